"""``dataset.decoder`` (topk/data/decoding.py): ``auto`` (JPEGs by torchvision's ``decode_jpeg``)
against ``pil`` (today's path, the reference) on tiny files of each kind: the same shapes, dtype,
value range and (within JPEG decoders' agreement) values, the same seeded batches, and the same
one-sentence errors for broken files. ``device`` (batches decoded and cropped in the training
process, on its device) gives ``auto``'s batches exactly on the CPU, and within a grey level on
CUDA (run by the GPU checks)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2.functional import pil_to_tensor

from conftest import compose_config
from topk.data import decoding
from topk.data.images import ImageBatches, ImageFileDataset, ImageFileSplit, ImageFileSplits
from topk.errors import ConfigError, DataError
from topk.schema import config_problem

KINDS = ("rgb.jpg", "grey.jpg", "cmyk.jpg", "rgb.png", "grey.png", "jpeg_named.png", "png_named.jpg")


def photo(width: int, height: int, noise: float, seed: int = 0) -> Image.Image:
    """Smooth colour waves plus Gaussian noise of ``noise`` grey levels: photo-like JPEG content."""
    y, x = np.mgrid[0:height, 0:width]
    waves = np.stack([128 + 100 * np.sin(x / width * 6 + c) * np.cos(y / height * 4 - c) for c in range(3)], -1)
    waves += np.random.default_rng(seed).normal(0, noise, waves.shape)
    return Image.fromarray(waves.clip(0, 255).astype(np.uint8))


def write(path, kind: str, seed: int = 0, size: tuple[int, int] = (20, 14)) -> str:
    """An image of ``kind`` (``KINDS``: mode, format, and the name it is saved under)."""
    image = photo(*size, noise=6, seed=seed)
    mode = {"grey": "L", "cmyk": "CMYK"}.get(kind.split(".")[0], "RGB")
    image_format = "PNG" if kind.endswith(".png") and kind != "jpeg_named.png" or kind == "png_named.jpg" else "JPEG"
    path = path / kind
    image.convert(mode).save(path, format=image_format)
    return str(path)


def decoded(path: str, decoder: str) -> torch.Tensor:
    image = ImageFileSplit([path], torch.zeros(1, dtype=torch.int64), decoder=decoder).decode(0)
    return image if isinstance(image, torch.Tensor) else pil_to_tensor(image)


@pytest.mark.parametrize("kind", KINDS)
def test_auto_and_pil_give_the_same_rgb_pixels(tmp_path, kind):
    path = write(tmp_path, kind)
    auto, pil = decoded(path, "auto"), decoded(path, "pil")
    assert isinstance(ImageFileSplit([path], torch.zeros(1), decoder="auto").decode(0), torch.Tensor)
    assert isinstance(ImageFileSplit([path], torch.zeros(1), decoder="pil").decode(0), Image.Image)
    assert auto.shape == pil.shape == (3, 14, 20) and auto.dtype == pil.dtype == torch.uint8
    assert int(auto.min()) >= 0 and int(auto.max()) <= 255 and int(auto.max()) > int(auto.min())
    # libjpeg-turbo in torchvision and in Pillow: bit-identical here, within 1 grey level on average anywhere
    assert (auto.float() - pil.float()).abs().mean() <= 1.0
    if kind.startswith("grey"):
        assert torch.equal(auto[0], auto[1]) and torch.equal(auto[1], auto[2])


@pytest.mark.parametrize("kind,by_torchvision", [("rgb.jpg", True), ("grey.jpg", True), ("jpeg_named.png", True),
                                                 ("rgb.png", False), ("png_named.jpg", False)])
def test_jpegs_are_told_by_their_first_bytes_not_their_name(tmp_path, kind, by_torchvision):
    assert (decoding.read_jpeg(write(tmp_path, kind)) is not None) is by_torchvision


def test_without_torchvisions_decoder_auto_decodes_with_pil(tmp_path, monkeypatch):
    path = write(tmp_path, "rgb.jpg")
    monkeypatch.setattr(decoding, "jpeg_decoder", lambda: None)
    assert decoding.read_jpeg(path) is None
    assert torch.equal(decoded(path, "auto"), decoded(path, "pil"))


def tiny_splits(tmp_path, decoder: str, kinds=("rgb.jpg", "grey.jpg", "rgb.png", "cmyk.jpg")) -> ImageFileSplits:
    paths = []
    for index in range(8):
        folder = tmp_path / f"{index}"
        folder.mkdir(parents=True)
        paths.append(write(folder, kinds[index % len(kinds)], seed=index, size=(24 + index, 18)))
    split = ImageFileSplit(paths, torch.arange(8) % 2)
    return ImageFileSplits(train=split, val=None, test=split.subset(torch.arange(4)), num_classes=2,
                           mean=(0.5,) * 3, std=(0.25,) * 3, image_size=8, resize_size=10, decoder=decoder)


def test_the_decoder_reaches_every_split_and_its_subsets(tmp_path):
    splits = tiny_splits(tmp_path, "pil")
    assert splits.train.decoder == splits.test.decoder == splits.train.subset(torch.arange(2)).decoder == "pil"


@pytest.mark.parametrize("ten_crop", [False, True])
def test_evaluation_crops_agree(tmp_path, ten_crop):
    crops = {}
    for decoder in ("auto", "pil"):
        splits = tiny_splits(tmp_path / decoder, decoder)
        images = ImageFileDataset(splits.train, splits.image_transform(training=False, ten_crop=ten_crop))
        crops[decoder] = torch.stack([images[(index, 0)][0] for index in range(len(splits.train))])
    shape = (8, 10, 3, 8, 8) if ten_crop else (8, 3, 8, 8)
    assert crops["auto"].shape == crops["pil"].shape == shape and crops["auto"].dtype == torch.uint8
    assert (crops["auto"].float() - crops["pil"].float()).abs().mean() <= 1.0


def first_batch(splits: ImageFileSplits, seed: int) -> torch.Tensor:
    transform = splits.image_transform(training=True, random_crop=True, flip=True)
    batches = ImageBatches(splits.train, 4, shuffle=True, seed=seed, image_transform=transform)
    batches.set_epoch(1)
    return next(iter(batches))[0]


def test_a_seeded_training_epoch_starts_alike_on_both_decoders(tmp_path):
    batches = {}
    for decoder in ("auto", "pil"):
        splits = tiny_splits(tmp_path / decoder, decoder)
        batches[decoder] = first_batch(splits, seed=5)
        assert torch.equal(batches[decoder], first_batch(splits, seed=5)), decoder
        assert not torch.equal(batches[decoder], first_batch(splits, seed=6)), decoder
    assert batches["auto"].shape == (4, 3, 8, 8) and batches["auto"].dtype == torch.uint8
    assert (batches["auto"].float() - batches["pil"].float()).abs().mean() <= 1.0


def jpeg_bytes() -> bytes:
    data = io.BytesIO()
    photo(20, 14, noise=6).save(data, format="JPEG")
    return data.getvalue()


@pytest.mark.parametrize("content", [b"\xff\xd8\xff truncated", b"not a jpeg at all", jpeg_bytes()[:200],
                                     jpeg_bytes()[:-300]],
                         ids=["jpeg_start_only", "no_image", "truncated_header", "truncated_scan"])
def test_a_broken_file_stops_with_the_same_sentence_on_both_decoders(tmp_path, content):
    path = tmp_path / "broken.jpg"
    path.write_bytes(content)
    messages = {}
    for decoder in ("auto", "pil", "device"):
        split = ImageFileSplit([str(path)], torch.zeros(1, dtype=torch.int64), decoder=decoder)
        with pytest.raises(DataError) as failure:
            next(iter(ImageBatches(split, 1, image_transform=v2.PILToTensor())))
        messages[decoder] = str(failure.value)
    assert messages["auto"] == messages["pil"] == messages["device"]
    assert messages["auto"].startswith(f"image {path} cannot be decoded (") and "\n" not in messages["auto"]
    assert messages["auto"].endswith("; replace or delete it.")


def test_an_unknown_decoder_is_refused_naming_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"^dataset.decoder must be one of auto, pil, device, got 'turbo'.$"):
        tiny_splits(tmp_path, "turbo")
    for dataset in ("plantnet", "imagenet", "imagenet_lt", "image_folder"):
        assert compose_config([f"dataset={dataset}"]).dataset.decoder == "auto"
        found = config_problem(compose_config([f"dataset={dataset}", "dataset.decoder=turbo"]))
        assert found is not None and found.startswith("dataset.decoder must be one of"), found


def test_reduced_size_decoding_would_change_the_crops():
    """The measurement behind topk/data/decoding.py's refusal of ``Image.draft``: 800×600, σ = 8."""
    data = io.BytesIO()
    photo(800, 600, noise=8).save(data, format="JPEG", quality=90)
    crop = v2.Compose([v2.PILToTensor(), v2.Resize(256, antialias=True), v2.CenterCrop(224)])
    full = crop(Image.open(io.BytesIO(data.getvalue())).convert("RGB"))
    drafted = Image.open(io.BytesIO(data.getvalue()))
    drafted.draft("RGB", (342, 257))  # the smallest scale keeping the shorter side >= 256
    assert drafted.size == (400, 300)
    difference = (crop(drafted.convert("RGB")).float() - full.float()).abs().mean()
    assert 0.5 < difference < 1.0  # 0.71 grey levels with PIL 13.0


