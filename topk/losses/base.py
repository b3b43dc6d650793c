"""The base classes of the losses: per-sample values reduced as torch's losses reduce them, and
a checked top-k parameter."""

from __future__ import annotations

import torch
from torch import nn

from topk.errors import ConfigError

REDUCTIONS = ("mean", "none")


class Loss(nn.Module):
    """A loss of per-sample values, returned as their mean (``reduction="mean"``) or as they
    are (``"none"``, a ``[batch]`` tensor), the attribute torch's own losses have: a wrapper such
    as :class:`topk.losses.weights.ClassWeighted` sets it to weight the samples."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ConfigError(
                f"loss reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}.")
        self.reduction = reduction

    def reduce(self, per_sample: torch.Tensor) -> torch.Tensor:
        return per_sample.mean() if self.reduction == "mean" else per_sample


class TopKLoss(Loss):
    """Holds and checks ``k``; the class count is checked against it at every call."""

    def __init__(self, k: int = 5):
        super().__init__()
        if k < 1:
            raise ConfigError(f"loss.k must be at least 1, got {k}.")
        self.k = k

    def extra_repr(self) -> str:
        return f"k={self.k}"
