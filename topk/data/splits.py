"""The container every data-set builder returns: train / optional validation / test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from topk.errors import ConfigError


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
    ``class_groups`` names groups of classes whose accuracies are also reported
    (``{group}_top{k}``), e.g. the many/medium/few-shot classes of a long-tailed set.
    """

    train: TensorSplit
    val: TensorSplit | None
    test: TensorSplit
    num_classes: int
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    class_groups: dict[str, list[int]] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    @property
    def class_counts(self) -> list[int]:
        return torch.bincount(self.train.y, minlength=self.num_classes).tolist()

    def record_run_facts(self, run_dir: Path, record: dict) -> None:
        """Write what a run record keeps about this data beyond its config: nothing here; data sets
        with noisy labels add the labels trained on and the realised noise rate."""


def balanced_subset(
    labels: torch.Tensor, per_class: int, generator: torch.Generator, what: str
) -> torch.Tensor:
    """Ascending positions of ``per_class`` samples of every class, drawn with ``generator``."""
    counts = torch.bincount(labels) if len(labels) else torch.zeros(0, dtype=torch.int64)
    present = counts[counts > 0]
    if len(present) and int(present.min()) < per_class:
        short = int(torch.argmin(torch.where(counts > 0, counts, counts.max() + 1)))
        raise ConfigError(
            f"{what} needs {per_class} images of every class, but class {short} has only "
            f"{int(counts[short])} left; choose a smaller value."
        )
    order = torch.randperm(len(labels), generator=generator)
    by_class = order[torch.argsort(labels[order], stable=True)]
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(len(labels)) - torch.repeat_interleave(starts, counts)
    return torch.sort(by_class[rank < per_class]).values