def all_batches(splits: ImageFileSplits, training: bool, device="cpu", workers: int = 0, ten_crop: bool = False):
    transform = splits.image_transform(training, random_crop=training, flip=training, ten_crop=ten_crop)
    batches = ImageBatches(splits.train, 3, shuffle=training, seed=4, device=device, image_transform=transform,
                           num_workers=workers)
    batches.set_epoch(2)
    try:
        return [(images.cpu(), labels.cpu()) for images, labels in batches]
    finally:
        batches.close()


@pytest.mark.parametrize(("training", "ten_crop", "workers", "train_crop"), [
    (True, False, 0, "random_resized"), (True, False, 2, "resize_then_random"),
    (False, False, 0, "random_resized"), (False, True, 0, "random_resized")])
def test_device_decoding_gives_autos_batches_exactly_on_the_cpu(tmp_path, training, ten_crop, workers, train_crop):
    """JPEGs (RGB, grey, CMYK) decoded a batch at a time in the training process, a PNG by the
    worker: the same seeded crops, flips and labels as ``auto``, bit for bit."""
    found = {}
    for decoder in ("auto", "device"):
        splits = tiny_splits(tmp_path / decoder, decoder)
        splits.train_crop = train_crop
        found[decoder] = all_batches(splits, training, workers=workers, ten_crop=ten_crop)
    assert len(found["auto"]) == len(found["device"]) == 3
    for (auto, labels), (device, device_labels) in zip(found["auto"], found["device"]):
        assert torch.equal(auto, device) and torch.equal(labels, device_labels)


