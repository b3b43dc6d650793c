"""Every loss of :mod:`topk.losses` as a function, as :func:`torch.nn.functional.cross_entropy`
is :class:`torch.nn.CrossEntropyLoss`'s: ``f(scores, target, <the class's arguments>)``.

Each function builds its loss class with the arguments given and calls it once, so that it keeps
the whole loss contract (docs/design.md §5): the same checks and one-sentence refusals, integer
labels ``[B]`` or probability targets ``[B, n]``, ``weight=`` and ``reduction=`` as torch's, and
the values and gradients of the class (``tests/test_functional.py``). Where a paper is cited,
it is the class's: the formulas are on the classes' pages. pytopk users find G22's losses here as
they found ``pytopk.functional``'s (``bal_noised_topk_loss``: :func:`noised_topk_hinge`,
``imbal_noised_topk_loss``: :func:`noised_imbalanced_topk_hinge`); the noised losses draw their
noise from torch's generator, as the classes do (given noise:
:func:`topk.functional.perturbed.perturbed_topk`'s ``noise=``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from topk.losses import (
    CalibratedTopKHingeLoss,
    ConvexTopKHingeLoss,
    DiffSortTopKCrossEntropyLoss,
    FocalLoss,
    LDAMLoss,
    NoisedImbalancedTopKHingeLoss,
    NoisedTopKHingeLoss,
    SmoothTopKSVM,
    TopKEntropyLoss,
    TopKGroupingLoss,
    TopKHingeLoss,
    TopKTransitionLoss,
    TruncatedTopKEntropyLoss,
)

Tensor = torch.Tensor

# Each function's class, which tests/test_functional.py holds each function's signature and
# values to.
CLASSES = {
    "smooth_topk_svm": SmoothTopKSVM,
    "topk_hinge": TopKHingeLoss,
    "convex_topk_hinge": ConvexTopKHingeLoss,
    "calibrated_topk_hinge": CalibratedTopKHingeLoss,
    "noised_topk_hinge": NoisedTopKHingeLoss,
    "noised_imbalanced_topk_hinge": NoisedImbalancedTopKHingeLoss,
    "topk_entropy": TopKEntropyLoss,
    "truncated_topk_entropy": TruncatedTopKEntropyLoss,
    "topk_grouping": TopKGroupingLoss,
    "topk_transition": TopKTransitionLoss,
    "diffsort_topk_ce": DiffSortTopKCrossEntropyLoss,
    "focal_loss": FocalLoss,
    "ldam_loss": LDAMLoss,
}


def smooth_topk_svm(scores: Tensor, target: Tensor, k: int = 5, tau: float = 1.0, alpha: float = 1.0,
                    weight=None, reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.smooth_svm.SmoothTopKSVM` (B18 eq. 9–10) of ``scores`` and ``target``.

    >>> import torch
    >>> from topk.functional import smooth_topk_svm
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> smooth_topk_svm(scores, labels, k=2, tau=1.0)
    tensor(1.3194)
    """
    return SmoothTopKSVM(k=k, tau=tau, alpha=alpha, weight=weight, reduction=reduction)(scores, target)


