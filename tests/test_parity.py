"""Parity with the published codes (the ``peers`` extra, ``pip install -e '.[peers]'``; skipped
without it): G22's ``pytopk`` for the noised losses, given the same noise, and ``difftopk``'s copy
of B18's smooth top-k SVM loss, values and gradients in float64. Where they differ, the
brute-force definition decides (``tests/test_smooth_svm.py``): difftopk's gradient at k = 1."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch

from helpers import value_and_grad
from topk.losses import NoisedImbalancedTopKHingeLoss, SmoothTopKSVM
from topk.losses.margin import margins_for
from topk.losses.noised import noised_topk_hinge

pytopk = pytest.importorskip("pytopk")
with contextlib.redirect_stdout(io.StringIO()):  # difftopk prints a torch-sparse notice
    difftopk = pytest.importorskip("difftopk")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # difftopk's autograd Function

CASES = [(n, k) for n in (10, 100) for k in (1, 2, 5)]


def assert_agree(ours, theirs):
    """Values to float64 rounding; gradients to 1e-7 relative: pytopk's backward rounds its averaging
    weights to float32 (relative differences of 6e-8, float32's rounding)."""
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-7, atol=1e-8)


def scores_labels_noise(n, k, n_samples, seed=0):
    generator = torch.Generator().manual_seed(seed + 100 * n + k)
    scores = 2 * torch.randn(16, n, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, n, (16,), generator=generator)
    noise = torch.randn(16, n, n_samples, generator=generator, dtype=torch.float64)  # pytopk's layout
    return scores, labels, noise


@pytest.mark.parametrize("n, k", CASES)
def test_noised_balanced_loss_equals_pytopk_on_the_same_noise(n, k):
    scores, labels, noise = scores_labels_noise(n, k, 10)
    smoothed = pytopk.noised_topk._noised_topk
    ones = torch.ones(n, dtype=torch.float64)
    ours = value_and_grad(lambda s: noised_topk_hinge(s, labels, ones, k, 0.2, 10, noise=noise.permute(2, 0, 1)).mean(), scores)
    theirs = value_and_grad(lambda s: pytopk.functional.bal_noised_topk_loss(s, labels, k, 0.2, smoothed, noise), scores)
    assert_agree(ours, theirs)


@pytest.mark.parametrize("n, k", CASES)
def test_noised_imbalanced_loss_equals_pytopk_on_the_same_noise(n, k):
    scores, labels, noise = scores_labels_noise(n, k, 5, seed=1)
    counts = [100 + 10 * c for c in range(n)]
    ours_module = NoisedImbalancedTopKHingeLoss(k, 0.01, 5, 0.2, 60.0, class_counts=counts)
    theirs_module = pytopk.ImbalNoisedTopK(k, 0.01, 0.2, counts, scale=60.0, n_sample=5)
    margins = margins_for(ours_module.margins, scores)
    torch.testing.assert_close(margins, theirs_module.m_list.to(margins), rtol=1e-6, atol=1e-7)
    smoothed = pytopk.noised_topk._noised_topk

    def ours(s):
        return 60.0 * noised_topk_hinge(s, labels, margins, k, 0.01, 5, noise=noise.permute(2, 0, 1)).mean()

    def theirs(s):
        return pytopk.functional.imbal_noised_topk_loss(s, labels, k, margins, 0.01, smoothed, noise, 60.0)

    assert_agree(value_and_grad(ours, scores), value_and_grad(theirs, scores))


@pytest.mark.parametrize("n, k", [case for case in CASES if case[1] > 1])
def test_smooth_svm_equals_difftopk(n, k):
    scores, labels, _ = scores_labels_noise(n, k, 1, seed=2)
    ours = value_and_grad(lambda s: SmoothTopKSVM(k, tau=1.0)(s, labels), scores)
    theirs = value_and_grad(lambda s: difftopk.SmoothHardTopKLoss(n, k, 1.0)(s, labels), scores)
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-9)


def test_at_k_1_difftopk_gradient_is_off_and_ours_is_the_definitions():
    """B18 eq. 10 at k = 1 is τ·softplus(α/τ + log Σ_{j≠y} e^{s_j/τ} - s_y/τ); its float64 autograd
    is the reference. difftopk's custom backward gives a different gradient (its values agree)."""
    scores, labels, _ = scores_labels_noise(20, 1, 1, seed=3)

    def definition(s):
        rivals = s.scatter(1, labels[:, None], -torch.inf)
        margin = 1.0 + torch.logsumexp(rivals, 1) - s.gather(1, labels[:, None]).squeeze(1)
        return torch.nn.functional.softplus(margin).mean()

    reference = value_and_grad(definition, scores)
    ours = value_and_grad(lambda s: SmoothTopKSVM(1, tau=1.0)(s, labels), scores)
    theirs = value_and_grad(lambda s: difftopk.SmoothHardTopKLoss(20, 1, 1.0)(s, labels), scores)
    torch.testing.assert_close(ours, reference, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(theirs[0], reference[0], rtol=1e-9, atol=1e-9)
    assert (theirs[1] - reference[1]).abs().max() > 1e-3
