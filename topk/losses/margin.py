"""Cross-entropy variants for imbalanced data: focal loss (Lin et al. 2017) and LDAM (Cao et al. 2019).

Both are G22's baselines on Pl@ntNet-300K (G22 Table 1, §4.5). The LDAM margins
``m_y = C / n_y^{1/4}`` are also those of G22's noised imbalanced top-K loss (G22 §3.3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import torch
import torch.nn.functional as F

from topk.functional.arguments import non_negative, positive
from topk.losses.base import Loss
from topk.losses.targets import expected_over_targets, loss_inputs, shift_to_row_max


def ldam_margins(class_counts: Sequence[int] | None, max_margin: float) -> torch.Tensor:
    """Per-class margins ``m_y = C / n_y^{1/4}`` (Cao et al. 2019; G22 §3.3), a float64 tensor ``[n]``.

    ``n_y`` is the number of training samples of class ``y`` and ``C`` is set so that the
    largest margin, that of the rarest class, is ``max_margin``.
    """
    if class_counts is None:
        raise ValueError(
            "class_counts is missing: this loss needs the training split's class counts "
            "(train.py passes them; pass class_counts=[...] when building the loss yourself)"
        )
    try:
        counts = torch.as_tensor(list(class_counts), dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        counts = torch.full((1,), math.nan, dtype=torch.float64)  # not numbers: refused below
    if counts.dim() != 1 or len(counts) == 0 or not bool(((counts > 0) & (counts < math.inf)).all()):
        raise ValueError(
            f"class_counts must be a non-empty list of positive counts, got {list(class_counts)}; "
            "every class needs at least one training sample"
        )
    non_negative("max_margin", max_margin)
    inverse_fourth_roots = counts ** -0.25
    return inverse_fourth_roots * (max_margin / inverse_fourth_roots.max())


def margins_for(margins: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """The per-class ``margins`` in the scores' dtype and device, checked against their class count.

    ``scores`` are those :func:`~topk.losses.targets.loss_inputs` returns.
    """
    if len(margins) != scores.shape[1]:
        raise ValueError(
            f"class_counts has {len(margins)} classes but the scores have {scores.shape[1]}; "
            "give the counts of the data set the model is trained on."
        )
    return margins.to(device=scores.device, dtype=scores.dtype)


def check_scale(scale: float) -> None:
    positive("scale", scale)


def focal_loss(scores: torch.Tensor, labels: torch.Tensor, gamma: float) -> torch.Tensor:
    """Per-sample ``(1 - p_y)^γ · CE(s, y)`` with ``p_y = exp(-CE)``, a ``[B]`` tensor.

    ``1 - p_y`` is computed as ``-expm1(-CE)``, exact also for confident samples (``p_y → 1``).
    """
    cross_entropy = F.cross_entropy(scores, labels, reduction="none")
    return (-torch.expm1(-cross_entropy)) ** gamma * cross_entropy


def ldam_loss(scores: torch.Tensor, labels: torch.Tensor, margins: torch.Tensor, scale: float) -> torch.Tensor:
    """Per-sample cross-entropy on ``scale · (s - m_y e_y)``, a ``[B]`` tensor (``margins`` ``[n]``).

    Invariant to adding a constant to every score (cross-entropy is, and ``scale`` multiplies the
    constant too); :class:`LDAMLoss` passes scores shifted to a row maximum of 0, without which
    float32 scores near ``1e4`` already lose part of the margin ``m_y`` to their rounding (and
    all of it near ``1e8``)."""
    shifted = scores - F.one_hot(labels, scores.shape[1]).to(scores.dtype) * margins[labels, None]
    return F.cross_entropy(scale * shifted, labels, reduction="none")


class FocalLoss(Loss):
    r"""Focal loss of Lin et al. 2017 (G22 Table 1).

    .. math::
        \ell_{\mathrm{focal}}^γ(s, y) = -(1 - p_y)^γ \log p_y, \qquad p_y = \mathrm{softmax}(s)_y

    Cross-entropy with well-classified samples down-weighted; ``γ = 0`` is cross-entropy.
    (G22 Table 1 prints the factor as ``(1 - log[ℓ_CE])^γ`` and swaps the focal and LDAM
    citations; the loss G22 trains is Lin et al.'s.)

    Parameters
    ----------
    gamma : float
        Focusing parameter ``γ ≥ 0`` (Lin et al.'s default 2).
    weight : sequence of float, Tensor or None
        One weight per class, as :class:`torch.nn.CrossEntropyLoss`'s ``weight``: sample ``i``
        weighs ``w_i = weight[y_i]`` (a probability target ``t_i``: ``Σ_c t_ic weight[c]``, the
        expected weight); ``None`` weighs every sample 1 (:class:`~topk.losses.base.Loss`).
    reduction : {"mean", "sum", "none"}
        How the per-sample losses ``ℓ_i`` are reduced: ``"mean"`` (the default) returns
        ``Σ_i w_i ℓ_i / Σ_i w_i``, the plain batch mean without weights (0 when every weight of
        the batch is 0); ``"sum"`` returns ``Σ_i w_i ℓ_i``; ``"none"`` returns the ``[B]``
        values ``w_i ℓ_i``.

    Notes
    -----
    Accepts integer labels ``[B]`` or a probability matrix ``[B, n]`` (Mixup), for which the
    loss is ``Σ_i t_i ℓ(s, i)``; the per-sample losses are weighted and reduced as ``weight``
    and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import FocalLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> FocalLoss(gamma=2.0)(scores, labels)
    tensor(1.2256)
    >>> FocalLoss(gamma=2.0, weight=[1.0, 1.0, 1.0, 3.0])(scores, labels)  # class 3 weighs 3
    tensor(1.3884)
    """

    def __init__(self, gamma: float = 2.0, weight=None, reduction: str = "mean"):
        super().__init__(weight, reduction)
        self.gamma = non_negative("gamma", gamma)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}"

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, target = loss_inputs(scores, target)
        per_sample = expected_over_targets(partial(focal_loss, gamma=self.gamma), scores, target)
        return self.reduce(per_sample, target, scores.shape[1])


class LDAMLoss(Loss):
    r"""Label-distribution-aware margin loss of Cao et al. 2019 (G22 Table 1, §4.5).

    .. math::
        \ell_{\mathrm{LDAM}}(s, y) = -\log \frac{e^{λ(s_y - m_y)}}
                                          {e^{λ(s_y - m_y)} + \sum_{j \ne y} e^{λ s_j}},
        \qquad m_y = \frac{C}{n_y^{1/4}}

    i.e. cross-entropy on ``λ · (s - m_y e_y)`` with ``λ`` the ``scale``: rarer classes must
    win by a larger margin. The margins are in the units of the unscaled scores, which G22 and
    Cao et al. take from a normalised (cosine) last layer, so that ``s ∈ [-1, 1]``.

    Parameters
    ----------
    max_margin : float
        Margin of the rarest class, ``max_y m_y`` (Cao et al. 0.5; G22 0.2 on Pl@ntNet-300K).
    scale : float
        Multiplier ``λ > 0`` of the scores (Cao et al. 30; G22 40 on Pl@ntNet-300K).
    class_counts : list of int
        Training samples per class; ``train.py`` passes the training split's counts.
    weight : sequence of float, Tensor or None
        One weight per class, as :class:`torch.nn.CrossEntropyLoss`'s ``weight``: sample ``i``
        weighs ``w_i = weight[y_i]`` (a probability target ``t_i``: ``Σ_c t_ic weight[c]``, the
        expected weight); ``None`` weighs every sample 1 (:class:`~topk.losses.base.Loss`).
    reduction : {"mean", "sum", "none"}
        How the per-sample losses ``ℓ_i`` are reduced: ``"mean"`` (the default) returns
        ``Σ_i w_i ℓ_i / Σ_i w_i``, the plain batch mean without weights (0 when every weight of
        the batch is 0); ``"sum"`` returns ``Σ_i w_i ℓ_i``; ``"none"`` returns the ``[B]``
        values ``w_i ℓ_i``.

    Notes
    -----
    Accepts integer labels ``[B]`` or a probability matrix ``[B, n]`` (Mixup), for which the
    loss is ``Σ_i t_i ℓ(s, i)``; the per-sample losses are weighted and reduced as ``weight``
    and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import LDAMLoss
    >>> scores = torch.tensor([[0.9, 0.1, -0.3, 0.2], [0.2, 0.3, 0.1, 0.6]])  # cosine scores
    >>> labels = torch.tensor([1, 2])
    >>> loss = LDAMLoss(max_margin=0.5, scale=30.0, class_counts=[500, 100, 20, 5], reduction="none")
    >>> loss.margins.float()  # m_y = C / n_y^(1/4), max_margin for the rarest class
    tensor([0.1581, 0.2364, 0.3536, 0.5000])
    >>> loss(scores, labels)
    tensor([31.0931, 25.6067])
    """

    def __init__(self, max_margin: float = 0.5, scale: float = 30.0, class_counts: Sequence[int] | None = None,
                 weight=None, reduction: str = "mean"):
        super().__init__(weight, reduction)
        check_scale(scale)
        self.max_margin = max_margin
        self.scale = scale
        self.register_buffer("margins", ldam_margins(class_counts, max_margin), persistent=False)

    def extra_repr(self) -> str:
        return f"max_margin={self.max_margin}, scale={self.scale}, classes={len(self.margins)}"

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, target = loss_inputs(scores, target)
        margins = margins_for(self.margins, scores)
        per_label = partial(ldam_loss, margins=margins, scale=self.scale)
        per_sample = expected_over_targets(per_label, shift_to_row_max(scores), target)
        return self.reduce(per_sample, target, scores.shape[1])
