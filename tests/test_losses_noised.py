"""G22's perturbed top-K (eq. 11–12) and noised top-K hinge losses (eq. 10, 13) against
brute-force oracles fed the same noise, G22's worked example, and Monte Carlo convergence."""

from __future__ import annotations

import contextlib
import math
import unittest.mock

import pytest
import torch
import torch.nn.functional as F

from helpers import value_and_grad
from topk.errors import ConfigError
from topk.functional import perturbed
from topk.functional.perturbed import (
    candidates_perturbed,
    noise_source,
    perturbed_topk,
    top_columns,
)
from topk.losses.hinge import CalibratedTopKHingeLoss
from topk.losses.noised import NoisedImbalancedTopKHingeLoss, NoisedTopKHingeLoss, noised_topk_hinge
from topk.sync import sync_free


def kth_largest(values, k):
    """(value, index) of the k-th largest entry of a list of floats, by Python's sort."""
    order = sorted(range(len(values)), key=lambda j: -values[j])
    return values[order[k - 1]], order[k - 1]


def oracle_perturbed_topk(scores, k, epsilon, noise):
    """G22 eq. 11 value and eq. 12 gradient (average one-hot) per row, with explicit loops."""
    n_samples, batch, n = noise.shape
    values, grads = [], []
    for b in range(batch):
        total, grad = 0.0, [0.0] * n
        for sample in range(n_samples):
            perturbed = [scores[b, j].item() + epsilon * noise[sample, b, j].item() for j in range(n)]
            value, index = kth_largest(perturbed, k)
            total += value
            grad[index] += 1 / n_samples
        values.append(total / n_samples)
        grads.append(grad)
    return torch.tensor(values, dtype=torch.float64), torch.tensor(grads, dtype=torch.float64)


def oracle_noised_loss(scores, labels, k, epsilon, noise, margins, scale):
    """Batch mean of scale·(m_y + top̂_{K+1,ε,B}(s) - s_y)_+ and its gradient, G22 eq. 12–13."""
    thresholds, threshold_grads = oracle_perturbed_topk(scores, k + 1, epsilon, noise)
    batch, n = scores.shape
    value, grad = 0.0, torch.zeros(batch, n, dtype=torch.float64)
    for b in range(batch):
        y = labels[b].item()
        margin = margins[y] + thresholds[b].item() - scores[b, y].item()
        if margin > 0:
            value += scale * margin / batch
            grad[b] = scale * (threshold_grads[b] - F.one_hot(labels[b], n)) / batch
    return torch.tensor(value, dtype=torch.float64), grad


def oracle_margins(class_counts, max_margin):
    raw = [count**-0.25 for count in class_counts]
    return [max_margin / max(raw) * value for value in raw]




def seeded(function, seed):
    """``function`` run with torch's global generator seeded, leaving the caller's state alone."""

    def run(*args):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return function(*args)

    return run


@pytest.fixture(params=["small inputs", "candidates", "every column"])
def path(request, monkeypatch):
    """Each way :func:`perturbed.perturbed_kth_largest` selects: the tests' inputs are small and
    take the first unless ``SMALL_PERTURBATION`` is lowered; then eager mode on the CPU takes the
    candidates, and :func:`sync_free` every column as on an accelerator."""
    if request.param != "small inputs":
        monkeypatch.setattr(perturbed, "SMALL_PERTURBATION", 0)
    with sync_free() if request.param == "every column" else contextlib.nullcontext():
        yield request.param


def test_small_inputs_select_along_the_classes_and_larger_ones_take_the_candidates():
    """Up to SMALL_PERTURBATION perturbed scores (batch · B · n) no candidates are chosen."""
    scores = torch.randn(64, 10)
    with unittest.mock.patch.object(perturbed, "candidates_perturbed", side_effect=AssertionError("candidates")):
        perturbed_topk(scores, 2, 0.2, 10)  # 6,400 perturbed scores
        with pytest.raises(AssertionError, match="candidates"):
            perturbed_topk(torch.randn(64, 100), 2, 0.2, 10)  # 64,000
    assert 64 * 10 * 100 > perturbed.SMALL_PERTURBATION >= 64 * 10 * 10


