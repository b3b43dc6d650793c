"""Elementary symmetric polynomials of ``exp(x)``, the numerical core of B18's smooth top-k SVM.

``σ_j(e) = Σ_{i_1 < … < i_j} e_{i_1} ⋯ e_{i_j}`` (``σ_0 = 1``) is the coefficient of ``X^j`` in
``Π_i (1 + e_i X)``, the polynomial ``Q`` of B18 eq. 13–14. The functions here take ``x [B, n]``
and work on ``e = exp(x)`` row by row.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from topk.sync import reads_are_free

# Stands for log 0 (e = 0). Finite, unlike -inf, so that no NaN appears as -inf - (-inf) in a
# log-sum-exp or its gradient; exp(LOG_ZERO - y) is exactly 0 for any log-coefficient y a real
# input can produce (|y| up to about k·max|x|).
LOG_ZERO = -1e30


# Terms below the largest one of their sum by more than this are taken as exp(NEGLIGIBLE) ≈ 2e-35
# times it, far below the rounding of float32 and float64: torch's CPU exp is much slower on
# arguments whose result is zero or subnormal, such as log 0 (docs/benchmarks.md, 'Code choices
# and the timings behind them'), and those terms change nothing.
NEGLIGIBLE = -80.0

def log_esp(x: torch.Tensor, k: int, *, linear_space: bool = True) -> torch.Tensor:
    r"""``log σ_j(exp(x))`` for ``j = 0 … k``: a ``[B, k + 1]`` tensor (column 0 is ``log 1 = 0``).

    Divide and conquer (B18 §4.2, Algorithm 1): start from the ``n`` polynomials ``1 + e_i X``,
    multiply them in pairs, truncating each product at degree ``k``, and repeat for the
    ``log2 n`` levels of the recursion; a level is one batched operation over all samples and
    pairs, and a level with an odd number of polynomials pairs the last one with the polynomial
    ``1``. ``x = -inf`` is allowed (``e = 0``) and has gradient 0. Two ways compute it:

    * *Log space* (:func:`log_space_esp`, B18 Appendix B.2.1): coefficients are stored as logs
      and each product is a log-sum-exp of its terms, so nothing overflows in float32 even for
      ``x = s / (kτ)`` with ``τ = 1e-4`` (B18 Table 5). It costs an ``exp`` per term and a ``log``
      per coefficient at every level.
    * *Linear space* (:class:`_RescaledLinearESP`), where ``linear_space`` and reading the data
      on the host is free (:func:`topk.sync.reads_are_free`: eager mode on the CPU): each row's
      ``e`` is rescaled once so that no coefficient can overflow, the levels are plain
      multiply-adds, and one ``exp`` per input and one ``log`` per output remain. A row is kept
      only if its result provably lost less than the dtype's rounding to underflow (checked
      from its ``σ_j`` alone); the other rows are recomputed in log space. On one CPU thread,
      batch 256, forward and backward take about a third of log space's time at n = 1,000
      (k = 5 and 20) and a quarter at n = 10,000, k = 5 (timed one after the other in one process;
      ``make bench-losses`` times the whole loss). On an accelerator and
      under ``torch.compile`` everything runs in log space: no value is read, nothing waits
      for the device, and the graph has no data-dependent branch.

    Both give the same values to rounding, and their gradients are the exact derivatives of
    their computations (custom backwards reusing the forward's terms), not B18's Algorithm 2,
    whose recursion is unstable (Appendix B.2.2).

    Parameters
    ----------
    x : Tensor ``[B, n]``
        Logs of the variables ``e``, float32 or float64 (others use log space), with ``k·|x|``
        far below ``1e30``.
    k : int
        Highest degree wanted, ``0 ≤ k ≤ n``.
    linear_space : bool
        Try linear space where it is allowed (``False``: log space only).
    """
    batch, n = x.shape
    if not 0 <= k <= n:
        raise ValueError(f"log_esp needs 0 <= k <= n = {n}, got k={k}")
    linear = linear_space and k > 0 and x.dtype in (torch.float32, torch.float64)
    if not (linear and reads_are_free(x)):
        return log_space_esp(x, k)
    values, trusted = _RescaledLinearESP.apply(x, k)
    if bool(trusted.all()):
        return values
    rows = (~trusted).nonzero().squeeze(1)
    return values.index_copy(0, rows, log_space_esp(x[rows], k))


def log_space_esp(x: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`log_esp` with every level in log space (B18 Algorithm 1 and Appendix B.2.1).

    Float32 gradients are most precise for rows shifted to a maximum of 0 (``σ_j`` then scales
    by ``e^{-j·max}``).
    """
    # Degree-major layout [degree + 1, B, polynomials]: the log-coefficients [0, x_i] of 1 + e_i X.
    x = x.clamp(min=LOG_ZERO)
    coefficients = torch.stack([torch.zeros_like(x), x])
    while coefficients.shape[-1] > 1:
        if coefficients.shape[-1] % 2:  # an odd count: pair the last polynomial with 1
            one = torch.full_like(coefficients[..., :1], LOG_ZERO)
            one[0] = 0
            coefficients = torch.cat([coefficients, one], dim=-1)
        coefficients = _PolynomialProducts.apply(coefficients, k)
    return coefficients[: k + 1, :, 0].T


def _convolution_slices(degree_in: int, degree_out: int):
    """For each output degree ``j ≥ 1``: the ``a_i`` and the ``b_{j-i}`` (read from ``b``
    reversed, where ``b_l`` sits at ``degree_in - l``) of the terms ``a_i + b_{j-i}``."""
    for j in range(1, degree_out + 1):
        low, high = max(0, j - degree_in), min(j, degree_in)
        yield j, slice(low, high + 1), slice(degree_in - j + low, degree_in - j + high + 1)


class _PolynomialProducts(torch.autograd.Function):
    r"""One level of the recursion in log space: multiply polynomial ``p`` by polynomial
    ``p + m/2``, ``p < m/2``.

    Input and output are log-coefficients ``[degree + 1, B, m]``; the output keeps degrees up to
    ``k``. The output coefficient ``c_j = log Σ_i exp(a_i + b_{j-i})`` is a log-sum-exp over its
    terms, for all pairs and samples at once (a loop over the ``≤ k`` output degrees). Its
    derivative with respect to each term is the term's softmax weight ``exp(a_i + b_{j-i} - c_j)``,
    which the forward pass computes anyway and saves.
    """

    @staticmethod
    def forward(ctx, coefficients: torch.Tensor, k: int):
        degree_in = coefficients.shape[0] - 1
        degree_out = min(2 * degree_in, k)
        _, batch, width = coefficients.shape
        half = width // 2
        a = coefficients[..., :half]
        b_reversed = coefficients[..., half:].flip(0)
        products = coefficients.new_empty((degree_out + 1, batch, half))
        products[0] = 0  # log 1
        peaks, totals = products[1:], products.new_empty((degree_out, batch, half))
        weights = []
        for j, a_slice, b_slice in _convolution_slices(degree_in, degree_out):
            terms = a[a_slice] + b_reversed[b_slice]  # [terms, B, half]
            torch.amax(terms, 0, out=peaks[j - 1])
            weights.append(terms.sub_(peaks[j - 1]).clamp_(min=NEGLIGIBLE).exp_())
            torch.sum(weights[-1], 0, out=totals[j - 1])
        ctx.save_for_backward(totals, *weights)
        ctx.degree_in = degree_in
        peaks += totals.log()
        return products

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_products: torch.Tensor):
        degree_in = ctx.degree_in
        totals, *weights = ctx.saved_tensors
        grad_terms = grad_products[1:] / totals
        _, batch, half = totals.shape
        grad = grad_products.new_zeros((degree_in + 1, batch, 2 * half))
        grad_a = grad[..., :half]
        grad_b_reversed = grad_products.new_zeros((degree_in + 1, batch, half))
        slices = _convolution_slices(degree_in, len(weights))
        for (j, a_slice, b_slice), term_weights in zip(slices, weights):
            share = term_weights * grad_terms[j - 1]
            grad_a[a_slice] += share
            grad_b_reversed[b_slice] += share
        grad[..., half:] = grad_b_reversed.flip(0)
        return grad, None


