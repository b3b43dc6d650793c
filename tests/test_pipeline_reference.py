"""The batched CIFAR pipeline against the classic per-image torchvision pipeline.

Marker images make every augmentation readable from an output image: channel 0 holds the row
index + 1 and channel 1 the column index + 1 of each source pixel (so zero padding shows as 0),
channel 2 is random content. With a normalisation mean of 1/2, real and padded pixels are never
exactly 0 after normalisation, so the Cutout square is the set of pixels that are 0 in every
channel. From each output we recover the crop offset (top, left), the flip and the Cutout centre,
then compare the two paths' empirical distributions with each other and with the uniform
distributions they should follow (chi-square tests, fixed seeds).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from topk.data.batches import TensorBatches
from topk.data.cifar import CIFAR100_MEAN, CIFAR100_STD
from topk.data.reference import PerImageCifar, PerImageCutout, per_image_transform
from topk.data.splits import TensorSplit
from topk.data.transforms import Compose, Cutout, Normalize, RandomCropFlip

SIZE = 32
PADDING = 4
CUTOUT = 8
MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.5, 0.2)
SAMPLES = 8192
SIGNIFICANCE = 1e-3


def marker_images(count: int, seed: int = 0) -> torch.Tensor:
    """uint8 [count, 3, SIZE, SIZE]: row + 1, column + 1, random content in 1..255."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.arange(1, SIZE + 1, dtype=torch.uint8).view(SIZE, 1).expand(SIZE, SIZE)
    cols = torch.arange(1, SIZE + 1, dtype=torch.uint8).view(1, SIZE).expand(SIZE, SIZE)
    images = torch.empty(count, 3, SIZE, SIZE, dtype=torch.uint8)
    images[:, 0] = rows
    images[:, 1] = cols
    content = torch.randint(1, 256, (count, SIZE, SIZE), generator=generator, dtype=torch.uint8)
    images[:, 2] = content
    return images


def batched_outputs(images: torch.Tensor, seed: int) -> torch.Tensor:
    """The training path: ``TensorBatches`` with the batched transforms, shuffle off."""
    transform = Compose(RandomCropFlip(PADDING, flip=True), Normalize(MEAN, STD), Cutout(CUTOUT))
    split = TensorSplit(images, torch.zeros(len(images), dtype=torch.int64))
    batches = TensorBatches(split, batch_size=512, transform=transform)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return torch.cat([inputs for inputs, _ in batches])


def per_image_outputs(images: torch.Tensor, seed: int) -> torch.Tensor:
    """The reference path: one PIL image at a time through torchvision's transforms."""
    transform = per_image_transform(PADDING, flip=True, cutout_size=CUTOUT, mean=MEAN, std=STD)
    dataset = PerImageCifar(images, torch.zeros(len(images), dtype=torch.int64), transform)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return torch.stack([dataset[i][0] for i in range(len(dataset))])


