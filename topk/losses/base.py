"""The base classes of the losses: per-sample values reduced as torch's losses reduce them, and
a checked top-k parameter with the loss contract's forward around a per-label loss."""

from __future__ import annotations

import torch
from torch import nn

from topk.functional.arguments import whole_number
from topk.losses.targets import check_k, expected_over_targets, loss_inputs, shift_to_row_max

REDUCTIONS = ("mean", "sum", "none")


def class_weight(weight) -> torch.Tensor | None:
    """``weight`` as a float ``[n]`` tensor (``None`` stays ``None``); raise unless it holds finite
    weights of at least 0, not all 0 (their count is checked against the scores at each call)."""
    if weight is None:
        return None
    tensor = torch.as_tensor(weight, dtype=torch.get_default_dtype()).detach().clone()
    if tensor.dim() != 1 or len(tensor) == 0 or not bool(torch.isfinite(tensor).all()) \
            or bool((tensor < 0).any()) or not bool((tensor > 0).any()):
        raise ValueError("weight must be one finite weight of at least 0 per class, not all 0, got "
                         f"{weight!r}")
    return tensor


class Loss(nn.Module):
    """A loss of per-sample values ``ℓ_i``, reduced as ``torch.nn.CrossEntropyLoss`` reduces them.

    ``weight`` (one per class, as torch's ``weight=``) weighs sample ``i`` by ``w_i = weight[y_i]``
    for a label, ``w_i = Σ_c t_ic weight[c]`` for a probability target (Mixup: the expected weight).
    ``reduction="mean"`` returns ``Σ_i w_i ℓ_i / Σ_i w_i`` (the plain mean without weights; 0, not
    NaN, when every weight of the batch is 0), ``"sum"`` returns ``Σ_i w_i ℓ_i``, ``"none"`` the
    ``[batch]`` values ``w_i ℓ_i``. torch's cross-entropy divides a weighted mean of probability
    targets by the batch size instead. A wrapper such as :class:`topk.losses.weights.ClassWeighted`
    sets ``reduction`` to ``"none"`` to weight the samples itself.
    """

    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
        self.reduction = reduction
        self.register_buffer("weight", class_weight(weight))

    def reduce(self, per_sample: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
        """``per_sample`` ``[B]`` reduced, weighted by the classes of ``target`` (checked labels
        ``[B]`` or a probability matrix ``[B, n]``) among the scores' ``num_classes``."""
        if self.weight is not None and len(self.weight) != num_classes:
            raise ValueError(f"weight has {len(self.weight)} entries but the scores have "
                             f"{num_classes} classes; give one weight per class")
        return weighted_reduction(per_sample, target, self.weight, self.reduction)


def weighted_reduction(per_sample: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                       reduction: str) -> torch.Tensor:
    """``per_sample`` ``[B]`` reduced as :class:`Loss` says, each sample weighted by its label's
    ``weight`` (a probability target ``[B, n]``: its expected weight); no weighting for ``None``."""
    if weight is not None:
        weight = weight.to(per_sample.dtype)
        sample_weight = target.to(per_sample.dtype) @ weight if target.dtype.is_floating_point else weight[target]
        per_sample = sample_weight * per_sample
    if reduction == "none":
        return per_sample
    if reduction == "sum" or weight is None:
        return per_sample.sum() if reduction == "sum" else per_sample.mean()
    # A batch whose labels all weigh 0 gives 0 (torch's weighted cross-entropy gives NaN).
    return per_sample.sum() / sample_weight.sum().clamp(min=torch.finfo(per_sample.dtype).tiny)


class TopKLoss(Loss):
    """Holds and checks ``k`` (a whole number of at least 1); the class count is checked against
    it at every call. The constructors' refusals are ``ValueError`` sentences naming the
    argument (:mod:`topk.functional.arguments`).

    Parameters
    ----------
    k : int
        ``k``, the number of guesses, ``1 ≤ k < n``.
    weight : sequence of float, Tensor or None
        One weight per class, as :class:`torch.nn.CrossEntropyLoss`'s ``weight``: sample ``i``
        weighs ``w_i = weight[y_i]`` (a probability target ``t_i``: ``Σ_c t_ic weight[c]``, the
        expected weight); ``None`` weighs every sample 1 (:class:`~topk.losses.base.Loss`).
    reduction : {"mean", "sum", "none"}
        How the per-sample losses ``ℓ_i`` are reduced: ``"mean"`` (the default) returns
        ``Σ_i w_i ℓ_i / Σ_i w_i``, the plain batch mean without weights (0 when every weight of
        the batch is 0); ``"sum"`` returns ``Σ_i w_i ℓ_i``; ``"none"`` returns the ``[B]``
        values ``w_i ℓ_i``.

    Examples
    --------
    >>> import torch
    >>> from topk.losses.base import TopKLoss
    >>> class PlainTopKHinge(TopKLoss):  # (1 + k-th largest other score - s_y)_+
    ...     def per_label_loss(self, scores, labels):
    ...         label_scores = scores.gather(1, labels[:, None]).squeeze(1)
    ...         others = scores.scatter(1, labels[:, None], float("-inf"))
    ...         return (1 + others.topk(self.k, dim=1).values[:, -1] - label_scores).clamp(min=0)
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> PlainTopKHinge(k=2)(scores, labels)
    tensor(1.)
    >>> PlainTopKHinge(k=2, reduction="none")(scores, labels)
    tensor([0.5000, 1.5000])
    """

    def __init__(self, k: int = 5, weight=None, reduction: str = "mean"):
        super().__init__(weight, reduction)
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
        per_sample = expected_over_targets(self.per_label_loss, shift_to_row_max(scores), target)
        return self.reduce(per_sample, target, scores.shape[1])
