"""The truncated and the top-k entropy losses (Lapin et al. 2016) against brute-force float64
definitions, values and gradients, for every n ≤ 8 and k < n; k = 1 against cross-entropy; soft
targets; and, for the top-k entropy loss, gradcheck, class weights and float32 at large scores."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import mixup_target, value_and_grad
from topk.errors import ConfigError
from topk.losses.entropy import (
    TopKEntropyLoss,
    TruncatedTopKEntropyLoss,
    topk_entropy,
    truncated_topk_entropy,
)
from topk.losses.weights import ClassWeighted


def brute_force(scores: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """``log(1 + Σ_{j ∈ J_y} exp(s_j - s_y))`` sample by sample: ``J_y`` the labels other than
    ``y`` once the ``k - 1`` with the largest scores (by a full sort) are removed."""
    losses = []
    for row, label in zip(scores, labels.tolist()):
        rivals = sorted((j for j in range(len(row)) if j != label), key=lambda j: -row[j].item())
        kept = rivals[k - 1:]
        total = 1 + sum(torch.exp(row[j] - row[label]) for j in kept)
        losses.append(torch.log(total))
    return torch.stack(losses)


@pytest.mark.parametrize("n", range(2, 9))
def test_values_and_gradients_match_the_definition(n):
    generator = torch.Generator().manual_seed(n)
    scores = 3 * torch.randn(12, n, generator=generator, dtype=torch.float64)  # no ties
    labels = torch.randint(0, n, (12,), generator=generator)
    for k in range(1, n):
        value, grad = value_and_grad(truncated_topk_entropy, scores, labels, k)
        expected_value, expected_grad = value_and_grad(brute_force, scores, labels, k)
        torch.testing.assert_close(value, expected_value, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_k_1_is_cross_entropy():
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(16, 10, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (16,), generator=generator)
    value, grad = value_and_grad(lambda s: TruncatedTopKEntropyLoss(1)(s, labels), scores)
    expected_value, expected_grad = value_and_grad(lambda s: F.cross_entropy(s, labels), scores)
    torch.testing.assert_close(value, expected_value)
    torch.testing.assert_close(grad, expected_grad)


def test_a_label_among_the_top_k_pays_only_the_weaker_rivals():
    # y = 2 is 2nd; k = 2 drops the strongest rival (label 0): log(1 + e^{-3} + e^{-4}).
    scores = torch.tensor([[5.0, 1.0, 4.0, 0.0]], dtype=torch.float64)
    value = truncated_topk_entropy(scores, torch.tensor([2]), 2)
    assert value.item() == pytest.approx(math.log(1 + math.exp(-3) + math.exp(-4)))


def test_probability_targets_average_the_label_losses():
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(8, 6, generator=generator, dtype=torch.float64)
    target = mixup_target(generator, 8, 6)
    loss = TruncatedTopKEntropyLoss(3)
    weights, labels = target.topk(2, dim=1)  # Mixup rows: two labels (row 0 one-hot)
    expected = sum(weights[:, i] * brute_force(scores, labels[:, i], 3) for i in range(2)).mean()
    torch.testing.assert_close(loss(scores, target), expected)


def test_k_must_be_below_the_class_count():
    with pytest.raises(ConfigError, match="^k=4 must be between 1"):
        TruncatedTopKEntropyLoss(4)(torch.zeros(2, 4), torch.tensor([0, 1]))


# ---------------------------------------------------------------------------------------------
# Top-k entropy loss: L_k(a) = max over x in Δ_k of <a, x> - (1 - <1,x>) log(1 - <1,x>) - <x, log x>,
# a = (s_j - s_y)_{j ≠ y}, Δ_k = {x : <1,x> ≤ 1, 0 ≤ x_i ≤ <1,x>/k} (libsdca's l2_entropy_topk).


def _log_sigmoid(theta: float) -> float:
    return -math.log1p(math.exp(-theta)) if theta > 0 else theta - math.log1p(math.exp(theta))


def _best_on_face(a: list[float], capped: tuple[int, ...], k: int):
    """The maximum of the objective over ``{x : x_i = s/k for i in capped, s = <1,x> ≤ 1}`` (no
    other constraint) and its maximiser, or ``None`` if that maximiser leaves ``Δ_k``.

    Given ``s``, the free coordinates share the mass ``M = s (1 - u/k)`` and maximise
    ``Σ a_j x_j - x_j log x_j``: ``x_j = M e^{a_j} / Z``, worth ``M log Z - M log M`` (the
    softmax's own conjugate). That leaves a strictly concave function ``g`` of ``s = σ(θ)``,
    maximised by bisection on the sign of ``g'``, in float64 until the interval cannot shrink.
    """
    u = len(capped)
    free = [a[j] for j in range(len(a)) if j not in capped]
    if u < k and not free:
        return None
    capped_sum = sum(a[j] for j in capped)
    log_z = math.log(sum(math.exp(v - max(free)) for v in free)) + max(free) if u < k else None
    share = 1 - u / k  # of s, for the free coordinates (0 when u = k: they are all 0)

    def slope(theta):  # g'(s), whose sign is that of dg/dθ
        log_s, log_1ms = _log_sigmoid(theta), _log_sigmoid(-theta)
        d = capped_sum / k - (u / k) * (log_s - math.log(k) + 1) + log_1ms + 1
        if log_z is not None:
            d += share * (log_z - math.log(share) - log_s - 1)
        return d

    lo, hi = -3000.0, 3000.0
    while (mid := (lo + hi) / 2) not in (lo, hi):
        lo, hi = (mid, hi) if slope(mid) > 0 else (lo, mid)
    log_s, log_1ms = _log_sigmoid(mid), _log_sigmoid(-mid)
    s, one_minus_s = math.exp(log_s), math.exp(log_1ms)
    value = capped_sum * s / k - u * (s / k) * (log_s - math.log(k)) - one_minus_s * log_1ms
    x = [s / k if j in capped else 0.0 for j in range(len(a))]
    if log_z is not None:
        value += s * share * (log_z - math.log(share) - log_s)
        for j in range(len(a)):
            if j not in capped:
                x[j] = s * share * math.exp(a[j] - log_z)
    if any(xj > s / k * (1 + 1e-9) for xj in x):
        return None
    return value, x


def brute_force_topk_entropy(scores: torch.Tensor, labels: torch.Tensor, k: int):
    """The loss and its gradient (the maximiser ``x``: ``x_j`` for ``j ≠ y``, ``-<1,x>`` for ``y``),
    sample by sample in float64, without the fast algorithm's structure.

    The entropy keeps every coordinate off 0 and ``s`` off 1, so the maximiser lies on the face
    of ``Δ_k`` where some set ``C`` of coordinates sits at the cap ``s/k`` and is the maximiser
    over that face (the other caps are slack there). Every ``C`` with ``|C| ≤ k`` is tried, not
    only sets of largest ``a_j``; each face maximiser that lies in ``Δ_k`` is a feasible point,
    so the largest of their values is the maximum.
    """
    values, grads = [], []
    for row, label in zip(scores.double().tolist(), labels.tolist()):
        rivals = [j for j in range(len(row)) if j != label]
        a = [row[j] - row[label] for j in rivals]
        faces = (_best_on_face(a, capped, k) for u in range(k + 1)
                 for capped in itertools.combinations(range(len(a)), u))
        value, x = max((face for face in faces if face is not None), key=lambda face: face[0])
        grad = [0.0] * len(row)
        for j, xj in zip(rivals, x):
            grad[j] = xj
        grad[label] = -sum(x)
        values.append(value)
        grads.append(grad)
    return torch.tensor(values, dtype=torch.float64), torch.tensor(grads, dtype=torch.float64)


def hard_scores(n: int, generator: torch.Generator) -> torch.Tensor:
    """Rows of every kind: generic, tied (small integers), large (|s| up to ~150), all equal."""
    generic = 2 * torch.randn(2, n, generator=generator, dtype=torch.float64)
    ties = torch.randint(-2, 3, (2, n), generator=generator).double()
    large = 50 * torch.randn(2, n, generator=generator, dtype=torch.float64)
    return torch.cat([generic, ties, large, torch.full((1, n), 0.5, dtype=torch.float64)])


@pytest.mark.parametrize("n", range(2, 9))
def test_topk_entropy_values_and_gradients_match_the_brute_force(n):
    generator = torch.Generator().manual_seed(10 + n)
    scores = hard_scores(n, generator)
    labels = torch.randint(0, n, (len(scores),), generator=generator)
    for k in range(1, n):
        value, grad = value_and_grad(topk_entropy, scores, labels, k)
        expected_value, expected_grad = brute_force_topk_entropy(scores, labels, k)
        torch.testing.assert_close(value, expected_value, rtol=1e-11, atol=1e-11)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-11)


def test_the_brute_force_knows_the_cases_solved_by_hand():
    """k = 1: log(1 + Σ e^{a_j}). n = k + 1: every rival at the cap, x_j = s/k, so
    L = max_s s·mean(a) - s log(s/k) - (1-s) log(1-s) = log(1 + k e^{mean(a)})."""
    generator = torch.Generator().manual_seed(4)
    scores = 3 * torch.randn(5, 5, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 5, (5,), generator=generator)
    torch.testing.assert_close(brute_force_topk_entropy(scores, labels, 1)[0],
                               F.cross_entropy(scores, labels, reduction="none"))
    rival_mean = (scores.sum(dim=1) - scores.gather(1, labels[:, None]).squeeze(1)) / 4
    a_mean = rival_mean - scores.gather(1, labels[:, None]).squeeze(1)
    hand = torch.log1p(4 * torch.exp(a_mean))
    torch.testing.assert_close(brute_force_topk_entropy(scores, labels, 4)[0], hand)
    torch.testing.assert_close(topk_entropy(scores, labels, 4), hand)


@pytest.mark.parametrize("n, k", [(2, 1), (5, 2), (8, 3), (8, 7), (30, 5)])
def test_topk_entropy_passes_gradcheck(n, k):
    generator = torch.Generator().manual_seed(n + k)
    scores = 3 * torch.randn(4, n, generator=generator, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, n, (4,), generator=generator)
    assert torch.autograd.gradcheck(lambda s: topk_entropy(s, labels, k), (scores,))


def test_topk_entropy_k_1_is_cross_entropy():
    generator = torch.Generator().manual_seed(5)
    scores = 4 * torch.randn(16, 10, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (16,), generator=generator)
    value, grad = value_and_grad(lambda s: TopKEntropyLoss(1)(s, labels), scores)
    expected_value, expected_grad = value_and_grad(lambda s: F.cross_entropy(s, labels), scores)
    torch.testing.assert_close(value, expected_value, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_topk_entropy_decreases_with_k():
    """Δ_k ⊂ Δ_{k-1} (a share ≤ 1/k of the total is ≤ 1/(k-1)), so L_k ≤ L_{k-1} ≤ … ≤ L_1 = CE,
    and x = 0 is in every Δ_k, so L_k ≥ 0."""
    generator = torch.Generator().manual_seed(6)
    scores = 3 * torch.randn(32, 12, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 12, (32,), generator=generator)
    values = torch.stack([topk_entropy(scores, labels, k) for k in range(1, 12)])
    assert bool((values[1:] <= values[:-1] + 1e-12).all()) and bool((values > 0).all())
    assert bool((values[1:] < values[:-1]).any())


def test_topk_entropy_probability_targets_average_the_label_losses():
    generator = torch.Generator().manual_seed(7)
    scores = 2 * torch.randn(8, 6, generator=generator, dtype=torch.float64)
    target = mixup_target(generator, 8, 6)
    weights, labels = target.topk(2, dim=1)  # Mixup rows: two labels (row 0 one-hot)
    expected = sum(weights[:, i] * brute_force_topk_entropy(scores, labels[:, i], 3)[0]
                   for i in range(2)).mean()
    torch.testing.assert_close(TopKEntropyLoss(3)(scores, target), expected)


def test_topk_entropy_class_weights_weight_each_sample():
    generator = torch.Generator().manual_seed(8)
    scores = 2 * torch.randn(9, 5, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 5, (9,), generator=generator)
    weights = torch.tensor([0.5, 2.0, 1.0, 0.0, 3.0], dtype=torch.float64)
    per_sample = brute_force_topk_entropy(scores, labels, 2)[0]
    expected = (weights[labels] * per_sample).sum() / weights[labels].sum()
    torch.testing.assert_close(ClassWeighted(TopKEntropyLoss(2), weights)(scores, labels), expected)


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_topk_entropy_float32_matches_float64_at_large_scores(scale):
    generator = torch.Generator().manual_seed(9)
    scores = scale * torch.randn(64, 200, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 200, (64,), generator=generator)
    for k in (2, 5, 20):
        value64, grad64 = value_and_grad(topk_entropy, scores, labels, k)
        value32, grad32 = value_and_grad(topk_entropy, scores.float(), labels, k)
        assert torch.isfinite(value32).all() and torch.isfinite(grad32).all()
        torch.testing.assert_close(value32.double(), value64, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad32.double(), grad64, rtol=0, atol=2e-5)


def test_topk_entropy_k_must_be_below_the_class_count():
    with pytest.raises(ConfigError, match="^k=4 must be between 1"):
        TopKEntropyLoss(4)(torch.zeros(2, 4), torch.tensor([0, 1]))