@functools.cache
def _linear_space_limits(n: int, k: int, dtype: torch.dtype) -> tuple[float, float, float]:
    """For rows of ``n`` variables in ``dtype``: the log of the sum ``S`` that
    :class:`_RescaledLinearESP` rescales ``e`` to, the log of ``4nk·tiny/eps`` (its bound on
    underflow, see there), and the log of the smallest ``σ_j`` it accepts, ``max^{-1/4}``."""
    info = torch.finfo(dtype)
    log_ceiling = math.log(info.max) / 2
    log_sum = min((log_ceiling + math.lgamma(j + 1)) / j for j in range(1, k + 1))
    log_underflow = math.log(4 * n * k) + math.log(info.tiny) - math.log(info.eps)
    return log_sum, log_underflow, -log_ceiling / 2


def _linear_products(coefficients: torch.Tensor, k: int) -> torch.Tensor:
    """One level in linear space: polynomial ``p`` times polynomial ``p + m/2``, truncated at
    degree ``k``. Coefficients ``[d, m, B]`` of degrees ``1 … d`` (degree 0 is 1 throughout):
    ``c_j = a_j + b_j + Σ_{i=1}^{j-1} a_i b_{j-i}``."""
    degree, half = coefficients.shape[0], coefficients.shape[1] // 2
    a, b = coefficients[:, :half], coefficients[:, half:]
    degree_out = min(2 * degree, k)
    products = coefficients.new_empty((degree_out, half, coefficients.shape[2]))
    torch.add(a, b, out=products[:degree])
    products[degree:] = 0
    for i in range(1, min(degree, degree_out - 1) + 1):
        count = min(degree, degree_out - i)  # the terms a_i b_l, l = 1 … count
        products[i : i + count].addcmul_(b[:count], a[i - 1])
    return products


