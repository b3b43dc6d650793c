"""Top-K hinge losses: Lapin et al. 2015's top-K hinge and its convex upper bound, and the
top-K calibrated hinge of Yang & Koyejo 2020, as written in G22 (eq. 4, Table 1, eq. 5).

Notation (G22 §3.1): ``top_K(s)`` is the K-th largest entry of ``s``, ``s\\y`` the scores
without the label's, ``e_y`` the y-th basis vector, ``(·)_+ = max(·, 0)``. All three losses are
piecewise linear; autograd gives their (sub)gradient, which has at most ``K + 1`` non-zeros.
All three are invariant to adding a constant to every score of a row; the losses compute them
on the scores less their row maximum (:meth:`topk.losses.base.TopKLoss.forward`), exact in
float32 at any score magnitude (at ``1e8`` the unshifted margin ``α + top_K - s_y`` rounded
``α`` away).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from topk.functional.arguments import non_negative
from topk.losses.base import TopKLoss


def _label_scores(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return scores.gather(1, labels[:, None]).squeeze(1)


def topk_hinge(scores: torch.Tensor, labels: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """Per-sample ``(α + top_K(s\\y) - s_y)_+`` (G22 eq. 4), a ``[B]`` tensor."""
    others = scores.scatter(1, labels[:, None], float("-inf"))
    kth_other = torch.topk(others, k, dim=1).values[:, -1]
    return F.relu(alpha + kth_other - _label_scores(scores, labels))


def convex_topk_hinge(scores: torch.Tensor, labels: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """Per-sample ``((1/K) Σ_{k≤K} top_k(α·1 - α·e_y + s) - s_y)_+`` (G22 Table 1), a ``[B]`` tensor.

    The sum of the K largest entries of ``s + α(1 - e_y)``: the label keeps its score, every
    other class gets the margin added.
    """
    label_scores = _label_scores(scores, labels)
    augmented = (scores + alpha).scatter(1, labels[:, None], label_scores[:, None])
    return F.relu(torch.topk(augmented, k, dim=1).values.mean(dim=1) - label_scores)


def calibrated_topk_hinge(scores: torch.Tensor, labels: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """Per-sample ``(α + top_{K+1}(s) - s_y)_+`` (G22 eq. 5), a ``[B]`` tensor."""
    kth_next = torch.topk(scores, k + 1, dim=1).values[:, -1]
    return F.relu(alpha + kth_next - _label_scores(scores, labels))


class _HingeLoss(TopKLoss):
    """Holds ``k`` and the margin ``α``; :meth:`per_label_loss` over the target, reduced.

    Soft targets ``t`` (Mixup) give ``Σ_i t_i ℓ(s, i)``: these losses are defined on hard labels
    only (S20 §V-B says the same of the smooth top-k SVM, which "cannot be directly applied" to
    soft labels).
    """

    def __init__(self, k: int = 5, alpha: float = 1.0, weight=None, reduction: str = "mean"):
        super().__init__(k, weight, reduction)
        self.alpha = non_negative("alpha", alpha)

    def extra_repr(self) -> str:
        return f"k={self.k}, alpha={self.alpha}"


class TopKHingeLoss(_HingeLoss):
    r"""Top-K hinge loss of Lapin et al. 2015 (G22 eq. 4).

    .. math::
        \ell_{\mathrm{Hinge}}^K(s, y) = \big(α + \mathrm{top}_K(s_{\setminus y}) - s_y\big)_+

    Zero once the label beats the K-th best other class by the margin ``α``. Not top-K
    calibrated (Yang & Koyejo 2020).

    Parameters
    ----------
    k : int
        ``K``, the number of guesses, ``1 ≤ K < n``.
    alpha : float
        Margin ``α ≥ 0`` (1 in Lapin et al. and G22).
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
    Accepts integer labels ``[B]`` or a probability matrix ``[B, n]`` (Mixup); the per-sample
    losses are weighted and reduced as ``weight`` and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import TopKHingeLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> TopKHingeLoss(k=2, alpha=1.0)(scores, labels)
    tensor(1.)
    >>> TopKHingeLoss(k=2, reduction="none")(scores, labels)
    tensor([0.5000, 1.5000])
    """

    def per_label_loss(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return topk_hinge(scores, labels, self.k, self.alpha)


class ConvexTopKHingeLoss(_HingeLoss):
    r"""Convex top-K hinge loss of Lapin et al. 2015 (G22 Table 1, :math:`\ell_{\mathrm{CVXHinge}}^K`).

    .. math::
        \ell_{\mathrm{CVXHinge}}^K(s, y) =
            \Big(\frac{1}{K} \sum_{k=1}^{K} \mathrm{top}_k(α\mathbf 1 - α e_y + s) - s_y\Big)_+

    A convex upper bound of :class:`TopKHingeLoss`: the mean of the K largest entries of
    ``s + α(1 - e_y)`` instead of the K-th largest other score.

    Parameters
    ----------
    k : int
        ``K``, the number of guesses, ``1 ≤ K < n``.
    alpha : float
        Margin ``α ≥ 0`` (1 in Lapin et al. and G22).
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
    Accepts integer labels ``[B]`` or a probability matrix ``[B, n]`` (Mixup); the per-sample
    losses are weighted and reduced as ``weight`` and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import ConvexTopKHingeLoss, TopKHingeLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> ConvexTopKHingeLoss(k=2, alpha=1.0, reduction="none")(scores, labels)
    tensor([1.2500, 2.0000])
    >>> TopKHingeLoss(k=2, reduction="none")(scores, labels)  # never above the convex loss
    tensor([0.5000, 1.5000])
    """

    def per_label_loss(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return convex_topk_hinge(scores, labels, self.k, self.alpha)


class CalibratedTopKHingeLoss(_HingeLoss):
    r"""Top-K calibrated hinge loss of Yang & Koyejo 2020 (G22 eq. 5 and 17).

    .. math::
        \ell_{\mathrm{Cal.Hinge}}^K(s, y) = \big(α + \mathrm{top}_{K+1}(s) - s_y\big)_+

    Zero once the label beats the (K+1)-th largest score, its own included, by ``α``. It is
    top-K calibrated, and the ``ε = 0`` case of G22's noised losses
    (:class:`~topk.losses.noised.NoisedTopKHingeLoss`).

    Parameters
    ----------
    k : int
        ``K``, the number of guesses, ``1 ≤ K < n``.
    alpha : float
        Margin ``α ≥ 0`` (1 in Yang & Koyejo and G22).
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
    Accepts integer labels ``[B]`` or a probability matrix ``[B, n]`` (Mixup); the per-sample
    losses are weighted and reduced as ``weight`` and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import CalibratedTopKHingeLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> CalibratedTopKHingeLoss(k=2, alpha=1.0)(scores, labels)
    tensor(0.7500)
    >>> CalibratedTopKHingeLoss(k=2, reduction="none")(scores, labels)
    tensor([0.5000, 1.0000])
    """

    def per_label_loss(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return calibrated_topk_hinge(scores, labels, self.k, self.alpha)