def topk_hinge(scores: Tensor, target: Tensor, k: int = 5, alpha: float = 1.0, weight=None,
               reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.hinge.TopKHingeLoss` (Lapin et al. 2015; G22 eq. 4).

    >>> import torch
    >>> from topk.functional import topk_hinge
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> topk_hinge(scores, labels, k=2, reduction="none")
    tensor([0.5000, 1.5000])
    """
    return TopKHingeLoss(k=k, alpha=alpha, weight=weight, reduction=reduction)(scores, target)


def convex_topk_hinge(scores: Tensor, target: Tensor, k: int = 5, alpha: float = 1.0, weight=None,
                      reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.hinge.ConvexTopKHingeLoss` (Lapin et al. 2015; G22 Table 1).

    >>> import torch
    >>> from topk.functional import convex_topk_hinge
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> convex_topk_hinge(scores, labels, k=2)
    tensor(1.6250)
    """
    return ConvexTopKHingeLoss(k=k, alpha=alpha, weight=weight, reduction=reduction)(scores, target)


def calibrated_topk_hinge(scores: Tensor, target: Tensor, k: int = 5, alpha: float = 1.0, weight=None,
                          reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.hinge.CalibratedTopKHingeLoss` (Yang & Koyejo 2020; G22 eq. 5).

    >>> import torch
    >>> from topk.functional import calibrated_topk_hinge
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> calibrated_topk_hinge(scores, labels, k=2)
    tensor(0.7500)
    """
    return CalibratedTopKHingeLoss(k=k, alpha=alpha, weight=weight, reduction=reduction)(scores, target)


def noised_topk_hinge(scores: Tensor, target: Tensor, k: int = 5, epsilon: float = 0.2, n_samples: int = 10,
                      compile: bool = False, weight=None, reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.noised.NoisedTopKHingeLoss` (G22 eq. 10), pytopk's
    ``bal_noised_topk_loss``; the noise comes from torch's generator.

    >>> import torch
    >>> from topk.functional import noised_topk_hinge
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> _ = torch.manual_seed(0)
    >>> round(noised_topk_hinge(scores, labels, k=2, epsilon=0.2, n_samples=10).item(), 4)
    0.7561
    """
    loss = NoisedTopKHingeLoss(k=k, epsilon=epsilon, n_samples=n_samples, compile=compile, weight=weight,
                               reduction=reduction)
    return loss(scores, target)


def noised_imbalanced_topk_hinge(scores: Tensor, target: Tensor, k: int = 5, epsilon: float = 0.01,
                                 n_samples: int = 5, max_margin: float = 0.2, scale: float = 60.0,
                                 class_counts: Sequence[int] | None = None, compile: bool = False,
                                 weight=None, reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.noised.NoisedImbalancedTopKHingeLoss` (G22 eq. 13), pytopk's
    ``imbal_noised_topk_loss``; the margins come from ``class_counts``.

    >>> import torch
    >>> from topk.functional import noised_imbalanced_topk_hinge
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> _ = torch.manual_seed(0)
    >>> loss = noised_imbalanced_topk_hinge(scores, labels, k=2, class_counts=[100, 50, 10, 5])
    >>> round(loss.item(), 2)
    6.1
    """
    loss = NoisedImbalancedTopKHingeLoss(k=k, epsilon=epsilon, n_samples=n_samples, max_margin=max_margin,
                                         scale=scale, class_counts=class_counts, compile=compile,
                                         weight=weight, reduction=reduction)
    return loss(scores, target)


def topk_entropy(scores: Tensor, target: Tensor, k: int = 5, weight=None, reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.entropy.TopKEntropyLoss` (Lapin, Hein, Schiele 2016).

    >>> import torch
    >>> from topk.functional import topk_entropy
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> topk_entropy(scores, labels, k=2)
    tensor(1.6707)
    """
    return TopKEntropyLoss(k=k, weight=weight, reduction=reduction)(scores, target)


def truncated_topk_entropy(scores: Tensor, target: Tensor, k: int = 5, weight=None,
                           reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.entropy.TruncatedTopKEntropyLoss` (Lapin, Hein, Schiele 2016).

    >>> import torch
    >>> from topk.functional import truncated_topk_entropy
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> truncated_topk_entropy(scores, labels, k=2)
    tensor(0.8676)
    """
    return TruncatedTopKEntropyLoss(k=k, weight=weight, reduction=reduction)(scores, target)


def topk_grouping(scores: Tensor, target: Tensor, k: int = 5, weight=None, reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.transition.TopKGroupingLoss` (S20 eq. 5).

    >>> import torch
    >>> from topk.functional import topk_grouping
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> topk_grouping(scores, labels, k=2)
    tensor(1.1140)
    """
    return TopKGroupingLoss(k=k, weight=weight, reduction=reduction)(scores, target)


def topk_transition(scores: Tensor, target: Tensor, k: int = 5, weight=None, reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.transition.TopKTransitionLoss` (S20 eq. 6).

    >>> import torch
    >>> from topk.functional import topk_transition
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> topk_transition(scores, labels, k=2)
    tensor(1.2232)
    """
    return TopKTransitionLoss(k=k, weight=weight, reduction=reduction)(scores, target)


def diffsort_topk_ce(scores: Tensor, target: Tensor, p_k: Sequence[float] = [0.2, 0.2, 0.2, 0.2, 0.2],  # noqa: B006
                     sorter: str = "bitonic", steepness: float = 1.0, distribution: str = "cauchy",
                     art_lambda: float = 0.25, top1_mode: str = "sm", m: int | None = None, weight=None,
                     reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.diffsort.DiffSortTopKCrossEntropyLoss` (P22).

    >>> import torch
    >>> from topk.functional import diffsort_topk_ce
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> diffsort_topk_ce(scores, labels, p_k=[0.5, 0.5], sorter="odd_even")
    tensor(1.0782)
    """
    loss = DiffSortTopKCrossEntropyLoss(p_k=list(p_k), sorter=sorter, steepness=steepness,
                                        distribution=distribution, art_lambda=art_lambda,
                                        top1_mode=top1_mode, m=m, weight=weight, reduction=reduction)
    return loss(scores, target)


def focal_loss(scores: Tensor, target: Tensor, gamma: float = 2.0, weight=None, reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.margin.FocalLoss` (Lin et al. 2017).

    >>> import torch
    >>> from topk.functional import focal_loss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> focal_loss(scores, labels, gamma=2.0)
    tensor(1.2256)
    """
    return FocalLoss(gamma=gamma, weight=weight, reduction=reduction)(scores, target)


def ldam_loss(scores: Tensor, target: Tensor, max_margin: float = 0.5, scale: float = 30.0,
              class_counts: Sequence[int] | None = None, weight=None, reduction: str = "mean") -> Tensor:
    """:class:`~topk.losses.margin.LDAMLoss` (Cao et al. 2019); the margins come from
    ``class_counts``.

    >>> import torch
    >>> from topk.functional import ldam_loss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> ldam_loss(scores, labels, class_counts=[100, 50, 10, 5], scale=1.0)
    tensor(2.1068)
    """
    loss = LDAMLoss(max_margin=max_margin, scale=scale, class_counts=class_counts, weight=weight,
                    reduction=reduction)
    return loss(scores, target)
