"""Lapin's top-K hinge and convex top-K hinge, and Yang & Koyejo's calibrated top-K hinge
(G22 eq. 4, Table 1, eq. 5) against brute-force oracles."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import mixup_target, value_and_grad
from topk.errors import ConfigError
from topk.losses.hinge import (
    CalibratedTopKHingeLoss,
    ConvexTopKHingeLoss,
    TopKHingeLoss,
    calibrated_topk_hinge,
    convex_topk_hinge,
    topk_hinge,
)


def by_decreasing_score(values, indices):
    return sorted(indices, key=lambda i: -values[i].item())


def positive_part(term):
    return term if term > 0 else 0 * term


def oracle_hinge(s, y, k, alpha):
    """G22 eq. 4: (α + top_K(s without y) - s_y)_+ for one sample."""
    others = by_decreasing_score(s, [j for j in range(len(s)) if j != y])
    return positive_part(alpha + s[others[k - 1]] - s[y])


def oracle_convex_hinge(s, y, k, alpha):
    """G22 Table 1: ((1/K) Σ_{k≤K} top_k(α·1 - α·e_y + s) - s_y)_+ for one sample."""
    augmented = [s[j] + (alpha if j != y else 0.0) for j in range(len(s))]
    order = by_decreasing_score(augmented, range(len(s)))
    return positive_part(sum(augmented[j] for j in order[:k]) / k - s[y])


def oracle_calibrated_hinge(s, y, k, alpha):
    """G22 eq. 5: (α + top_{K+1}(s) - s_y)_+ for one sample."""
    order = by_decreasing_score(s, range(len(s)))
    return positive_part(alpha + s[order[k]] - s[y])


LOSSES = [
    (TopKHingeLoss, oracle_hinge),
    (ConvexTopKHingeLoss, oracle_convex_hinge),
    (CalibratedTopKHingeLoss, oracle_calibrated_hinge),
]


def oracle_loss(oracle, scores, target, k, alpha):
    """Batch mean of Σ_i t_i ℓ(s, i) over the target's non-zero entries (a label is one-hot)."""
    probabilities = F.one_hot(target, scores.shape[1]).double() if target.dtype == torch.int64 else target
    total = 0
    for b in range(len(scores)):
        for i in range(scores.shape[1]):
            if probabilities[b, i] > 0:
                total = total + probabilities[b, i] * oracle(scores[b], i, k, alpha)
    return total / len(scores)






CASES = [(n, k) for n in (3, 4, 6, 10) for k in (1, 2, 3, 5) if k < n]


@pytest.mark.parametrize("n,k", CASES)
@pytest.mark.parametrize("loss_class,oracle", LOSSES)
@pytest.mark.parametrize("soft", [False, True])
def test_matches_brute_force(n, k, loss_class, oracle, soft):
    generator = torch.Generator().manual_seed(1000 * n + 10 * k + soft)
    scores = 2 * torch.randn(9, n, generator=generator, dtype=torch.float64)
    target = mixup_target(generator, 9, n) if soft else torch.randint(0, n, (9,), generator=generator)
    alpha = 0.7 if k == 2 else 1.0
    value, grad = value_and_grad(loss_class(k, alpha), scores, target)
    expected_value, expected_grad = value_and_grad(
        lambda s, t: oracle_loss(oracle, s, t, k, alpha), scores, target
    )
    assert expected_value > 0  # the margins are active on some samples: the gradient is tested
    torch.testing.assert_close(value, expected_value, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-12)


def test_hand_computed_values():
    scores = torch.tensor([[3.0, 1.0, 2.0, 0.0]], dtype=torch.float64)
    label = torch.tensor([1])
    # s without y = [3, 2, 0]: top_2 = 2, so 1 + 2 - 1 = 2.
    assert TopKHingeLoss(2)(scores, label).item() == 2.0
    # s + 1 - e_y = [4, 1, 3, 1]: (4 + 3) / 2 - 1 = 2.5.
    assert ConvexTopKHingeLoss(2)(scores, label).item() == 2.5
    # top_3(s) = 1, so 1 + 1 - 1 = 1; with y in the top 2 (s_y = 2), top_3 = 1 gives 0.
    assert CalibratedTopKHingeLoss(2)(scores, label).item() == 1.0
    assert CalibratedTopKHingeLoss(2)(scores, torch.tensor([2])).item() == 0.0


def test_convex_hinge_bounds_hinge_which_bounds_calibrated_hinge():
    # Lapin: the convex loss upper-bounds the hinge (both are Crammer & Singer's for K = 1);
    # top_K(s without y) ≥ top_{K+1}(s) always.
    generator = torch.Generator().manual_seed(5)
    scores = torch.randn(500, 7, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 7, (500,), generator=generator)
    for k in (1, 3, 5):
        convex = convex_topk_hinge(scores, labels, k, 1.0)
        hinge = topk_hinge(scores, labels, k, 1.0)
        calibrated = calibrated_topk_hinge(scores, labels, k, 1.0)
        assert (convex >= hinge).all() and (hinge >= calibrated).all()
        assert (convex > hinge).any() == (k > 1) and (hinge > calibrated).any()


@pytest.mark.parametrize("loss_class,oracle", LOSSES)
def test_mixup_target_is_the_mix_of_the_two_label_losses(loss_class, oracle):
    generator = torch.Generator().manual_seed(11)
    scores = torch.randn(16, 6, generator=generator, dtype=torch.float64)
    first = torch.randint(0, 6, (16,), generator=generator)
    second = torch.randint(0, 6, (16,), generator=generator)
    lam = 0.3
    mixed = lam * F.one_hot(first, 6).double() + (1 - lam) * F.one_hot(second, 6).double()
    loss = loss_class(2)
    value, grad = value_and_grad(loss, scores, mixed)
    expected = value_and_grad(lambda s, _: lam * loss(s, first) + (1 - lam) * loss(s, second), scores, first)
    torch.testing.assert_close((value, grad), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("loss_class,oracle", LOSSES)
def test_gradcheck(loss_class, oracle):
    # Piecewise linear: random points are away from the kinks by far more than gradcheck's step.
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(6, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 5, (6,), generator=generator)
    loss = loss_class(2)
    assert torch.autograd.gradcheck(loss, (scores, labels))
    assert torch.autograd.gradcheck(loss, (scores, mixup_target(generator, 6, 5)))


@pytest.mark.parametrize("loss_class,oracle", LOSSES)
def test_float32_scores_give_float32_loss(loss_class, oracle):
    scores = torch.randn(4, 10, requires_grad=True)
    value = loss_class(5)(scores, torch.tensor([0, 3, 9, 4]))
    value.backward()
    assert value.dtype == torch.float32 and torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("loss_class,oracle", LOSSES)
def test_bad_inputs_name_the_value(loss_class, oracle):
    scores = torch.randn(2, 4)
    with pytest.raises(ConfigError, match=r"^k=4 must be between 1 and .* \(3\)"):
        loss_class(4)(scores, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="^k must be a whole number of at least 1, got 0$"):
        loss_class(0)
    with pytest.raises(ValueError, match="^k must be a whole number of at least 1, got 2.5$"):
        loss_class(2.5)
    with pytest.raises(ValueError, match=r"^alpha must be a finite number >= 0, got -1$"):
        loss_class(2, alpha=-1)
    with pytest.raises(ValueError, match=r"labels must be class indices from 0 to 3 \(4 classes\), got 4"):
        loss_class(2)(scores, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="must sum to 1"):
        loss_class(2)(scores, torch.full((2, 4), 0.5))
