"""Smooth top-k SVM loss ``L_{k,τ}`` of Berrada, Zisserman and Kumar 2018 (B18), §3–4."""

from __future__ import annotations

import torch

from topk.functional.arguments import non_negative
from topk.functional.esp import LOG_ZERO, log_esp
from topk.losses.base import TopKLoss
from topk.losses.hinge import topk_hinge
from topk.losses.targets import check_k, expected_over_targets, loss_inputs, shift_to_row_max


def smooth_topk_svm(scores: torch.Tensor, labels: torch.Tensor, k: int, tau: float, alpha: float) -> torch.Tensor:
    r"""Per-sample ``L_{k,τ}(s, y)`` for integer labels (B18 eq. 10), a ``[B]`` tensor.

    With ``x = s / (kτ)`` and ``e = exp(x\y)``,

    .. math::
        L_{k,τ} &= τ \log\big(e^{x_y} σ_{k-1}(e) + e^{α/τ} σ_k(e)\big) - τ \log\big(e^{x_y} σ_{k-1}(e)\big) \\
                &= τ \,\mathrm{softplus}\big(α/τ + \log σ_k(e) - \log σ_{k-1}(e) - x_y\big).

    ``σ(e)`` of every sample comes from one :func:`~topk.functional.esp.log_esp` call on ``x``
    with ``x_y`` set to ``log 0`` (``e_y = 0`` drops it from every product). The scores are
    shifted by their row maximum before they are divided by ``kτ``
    (:func:`~topk.losses.targets.shift_to_row_max`), which leaves the loss unchanged, keeps the
    log-coefficients small, so that near-ties keep their precision in float32, and keeps the
    differences of large scores exact (divided first, scores near ``1e8`` lose their
    differences to the rounding of the quotients).
    """
    x = shift_to_row_max(scores) / (k * tau)
    x_label = x.gather(1, labels[:, None]).squeeze(1)
    log_sigma = log_esp(x.scatter(1, labels[:, None], LOG_ZERO), k)
    margin = alpha / tau + log_sigma[:, k] - log_sigma[:, k - 1] - x_label
    # softplus(margin) without F.softplus's linear cut-off above 20, which would make float64
    # gradients inexact.
    return tau * torch.logaddexp(margin, torch.zeros_like(margin))


def hard_topk_svm(scores: torch.Tensor, labels: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    r"""Per-sample ``l_k(s, y)`` (B18 eq. 8), the ``τ → 0`` limit of ``L_{k,τ}``: each log-sum-exp
    of eq. 9 becomes a max over subsets, and the two maxima differ only when the best k-subset
    leaves ``y`` out, so that

    .. math:: l_k(s, y) = \big(α + (s_{\setminus y, [k]} - s_y) / k\big)_+,

    Lapin's top-k hinge on the scores divided by ``k`` (:func:`topk.losses.hinge.topk_hinge`),
    shifted by their row maximum first (exact for large scores, as in :func:`smooth_topk_svm`).
    """
    return topk_hinge(shift_to_row_max(scores) / k, labels, k, alpha)


class SmoothTopKSVM(TopKLoss):
    r"""Smooth top-k SVM loss ``L_{k,τ}`` of Berrada et al. 2018, eq. 9 (evaluated as eq. 10).

    .. math::
        L_{k,τ}(s, y) ={}& τ \log \sum_{A ⊂ [n], |A| = k}
                            \exp\Big(\frac{1}{τ}\Big(α\,1[y ∉ A] + \frac{1}{k}\sum_{j∈A} s_j\Big)\Big) \\
                      & - τ \log \sum_{A ∋ y, |A| = k} \exp\Big(\frac{1}{kτ}\sum_{j∈A} s_j\Big)

    the log-sum-exp smoothing with temperature ``τ`` of the top-k SVM loss ``l_k`` (B18 eq. 8),
    which it approaches as ``τ → 0``. ``k = 1``, ``τ = 1``, ``α = 0`` is cross-entropy (B18 §3.3).
    The sums over the ``C(n, k)`` subsets are computed through elementary symmetric
    polynomials in log-space (B18 §4, Algorithm 1; see :func:`smooth_topk_svm`). B18's published
    code switches a sample to the hard loss ``l_k`` when ``s_[k] - s_[k+1] ≥ kτ log 1e3``; this
    implementation has no such switch and needs none: there, as for every ``τ`` down to 1e-4,
    its float32 values and gradients are finite and match the float64 enumeration of subsets
    (see the tests).

    Parameters
    ----------
    k : int
        Size of the predicted set, ``1 ≤ k < n``.
    tau : float
        Temperature ``τ ≥ 0``; B18 uses 1 on CIFAR-100 and 0.1 on ImageNet. ``τ = 0`` is the
        non-smooth ``l_k`` (:func:`hard_topk_svm`), the first row of B18 Table 6.
    alpha : float
        Margin ``α ≥ 0`` (the scaling of ``Δ_k``; B18 keeps 1).
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
    loss is ``Σ_i t_i L_{k,τ}(s, i)`` (the loss has no native soft-target form); the per-sample
    losses are weighted and reduced as ``weight`` and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import SmoothTopKSVM
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> SmoothTopKSVM(k=2, tau=1.0, alpha=1.0)(scores, labels)
    tensor(1.3194)
    >>> SmoothTopKSVM(k=2, tau=1.0, reduction="none")(scores, labels)
    tensor([1.1369, 1.5019])
    """

    def __init__(self, k: int = 5, tau: float = 1.0, alpha: float = 1.0, weight=None, reduction: str = "mean"):
        super().__init__(k, weight, reduction)
        self.tau = non_negative("tau", tau, " (0 is the non-smooth top-k SVM)")
        self.alpha = non_negative("alpha", alpha)

    def extra_repr(self) -> str:
        return f"k={self.k}, tau={self.tau}, alpha={self.alpha}"

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, target = loss_inputs(scores, target)
        check_k(self.k, scores.shape[1])
        if self.tau == 0:
            per_sample = expected_over_targets(
                lambda s, y: hard_topk_svm(s, y, self.k, self.alpha), scores, target
            )
        else:
            per_sample = expected_over_targets(
                lambda s, y: smooth_topk_svm(s, y, self.k, self.tau, self.alpha), scores, target
            )
        return self.reduce(per_sample, target, scores.shape[1])
