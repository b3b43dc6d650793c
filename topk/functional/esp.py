"""Elementary symmetric polynomials of ``exp(x)``, the numerical core of B18's smooth top-k SVM.

``σ_j(e) = Σ_{i_1 < … < i_j} e_{i_1} ⋯ e_{i_j}`` (``σ_0 = 1``) is the coefficient of ``X^j`` in
``Π_i (1 + e_i X)``, the polynomial ``Q`` of B18 eq. 13–14. The functions here take ``x [B, n]``
and work on ``e = exp(x)`` row by row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from topk.sync import reads_are_free

# Stands for log 0 (e = 0). Finite, unlike -inf, so that no NaN appears as -inf - (-inf) in a
# log-sum-exp or its gradient; exp(LOG_ZERO - y) is exactly 0 for any log-coefficient y a real
# input can produce (|y| up to about k·max|x|).
LOG_ZERO = -1e30


# Terms below the largest one of their sum by more than this are taken as exp(NEGLIGIBLE) ≈ 2e-35
# times it, far below the rounding of float32 and float64: torch's CPU exp measured 10x slower
# (11 ns against 1 ns per element, one thread) on arguments whose result is zero or subnormal,
# such as log 0, and those terms change nothing.
NEGLIGIBLE = -80.0

# Input degree from which a level of the recursion first tries linear-space products
# (:class:`_PolynomialProducts`). Below it the log-space products cost less: they need fewer
# operations when each product has only a few terms (measured per level at batch 256, n = 1024,
# one CPU thread: log-space faster up to degree 5, linear-space 1.2-2.5x faster from degree 8).
LINEAR_FROM_DEGREE = 8

# Smallest linear-space coefficient trusted to carry its own precision: terms lost to underflow
# (below the dtype's smallest normal number) then change it by less than 1e-11 relative.
_TRUSTED_MINIMUM = {torch.float32: 1e-25, torch.float64: 1e-280}


def log_esp(x: torch.Tensor, k: int, *, linear_from_degree: int = LINEAR_FROM_DEGREE) -> torch.Tensor:
    r"""``log σ_j(exp(x))`` for ``j = 0 … k``: a ``[B, k + 1]`` tensor (column 0 is ``log 1 = 0``).

    Divide and conquer (B18 §4.2, Algorithm 1): start from the ``n`` polynomials ``1 + e_i X``,
    multiply them in pairs, truncating each product at degree ``k``, and repeat for the
    ``log2 n`` levels of the recursion. A level is one batched operation over all samples and
    all pairs. Coefficients are stored as logs, so nothing overflows in float32 even for
    ``x = s / (kτ)`` with ``τ = 1e-4``. A level with an odd number of polynomials pairs the last
    one with the polynomial ``1`` (padding ``n`` to a power of two with log 0 instead made
    ``n = 10,000`` cost 2.5x more, one CPU thread); ``x = -inf`` is allowed and has gradient 0.
    Float32 gradients are most precise for rows shifted to a maximum of 0 (``σ_j`` then scales
    by ``e^{-j·max}``).

    Each product is computed one of two ways (:class:`_PolynomialProducts`): as log-sum-exps of
    the terms (B18 Appendix B.2.1), or, from input degree ``linear_from_degree`` on, in linear
    space after rescaling both factors so that no term can overflow, checked afterwards for
    underflow: a level whose check fails, and every level after it, uses log-sum-exps. The
    result is the same to rounding; linear space saves an ``exp`` per term, which makes ``k = 20``
    cost 1.5x to 1.7x ``k = 5`` on a CPU instead of about 2.3x (``make bench-losses``). The check
    reads one flag per level on the host, so linear space is tried only where that read is free
    (:func:`topk.sync.reads_are_free`: eager mode on the CPU). On an accelerator and under
    ``torch.compile`` every level uses log-sum-exps: no value is read, nothing waits for the
    device, and the graph has no data-dependent branch. (Deciding per element instead, with both
    results computed and one kept by ``torch.where``, would cost more than log space alone.)

    The gradient is the exact derivative of this computation, by a custom backward that reuses
    the forward's terms (the chain rule autograd would apply, in fewer operations); it is not
    B18's Algorithm 2, whose recursion is unstable (Appendix B.2.2).

    Parameters
    ----------
    x : Tensor ``[B, n]``
        Logs of the variables ``e``, float32 or float64, with ``k·|x|`` far below ``1e30``.
    k : int
        Highest degree wanted, ``0 ≤ k ≤ n``.
    linear_from_degree : int
        Input degree from which linear-space products are tried (a large value turns them off).
    """
    batch, n = x.shape
    if not 0 <= k <= n:
        raise ValueError(f"log_esp needs 0 <= k <= n = {n}, got k={k}")
    # Degree-major layout [degree + 1, B, polynomials]: the log-coefficients [0, x_i] of 1 + e_i X.
    x = x.clamp(min=LOG_ZERO)
    coefficients = torch.stack([torch.zeros_like(x), x])
    try_linear = x.dtype in _TRUSTED_MINIMUM and reads_are_free(x)
    while coefficients.shape[-1] > 1:
        if coefficients.shape[-1] % 2:  # an odd count: pair the last polynomial with 1
            one = torch.full_like(coefficients[..., :1], LOG_ZERO)
            one[0] = 0
            coefficients = torch.cat([coefficients, one], dim=-1)
        linear = try_linear and coefficients.shape[0] - 1 >= linear_from_degree
        coefficients, used_linear = _PolynomialProducts.apply(coefficients, k, linear)
        try_linear = try_linear and (used_linear or not linear)
    return coefficients[: k + 1, :, 0].T


def _convolution_slices(degree_in: int, degree_out: int):
    """For each output degree ``j ≥ 1``: the ``a_i`` and the ``b_{j-i}`` (read from ``b``
    reversed, where ``b_l`` sits at ``degree_in - l``) of the terms ``a_i + b_{j-i}``."""
    for j in range(1, degree_out + 1):
        low, high = max(0, j - degree_in), min(j, degree_in)
        yield j, slice(low, high + 1), slice(degree_in - j + low, degree_in - j + high + 1)


class _PolynomialProducts(torch.autograd.Function):
    r"""One level of the recursion: multiply polynomial ``p`` by polynomial ``p + m/2``, ``p < m/2``.

    Input and output are log-coefficients ``[degree + 1, B, m]``; the output keeps degrees up to
    ``k``. Returns also whether the level was computed in linear space (a bool tensor).

    *Log space.* The output coefficient ``c_j = log Σ_i exp(a_i + b_{j-i})`` is a log-sum-exp
    over its terms, for all pairs and samples at once (a loop over the ``≤ k`` output degrees).
    Its derivative with respect to each term is the term's softmax weight
    ``exp(a_i + b_{j-i} - c_j)``, which the forward pass computes anyway and saves.

    *Linear space.* With a slope ``β`` per pair (the secant of the product's log-coefficients
    from degree 0 to its highest nonzero one) and the shifts ``α_a = max_i (a_i - β i)``,
    ``α_b`` alike, the factors ``m_i = exp(a_i - β i - α_a)`` and ``n_l = exp(b_l - β l - α_b)``
    lie in ``[0, 1]``, and ``c_j = log C_j + α_a + α_b + β j`` with ``C_j = Σ_i m_i n_{j-i}``, a
    plain convolution (no overflow: ``C_j ≤ k + 1``). Its derivative with respect to ``a_i`` is
    ``Σ_j g_j m_i n_{j-i} / C_j``, again a convolution. The result is trusted when every nonzero
    ``C_j`` is at least ``_TRUSTED_MINIMUM``; otherwise the level is recomputed in log space
    (which happens when the log-coefficients bend by more than about 57 within one product, e.g.
    float32 with ``x`` spread over more than 100).
    """

    @staticmethod
    def forward(ctx, coefficients: torch.Tensor, k: int, linear: bool):
        ctx.degree_in = coefficients.shape[0] - 1
        ctx.degree_out = min(2 * ctx.degree_in, k)
        products = _PolynomialProducts._linear_forward(ctx, coefficients) if linear else None
        ctx.linear = products is not None
        if not ctx.linear:
            products = _PolynomialProducts._log_forward(ctx, coefficients)
        used_linear = torch.tensor(ctx.linear)
        ctx.mark_non_differentiable(used_linear)
        return products, used_linear

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_products: torch.Tensor, _grad_flag):
        if ctx.linear:
            return _PolynomialProducts._linear_backward(ctx, grad_products), None, None
        return _PolynomialProducts._log_backward(ctx, grad_products), None, None

    @staticmethod
    def _log_forward(ctx, coefficients: torch.Tensor) -> torch.Tensor:
        degree_in, degree_out = ctx.degree_in, ctx.degree_out
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
        peaks += totals.log()
        return products

    @staticmethod
    def _log_backward(ctx, grad_products: torch.Tensor) -> torch.Tensor:
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
        return grad

    @staticmethod
    def _linear_forward(ctx, coefficients: torch.Tensor) -> torch.Tensor | None:
        """The level's log-coefficients, saving ``m, n, C`` for the backward, or ``None`` when
        underflow makes the linear-space result untrustworthy (a read of the data on the host:
        :func:`log_esp` calls it only where :func:`~topk.sync.reads_are_free`)."""
        degree_in, degree_out = ctx.degree_in, ctx.degree_out
        half = coefficients.shape[-1] // 2
        a, b = coefficients[..., :half], coefficients[..., half:]
        # Highest nonzero degree of each factor (coefficients of a subtree with fewer than j
        # nonzero variables are log 0) and of their product.
        top_a = (a > LOG_ZERO / 2).sum(0, keepdim=True) - 1
        top_b = (b > LOG_ZERO / 2).sum(0, keepdim=True) - 1
        top = top_a + top_b
        slope = (a.gather(0, top_a) + b.gather(0, top_b)) / top.clamp(min=1)
        ramp = slope * torch.arange(degree_in + 1, dtype=a.dtype, device=a.device).view(-1, 1, 1)
        a_flat, b_flat = a - ramp, b - ramp
        a_peak, b_peak = a_flat.amax(0, keepdim=True), b_flat.amax(0, keepdim=True)
        m = a_flat.sub_(a_peak).exp_()
        n = b_flat.sub_(b_peak).exp_()
        scaled = coefficients.new_zeros((degree_out + 1,) + a.shape[1:])
        for i in range(min(degree_in, degree_out) + 1):
            last = min(degree_in, degree_out - i)
            scaled[i : i + last + 1].addcmul_(n[: last + 1], m[i])
        degrees_out = torch.arange(degree_out + 1, device=a.device).view(-1, 1, 1)
        nonzero = degrees_out <= top
        if not bool(((scaled >= _TRUSTED_MINIMUM[a.dtype]) | ~nonzero).all()):
            return None
        products = scaled.log().add_(a_peak + b_peak).add_(slope * degrees_out).clamp_(min=LOG_ZERO)
        products[0] = 0
        ctx.save_for_backward(m, n, scaled)
        return products

    @staticmethod
    def _linear_backward(ctx, grad_products: torch.Tensor) -> torch.Tensor:
        degree_in, degree_out = ctx.degree_in, ctx.degree_out
        m, n, scaled = ctx.saved_tensors
        # g_j / C_j, zero where C_j = 0 (a product degree above every nonzero term).
        grad_scaled = torch.where(scaled > 0, grad_products / scaled, 0)
        grad_scaled[0] = 0  # c_0 = log 1 is a constant
        grad_a, grad_b = torch.zeros_like(m), torch.zeros_like(n)
        # grad_a_i += (g/C)_{i+d} n_d and grad_b_i += (g/C)_{i+d} m_d, for every offset d.
        for offset in range(min(degree_in, degree_out) + 1):
            last = min(degree_in, degree_out - offset)
            grad_a[: last + 1].addcmul_(grad_scaled[offset : offset + last + 1], n[offset])
            grad_b[: last + 1].addcmul_(grad_scaled[offset : offset + last + 1], m[offset])
        return torch.cat([grad_a.mul_(m), grad_b.mul_(n)], dim=-1)


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
