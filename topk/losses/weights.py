"""Class weights in a run (``loss.weight``: null, ``balanced`` or one weight per class), resolved
from the training split's class counts into the weight vector that every loss of :mod:`topk`
takes as ``weight=`` (:class:`topk.losses.base.Loss`: each sample's loss weighted by its label's
weight, the weighted mean over the batch); :class:`ClassWeighted` gives torch's cross-entropy the
same weighting (``topk.build.build_loss``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from topk.errors import ConfigError
from topk.losses.base import weighted_reduction


def class_weight_vector(spec, class_counts: Sequence[int] | None,
                        num_classes: int) -> torch.Tensor | None:
    """The weights ``loss.weight`` asks for, a float ``[num_classes]`` tensor, or ``None``.

    ``null``: none (every loss unweighted). ``balanced``: ``N / (C · N_c)`` for a training split
    of ``N`` samples in ``C`` classes, ``N_c`` of class ``c`` (scikit-learn's ``balanced``: every
    class then weighs as much in total). A list: one non-negative weight per class, not all 0.
    """
    if spec is None:
        return None
    if spec == "balanced":
        counts = torch.as_tensor(list(class_counts or []), dtype=torch.float64)
        if len(counts) != num_classes or not bool((counts > 0).all()):
            raise ConfigError(
                "loss.weight=balanced needs a training sample of every class; this split's "
                f"class counts are {[int(c) for c in counts]}: give the weights as a list instead.")
        return (counts.sum() / (num_classes * counts)).float()
    if isinstance(spec, str) or not isinstance(spec, Sequence):
        raise ConfigError(f"loss.weight must be null, balanced or a list of {num_classes} "
                          f"weights, got {spec!r}.")
    values = [float(w) if isinstance(w, (int, float)) and not isinstance(w, bool) else math.nan
              for w in spec]
    if len(values) != num_classes or not all(0 <= w < math.inf for w in values) or not any(values):
        raise ConfigError(
            f"loss.weight must hold {num_classes} finite non-negative weights, one per "
            f"class, not all 0; got {list(spec)}.")
    return torch.tensor(values)


class ClassWeighted(nn.Module):
    r"""``loss`` with each sample weighted by its label's weight:

    .. math:: \frac{\sum_i w_i \, ℓ(s_i, t_i)}{\sum_i w_i}, \qquad w_i = w_{y_i}
              \text{ (labels)}, \quad w_i = \sum_c t_{ic} w_c \text{ (a probability target)},

    the expected weight of a Mixup target. For integer labels this is torch's own
    ``CrossEntropyLoss(weight=w)``. ``loss`` must return per-sample values with
    ``reduction="none"`` (torch's losses and :class:`topk.losses.base.Loss`); it is set so here.

    Examples
    --------
    Torch's cross-entropy weighted for a probability (Mixup) target, which torch's own
    ``weight=`` divides by the batch size instead:

    >>> import torch
    >>> from topk.losses.weights import ClassWeighted
    >>> loss = ClassWeighted(torch.nn.CrossEntropyLoss(), torch.tensor([1.0, 3.0]))
    >>> scores = torch.zeros(2, 2)
    >>> round(loss(scores, torch.tensor([[0.5, 0.5], [1.0, 0.0]])).item(), 4)
    0.6931
    """

    def __init__(self, loss: nn.Module, weights: torch.Tensor):
        super().__init__()
        loss.reduction = "none"
        self.loss = loss
        self.register_buffer("weights", weights, persistent=False)

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if len(self.weights) != scores.shape[-1]:
            raise ConfigError(f"weights has {len(self.weights)} entries but the scores have "
                              f"{scores.shape[-1]} classes; give one weight per class.")
        return weighted_reduction(self.loss(scores, target), target, self.weights, "mean")