def test_the_chosen_path_follows_size_and_whether_reads_are_free_and_each_can_be_forced():
    """:func:`perturbed.chosen_path`; every forced path gives the same k-th largest values and
    columns for the same given noise, and an unknown path is refused naming the known ones."""
    small, large = torch.randn(64, 10, dtype=torch.float64), 4 * torch.randn(64, 100, dtype=torch.float64)
    assert perturbed.chosen_path(small, 10) == "kthvalue" and perturbed.chosen_path(large, 10) == "candidates"
    with sync_free():
        assert perturbed.chosen_path(large, 10) == "every column"
    noise = standard_noise(3, 10, 64, 100)
    results = [perturbed.perturbed_kth_largest(large, 5, 0.2, 10, noise=noise, path=path) for path in perturbed.PATHS]
    for values, columns in results[1:]:
        torch.testing.assert_close(values, results[0][0], rtol=0, atol=0)
        assert torch.equal(columns, results[0][1])
    with pytest.raises(ValueError, match="path must be one of kthvalue, candidates, every column; got 'sorted'"):
        perturbed.perturbed_kth_largest(large, 5, 0.2, 10, path="sorted")


def standard_noise(seed, n_samples, batch, n):
    return torch.randn(n_samples, batch, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- perturbed top-K -------------------------------------------------------------------------


@pytest.mark.parametrize("n,k", [(n, k) for n in (3, 4, 6, 10) for k in (1, 2, 3, 5, n) if k <= n])
@pytest.mark.parametrize("epsilon", [0.05, 1.0])
def test_perturbed_topk_matches_brute_force(n, k, epsilon, path):
    generator = torch.Generator().manual_seed(100 * n + k)
    scores = 3 * torch.randn(6, n, generator=generator, dtype=torch.float64)
    noise = torch.randn(7, 6, n, generator=generator, dtype=torch.float64)
    weights = torch.rand(6, generator=generator, dtype=torch.float64)
    value, grad = value_and_grad(lambda s: (weights * perturbed_topk(s, k, epsilon, 7, noise=noise)).sum(), scores)
    expected_values, expected_grads = oracle_perturbed_topk(scores, k, epsilon, noise)
    torch.testing.assert_close(value, (weights * expected_values).sum(), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, weights[:, None] * expected_grads, rtol=1e-9, atol=1e-12)


def candidates(scores, k, epsilon, noise):
    """:func:`candidates_perturbed` with the given standard noise ``[n_samples, batch, n]``."""
    return candidates_perturbed(scores, k, epsilon, noise_source(noise.shape[0], scores, noise=noise))


def test_perturbed_topk_on_candidates_matches_brute_force(monkeypatch):
    monkeypatch.setattr(perturbed, "SMALL_PERTURBATION", 0)
    # Spread scores and small ε: noise is drawn for a few columns per row only.
    generator = torch.Generator().manual_seed(7)
    scores = 20 * torch.randn(32, 10, generator=generator, dtype=torch.float64)
    noise = torch.randn(5, 32, 10, generator=generator, dtype=torch.float64)
    assert candidates(scores, 3, 0.05, noise)[0].shape[0] <= 5
    value, grad = value_and_grad(lambda s: perturbed_topk(s, 3, 0.05, 5, noise=noise).sum(), scores)
    expected_values, expected_grads = oracle_perturbed_topk(scores, 3, 0.05, noise)
    torch.testing.assert_close(value, expected_values.sum(), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, expected_grads, rtol=1e-9, atol=1e-12)


def test_candidates_lie_within_the_noise_bound_of_the_lowest_perturbed_top_score():
    """k = 2, ε = 0.1, t = 8: the top two columns (9 and 5) come first. Without noise the
    lowest of their perturbed scores is 5, and nothing else lies within εt = 0.8 of it; noise
    of -8 on column 1 in one sample lowers it to 4.2, and 3.5 joins (3.3 does not). Each
    column's perturbed score s + εZ comes in the layout [M, n_samples, batch]."""
    scores = torch.tensor([[9.0, 5.0, 3.5, 3.3, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0]])
    quiet = torch.zeros(3, 1, 10)
    columns, perturbed = candidates(scores, 2, 0.1, quiet)
    assert columns.T.tolist() == [[0, 1]] and perturbed[:, :, 0].tolist() == [[9.0] * 3, [5.0] * 3]
    loud = quiet.clone()
    loud[1, 0, 1], loud[:, 0, 2] = -8.0, torch.tensor([0.5, 0.6, 0.7])
    columns, perturbed = candidates(scores, 2, 0.1, loud)
    assert columns.T.tolist() == [[0, 1, 2]]
    torch.testing.assert_close(perturbed[:, :, 0], scores[0, :3, None] + 0.1 * loud[:, 0, :3].T)
    assert candidates(scores, 2, 1.0, quiet)[0].shape[0] == 10  # most columns: all are kept


def test_every_column_is_taken_only_beyond_two_thirds_of_the_columns_as_candidates():
    """Without noise and ε = 0.1 (window εt = 0.8 below the lowest top score 5), the scores
    5 - 0.04 j give 1 + 20 candidates of 30 (70%): every column; 1 + 17 (60%): the candidates."""
    for within, expected in ((20, 30), (17, 18)):
        scores = torch.full((1, 30), -9.0)
        scores[0, 0] = 9.0
        scores[0, 1 : within + 1] = 5.0 - 0.04 * torch.arange(within)
        assert candidates(scores, 2, 0.1, torch.zeros(3, 1, 30))[0].shape[0] == expected


def test_candidates_give_the_result_of_every_column_under_the_same_noise():
    """G22's CIFAR-100 setting at the loss's width (k + 1 = 6, ε = 0.2, B = 10) on 1,000 classes,
    where the top columns often lie in one group: eager mode's few candidates per row give
    exactly the values and gradients of every column, given the same noise."""
    generator = torch.Generator().manual_seed(12)
    scores = 4 * torch.randn(64, 1000, generator=generator, dtype=torch.float64)
    scores[:8, :6] = scores[:8].amax(1, keepdim=True) + 0.1  # the top six in six groups of 64…
    scores[8:16, 0:384:64] += 20  # …and in one group
    noise = torch.randn(10, 64, 1000, generator=generator, dtype=torch.float64)
    assert candidates(scores, 6, 0.2, noise)[0].shape[0] < 100
    weights = torch.rand(64, generator=generator, dtype=torch.float64)
    eager = value_and_grad(lambda s: (weights * perturbed_topk(s, 6, 0.2, 10, noise=noise)).sum(), scores)
    with sync_free():
        every = value_and_grad(lambda s: (weights * perturbed_topk(s, 6, 0.2, 10, noise=noise)).sum(), scores)
    assert torch.equal(eager[0], every[0]) and torch.equal(eager[1], every[1])


def test_drawn_noise_on_candidates_has_the_mean_of_noise_on_every_column():
    """Monte Carlo means of top̂_{6,ε} with noise drawn for the candidates alone and for every
    column agree within five standard errors (each draw's spread is at most ε)."""
    scores = 4 * torch.randn(2, 600, generator=torch.Generator().manual_seed(13))
    n_samples, epsilon = 20_000, 0.5
    assert candidates(scores, 6, epsilon, torch.zeros(1, 2, 600))[0].shape[0] < 300
    candidates_only = perturbed_topk(scores, 6, epsilon, n_samples, torch.Generator().manual_seed(1))
    with sync_free():
        every_column = perturbed_topk(scores, 6, epsilon, n_samples, torch.Generator().manual_seed(2))
    assert (candidates_only - every_column).abs().max() <= 5 * epsilon * (2 / n_samples) ** 0.5


def test_candidates_pad_short_rows_with_minus_infinity():
    # Without noise, window εt = 0.16 below the top score (k = 1): row 0 has three candidates,
    # row 1 one, then padding with column 0 and -inf.
    scores = torch.tensor([[9.0, 8.9, 8.85, 0.0, -1.0, -2.0, -3.0, -4.0],
                           [0.0, 7.0, -9.0, -8.0, -7.0, -6.0, -5.0, -4.0]])
    columns, perturbed = candidates(scores, 1, 0.02, torch.zeros(2, 2, 8))
    assert columns.T.tolist() == [[0, 1, 2], [1, 0, 0]] and perturbed.shape == (3, 2, 2)
    assert perturbed[:, :, 1].tolist() == [[7.0, 7.0], [-math.inf] * 2, [-math.inf] * 2]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_kth_largest_equals_topk_with_ties_counted(dtype):
    """Values and positions of the k-th largest along dim 0, as torch.topk's; rows of integer
    values have many ties, counted with their multiplicity (the position is then the last of
    the equal entries)."""
    generator = torch.Generator().manual_seed(6)
    for values in (torch.randn(9, 4, 5, generator=generator), torch.randint(0, 4, (9, 4, 5), generator=generator).float()):
        values = values.to(dtype)
        for k in (1, 2, 5, 9):
            kth, position = perturbed.kth_largest_of(values, k, compile=False)
            expected = torch.topk(values.float(), k, dim=0).values[-1].to(dtype)
            assert torch.equal(kth, expected)
            assert (values.gather(0, position.unsqueeze(0))[0] == kth).all()
            later = torch.arange(9).view(-1, 1, 1) > position
            assert not ((values == kth) & later).any()


def test_top_columns_are_distinct_columns_with_their_scores_and_often_the_top_k():
    generator = torch.Generator().manual_seed(7)
    scores = 4 * torch.randn(64, 1000, generator=generator)
    scores[:, 990:] += 3  # the 40 columns outside the 64 groups of 15 are often among the top
    for k, exact_share in ((1, 1.0), (6, 0.6), (16, 0.1)):  # k largest in distinct groups of 64
        columns, values = top_columns(scores, k)
        exact = torch.topk(scores, k, dim=1).values
        assert torch.equal(scores.gather(1, columns), values)
        assert (columns.sort(1).values.diff(dim=1) > 0).all()  # distinct
        assert (values.diff(dim=1) <= 0).all() and (values <= exact).all()
        assert (values == exact).all(1).float().mean() >= exact_share
    small = scores[:, :100]  # below 8 groups' worth of columns: exact
    assert torch.equal(top_columns(small, 6)[1], torch.topk(small, 6, dim=1).values)


def test_g22_worked_example(path):
    # G22 §3.2: s = [2.4, 2.6, 2.3, 0.5], K = 2, ε = 1 and the paper's three noise vectors.
    scores = torch.tensor([[2.4, 2.6, 2.3, 0.5]], dtype=torch.float64)
    noise = torch.tensor(
        [[0.2, -0.1, 0.1, 0.3], [0.1, 0.1, -0.1, 0.1], [-0.1, -0.1, 0.1, -0.1]], dtype=torch.float64
    ).unsqueeze(1)
    given = noise.clone()
    value, grad = value_and_grad(lambda s: perturbed_topk(s, 2, 1.0, 3, noise=noise).sum(), scores)
    assert torch.equal(noise, given)  # the given noise is read, not overwritten
    assert value.item() == pytest.approx((2.5 + 2.5 + 2.4) / 3, abs=1e-12)
    assert round(value.item(), 2) == 2.47
    torch.testing.assert_close(grad, torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0]], dtype=torch.float64))
    # "if we set ε to a smaller value, e.g. ε = 0.1 ... the same gradient as the non-smoothed top-K".
    _, grad = value_and_grad(lambda s: perturbed_topk(s, 2, 0.1, 3, noise=noise).sum(), scores)
    torch.testing.assert_close(grad, torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64))


