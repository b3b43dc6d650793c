"""Elementary symmetric polynomials in log-space (B18 §4, Appendices B and C) against enumeration."""

from __future__ import annotations

import itertools
import math
from unittest import mock

import pytest
import torch

from topk.functional.esp import (
    _RescaledLinearESP,
    log_esp,
    log_esp_summation,
    log_space_esp,
    topk_marginals,
)
from topk.sync import sync_free

TAUS = (10.0, 1.0, 0.1, 1e-2, 1e-3, 1e-4)


def brute_force_log_esp(x, k):
    """``log σ_j(exp(x))``, j = 0..k, by enumerating every j-subset of every row. float64."""
    rows = []
    for row in x:
        logs = [torch.zeros((), dtype=x.dtype)]  # σ_0 = 1
        for j in range(1, k + 1):
            subsets = torch.tensor(list(itertools.combinations(range(len(row)), j)))
            logs.append(torch.logsumexp(row[subsets].sum(dim=1), dim=0))
        rows.append(torch.stack(logs))
    return torch.stack(rows)


def value_and_grad(function, x, k, weights):
    """The function's value and the gradient of ``Σ weights · value`` (all degrees at once)."""
    x = x.clone().requires_grad_(True)
    value = function(x, k)
    (grad,) = torch.autograd.grad((weights * value).sum(), x)
    return value.detach(), grad


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8, 10])
@pytest.mark.parametrize("function", [log_esp, log_space_esp, log_esp_summation])
def test_all_degrees_match_enumeration(n, function):
    generator = torch.Generator().manual_seed(n)
    x = 2 * torch.randn(5, n, generator=generator, dtype=torch.float64)
    assert (function(x, 0) == 0).all()  # σ_0 = 1
    for k in range(1, n + 1):
        weights = torch.randn(5, k + 1, generator=generator, dtype=torch.float64)
        got = value_and_grad(function, x, k, weights)
        expected = value_and_grad(brute_force_log_esp, x, k, weights)
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("function", [log_esp, log_space_esp])
def test_minus_infinity_is_a_zero_variable_with_zero_gradient(function):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 7, generator=generator, dtype=torch.float64)
    dropped = x.clone()
    dropped[:, 2] = float("-inf")
    weights = torch.randn(4, 6, generator=generator, dtype=torch.float64)
    value, grad = value_and_grad(function, dropped, 5, weights)
    expected_value, expected_grad = value_and_grad(function, x[:, [0, 1, 3, 4, 5, 6]], 5, weights)
    torch.testing.assert_close(value, expected_value, rtol=1e-12, atol=1e-12)
    assert (grad[:, 2] == 0).all()
    torch.testing.assert_close(grad[:, [0, 1, 3, 4, 5, 6]], expected_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("function", [log_esp, log_space_esp])
def test_gradcheck(function):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(3, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: function(x, 4), (x,))


def trusted_rows(x, k):
    """Which rows :func:`log_esp` keeps from linear space."""
    return _RescaledLinearESP.apply(x, k)[1]


def test_linear_space_equals_log_space_with_padding_and_dropped_variables():
    """n = 300 pairs odd counts with 1 at several levels, and every row drops a few variables
    (x = -inf, as the smooth SVM drops the label); two rows have fewer than k variables left,
    so that σ_k = 0 there: those rows alone come from log space."""
    generator = torch.Generator().manual_seed(3)
    x = 3 * torch.randn(8, 300, generator=generator, dtype=torch.float64)
    x[torch.arange(8), torch.randint(0, 300, (8,), generator=generator)] = float("-inf")
    x[:2, 30:] = float("-inf")
    for k in (5, 8, 20, 40):
        assert trusted_rows(x, k).tolist() == [k < 30] * 2 + [True] * 6
        weights = torch.randn(8, k + 1, generator=generator, dtype=torch.float64)
        linear = value_and_grad(log_esp, x, k, weights)
        log_only = value_and_grad(log_space_esp, x, k, weights)
        torch.testing.assert_close(linear, log_only, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_rows_that_would_underflow_in_linear_space_come_from_log_space(dtype, tolerance):
    """Moderate rows, up to a spread of 1,000, are kept from linear space; rows spread over
    1e4 and 1e5 (σ_8 below ``max^{-1/4}`` after the rescaling) are recomputed in log space; a
    batch mixing both gives each row's log-space value and gradient. Rows are shifted to a
    maximum of 0, as the smooth SVM does, for precise float32 gradients."""
    generator = torch.Generator().manual_seed(4)
    spreads = torch.tensor([10.0, 1e4, 30.0, 1e5, 1.0, 1e3], dtype=torch.float64)
    x = spreads[:, None] * torch.rand(6, 200, generator=generator, dtype=torch.float64)
    x = (x - x.amax(dim=1, keepdim=True)).to(dtype)
    k = 8
    assert trusted_rows(x, k).tolist() == [True, False, True, False, True, True]
    weights = torch.randn(6, k + 1, generator=generator, dtype=dtype)
    got = value_and_grad(log_esp, x, k, weights)
    expected = value_and_grad(log_space_esp, x.double(), k, weights.double())
    assert all(torch.isfinite(part).all() for part in got)
    torch.testing.assert_close(got[0].double(), expected[0], rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(got[1].double(), expected[1], rtol=1e-4 if dtype == torch.float32 else 1e-10,
                               atol=tolerance)


def test_linear_space_rescales_rows_whose_sigma_would_overflow_float32():
    """1,000 equal scores, k = 20: σ_20 = C(1000, 20) ≈ 3.4e41 exceeds float32 (3.4e38); the
    rescaled row stays in range and matches the closed form, its gradient k/n each."""
    x = torch.zeros(2, 1000)
    assert trusted_rows(x, 20).all()
    value, grad = value_and_grad(log_esp, x, 20, torch.nn.functional.one_hot(torch.tensor([20, 20]), 21))
    closed_form = [math.lgamma(1001) - math.lgamma(j + 1) - math.lgamma(1001 - j) for j in range(21)]
    torch.testing.assert_close(value, torch.tensor([closed_form] * 2), rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(grad, torch.full((2, 1000), 0.02), rtol=1e-5, atol=0)


@pytest.mark.parametrize("n", [3000, 10000])
def test_float32_linear_space_holds_where_sigma_has_more_terms_than_float32_can_count(n):
    """C(n, 20) is about 1e51 at n = 3,000 and 4e61 at n = 10,000, beyond float32's 3.4e38: the
    row check bounds underflow per operation of the tree (4nk·tiny), not per term, so these
    rows stay in float32 linear space and agree with float64 log space."""
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(4, n, generator=generator)
    assert trusted_rows(x, 20).all()
    weights = torch.randn(4, 21, generator=generator)
    with mock.patch("topk.functional.esp.log_space_esp", side_effect=AssertionError):
        value, grad = value_and_grad(log_esp, x, 20, weights)
    assert value.dtype == grad.dtype == torch.float32
    expected = value_and_grad(log_space_esp, x.double(), 20, weights.double())
    torch.testing.assert_close(value.double(), expected[0], rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(grad.double(), expected[1], rtol=1e-4, atol=1e-7)


def test_row_check_bounds_underflow_by_the_lower_degrees():
    """k = 2, one score of 0 and 999 of -L in float32: ρ ≈ 6.1e9 and σ_1 ≈ ρ, so underflow could
    move σ_2 by up to U·(1 + σ_1) ≈ 3.5e-15 (U = 4nk·ρ·tiny), which is eps·σ_2 for σ_2 ≈ 3e-8.
    At L = 72.7 (σ_2 ≈ 1e-9, above the floor max^{-1/4} ≈ 2.3e-10) the row is refused; at
    L = 68 (σ_2 ≈ 1e-7) it is kept. Both give log space's values."""
    x = torch.full((2, 1000), -72.7)
    x[1] = -68.0
    x[:, 0] = 0.0
    assert trusted_rows(x, 2).tolist() == [False, True]
    torch.testing.assert_close(log_esp(x, 2).double(), log_space_esp(x.double(), 2), rtol=1e-6, atol=1e-6)


def test_sync_free_mode_uses_log_space_alone():
    """Where reading the data is not free (accelerators, ``torch.compile``), the linear-space
    attempt and its row check are skipped."""
    x = torch.randn(4, 50, dtype=torch.float64)
    with sync_free(), mock.patch.object(_RescaledLinearESP, "apply", side_effect=AssertionError):
        torch.testing.assert_close(log_esp(x, 5), log_space_esp(x, 5), rtol=0, atol=0)


def test_rejects_degrees_outside_zero_to_n():
    x = torch.randn(2, 4)
    for function in (log_esp, log_esp_summation):
        with pytest.raises(ValueError, match="0 <= k <= n = 4, got k=5"):
            function(x, 5)
        with pytest.raises(ValueError, match="got k=-1"):
            function(x, -1)


def imagenet_like_scores(dtype):
    """Logits with a spread of about 100 (15·N(0, 1) over 1,000 classes), like a trained net's."""
    generator = torch.Generator().manual_seed(2018)
    return (15 * torch.randn(64, 1000, generator=generator, dtype=torch.float64)).to(dtype)


@pytest.mark.parametrize("tau", TAUS)
def test_log_space_is_finite_in_float32_and_agrees_with_float64(tau):
    k = 5
    x32 = imagenet_like_scores(torch.float32) / (k * tau)
    x32 = x32 - x32.amax(dim=1, keepdim=True)  # as the smooth SVM does, for precise gradients
    weights = torch.zeros(64, k + 1)
    weights[:, k - 1 :] = 1
    value32, grad32 = value_and_grad(log_esp, x32, k, weights)
    value64, grad64 = value_and_grad(log_esp, x32.double(), k, weights.double())
    assert torch.isfinite(value32).all() and torch.isfinite(grad32).all()
    torch.testing.assert_close(value32.double(), value64, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(grad32.double(), grad64, rtol=1e-4, atol=1e-5)


def test_summation_algorithm_overflows_as_b18_table_5_reports():
    """B18 Table 5: the summation algorithm overflows below τ = 1 in float32 and below τ = 0.1 in
    float64; divide and conquer in log-space never does."""
    k = 5
    for dtype, stable_taus in ((torch.float32, (10.0, 1.0)), (torch.float64, (10.0, 1.0, 0.1))):
        scores = imagenet_like_scores(dtype)
        for tau in TAUS:
            summation_finite = bool(torch.isfinite(log_esp_summation(scores / (k * tau), k)).all())
            assert summation_finite == (tau in stable_taus), (dtype, tau)
            assert torch.isfinite(log_esp(scores / (k * tau), k)).all(), (dtype, tau)


def brute_force_marginals(scores, k):
    """``P(i ∈ A)`` with ``P(A) ∝ Π_{j∈A} e^{s_j}`` over the k-subsets A. float64."""
    n = scores.shape[1]
    subsets = list(itertools.combinations(range(n), k))
    marginals = torch.zeros_like(scores)
    for b, row in enumerate(scores):
        weights = torch.stack([row[list(subset)].sum() for subset in subsets]).softmax(dim=0)
        for weight, subset in zip(weights, subsets):
            marginals[b, list(subset)] += weight
    return marginals


@pytest.mark.parametrize("n,k", [(4, 1), (5, 2), (7, 3), (10, 5)])
def test_topk_marginals_match_enumeration_and_sum_to_k(n, k):
    generator = torch.Generator().manual_seed(10 * n + k)
    scores = 2 * torch.randn(6, n, generator=generator, dtype=torch.float64)
    marginals = topk_marginals(scores, k)
    torch.testing.assert_close(marginals, brute_force_marginals(scores, k), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(marginals.sum(dim=1), torch.full((6,), float(k), dtype=torch.float64))


def test_topk_marginals_work_in_inference_mode_in_float32():
    scores = imagenet_like_scores(torch.float32)[:8]
    with torch.inference_mode():
        marginals = topk_marginals(scores, 5)
    assert not marginals.requires_grad
    assert torch.isfinite(marginals).all()
    torch.testing.assert_close(marginals.sum(dim=1), torch.full((8,), 5.0))


@pytest.mark.parametrize("dtype,value_tolerance,grad_tolerance", [(torch.float32, 1e-5, 1e-4),
                                                                  (torch.float64, 1e-12, 1e-12)])
def test_log_esp_equals_float64_log_space_on_random_shapes_and_spreads(dtype, value_tolerance, grad_tolerance):
    """Rows of every width and spread (1e-2 to 1e5, some with a variable dropped), k up to 25:
    finite, and within float rounding of float64 log space, values and gradients, whichever
    way each row was computed (the float32 gradients least precise, to 9e-5 of the row's
    largest, are those of widely spread rows, which come from log space)."""
    generator = torch.Generator().manual_seed(11)
    draws = torch.randint(0, 1000, (40, 4), generator=generator).tolist()
    for width_draw, k_draw, spread_draw, drop in draws:
        n = (2, 3, 7, 16, 33, 100, 257, 1000)[width_draw % 8]
        k = 1 + k_draw % min(n, 25)
        x = (1e-2, 1.0, 10.0, 100.0, 1e3, 1e5)[spread_draw % 6] * torch.randn(6, n, generator=generator, dtype=torch.float64)
        if drop % 3 == 0 and n > k + 2:
            x[:, drop % n] = float("-inf")
        x = (x - x.amax(dim=1, keepdim=True)).to(dtype)
        weights = torch.randn(6, k + 1, generator=generator, dtype=torch.float64)
        value, grad = value_and_grad(log_esp, x, k, weights.to(dtype))
        expected_value, expected_grad = value_and_grad(log_space_esp, x.double(), k, weights)
        assert torch.isfinite(value).all() and torch.isfinite(grad).all(), (n, k)
        assert ((value.double() - expected_value).abs() <= value_tolerance * expected_value.abs().clamp(min=1)).all(), (n, k)
        grad_scale = expected_grad.abs().amax(dim=1, keepdim=True).clamp(min=1)
        assert ((grad.double() - expected_grad).abs() <= grad_tolerance * grad_scale).all(), (n, k)
