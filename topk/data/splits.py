"""The container every data-set builder returns: train / optional validation / test."""

from __future__ import annotations

from dataclasses import dataclass, field
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

    def subset(self, positions: torch.Tensor) -> TensorSplit:
        """The samples at ``positions``, in that order."""
        return TensorSplit(self.x[positions], self.y[positions])


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
    sources: dict[str, str] = field(default_factory=dict)  # split -> where it was read from

    def __post_init__(self):
        """The checks every data set gets, wherever it was read: at least two classes (with one,
        every top-k prediction is right and no top-k loss is defined), no split is empty (an
        empty evaluation split would be reported as 0 %, an empty validation split would always
        select epoch 1) and no in-memory feature is NaN or infinite."""
        for name in ("train", "val", "test"):
            split = getattr(self, name)
            if split is None:
                continue
            where = f" read from {self.sources[name]}" if name in self.sources else ""
            if len(split) == 0:
                raise ConfigError(f"the {name} split{where} holds no samples; give it samples "
                                  "(or, for val, choose a data set configuration without one).")
            if isinstance(split, TensorSplit) and not all_finite(split.x):
                raise ConfigError(f"the {name} split{where} holds NaN or infinite features; "
                                  "fix the data (or the data set's parameters) before training.")
        if self.num_classes < 2:
            where = f" read from {self.sources['train']}" if "train" in self.sources else ""
            raise ConfigError(f"the data set{where} has a single class, and top-k classification needs "
                              "at least 2 (with one, every prediction is right); give it samples of at "
                              "least 2 classes.")

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


def stratified_indices(labels: torch.Tensor, count: int, seed: int) -> torch.Tensor:
    """Ascending positions of ``count`` samples taken round-robin over the classes of ``labels``
    (non-negative): every class gives as many as ``count`` allows, give or take one (a class with
    fewer samples gives all it has and the others fill in), each class's drawn at random.

    For evaluating part of a split (``trainer.limit_batches``): splits sorted by class would
    otherwise show one class only. The draw depends only on ``seed``, so every epoch and every
    resume evaluates the same samples; which classes give one more, when ``count`` does not
    divide evenly, is drawn too. All positions when ``count`` is at least the split's size.
    """
    size = len(labels)
    if count >= size:
        return torch.arange(size)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(size, generator=generator)
    by_class = order[torch.argsort(labels[order], stable=True)]  # grouped by class, shuffled within
    counts = torch.bincount(labels)
    starts = torch.cumsum(counts, 0) - counts
    classes = labels[by_class]
    rank = torch.arange(size) - starts[classes]  # place within its class
    turn = torch.randperm(len(counts), generator=generator)[classes]  # the class's place in each round
    round_robin = by_class[torch.argsort(rank * len(counts) + turn)]
    return torch.sort(round_robin[:count]).values


def all_finite(x: torch.Tensor, chunk_rows: int = 65536) -> bool:
    """Whether every value of ``x`` is finite (integer tensors always are), checked a chunk of
    rows at a time so that a large feature matrix needs no second copy of itself."""
    if not x.is_floating_point():
        return True
    return all(bool(torch.isfinite(part).all()) for part in torch.split(x, chunk_rows))


def refuse_untrained_classes(labels: torch.Tensor, num_classes: int, where: str,
                             names: list[str] | None = None) -> None:
    """One sentence if a class that the data set defines from its files (a class folder, a
    label) has no training sample: it could never be learnt and would only lower every
    accuracy, so the run stops naming the classes and where the training data was read."""
    counts = torch.bincount(labels, minlength=num_classes)[:num_classes]
    missing = torch.nonzero(counts == 0).flatten().tolist()
    if not missing:
        return
    shown = ", ".join(names[c] if names else str(c) for c in missing[:5])
    raise ConfigError(
        f"{where} has no training sample of {len(missing)} of its {num_classes} classes "
        f"({shown}{', ...' if len(missing) > 5 else ''}); a class without training data cannot be "
        "learnt: give it training samples or remove it from every split.")


def stratified_parts(labels: torch.Tensor, fractions: list[float], seed: int) -> list[torch.Tensor]:
    """Ascending positions of one held-out part per fraction of ``fractions`` and of the rest
    (last), each class of ``labels`` (non-negative) giving ``round(fraction * its count)`` samples
    to each part (halves up; stratified, as :func:`balanced_subset` draws), in the order of a
    permutation drawn from ``seed`` alone: the same seed, the same parts.
    Fractions are non-negative and sum to less than 1; a class may give a part nothing."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(labels), generator=generator)
    by_class = order[torch.argsort(labels[order], stable=True)]  # grouped by class, shuffled within
    counts = torch.bincount(labels) if len(labels) else torch.zeros(0, dtype=torch.int64)
    starts = torch.cumsum(counts, 0) - counts
    classes = labels[by_class]
    rank = torch.arange(len(labels)) - starts[classes]  # place within its class
    parts, low = [], torch.zeros_like(counts)
    for fraction in fractions:
        high = low + torch.floor(counts.double() * fraction + 0.5).long()
        parts.append(by_class[(rank >= low[classes]) & (rank < high[classes])])
        low = high
    parts.append(by_class[rank >= low[classes]])
    return [torch.sort(part).values for part in parts]