def test_zero_epsilon_is_exactly_top_k():
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(20, 8, generator=generator)
    for k in (1, 3, 8):
        assert torch.equal(perturbed_topk(scores, k, 0.0, 10), torch.topk(scores, k).values[:, -1])
        _, grad = value_and_grad(lambda s, k=k: perturbed_topk(s, k, 0.0, 10).sum(), scores)
        _, expected_grad = value_and_grad(lambda s, k=k: torch.topk(s, k).values[:, -1].sum(), scores)
        assert torch.equal(grad, expected_grad)


def smoothed_topk_by_quadrature(scores_row, k, epsilon, points=40001):
    """E[top_K(s + εZ)] and E[argtop_K(s + εZ)] for one row by numerical integration.

    With X_j = s_j + εZ_j independent, the number of X_j above x is Poisson-binomial with
    p_j(x) = P(X_j > x); X_(K) ≤ x iff fewer than K exceed x, and j is the K-th largest at x
    iff exactly K - 1 others exceed x.
    """
    n = len(scores_row)
    x = torch.linspace(scores_row.min() - 12 * epsilon, scores_row.max() + 12 * epsilon, points, dtype=torch.float64)
    above = torch.special.ndtr((scores_row[None, :] - x[:, None]) / epsilon)  # P(X_j > x)

    def count_distribution(columns):
        distribution = torch.zeros(points, n + 1, dtype=torch.float64)
        distribution[:, 0] = 1
        for j in columns:
            shifted = torch.cat([torch.zeros(points, 1, dtype=torch.float64), distribution[:, :-1]], dim=1)
            distribution = distribution * (1 - above[:, j : j + 1]) + shifted * above[:, j : j + 1]
        return distribution

    cdf = count_distribution(range(n))[:, :k].sum(dim=1)
    mean = x[0] + torch.trapezoid(1 - cdf, x)
    gradient = []
    for j in range(n):
        density = torch.exp(-0.5 * ((x - scores_row[j]) / epsilon) ** 2) / (epsilon * (2 * torch.pi) ** 0.5)
        others_above = count_distribution([i for i in range(n) if i != j])[:, k - 1]
        gradient.append(torch.trapezoid(density * others_above, x))
    return mean, torch.stack(gradient)