def test_a_jpeg_the_batch_decoder_refuses_is_decoded_alone(tmp_path, monkeypatch):
    """Where one JPEG of a batch makes ``decode_jpeg`` raise, the others are decoded alone and that
    one as under ``auto``: the batch is still ``auto``'s."""
    splits = tiny_splits(tmp_path / "device", "device", kinds=("rgb.jpg",))
    reference = all_batches(tiny_splits(tmp_path / "auto", "auto", kinds=("rgb.jpg",)), training=False)
    real, first_call = decoding.jpeg_decoder(), []

    def refusing(data, mode, device="cpu"):
        if isinstance(data, list) and not first_call:
            first_call.append(True)
            raise RuntimeError("a JPEG nvJPEG does not read")
        return real[0](data, mode=mode, device=device)

    monkeypatch.setattr(decoding, "jpeg_decoder", lambda: (refusing, real[1]))
    found = all_batches(splits, training=False)
    assert first_call and all(torch.equal(a[0], b[0]) for a, b in zip(found, reference))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU checks run it)")
def test_device_decoding_on_cuda_is_autos_within_a_grey_level_and_seeded(tmp_path):
    """nvJPEG and the GPU's resize against libjpeg-turbo and the CPU's: the same shapes and
    labels, uint8 on the GPU, a mean difference under a grey level; the same batches twice."""
    cpu = all_batches(tiny_splits(tmp_path / "auto", "auto", kinds=("rgb.jpg", "grey.jpg")), training=True)
    splits = tiny_splits(tmp_path / "device", "device", kinds=("rgb.jpg", "grey.jpg"))
    transform = splits.image_transform(True, random_crop=True, flip=True)
    first = next(iter(ImageBatches(splits.train, 3, shuffle=True, seed=4, device="cuda", image_transform=transform)))
    assert first[0].device.type == "cuda" and first[0].dtype == torch.uint8
    gpu = all_batches(splits, training=True, device="cuda")
    assert all(torch.equal(a[0], b[0]) for a, b in zip(gpu, all_batches(splits, training=True, device="cuda")))
    for (auto, labels), (device, device_labels) in zip(cpu, gpu):
        assert auto.shape == device.shape and torch.equal(labels, device_labels)
        assert (auto.float() - device.float()).abs().mean() <= 1.0


def test_a_run_with_device_decoding_is_an_auto_run_on_the_cpu(tmp_path):
    """End to end through train.py's run: the same history and test metrics."""
    from conftest import run_in_process
    from topk.data.fixtures import write_image_tree

    root = tmp_path / "images"
    write_image_tree(root, {"cat": 6, "dog": 6}, np.random.default_rng(0))
    records = {}
    for decoder in ("auto", "device"):
        records[decoder], _ = run_in_process(tmp_path / decoder, [
            "dataset=image_folder", f"dataset.root={root}", "dataset.test_fraction=0.25", "dataset.image_size=8",
            "dataset.resize_size=10", "trainer.epochs=2", "trainer.batch_size=4", "model=linear", "trainer.ks=[1]",
            "k=1", "trainer.selection_metric=last", "trainer.num_workers=0", f"dataset.decoder={decoder}"])
    assert records["device"]["status"] == "completed" and records["device"]["test"] == records["auto"]["test"]
    history = {decoder: (tmp_path / decoder / "history.csv").read_text().splitlines() for decoder in records}
    strip = [",".join(line.split(",")[:-1]) for line in history["auto"]]  # all but the epoch's seconds
    assert strip == [",".join(line.split(",")[:-1]) for line in history["device"]]
