"""The base classes of the losses: per-sample values reduced as torch's losses reduce them, and
a checked top-k parameter with the loss contract's forward around a per-label loss."""

from __future__ import annotations

import torch
from torch import nn

from topk.functional.arguments import whole_number
from topk.losses.targets import check_k, expected_over_targets, loss_inputs, shift_to_row_max

REDUCTIONS = ("mean", "none")


class Loss(nn.Module):
    """A loss of per-sample values, returned as their mean (``reduction="mean"``) or as they
    are (``"none"``, a ``[batch]`` tensor), the attribute torch's own losses have: a wrapper such
    as :class:`topk.losses.weights.ClassWeighted` sets it to weight the samples."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
        self.reduction = reduction

    def reduce(self, per_sample: torch.Tensor) -> torch.Tensor:
        return per_sample.mean() if self.reduction == "mean" else per_sample


class TopKLoss(Loss):
    """Holds and checks ``k`` (a whole number of at least 1); the class count is checked against
    it at every call. The constructors' refusals are ``ValueError`` sentences naming the
    argument (:mod:`topk.functional.arguments`)."""

    def __init__(self, k: int = 5):
        super().__init__()
        self.k = whole_number("k", k)

    def extra_repr(self) -> str:
        return f"k={self.k}"

    def per_label_loss(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The ``[B]`` losses of integer labels; a loss that defines it gets :meth:`forward`."""
        raise NotImplementedError

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss contract (docs/design.md §5) around :meth:`per_label_loss`: checked inputs,
        shifted to a row maximum of 0 (:func:`~topk.losses.targets.shift_to_row_max`; every loss
        defined here is shift-invariant, so the detached shift leaves value and gradient exact),
        ``Σ_i t_i L(s, i)`` for a soft target, reduced."""
        scores, target = loss_inputs(scores, target)
        check_k(self.k, scores.shape[1])
        return self.reduce(expected_over_targets(self.per_label_loss, shift_to_row_max(scores), target))