@pytest.mark.parametrize("n_samples", [10, 1000, 100_000])
def test_monte_carlo_converges_to_the_smoothed_top_k(n_samples):
    # Var(top_K(s + εZ)) ≤ ε² (Gaussian Poincaré inequality: top_K is 1-Lipschitz) and each
    # gradient entry is a mean of Bernoulli draws (variance ≤ 1/4): five standard errors.
    scores = torch.tensor([[0.3, 0.0, -0.2, 1.0], [2.0, 2.1, 1.9, 2.05]], dtype=torch.float64)
    k, epsilon = 2, 0.5
    generator = torch.Generator().manual_seed(n_samples)
    for row in scores.split(1):
        exact_value, exact_gradient = smoothed_topk_by_quadrature(row[0], k, epsilon)
        assert exact_gradient.sum().item() == pytest.approx(1, abs=1e-9)
        assert exact_value - row.topk(k).values[0, -1] > 0.1  # smoothing moves the value
        value, grad = value_and_grad(lambda s: perturbed_topk(s, k, epsilon, n_samples, generator).sum(), row)
        assert abs(value - exact_value) <= 5 * epsilon / n_samples**0.5
        assert (grad[0] - exact_gradient).abs().max() <= 5 * 0.5 / n_samples**0.5


def test_generator_makes_draws_reproducible_and_every_call_draws_anew(path):
    scores = torch.randn(8, 6, dtype=torch.float64)
    first = perturbed_topk(scores, 2, 1.0, 3, torch.Generator().manual_seed(5))
    again = perturbed_topk(scores, 2, 1.0, 3, torch.Generator().manual_seed(5))
    assert torch.equal(first, again)
    generator = torch.Generator().manual_seed(5)
    assert not torch.equal(perturbed_topk(scores, 2, 1.0, 3, generator), perturbed_topk(scores, 2, 1.0, 3, generator))
    assert perturbed_topk(scores.float(), 2, 1.0, 3).dtype == torch.float32
    if path != "candidates":  # every column: the draw is a standard normal [n_samples, batch, n] in the scores' dtype
        expected, _ = oracle_perturbed_topk(scores, 2, 1.0, standard_noise(5, 3, 8, 6))
        torch.testing.assert_close(first, expected, rtol=1e-12, atol=1e-12)


