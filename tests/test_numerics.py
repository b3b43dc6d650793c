"""Every loss is exact for large float32 scores (a diverged model's, near 1e8).

Each loss is compared, value and gradient, with the same loss computed in float64 on the same
float32 scores (cast to float64, exactly): only the arithmetic's precision differs. Before the
losses shifted their scores by the row maximum (``topk.losses.targets.shift_to_row_max``; the
noised hinges now by the label's score), the
hinges, the S20 and truncated-entropy losses returned 0.5 to 1.5 at 1e8 where the float64 loss
is 1.4 to 3.1 (a margin or a log-sum-exp term rounded away against scores 8 apart), LDAM and the
noised, smooth-SVM (``kτ`` not a power of 2), top-k entropy and sorting-network losses were off
by 0.007 to 10, and their gradients by up to 1 (4 with ``noised_imbal``'s scale 60). Torch's
cross-entropy, the focal loss, NeuralSort and SoftSort were exact already.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import topk.losses
from helpers import mixup_target, value_and_grad
from topk.functional import perturbed
from topk.losses import (
    CalibratedTopKHingeLoss,
    ConvexTopKHingeLoss,
    CrossEntropyLoss,
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
from topk.sync import sync_free

BATCH, CLASSES = 12, 7
CLASS_COUNTS = [3, 5, 8, 13, 21, 34, 55]
N_SAMPLES = 4

# Every configuration that computes differently: k = 3 and τ = 0.1 make kτ no power of 2 (a
# division by 2 or 4 would be exact), the sorters each relax the ranks their own way.
LOSSES = {
    "ce": lambda: CrossEntropyLoss(),
    "hinge": lambda: TopKHingeLoss(2),
    "cvx_hinge": lambda: ConvexTopKHingeLoss(3),
    "cal_hinge": lambda: CalibratedTopKHingeLoss(2),
    "focal": lambda: FocalLoss(),
    "ldam": lambda: LDAMLoss(class_counts=CLASS_COUNTS),
    "noised_bal": lambda: NoisedTopKHingeLoss(2, epsilon=0.5, n_samples=N_SAMPLES),
    "noised_imbal": lambda: NoisedImbalancedTopKHingeLoss(2, epsilon=0.5, n_samples=N_SAMPLES,
                                                          class_counts=CLASS_COUNTS),
    "smooth_svm": lambda: SmoothTopKSVM(3, tau=0.1),
    "smooth_svm_tau1": lambda: SmoothTopKSVM(2, tau=1.0),
    "smooth_svm_hard": lambda: SmoothTopKSVM(3, tau=0.0),
    "topk_group": lambda: TopKGroupingLoss(2),
    "topk_transition": lambda: TopKTransitionLoss(2),
    "trunc_topk_entropy": lambda: TruncatedTopKEntropyLoss(3),
    "topk_entropy": lambda: TopKEntropyLoss(3),
    "diffsort_bitonic": lambda: DiffSortTopKCrossEntropyLoss(p_k=[0.5, 0.0, 0.5]),
    "diffsort_odd_even": lambda: DiffSortTopKCrossEntropyLoss(p_k=[0.25, 0.75], sorter="odd_even",
                                                              distribution="logistic_phi", top1_mode="smce"),
    "diffsort_neuralsort": lambda: DiffSortTopKCrossEntropyLoss(p_k=[0.5, 0.5], sorter="neuralsort", steepness=0.5),
    "diffsort_softsort": lambda: DiffSortTopKCrossEntropyLoss(p_k=[0.0, 1.0], sorter="softsort", steepness=0.5,
                                                              top1_mode="sort", m=5),
}

# 1e4 to 1e8: float32's rounding unit there is 1e-3 to 8, so the perturbations (standard normal,
# times 2) are kept to that unit and many scores tie at 1e8. -1e8: a model diverged the other way.
BASES = [1e4, 1e6, 1e8, -1e8]

# Both sides compute the same formulas on the same numbers; the float32 side rounds at 6e-8
# relative per operation, through a few dozen operations (a log-sum-exp, the sorting network's
# 2⌈log2 n⌉ layers, log_esp's levels) on shifted scores of magnitude up to ~20. Measured: values
# agree to 2e-7 relative (LDAM's ~80 to 1e-5 absolute), gradients to 2e-7 absolute. The
# tolerance, 1e-4 relative and absolute, leaves a margin of 500 and is still 5,000 times below
# the unshifted losses' errors at 1e8 (0.5 and more on values of 1 to 3).
RTOL = ATOL = 1e-4


def test_every_loss_is_checked():
    """The table above holds every loss class of topk.losses (docs/design.md §8)."""
    classes = {getattr(topk.losses, name) for name in topk.losses.__all__}
    losses = {cls for cls in classes if isinstance(cls, type) and issubclass(cls, torch.nn.Module)
              and cls is not topk.losses.TopKLoss}
    assert {type(make()) for make in LOSSES.values()} == losses


@pytest.fixture
def fixed_noise(monkeypatch):
    """The noised losses' noise, fixed and the same in float32 and float64 (float32 values, exact
    in float64): drawn per dtype, the two computations would not see the same perturbations."""
    noise = torch.randn(N_SAMPLES, BATCH, CLASSES, generator=torch.Generator().manual_seed(3))
    original = perturbed.noise_source
    monkeypatch.setattr(perturbed, "noise_source",
                        lambda n_samples, scores, generator=None, given=None: original(n_samples, scores, generator, noise))
    monkeypatch.setattr(perturbed, "every_column_noise",  # small inputs' noise (perturbed_kth_largest)
                        lambda n_samples, scores, generator=None, given=None: noise.to(scores.dtype, copy=True))


def large_scores(base: float, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    scores = (base + 2 * torch.randn(BATCH, CLASSES, generator=generator, dtype=torch.float64)).float()
    labels = torch.randint(0, CLASSES, (BATCH,), generator=generator)
    labels[0] = scores[0].argmax()  # a sample ranked first: margins and near-zero terms matter
    return scores, labels


@pytest.mark.parametrize("path", ["eager", "sync_free"])
@pytest.mark.parametrize("target_kind", ["labels", "mixup"])
@pytest.mark.parametrize("base", BASES, ids=[f"{b:.0e}" for b in BASES])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_float32_loss_of_large_scores_matches_float64(name, base, target_kind, path, fixed_noise):
    """Value and gradient in float32 equal the float64 ones on the same scores; on the CPU's
    eager path and on the path an accelerator and torch.compile take (``sync_free``)."""
    scores, labels = large_scores(base)
    target = labels if target_kind == "labels" else mixup_target(torch.Generator().manual_seed(1), BATCH, CLASSES)
    loss = LOSSES[name]()
    with sync_free() if path == "sync_free" else contextlib.nullcontext():
        value32, grad32 = value_and_grad(loss, scores, target.float() if target_kind == "mixup" else target)
        value64, grad64 = value_and_grad(loss, scores.double(), target.double() if target_kind == "mixup" else target)
    assert value32.dtype == torch.float32 and torch.isfinite(value32) and torch.isfinite(grad32).all()
    assert 0.1 < value64 < 200  # O(1) values (LDAM's scale 30 and noised_imbal's 60 multiply theirs)
    torch.testing.assert_close(value32.double(), value64, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(grad32.double(), grad64, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_large_scores_give_the_loss_of_the_same_scores_near_zero(name, fixed_noise):
    """The losses are invariant to adding a constant to every score of a row (the premise of the
    shift, and of detaching it): in float64, scores near 1e8 give the loss and gradient of the
    same differences near 0."""
    scores, labels = large_scores(0.0)
    scores = scores.double()
    loss = LOSSES[name]()
    near_zero = value_and_grad(loss, scores, labels)
    for offset in (1e8, -3.5e7):
        shifted = value_and_grad(loss, scores + offset, labels)
        torch.testing.assert_close(shifted[0], near_zero[0], rtol=1e-7, atol=1e-7)
        torch.testing.assert_close(shifted[1], near_zero[1], rtol=1e-7, atol=1e-7)
