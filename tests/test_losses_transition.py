"""S20's top-k grouping (eq. 5) and transition (eq. 6) losses against a brute-force oracle."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import value_and_grad
from topk.errors import ConfigError
from topk.losses import TopKGroupingLoss, TopKTransitionLoss, topk_membership


def oracle_terms(scores_row, target_row, k):
    """Eq. 3, 5 and 6 for one sample, written as the paper does: sort, sum, log. float64."""
    n = len(scores_row)
    exps = [torch.exp(scores_row[i]) for i in range(n)]
    total = sum(exps)
    q = [e / total for e in exps]
    # [i] sorts q descending; ties: the class with less target mass first, then the lower index.
    order = sorted(range(n), key=lambda i: (-scores_row[i].item(), target_row[i].item(), i))
    top, rest = order[:k], order[k:]
    target_top = sum(target_row[i] for i in top)
    q_top = sum(q[i] for i in top)
    grouping = -target_top * torch.log(q_top) - sum(target_row[i] * torch.log(q[i]) for i in rest)
    cross_entropy = -sum(target_row[i] * torch.log(q[i]) for i in range(n))
    transition = (1 - q_top) * cross_entropy + q_top * grouping
    return grouping, transition


def oracle_loss(scores, target, k, which):
    probabilities = F.one_hot(target, scores.shape[1]).double() if target.dtype == torch.int64 else target
    values = [oracle_terms(scores[b], probabilities[b], k)[which] for b in range(len(scores))]
    return sum(values) / len(values)




CASES = [(n, k) for n in (3, 4, 6, 10) for k in (1, 2, 3, 5) if k < n]
LOSSES = [(TopKGroupingLoss, 0), (TopKTransitionLoss, 1)]


@pytest.mark.parametrize("n,k", CASES)
@pytest.mark.parametrize("loss_class,which", LOSSES)
@pytest.mark.parametrize("soft", [False, True])
def test_matches_brute_force(n, k, loss_class, which, soft):
    generator = torch.Generator().manual_seed(1000 * n + 10 * k + soft)
    scores = 3 * torch.randn(7, n, generator=generator, dtype=torch.float64)
    if soft:
        target = torch.rand(7, n, generator=generator, dtype=torch.float64) ** 4
        target = target / target.sum(dim=1, keepdim=True)
    else:
        target = torch.randint(0, n, (7,), generator=generator)
    value, grad = value_and_grad(loss_class(k), scores, target)
    expected_value, expected_grad = value_and_grad(
        lambda s, t: oracle_loss(s, t, k, which), scores, target
    )
    torch.testing.assert_close(value, expected_value, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("loss_class,which", LOSSES)
def test_hard_labels_equal_one_hot_targets(loss_class, which):
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(32, 8, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 8, (32,), generator=generator)
    loss = loss_class(3)
    hard = value_and_grad(loss, scores, labels)
    soft = value_and_grad(loss, scores, F.one_hot(labels, 8).double())
    torch.testing.assert_close(hard, soft, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("soft", [False, True])
def test_grouping_discontinuity_takes_second_term_gradient(soft):
    # y = 2 ties with class 1 for the 2nd place (k = 2): S20 takes the gradient of -log q_y.
    scores = torch.tensor([[3.0, 1.0, 1.0, -2.0]], dtype=torch.float64)
    labels = torch.tensor([2])
    target = F.one_hot(labels, 4).double() if soft else labels
    value, grad = value_and_grad(TopKGroupingLoss(2), scores, target)
    expected_value, expected_grad = value_and_grad(lambda s, t: F.cross_entropy(s, labels), scores, labels)
    torch.testing.assert_close(value, expected_value)
    torch.testing.assert_close(grad, expected_grad)
    # A hair above the tie, y joins the top 2 and the loss drops to -log(q_0 + q_2).
    nudged = scores.clone()
    nudged[0, 2] += 1e-9
    q = torch.softmax(nudged, dim=1)[0]
    torch.testing.assert_close(TopKGroupingLoss(2)(nudged, labels), -torch.log(q[0] + q[2]))


def test_membership_tie_rule():
    scores = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    target = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    # Three-way tie for two places: the target class is left out, then lower indices win.
    assert topk_membership(scores, target, 2).tolist() == [[True, False, True, False]]


def test_gradcheck():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 5, (4,), generator=generator)
    soft = torch.softmax(torch.randn(4, 5, generator=generator, dtype=torch.float64), dim=1)
    for loss in (TopKGroupingLoss(2), TopKTransitionLoss(2)):
        assert torch.autograd.gradcheck(loss, (scores, labels))
        assert torch.autograd.gradcheck(loss, (scores, soft))


def test_transition_is_cross_entropy_when_topk_mass_is_small_and_grouping_when_large():
    labels = torch.tensor([0])
    flat = torch.zeros(1, 1000, dtype=torch.float64)  # top-2 mass 0.002: almost pure CE
    ce = F.cross_entropy(flat, labels)
    assert abs(TopKTransitionLoss(2)(flat, labels) - ce) < 0.01 * ce
    peaked = torch.tensor([[20.0, 19.0, 0.0, 0.0]], dtype=torch.float64)  # mass ~1
    torch.testing.assert_close(TopKTransitionLoss(2)(peaked, labels), TopKGroupingLoss(2)(peaked, labels), rtol=1e-6, atol=1e-8)


def test_float32_is_finite_on_large_scores():
    scores = torch.tensor([[300.0, -300.0, 0.0, 150.0]], requires_grad=True)
    for loss in (TopKGroupingLoss(2), TopKTransitionLoss(2)):
        for target in (torch.tensor([1]), torch.tensor([[0.25, 0.25, 0.25, 0.25]])):
            value = loss(scores, target)
            (grad,) = torch.autograd.grad(value, scores)
            assert torch.isfinite(value) and torch.isfinite(grad).all()


def test_bad_inputs_name_the_value():
    scores = torch.randn(2, 4)
    with pytest.raises(ConfigError, match=r"^k=4 must be between 1 and .* \(3\)"):
        TopKGroupingLoss(4)(scores, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"labels must be class indices from 0 to 3 \(4 classes\), got 7"):
        TopKTransitionLoss(2)(scores, torch.tensor([0, 7]))
    with pytest.raises(ValueError, match="labels must be class indices from 0 to 3 .*, got -1"):
        TopKTransitionLoss(2)(scores, torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match="must sum to 1; one sums to 0.5"):
        TopKGroupingLoss(2)(scores, torch.full((2, 4), 0.125))
    with pytest.raises(ValueError, match="negative"):
        TopKGroupingLoss(2)(scores, torch.tensor([[1.5, -0.5, 0, 0], [1.0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="at least 1"):
        TopKGroupingLoss(0)
