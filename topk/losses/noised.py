"""Noised top-K hinge losses of Garcin et al. 2022 (G22): the calibrated top-K hinge of Yang &
Koyejo 2020 with its ``top_{K+1}`` smoothed by Gaussian perturbation (§3.2, eq. 10), and its
variant with LDAM margins for imbalanced data (§3.3, eq. 13).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from topk.functional.perturbed import (
    check_perturbation,
    check_perturbation_inputs,
    mean_of_one_hots,
    perturbed_kth_largest,
    perturbed_topk,
)
from topk.losses.base import TopKLoss, weighted_reduction
from topk.losses.margin import check_scale, ldam_margins, margins_for
from topk.losses.targets import check_k, label_scores, loss_inputs, shift_to_row_max


def noised_topk_hinge(
    scores: torch.Tensor,
    target: torch.Tensor,
    margins: torch.Tensor | float,
    k: int,
    epsilon: float,
    n_samples: int,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
    compile: bool = False,
    scale: float = 1.0,
    reduction: str = "none",
) -> torch.Tensor:
    r"""Per-sample ``λ (m_y + top̂_{K+1,ε,B}(s) - s_y)_+`` (G22 eq. 10 and 13; ``λ = scale``, see
    :class:`NoisedImbalancedTopKHingeLoss`), a ``[batch]`` tensor for ``reduction="none"``, their
    plain mean or sum for ``"mean"`` or ``"sum"``.

    ``top̂_{K+1,ε,B}`` is :func:`~topk.functional.perturbed.perturbed_topk` (eq. 11); the
    gradient is G22 eq. 12, ``1{m_y + top̂ > s_y} · (argtop̂_{K+1,ε,B}(s) - e_y)`` (G22 writes ``≥``;
    the two differ only on the kink). ``margins`` is
    ``[n]``, or one number for every class. The smoothed threshold does not depend on the label, so a probability target ``t``
    (Mixup) gives ``Σ_i t_i (m_i + top̂ - s_i)_+`` with one noise draw shared by all labels: for
    ``t = λ e_a + (1-λ) e_b`` exactly ``λ ℓ(s, a) + (1-λ) ℓ(s, b)`` under the same noise.
    ``generator``, ``noise`` and ``compile`` are those of ``perturbed_topk``. ``scores`` and
    ``target`` are those :func:`~topk.losses.targets.loss_inputs` returns; the labels' range may
    be left unchecked there (``range_from_gather=True``), as the modules do: their first use
    here is :func:`~topk.losses.targets.label_scores`, which checks it.

    The loss is invariant to adding a constant to every score of a row (under the same noise,
    ``top_{K+1}(s + c + εZ) = top_{K+1}(s + εZ) + c``); it is computed on shifted scores, where
    the noise ``εZ`` and the margins keep their precision: added to float32 scores near ``1e8``
    (rounding unit 8), both would round away. A probability target shifts by the row maximum
    (:func:`~topk.losses.targets.shift_to_row_max`); a label by its own score, which the hinge
    needs anyway: ``(m_y + top̂(s - s_y))_+``, with ``s_j - s_y`` exact for every score within a
    factor 2 of ``s_y`` (Sterbenz's lemma), the ones near the kink. One ``amax`` fewer per call.
    """
    check_k(k, scores.shape[1])
    if target.dtype.is_floating_point:
        scores = shift_to_row_max(scores)
        threshold = perturbed_topk(scores, k + 1, epsilon, n_samples, generator, noise, compile)
        hinge = scale * (target * F.relu(margins + threshold[:, None] - scores)).sum(dim=1)
        return weighted_reduction(hinge, target, None, reduction)
    check_perturbation_inputs(scores, k + 1, epsilon, n_samples, noise)
    detached = scores.detach()
    shifted = detached - label_scores(detached, target)  # the label's own score becomes 0
    values, columns = perturbed_kth_largest(shifted, k + 1, epsilon, n_samples, generator, noise, compile)
    margin = margins.index_select(0, target) if isinstance(margins, torch.Tensor) else margins
    return _Hinge.apply(scores, values, columns, target, margin, scale, reduction)


class _Hinge(torch.autograd.Function):
    """``λ (m_y + top̂ - s_y)_+`` per sample (G22 eq. 10 and 13), or their mean or sum
    (``reduction``), from the k-th largest perturbed ``values`` and their ``columns``
    ``[B, batch]``, with gradient eq. 12 written in one pass:
    ``λ g_i 1{m_y + top̂ > s_y} · ((1/B) Σ_b e_{c_b} - e_y)``. One autograd node where the
    threshold, the label's score, the margin, the ReLU, λ and the reduction would take six: the
    fixed cost of each node is what small inputs pay (``make bench-losses`` at G22's settings;
    docs/benchmarks.md, 'Code choices and the timings behind them', the row of this class).
    The ``values`` are those of the scores less each label's score (detached), so that
    ``top̂ - s_y`` is their mean; the gradient is the scores' own (the loss is shift-invariant)."""

    @staticmethod
    def forward(ctx, scores, values, columns, labels, margin, scale, reduction):
        hinge = values.mean(dim=0).add_(margin)
        active = hinge > 0
        ctx.save_for_backward(columns, labels, active)
        ctx.num_classes, ctx.scale, ctx.reduction = scores.shape[1], scale, reduction
        hinge.clamp_(min=0)
        if reduction != "none":
            hinge = hinge.mean() if reduction == "mean" else hinge.sum()
        return hinge if scale == 1 else hinge.mul_(scale)

    @staticmethod
    def backward(ctx, grad_output):
        columns, labels, active = ctx.saved_tensors
        factor = ctx.scale / len(labels) if ctx.reduction == "mean" else ctx.scale
        grad_output = grad_output * active if factor == 1 else grad_output * factor * active
        grad = mean_of_one_hots(grad_output, columns, ctx.num_classes, labels)
        return grad, None, None, None, None, None, None


class _NoisedHingeLoss(TopKLoss):
    """What the two noised losses share: the hinge of :func:`noised_topk_hinge`, reduced."""

    def reduce_hinge(self, scores: torch.Tensor, target: torch.Tensor, margins, scale: float) -> torch.Tensor:
        """The loss of checked ``scores`` and ``target``: without class weights the hinge's
        autograd node reduces the batch itself (one node fewer, see ``_Hinge``)."""
        reduction = self.reduction if self.weight is None else "none"
        hinge = noised_topk_hinge(scores, target, margins, self.k, self.epsilon, self.n_samples,
                                  compile=self.compile, scale=scale, reduction=reduction)
        return hinge if self.weight is None else self.reduce(hinge, target, scores.shape[1])


class NoisedTopKHingeLoss(_NoisedHingeLoss):
    r"""Noised balanced top-K hinge loss of G22 (eq. 10; ``noised_bal``).

    .. math::
        \ell_{\mathrm{Noised\,bal.}}^{K,ε,B}(s, y)
            &= \big(1 + \widehat{\mathrm{top}}_{K+1,ε,B}(s) - s_y\big)_+, \\
        \widehat{\mathrm{top}}_{K+1,ε,B}(s)
            &= \frac{1}{B} \sum_{b=1}^{B} \mathrm{top}_{K+1}(s + ε Z_b)

    The calibrated top-K hinge (:class:`~topk.losses.hinge.CalibratedTopKHingeLoss`, which it
    equals for ``ε = 0``) with its threshold smoothed by Gaussian perturbation (§3.2). ``B``
    fresh noise vectors ``Z_b ~ N(0, I)`` per sample are drawn at every call from torch's
    random generator (seed it for reproducible runs), on the scores' device and in their dtype
    (float32 for float16 and bfloat16 scores, see :mod:`topk.losses.targets`). The
    gradient is G22 eq. 12 (see :func:`~topk.functional.perturbed.perturbed_topk`).

    Parameters
    ----------
    k : int
        ``K``, the number of guesses, ``1 ≤ K < n``.
    epsilon : float
        Noise scale ``ε ≥ 0`` (G22: 0.2 on CIFAR-100, Table 2 for its influence).
    n_samples : int
        Noise vectors ``B`` per sample (G22: 10 on CIFAR-100, 3 to 10 advised, Table 3).
    compile : bool
        Select the ``K+1``-th largest perturbed scores with one compiled kernel
        (:func:`~topk.functional.perturbed.compiled_kth_largest`): the same values, faster
        after a first call that compiles (needs a C++ compiler on a CPU, Triton on a GPU).
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
    Accepts integer labels ``[batch]`` or a probability matrix ``[batch, n]`` (Mixup; see
    :func:`noised_topk_hinge`); the per-sample losses are weighted and reduced as ``weight`` and
    ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import CalibratedTopKHingeLoss, NoisedTopKHingeLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> _ = torch.manual_seed(0)  # the noise is drawn from torch's generator
    >>> round(NoisedTopKHingeLoss(k=2, epsilon=0.2, n_samples=10)(scores, labels).item(), 4)
    0.7561
    >>> NoisedTopKHingeLoss(k=2, epsilon=0.0)(scores, labels), CalibratedTopKHingeLoss(k=2)(scores, labels)
    (tensor(0.7500), tensor(0.7500))
    """

    def __init__(self, k: int = 5, epsilon: float = 0.2, n_samples: int = 10, compile: bool = False,
                 weight=None, reduction: str = "mean"):
        super().__init__(k, weight, reduction)
        check_perturbation(epsilon, n_samples)
        self.epsilon = epsilon
        self.n_samples = n_samples
        self.compile = compile

    def extra_repr(self) -> str:
        return f"k={self.k}, epsilon={self.epsilon}, n_samples={self.n_samples}, compile={self.compile}"

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, target = loss_inputs(scores, target, range_from_gather=True)
        return self.reduce_hinge(scores, target, 1.0, 1.0)


class NoisedImbalancedTopKHingeLoss(_NoisedHingeLoss):
    r"""Noised imbalanced top-K hinge loss of G22 (eq. 13, §4.5; ``noised_imbal``).

    .. math::
        \ell_{\mathrm{Noised\,imbal.}}^{K,ε,B,m_y}(s, y)
            = λ \big(m_y + \widehat{\mathrm{top}}_{K+1,ε,B}(s) - s_y\big)_+,
        \qquad m_y = \frac{C}{n_y^{1/4}}

    :class:`NoisedTopKHingeLoss` with the LDAM margins of Cao et al. 2019
    (:func:`~topk.losses.margin.ldam_margins`): rarer classes must win by a larger margin.

    Where the scale ``λ`` goes: eq. 13 has none; §4.5 normalises the last layer (cosine scores
    in ``[-1, 1]``) and "multiplies the scores by a scaling constant", tuned like LDAM's, whose
    scale multiplies the scores *after* the margin is subtracted (Cao et al.). Read the same way
    here, margins and ``ε`` are in units of the cosine scores and ``λ`` multiplies the hinge, as
    G22's published code does (``scale * (m_y + top̂ - s_y)``, then
    ReLU). Scaling the scores first instead would shrink the margins and the noise by ``λ``
    (``max_margin = 0.2`` against scores of ±60), which the shared tuning of ``max_margin``
    with LDAM (same best value 0.2) argues against.

    Parameters
    ----------
    k : int
        ``K``, the number of guesses, ``1 ≤ K < n``.
    epsilon : float
        Noise scale ``ε ≥ 0`` (G22: 0.01 on Pl@ntNet-300K).
    n_samples : int
        Noise vectors ``B`` per sample (G22: 5 on Pl@ntNet-300K).
    max_margin : float
        Margin of the rarest class, ``max_y m_y`` (G22: 0.2).
    scale : float
        ``λ > 0`` (G22: 60 on Pl@ntNet-300K; 50 suggested as default in its Appendix E).
    class_counts : list of int
        Training samples per class; ``train.py`` passes the training split's counts.
    compile : bool
        As for :class:`NoisedTopKHingeLoss`.
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
    Accepts integer labels ``[batch]`` or a probability matrix ``[batch, n]`` (Mixup; see
    :func:`noised_topk_hinge`); the per-sample losses are weighted and reduced as ``weight`` and
    ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import NoisedImbalancedTopKHingeLoss
    >>> scores = torch.tensor([[0.9, 0.1, -0.3, 0.2], [0.2, 0.3, 0.1, 0.6]])  # cosine scores
    >>> labels = torch.tensor([1, 2])
    >>> loss = NoisedImbalancedTopKHingeLoss(k=2, epsilon=0.01, n_samples=5, max_margin=0.2, scale=60.0,
    ...                                      class_counts=[500, 100, 20, 5])
    >>> _ = torch.manual_seed(0)
    >>> round(loss(scores, labels).item(), 4)
    9.8462
    """

    def __init__(
        self,
        k: int = 5,
        epsilon: float = 0.01,
        n_samples: int = 5,
        max_margin: float = 0.2,
        scale: float = 60.0,
        class_counts: Sequence[int] | None = None,
        compile: bool = False,
        weight=None,
        reduction: str = "mean",
    ):
        super().__init__(k, weight, reduction)
        check_perturbation(epsilon, n_samples)
        check_scale(scale)
        self.epsilon = epsilon
        self.n_samples = n_samples
        self.max_margin = max_margin
        self.scale = scale
        self.compile = compile
        self.register_buffer("margins", ldam_margins(class_counts, max_margin), persistent=False)

    def extra_repr(self) -> str:
        return (
            f"k={self.k}, epsilon={self.epsilon}, n_samples={self.n_samples}, "
            f"max_margin={self.max_margin}, scale={self.scale}, classes={len(self.margins)}, "
            f"compile={self.compile}"
        )

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, target = loss_inputs(scores, target, range_from_gather=True)
        return self.reduce_hinge(scores, target, margins_for(self.margins, scores), self.scale)
