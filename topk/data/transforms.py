"""Per-image transforms applied to a whole batch at once, on the batch's device.

Images stay uint8 ``[N, C, H, W]`` in memory; a transform turns a batch into normalised float
images. Random draws use torch's global generator (whose state the checkpoints keep), so a
resumed run draws the same crops, flips and cutouts as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from topk.errors import ConfigError


class Normalize:
    """``(x / 255 - mean) / std`` per channel, for uint8 (or already float 0–255) images."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        mean, std = self.mean.to(images.device), self.std.to(images.device)
        # one new tensor, then in place: a batch-sized allocation per step instead of four
        return images.to(torch.float32, copy=True).div_(255.0).sub_(mean).div_(std)


class RandomCropFlip:
    """Random crop of the original size from the image zero-padded by ``padding`` pixels on each
    side, then a horizontal flip with probability 1/2 (the standard CIFAR augmentation).

    Zero padding is applied to the uint8 image, i.e. before normalisation, as torchvision's
    ``RandomCrop(32, padding=4)`` on PIL images does.
    """

    def __init__(self, padding: int = 4, flip: bool = True):
        if padding < 0:
            raise ConfigError(f"augment.images.crop_padding must be >= 0, got {padding}.")
        self.padding = padding
        self.flip = flip

    def __repr__(self) -> str:
        return f"RandomCropFlip(padding={self.padding}, flip={self.flip})"

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        batch, _, height, width = images.shape
        pad = self.padding
        padded = F.pad(images, (pad, pad, pad, pad))
        top = torch.randint(0, 2 * pad + 1, (batch,)).to(images.device)
        left = torch.randint(0, 2 * pad + 1, (batch,)).to(images.device)
        # every height x width window of the padded images, a view; pick one per image
        windows = padded.unfold(2, height, 1).unfold(3, width, 1)  # [B, C, rows, cols, H, W]
        crops = windows[torch.arange(batch, device=images.device), :, top, left]
        if self.flip:
            flipped = (torch.rand(batch) < 0.5).to(images.device)
            crops[flipped] = crops[flipped].flip(-1)
        return crops


class Cutout:
    """Cutout (DeVries & Taylor 2017): zero one ``size``×``size`` square per image, its centre
    uniform over the image, so the square may fall partly outside."""

    def __init__(self, size: int = 8):
        if size < 1:
            raise ConfigError(f"augment.images.cutout_size must be a positive number of pixels, got {size}.")
        self.size = size

    def __repr__(self) -> str:
        return f"Cutout(size={self.size})"

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        batch, _, height, width = images.shape
        centre_y = torch.randint(0, height, (batch,)).to(images.device)
        centre_x = torch.randint(0, width, (batch,)).to(images.device)
        half = self.size // 2
        ys = torch.arange(height, device=images.device)[None, :]
        xs = torch.arange(width, device=images.device)[None, :]
        inside_y = (ys >= (centre_y - half)[:, None]) & (ys < (centre_y - half + self.size)[:, None])
        inside_x = (xs >= (centre_x - half)[:, None]) & (xs < (centre_x - half + self.size)[:, None])
        square = inside_y[:, None, :, None] & inside_x[:, None, None, :]
        return images.masked_fill(square, 0)


class Compose:
    """Apply transforms in order."""

    def __init__(self, *transforms):
        self.transforms = [t for t in transforms if t is not None]

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        for transform in self.transforms:
            images = transform(images)
        return images


class EachImage:
    """Apply ``transform`` (a torchvision ``transforms.v2`` transform) to each image of a batch
    ``[N, C, H, W]`` on its own, so that each image draws its own random parameters: a v2
    transform given a batch draws one set of parameters for the whole batch (one RandAugment op,
    one erased box for every image), whereas torchvision's reference applies RandAugment and
    RandomErasing to one image at a time, in its data set's transform."""

    def __init__(self, transform):
        self.transform = transform

    def __repr__(self) -> str:
        return f"EachImage({self.transform!r})"

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.transform(image) for image in images])
