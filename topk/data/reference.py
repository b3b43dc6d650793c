"""The classic per-image CIFAR pipeline: PIL images through torchvision transforms, one at a time.

Training never uses this module. The training path keeps the images as one uint8 tensor and
augments whole batches at once (:mod:`topk.data.transforms`, :class:`topk.data.TensorBatches`).
This module keeps the per-image torchvision pipeline that most CIFAR code uses, for two jobs:

* a reference for the tests (``tests/test_pipeline_reference.py``): both paths must draw the
  same distribution of crop offsets, flips and Cutout squares, and give the same normalised
  pixels for the same crop;
* a baseline for the speed benchmark (``scripts/bench_data.py``), in a ``DataLoader`` with
  worker processes.

Random draws use torch's global generator, as torchvision's random transforms do; a
``DataLoader`` seeds it differently in each worker.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms


class PerImageCutout:
    """Cutout (DeVries & Taylor 2017) on one ``[C, H, W]`` float image, after normalisation.

    Zeroes one ``size``×``size`` square whose centre is uniform over the image pixels; the
    square covers rows ``centre_y - size // 2`` to ``centre_y - size // 2 + size - 1`` (columns
    likewise) and is clipped at the borders, so it may be smaller near an edge. These are the
    semantics of the batched :class:`topk.data.transforms.Cutout`. torchvision's
    ``RandomErasing`` is different: it erases a rectangle of random area and aspect ratio that
    always lies fully inside the image, and only with some probability.
    """

    def __init__(self, size: int = 8):
        if size < 1:
            raise ValueError(f"Cutout size must be a positive number of pixels, got {size}.")
        self.size = size

    def __repr__(self) -> str:
        return f"PerImageCutout(size={self.size})"

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        _, height, width = image.shape
        centre_y = int(torch.randint(0, height, (1,)))
        centre_x = int(torch.randint(0, width, (1,)))
        top = max(centre_y - self.size // 2, 0)
        left = max(centre_x - self.size // 2, 0)
        bottom = min(centre_y - self.size // 2 + self.size, height)
        right = min(centre_x - self.size // 2 + self.size, width)
        image = image.clone()
        image[:, top:bottom, left:right] = 0
        return image


def per_image_transform(
    padding: int,
    flip: bool,
    cutout_size: int | None,
    mean: Sequence[float],
    std: Sequence[float],
    image_size: int = 32,
) -> transforms.Compose:
    """The torchvision transform of one PIL training image, the per-image twin of
    ``Compose(RandomCropFlip(padding, flip), Normalize(mean, std), Cutout(cutout_size))``.

    ``RandomCrop(image_size, padding=padding)`` (zero fill, so the padding is black before
    normalisation), ``RandomHorizontalFlip()`` when ``flip``, ``ToTensor()`` (divides by 255),
    ``Normalize(mean, std)``, then :class:`PerImageCutout` when ``cutout_size`` is set.
    ``padding=0`` leaves out the crop, ``flip=False`` the flip, ``cutout_size=None`` (or 0) the
    Cutout.
    """
    steps = []
    if padding > 0:
        steps.append(transforms.RandomCrop(image_size, padding=padding, fill=0))
    if flip:
        steps.append(transforms.RandomHorizontalFlip())
    steps += [transforms.ToTensor(), transforms.Normalize(mean, std)]
    if cutout_size:
        steps.append(PerImageCutout(cutout_size))
    return transforms.Compose(steps)


class PerImageCifar(Dataset):
    """uint8 images ``[N, 3, H, W]`` and labels ``[N]`` served one PIL image at a time.

    The images are stored once as a height × width × channel NumPy array, the layout
    torchvision's own ``CIFAR100`` data set keeps; ``__getitem__`` wraps image ``i`` in a PIL
    image and applies ``transform`` (e.g. :func:`per_image_transform`), returning
    ``(image, label)`` with an int label, ready for a ``DataLoader``.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform=None):
        if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(
                f"expected uint8 images [N, 3, H, W], got {images.dtype} {tuple(images.shape)}"
            )
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = np.ascontiguousarray(images.permute(0, 2, 3, 1).numpy())
        self.labels = labels.tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = Image.fromarray(self.images[index])
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]
