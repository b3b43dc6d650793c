"""Random images of CIFAR's shape, for timing (G22 Fig. 3's epoch time) without the data set.

The pixels carry no signal about the labels; only the cost of an epoch means anything.
"""

from __future__ import annotations

import torch

from topk.data.cifar import CIFAR100_MEAN, CIFAR100_STD
from topk.data.splits import DataSplits, TensorSplit


def random_images(
    seed: int, num_classes: int = 100, train_size: int = 2560, test_size: int = 256, image_size: int = 32
) -> DataSplits:
    """Uniform random uint8 images ``[N, 3, image_size, image_size]`` with uniform labels.

    Parameters
    ----------
    seed : int
        Seeds the pixels and labels.
    num_classes, train_size, test_size, image_size : int
        Shape of the data (CIFAR-100: 100 classes, 32-pixel images).
    """
    generator = torch.Generator().manual_seed(seed)

    def split(size: int) -> TensorSplit:
        images = torch.randint(0, 256, (size, 3, image_size, image_size), generator=generator, dtype=torch.uint8)
        return TensorSplit(images, torch.randint(0, num_classes, (size,), generator=generator))

    return DataSplits(train=split(train_size), val=None, test=split(test_size), num_classes=num_classes,
                      mean=CIFAR100_MEAN, std=CIFAR100_STD)
