"""The container every data-set builder returns: train / optional validation / test."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TensorSplit:
    """One split held in memory: inputs ``x`` [N, ...] and int64 labels ``y`` [N]."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class DataSplits:
    """Train, validation (``None`` when the protocol has none) and test splits of one data set.

    ``class_counts`` are the training-split counts per class, the plain list that margin-based
    losses (LDAM, noised imbalanced) receive. Image data sets keep uint8 images and give the
    per-channel ``mean`` and ``std`` (fractions of 255) that normalise them on the device.
    """

    train: TensorSplit
    val: TensorSplit | None
    test: TensorSplit
    num_classes: int
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    @property
    def class_counts(self) -> list[int]:
        return torch.bincount(self.train.y, minlength=self.num_classes).tolist()