def test_perturbed_topk_gradcheck(path):
    generator = torch.Generator().manual_seed(9)
    scores = torch.randn(3, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    noise = torch.randn(4, 3, 6, generator=generator, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda s: perturbed_topk(s, 2, 0.5, 4, noise=noise), (scores,))


# --- noised top-K hinge losses ---------------------------------------------------------------

CASES = [(n, k) for n in (3, 4, 6, 10) for k in (1, 2, 3, 5) if k < n]


@pytest.mark.parametrize("n,k", CASES)
@pytest.mark.parametrize("imbalanced", [False, True])
@pytest.mark.parametrize("path", ["small inputs", "every column"], indirect=True)  # the candidates draw in another order
def test_noised_losses_match_brute_force(n, k, imbalanced, path):
    generator = torch.Generator().manual_seed(10 * n + k + 1000 * imbalanced)
    scores = torch.randn(9, n, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, n, (9,), generator=generator)
    if imbalanced:
        counts = [int(c) for c in torch.randint(1, 300, (n,), generator=generator)]
        loss = NoisedImbalancedTopKHingeLoss(k, epsilon=0.3, n_samples=4, max_margin=0.8, scale=7.0, class_counts=counts)
        margins, scale = oracle_margins(counts, 0.8), 7.0
    else:
        loss = NoisedTopKHingeLoss(k, epsilon=0.3, n_samples=4)
        margins, scale = [1.0] * n, 1.0
    # noise for every column: the seeded draw is standard_noise(n, 4, 9, n)
    value, grad = value_and_grad(seeded(loss, seed=n), scores, labels)
    expected_value, expected_grad = oracle_noised_loss(scores, labels, k, 0.3, standard_noise(n, 4, 9, n), margins, scale)
    assert expected_value > 0
    torch.testing.assert_close(value, expected_value, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-12)


def test_functional_noised_hinge_with_given_noise_matches_brute_force(path):
    generator = torch.Generator().manual_seed(2)
    scores = 4 * torch.randn(16, 10, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (16,), generator=generator)
    noise = torch.randn(3, 16, 10, generator=generator, dtype=torch.float64)
    margins = torch.linspace(0.5, 2.0, 10, dtype=torch.float64)
    value, grad = value_and_grad(
        lambda s: noised_topk_hinge(s, labels, margins, 2, 0.1, 3, noise=noise).mean(), scores
    )
    expected = oracle_noised_loss(scores, labels, 2, 0.1, noise, margins.tolist(), 1.0)
    torch.testing.assert_close((value, grad), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("scale", [1.0, 7.0])
def test_the_hinge_reduced_in_its_node_is_the_reduction_of_its_per_sample_values(reduction, scale, path):
    generator = torch.Generator().manual_seed(4)
    scores = 3 * torch.randn(12, 6, generator=generator, dtype=torch.float64)
    labels = scores.argmax(dim=1)
    labels[::2] = torch.randint(0, 6, (6,), generator=generator)  # half the labels ranked first
    noise = torch.randn(3, 12, 6, generator=generator, dtype=torch.float64)
    margins = torch.linspace(0.2, 1.5, 6, dtype=torch.float64)
    per_sample = noised_topk_hinge(scores, labels, margins, 2, 0.4, 3, noise=noise, scale=scale)
    assert (per_sample > 0).any() and (per_sample == 0).any()  # active and inactive samples

    def hinge(s, reduction="none"):
        return noised_topk_hinge(s, labels, margins, 2, 0.4, 3, noise=noise, scale=scale, reduction=reduction)

    torch.testing.assert_close(value_and_grad(lambda s: hinge(s, reduction), scores),
                               value_and_grad(lambda s: getattr(hinge(s), reduction)(), scores), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_zero_epsilon_is_exactly_the_calibrated_hinge(k):
    generator = torch.Generator().manual_seed(k)
    scores = torch.randn(32, 8, generator=generator)
    labels = torch.randint(0, 8, (32,), generator=generator)
    noised = value_and_grad(NoisedTopKHingeLoss(k, epsilon=0.0, n_samples=10), scores, labels)
    calibrated = value_and_grad(CalibratedTopKHingeLoss(k), scores, labels)
    # The same gradient; the same value up to the order of one addition ((1 + t) - s_y against
    # 1 + (t - s_y), which perturbed_topk returns with its gradient in one pass).
    torch.testing.assert_close(noised[0], calibrated[0], rtol=1e-6, atol=0)
    assert torch.equal(noised[1], calibrated[1])
    # Equal class counts and max_margin 1: every margin is 1, the imbalanced loss is scale × that.
    imbalanced = NoisedImbalancedTopKHingeLoss(k, epsilon=0.0, max_margin=1.0, scale=4.0, class_counts=[9] * 8)
    torch.testing.assert_close(value_and_grad(imbalanced, scores, labels), (4 * calibrated[0], 4 * calibrated[1]))


@pytest.mark.parametrize(
    "make_loss",
    [lambda: NoisedTopKHingeLoss(2, 0.5, 3), lambda: NoisedImbalancedTopKHingeLoss(2, 0.5, 3, 0.4, 9.0, [5, 50, 500, 8, 80])],
)
def test_mixup_target_is_the_mix_of_the_two_label_losses_under_the_same_noise(make_loss):
    generator = torch.Generator().manual_seed(11)
    scores = torch.randn(16, 5, generator=generator, dtype=torch.float64)
    first = torch.randint(0, 5, (16,), generator=generator)
    second = torch.randint(0, 5, (16,), generator=generator)
    lam = 0.3
    mixed = lam * F.one_hot(first, 5).double() + (1 - lam) * F.one_hot(second, 5).double()
    loss = make_loss()
    value, grad = value_and_grad(seeded(loss, 4), scores, mixed)
    expected = value_and_grad(
        lambda s: lam * seeded(loss, 4)(s, first) + (1 - lam) * seeded(loss, 4)(s, second), scores
    )
    torch.testing.assert_close((value, grad), expected, rtol=1e-12, atol=1e-14)


def test_noised_losses_gradcheck_under_fixed_noise(path):
    generator = torch.Generator().manual_seed(6)
    scores = torch.randn(5, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 6, (5,), generator=generator)
    soft = torch.softmax(3 * torch.randn(5, 6, generator=generator, dtype=torch.float64), dim=1)
    losses = (NoisedTopKHingeLoss(2, 0.5, 4), NoisedImbalancedTopKHingeLoss(2, 0.5, 4, 1.5, 2.0, [1, 2, 3, 40, 50, 60]))
    for loss in losses:
        for target in (labels, soft):
            assert torch.autograd.gradcheck(seeded(loss, 0), (scores, target))


def test_noise_follows_the_scores_dtype():
    scores = torch.randn(4, 10, requires_grad=True)
    value = NoisedImbalancedTopKHingeLoss(class_counts=list(range(1, 11)))(scores, torch.tensor([0, 3, 9, 4]))
    value.backward()
    assert value.dtype == torch.float32 and torch.isfinite(scores.grad).all()


def test_bad_inputs_name_the_value():
    scores = torch.randn(2, 4)
    labels = torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"^epsilon must be a finite number >= 0, got -1$"):
        NoisedTopKHingeLoss(2, epsilon=-1)
    with pytest.raises(ValueError, match=r"^epsilon must be a finite number >= 0, got -0.5$"):
        NoisedImbalancedTopKHingeLoss(2, epsilon=-0.5, class_counts=[1, 2, 3, 4])
    with pytest.raises(ValueError, match="^n_samples must be a whole number of at least 1, got 0$"):
        NoisedTopKHingeLoss(2, n_samples=0)
    with pytest.raises(ValueError, match="^n_samples must be a whole number of at least 1, got 2.0$"):
        NoisedTopKHingeLoss(2, n_samples=2.0)
    with pytest.raises(ValueError, match="^class_counts is missing: this loss needs the training split's class counts"):
        NoisedImbalancedTopKHingeLoss(2)
    with pytest.raises(ValueError, match="^scale must be a finite number > 0, got -1.0$"):
        NoisedImbalancedTopKHingeLoss(2, scale=-1.0, class_counts=[1, 2, 3, 4])
    with pytest.raises(ConfigError, match=r"^k=4 must be between 1 and .* \(3\)"):
        NoisedTopKHingeLoss(4)(scores, labels)
    with pytest.raises(ValueError, match="^k must be a whole number of at least 1, got 0$"):
        NoisedTopKHingeLoss(0)
    with pytest.raises(ValueError, match=r"labels must be class indices from 0 to 3 \(4 classes\), got 4"):
        NoisedTopKHingeLoss(2)(scores, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="class_counts has 3 classes but the scores have 4"):
        NoisedImbalancedTopKHingeLoss(2, class_counts=[1, 2, 3])(scores, labels)
    with pytest.raises(ValueError, match=r"noise must have shape \[n_samples, batch, classes\] = \[3, 2, 4\]"):
        perturbed_topk(scores, 2, 1.0, 3, noise=torch.randn(3, 2, 5))
    with pytest.raises(ValueError, match="needs 1 <= k <= n = 4, got k=5"):
        perturbed_topk(scores, 5, 1.0, 3)
