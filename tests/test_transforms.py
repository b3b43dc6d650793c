"""Batch image transforms against per-image reference implementations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from topk.data.transforms import Compose, Cutout, Normalize, RandomCropFlip
from topk.errors import ConfigError


def images(batch=6, size=8):
    generator = torch.Generator().manual_seed(0)
    return torch.randint(1, 256, (batch, 3, size, size), generator=generator, dtype=torch.uint8)


def test_random_crop_flip_equals_a_per_image_crop_of_the_padded_image():
    batch = images()
    torch.manual_seed(3)
    out = RandomCropFlip(padding=2)(batch)
    torch.manual_seed(3)
    top = torch.randint(0, 5, (6,))
    left = torch.randint(0, 5, (6,))
    flip = torch.rand(6) < 0.5
    padded = F.pad(batch, (2, 2, 2, 2))
    for i in range(6):
        crop = padded[i, :, top[i] : top[i] + 8, left[i] : left[i] + 8]
        expected = crop.flip(-1) if flip[i] else crop
        assert torch.equal(out[i], expected), i
    assert out.dtype == torch.uint8 and out.shape == batch.shape


def test_crop_without_padding_or_flip_is_identity():
    batch = images()
    assert torch.equal(RandomCropFlip(padding=0, flip=False)(batch), batch)


def test_cutout_zeroes_one_clipped_square_per_image():
    batch = images(batch=200, size=12)
    torch.manual_seed(1)
    out = Cutout(size=4)(batch)
    zeroed = (out == 0).all(dim=1)  # [B, H, W]: the input has no zero pixels
    counts = zeroed.flatten(1).sum(dim=1)
    assert counts.max() == 16 and counts.min() >= 4  # partly outside at the borders
    for i in range(200):
        ys, xs = torch.nonzero(zeroed[i], as_tuple=True)
        assert ys.max() - ys.min() < 4 and xs.max() - xs.min() < 4
        assert len(ys) == (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)  # a rectangle
    assert torch.equal(out[~zeroed.unsqueeze(1).expand_as(out)], batch[~zeroed.unsqueeze(1).expand_as(out)])


def test_normalize_and_compose():
    batch = images()
    normalize = Normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0))
    out = Compose(RandomCropFlip(padding=0, flip=False), None, normalize)(batch)
    expected = (batch.float() / 255 - 0.5) / torch.tensor([0.25, 0.5, 1.0]).view(1, 3, 1, 1)
    torch.testing.assert_close(out, expected)


def test_bad_values():
    with pytest.raises(ConfigError, match="padding must be >= 0"):
        RandomCropFlip(padding=-1)
    with pytest.raises(ConfigError, match="cutout_size must be a positive"):
        Cutout(size=0)