def _linear_products_backward(grad: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """The gradient of a level's input coefficients from that of its products ``[D, m/2, B]``:
    ``∂/∂a_i = g_i + Σ_{l≥1} g_{i+l} b_l``, and alike for ``b``."""
    degree, half = coefficients.shape[0], grad.shape[1]
    a, b = coefficients[:, :half], coefficients[:, half:]
    result = torch.empty_like(coefficients)
    grad_a, grad_b = result[:, :half], result[:, half:]
    grad_a.copy_(grad[:degree])
    grad_b.copy_(grad[:degree])
    for offset in range(1, min(degree, grad.shape[0] - 1) + 1):
        count = min(degree, grad.shape[0] - offset)
        grad_a[:count].addcmul_(grad[offset : offset + count], b[offset - 1])
        grad_b[:count].addcmul_(grad[offset : offset + count], a[offset - 1])
    return result


class _RescaledLinearESP(torch.autograd.Function):
    r""":func:`log_esp` in linear space, and whether each row's result can be trusted (a bool
    ``[B]``; the values of an untrusted row are 0, its gradient is 0).

    Each row is shifted to a maximum of 0 and rescaled, ``e_i = ρ exp(x_i - max x)``, with ``ρ``
    such that ``S = Σ_i e_i`` is the largest sum for which ``S^j / j! ≤ √max`` for every
    ``j ≤ k``; since ``σ_j ≤ S^j / j!``, no coefficient can exceed ``√max`` of the dtype (about
    ``2^64`` in float32) and every gradient stays finite. ``log σ_j(exp(x)) = log σ_j(e) +
    j (max x - log ρ)``; the shift and ``ρ`` are constants of the derivative (the identity holds
    for any of them).

    Underflow is what can go wrong. An operation whose result falls below the dtype's smallest
    normal number ``tiny`` is off by at most ``tiny`` (by ``2^-150`` with gradual underflow,
    by ``tiny`` if subnormals are flushed to zero); any other is off by its rounding, a relative
    ``eps/2``. A variable ``e_i`` is off by up to ``(1 + ρ)·tiny`` (its ``exp``, then the
    product by ``ρ``). A product's coefficient of degree ``j ≤ k`` is a sum and at most
    ``j - 1`` products and sums, so it is off by up to ``(2k - 1)·tiny`` beyond the errors of
    its inputs. A row has ``n`` variables and fewer than ``n + log2 n`` products (padding adds
    one per level). To first order, an error ``δ`` in coefficient ``i`` of a polynomial reaches
    ``σ_j`` multiplied by ``σ_{j-i}`` of the variables outside it, at most ``σ_{j-i}`` of all.
    Summed, underflow moves ``σ_j`` by less than ``U · Σ_{m<j} σ_m`` (``σ_0 = 1``), with
    ``U = 4nk · max(1, ρ) · tiny`` since ``2n + (2k - 1)(n + log2 n) ≤ 4nk``. A row is trusted
    when, for every ``j``, that is below ``eps·σ_j`` and ``σ_j ≥ max^{-1/4}`` (which bounds the
    backward's intermediate products). The check needs only the row's ``σ_j``, and ``U`` stays
    tiny at any size (``4nk·tiny`` is about ``1e-31`` at n = 100,000, k = 20), so float32 rows
    whose mass is spread over more than ``k`` variables are kept in float32 at any ``n``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, k: int):
        batch, n = x.shape
        log_sum, log_underflow, log_floor = _linear_space_limits(n, k, x.dtype)
        shift = x.amax(1, keepdim=True)
        e = (x - shift).exp_()
        log_rho = log_sum - e.sum(1, keepdim=True).log()
        leaves = torch.mul(e.T, log_rho.T.exp()).unsqueeze(0)  # [degree 1, n, B]
        coefficients, levels = leaves, []
        while coefficients.shape[1] > 1:
            if coefficients.shape[1] % 2:  # an odd count: pair the last polynomial with 1
                coefficients = F.pad(coefficients, (0, 0, 0, 1))
            levels.append(coefficients)
            coefficients = _linear_products(coefficients, k)
        sigma = coefficients[:, 0]  # σ_1 … σ_k of e, [k, B]
        log_sigma = sigma.log().T
        below = 1 + F.pad(sigma[:-1], (0, 0, 1, 0)).cumsum(0)  # Σ_{m<j} σ_m, [k, B]
        underflow = below.log().T + (log_underflow + log_rho.clamp(min=0))
        trusted = ((log_sigma >= underflow) & (log_sigma >= log_floor)).all(1)
        degrees = torch.arange(1, k + 1, dtype=x.dtype, device=x.device)
        values = torch.where(trusted[:, None], log_sigma + degrees * (shift - log_rho), 0)
        ctx.save_for_backward(sigma, trusted, *levels)
        ctx.mark_non_differentiable(trusted)
        ctx.n = n
        return F.pad(values, (1, 0)), trusted

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_values: torch.Tensor, _grad_trusted):
        sigma, trusted, *levels = ctx.saved_tensors
        grad = torch.where(trusted, grad_values[:, 1:].T / sigma, 0).unsqueeze(1)  # [k, 1, B]
        for coefficients in reversed(levels):
            grad = _linear_products_backward(grad[:, : coefficients.shape[1] // 2], coefficients)
        e = levels[0][0, : ctx.n] if levels else sigma  # n = 1: no level, σ_1 = e
        return (grad[0, : ctx.n] * e).T, None


def log_esp_summation(x: torch.Tensor, k: int) -> torch.Tensor:
    """``log σ_j(exp(x))`` for ``j = 0 … k`` by the summation algorithm (B18 Appendix B.3.1, Algorithm 3).

    The recursion ``σ_j(e_1..e_i) = σ_j(e_1..e_{i-1}) + e_i σ_{j-1}(e_1..e_{i-1})`` runs
    sequentially over the ``n`` variables, vectorised over samples and degrees. It works on
    ``e = exp(x)`` itself, so it overflows once ``x`` exceeds the dtype's range (B18 Table 5, for
    ``x = s / (kτ)``: from ``τ = 0.1`` down in float32, from ``τ = 0.01`` in float64); it is the
    baseline for speed and stability comparisons, not for training. All degrees ``0 … k`` are
    kept (Algorithm 3 skips those not needed for ``σ_k``).
    """
    batch, n = x.shape
    if not 0 <= k <= n:
        raise ValueError(f"log_esp_summation needs 0 <= k <= n = {n}, got k={k}")
    e = x.exp()
    sigma = F.pad(torch.ones_like(x[:, :1]), (0, k))  # σ_0..σ_k of no variable: 1, 0, …, 0
    for i in range(n):
        sigma = torch.cat([sigma[:, :1], sigma[:, 1:] + e[:, i : i + 1] * sigma[:, :-1]], dim=1)
    return sigma.log()


def topk_marginals(scores: torch.Tensor, k: int) -> torch.Tensor:
    r"""Probability that each label is in the top-k set (B18 Appendix C, Proposition 7).

    With ``P(A) ∝ exp(Σ_{j∈A} s_j)`` over the k-subsets ``A`` of labels,
    ``P(i ∈ A) = e^{s_i} σ_{k-1}(e^{s\i}) / σ_k(e^{s}) = ∂ log σ_k(exp(s)) / ∂ s_i``.
    Rows sum to ``k``. B18 averages these over the crops of an image and ranks the labels by the
    average (multi-crop testing). Returns a ``[B, n]`` tensor without gradient; works under
    ``torch.inference_mode`` (the derivative is taken on a fresh copy of ``scores``).
    """
    with torch.inference_mode(False), torch.enable_grad():
        scores = scores.detach().clone().requires_grad_(True)
        (marginals,) = torch.autograd.grad(log_esp(scores, k)[:, k].sum(), scores)
    return marginals