def masked_extremes(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample min and max of ``values`` [N, H, W] over the pixels where ``mask`` holds."""
    low = torch.where(mask, values, torch.inf).amin(dim=(1, 2))
    high = torch.where(mask, values, -torch.inf).amax(dim=(1, 2))
    return low, high


def decode(outputs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Recover crop offset, flip and Cutout centre of each output made from marker images.

    Asserts along the way that every output is such an augmentation: one consistent offset
    and flip over all its real pixels, and a zeroed set that is exactly the clipped square
    around the recovered centre.
    """
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    values = ((outputs * std + mean) * 255).round()
    cut = (outputs == 0).all(dim=1)
    real = ~cut & (values[:, 0] != 0)
    rows = torch.arange(SIZE, dtype=torch.float32).view(1, SIZE, 1)
    cols = torch.arange(SIZE, dtype=torch.float32).view(1, 1, SIZE)

    top_low, top_high = masked_extremes(values[:, 0] - 1 - rows + PADDING, real)
    assert torch.equal(top_low, top_high), "rows of one output disagree on the crop offset"
    plain_low, plain_high = masked_extremes(values[:, 1] - 1 - cols + PADDING, real)
    mirror_low, mirror_high = masked_extremes(values[:, 1] - 1 - (SIZE - 1 - cols) + PADDING, real)
    plain, flipped = plain_low == plain_high, mirror_low == mirror_high
    assert torch.equal(plain, ~flipped), "columns of an output are neither in order nor reversed"
    top = top_low.long()
    left = torch.where(flipped, mirror_low, plain_low).long()

    half = CUTOUT // 2
    centres = []
    for covered in (cut.any(dim=2), cut.any(dim=1)):  # rows, then columns, of the square
        first = covered.int().argmax(dim=1)
        last = SIZE - 1 - covered.flip(1).int().argmax(dim=1)
        centres.append(torch.where(first > 0, first + half, last + 1 - CUTOUT + half))
    centre_y, centre_x = centres
    in_square_y = (rows.long() >= centre_y.view(-1, 1, 1) - half) & (
        rows.long() < centre_y.view(-1, 1, 1) - half + CUTOUT
    )
    in_square_x = (cols.long() >= centre_x.view(-1, 1, 1) - half) & (
        cols.long() < centre_x.view(-1, 1, 1) - half + CUTOUT
    )
    assert torch.equal(cut, in_square_y & in_square_x), "the zeroed pixels are not the square"
    return {"top": top, "left": left, "flipped": flipped.long(), "centre_y": centre_y,
            "centre_x": centre_x}


def chi_square_p_value(statistic: float, degrees_of_freedom: int) -> float:
    """Upper tail of the chi-square distribution (regularised upper incomplete gamma)."""
    return float(torch.special.gammaincc(torch.tensor(degrees_of_freedom / 2, dtype=torch.float64),
                                         torch.tensor(statistic / 2, dtype=torch.float64)))


def uniformity_p_value(codes: torch.Tensor, categories: int) -> float:
    """Pearson's goodness-of-fit test of ``codes`` against the uniform law on ``categories``."""
    observed = torch.bincount(codes, minlength=categories).double()
    assert len(observed) == categories, f"codes outside 0..{categories - 1}"
    expected = len(codes) / categories
    return chi_square_p_value(float(((observed - expected) ** 2 / expected).sum()), categories - 1)


def homogeneity_p_value(first: torch.Tensor, second: torch.Tensor, categories: int) -> float:
    """Pearson's test that two samples of codes come from the same distribution."""
    table = torch.stack([torch.bincount(first, minlength=categories),
                         torch.bincount(second, minlength=categories)]).double()
    table = table[:, table.sum(dim=0) > 0]
    expected = table.sum(dim=1, keepdim=True) * table.sum(dim=0, keepdim=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    return chi_square_p_value(statistic, table.shape[1] - 1)


OFFSETS = 2 * PADDING + 1
# name -> (code from the decoded draws, number of categories)
QUANTITIES = {
    "offset": (lambda d: d["top"] * OFFSETS + d["left"], OFFSETS**2),
    "offset_top": (lambda d: d["top"], OFFSETS),
    "offset_left": (lambda d: d["left"], OFFSETS),
    "flip": (lambda d: d["flipped"], 2),
    "offset_and_flip": (
        lambda d: (d["top"] * OFFSETS + d["left"]) * 2 + d["flipped"],
        2 * OFFSETS**2,
    ),
    "cutout_centre": (lambda d: d["centre_y"] * SIZE + d["centre_x"], SIZE * SIZE),
    "cutout_centre_y": (lambda d: d["centre_y"], SIZE),
    "cutout_centre_x": (lambda d: d["centre_x"], SIZE),
}


@pytest.fixture(scope="module")
def images():
    return marker_images(SAMPLES)


@pytest.fixture(scope="module")
def draws(images):
    """Decoded draws of both paths on the same marker images (different seeds)."""
    return {"batched": decode(batched_outputs(images, seed=1)),
            "per_image": decode(per_image_outputs(images, seed=2))}


@pytest.mark.parametrize("quantity", sorted(QUANTITIES))
@pytest.mark.parametrize("path", ["batched", "per_image"])
def test_each_path_draws_uniformly(draws, path, quantity):
    code, categories = QUANTITIES[quantity]
    p_value = uniformity_p_value(code(draws[path]), categories)
    assert p_value > SIGNIFICANCE, f"{path} {quantity}: p = {p_value:.2e}"


@pytest.mark.parametrize("quantity", sorted(QUANTITIES))
def test_both_paths_draw_the_same_distribution(draws, quantity):
    code, categories = QUANTITIES[quantity]
    p_value = homogeneity_p_value(code(draws["batched"]), code(draws["per_image"]), categories)
    assert p_value > SIGNIFICANCE, f"{quantity}: p = {p_value:.2e}"


def test_flip_rate_is_one_half(draws):
    for path, decoded in draws.items():
        rate = decoded["flipped"].double().mean().item()
        assert abs(rate - 0.5) < 4 * (0.25 / SAMPLES) ** 0.5, (path, rate)


def expected_output(image: torch.Tensor, top: int, left: int, flipped: bool, centre_y: int,
                    centre_x: int) -> torch.Tensor:
    """One augmented image rebuilt from its draws with plain slicing and the batched Normalize."""
    crop = F.pad(image, (PADDING,) * 4)[:, top : top + SIZE, left : left + SIZE]
    if flipped:
        crop = crop.flip(-1)
    normalised = Normalize(MEAN, STD)(crop[None])[0]
    half = CUTOUT // 2
    normalised[:, max(centre_y - half, 0) : centre_y - half + CUTOUT,
               max(centre_x - half, 0) : centre_x - half + CUTOUT] = 0
    return normalised


def test_per_image_pixels_equal_the_batched_transforms_for_the_same_draws(images):
    outputs = per_image_outputs(images[:300], seed=3)
    decoded = decode(outputs)
    for i in range(len(outputs)):
        draw = {name: int(values[i]) for name, values in decoded.items()}
        expected = expected_output(images[i], draw["top"], draw["left"], bool(draw["flipped"]),
                                   draw["centre_y"], draw["centre_x"])
        torch.testing.assert_close(outputs[i], expected, rtol=0, atol=1e-6)


def test_fixed_crop_gives_identical_normalised_pixels():
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (64, 3, SIZE, SIZE), generator=generator, dtype=torch.uint8)
    batched = Compose(RandomCropFlip(padding=0, flip=False), Normalize(CIFAR100_MEAN, CIFAR100_STD))
    transform = per_image_transform(0, flip=False, cutout_size=None, mean=CIFAR100_MEAN,
                                    std=CIFAR100_STD)
    dataset = PerImageCifar(images, torch.arange(64), transform)
    per_image = torch.stack([dataset[i][0] for i in range(64)])
    torch.testing.assert_close(per_image, batched(images), rtol=0, atol=1e-6)
    assert [dataset[i][1] for i in range(64)] == list(range(64))


def test_per_image_cutout_clips_the_square_at_the_borders():
    image = torch.ones(3, SIZE, SIZE)
    areas = set()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        for _ in range(2000):
            areas.add(int((PerImageCutout(CUTOUT)(image) == 0).all(dim=0).sum()))
    assert max(areas) == CUTOUT * CUTOUT and min(areas) == (CUTOUT // 2) ** 2
    assert torch.equal(image, torch.ones(3, SIZE, SIZE))  # the input is left untouched


def test_per_image_dataset_rejects_non_image_tensors():
    with pytest.raises(ValueError, match="uint8 images"):
        PerImageCifar(torch.zeros(2, 3, 4, 4), torch.zeros(2))
    with pytest.raises(ValueError, match="labels"):
        PerImageCifar(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(3))
