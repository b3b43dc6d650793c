"""Elementary symmetric polynomials of ``exp(x)``, the numerical core of B18's smooth top-k SVM.

``σ_j(e) = Σ_{i_1 < … < i_j} e_{i_1} ⋯ e_{i_j}`` (``σ_0 = 1``) is the coefficient of ``X^j`` in
``Π_i (1 + e_i X)``, the polynomial ``Q`` of B18 eq. 13–14. The functions here take ``x [B, n]``
and work on ``e = exp(x)`` row by row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Stands for log 0 (e = 0). Finite, unlike -inf, so that no NaN appears as -inf - (-inf) in a
# log-sum-exp or its gradient; exp(LOG_ZERO - y) is exactly 0 for any log-coefficient y a real
# input can produce (|y| up to about k·max|x|).
LOG_ZERO = -1e30


def log_esp(x: torch.Tensor, k: int) -> torch.Tensor:
    r"""``log σ_j(exp(x))`` for ``j = 0 … k``: a ``[B, k + 1]`` tensor (column 0 is ``log 1 = 0``).

    Divide and conquer (B18 §4.2, Algorithm 1): start from the ``n`` polynomials ``1 + e_i X``,
    multiply them in pairs, truncating each product at degree ``k``, and repeat for the
    ``log2 n`` levels of the recursion. A level is one batched operation over all samples and
    all pairs. Coefficients are stored as logs, so a product of coefficients is a sum and a sum
    of products a log-sum-exp (Appendix B.2.1): nothing overflows in float32 even for
    ``x = s / (kτ)`` with ``τ = 1e-4``. ``n`` is padded to a power of two with ``e = 0``, which
    leaves every ``σ_j`` unchanged; ``x = -inf`` is allowed and has gradient 0. Float32 gradients
    are most precise for rows shifted to a maximum of 0 (``σ_j`` then scales by ``e^{-j·max}``).

    The gradient is the exact derivative of this computation: each product's backward reuses
    the softmax weights of its forward log-sum-exps (see :class:`_LogPolynomialProducts`). That
    is the chain rule autograd would apply, in fewer operations (about 1.5× faster forward and
    backward on CPU); it is not B18's Algorithm 2, whose recursion is unstable (Appendix B.2.2).

    Parameters
    ----------
    x : Tensor ``[B, n]``
        Logs of the variables ``e``, float32 or float64, with ``k·|x|`` far below ``1e30``.
    k : int
        Highest degree wanted, ``0 ≤ k ≤ n``.
    """
    batch, n = x.shape
    if not 0 <= k <= n:
        raise ValueError(f"log_esp needs 0 <= k <= n = {n}, got k={k}")
    width = 1 << (n - 1).bit_length()
    x = F.pad(x.clamp(min=LOG_ZERO), (0, width - n), value=LOG_ZERO)
    # Degree-major layout [degree + 1, B, polynomials]: the log-coefficients [0, x_i] of 1 + e_i X.
    coefficients = torch.stack([torch.zeros_like(x), x])
    while coefficients.shape[-1] > 1:
        coefficients = _LogPolynomialProducts.apply(coefficients, k)
    return coefficients[: k + 1, :, 0].T


def _convolution_slices(degree_in: int, degree_out: int):
    """For each output degree ``j ≥ 1``: the ``a_i`` and the ``b_{j-i}`` (read from ``b``
    reversed, where ``b_l`` sits at ``degree_in - l``) of the terms ``a_i + b_{j-i}``."""
    for j in range(1, degree_out + 1):
        low, high = max(0, j - degree_in), min(j, degree_in)
        yield j, slice(low, high + 1), slice(degree_in - j + low, degree_in - j + high + 1)


class _LogPolynomialProducts(torch.autograd.Function):
    """One level of the recursion: multiply polynomial ``p`` by polynomial ``p + m/2``, ``p < m/2``.

    Input and output are log-coefficients ``[degree + 1, B, m]``. The output coefficient
    ``c_j = log Σ_i exp(a_i + b_{j-i})`` is a log-sum-exp over its terms, computed for all
    pairs and samples at once (a loop over the ``≤ k`` output degrees). Its derivative with
    respect to each term is the term's softmax weight ``exp(a_i + b_{j-i} - c_j)``, which the
    forward pass computes anyway: the backward multiplies the saved weights by the incoming
    gradient and adds them to ``a_i`` and ``b_{j-i}``.
    """

    @staticmethod
    def forward(ctx, coefficients: torch.Tensor, k: int) -> torch.Tensor:
        degree_in = coefficients.shape[0] - 1
        degree_out = min(2 * degree_in, k)
        half = coefficients.shape[-1] // 2
        a = coefficients[..., :half]
        b_reversed = coefficients[..., half:].flip(0)
        batch = coefficients.shape[1]
        peaks = coefficients.new_empty((degree_out, batch, half))
        totals = torch.empty_like(peaks)
        weights = []
        for j, a_slice, b_slice in _convolution_slices(degree_in, degree_out):
            terms = a[a_slice] + b_reversed[b_slice]  # [terms, B, half]
            torch.amax(terms, 0, out=peaks[j - 1])
            weights.append(terms.sub_(peaks[j - 1]).exp_())
            torch.sum(weights[-1], 0, out=totals[j - 1])
        ctx.save_for_backward(totals, *weights)
        ctx.degree_in = degree_in
        log_one = coefficients.new_zeros((1, batch, half))
        return torch.cat([log_one, totals.log() + peaks])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_products: torch.Tensor):
        degree_in = ctx.degree_in
        totals, *weights = ctx.saved_tensors
        grad_terms = grad_products[1:] / totals
        grad_a = grad_products.new_zeros((degree_in + 1,) + totals.shape[1:])
        grad_b_reversed = torch.zeros_like(grad_a)
        slices = _convolution_slices(degree_in, len(weights))
        for (j, a_slice, b_slice), term_weights in zip(slices, weights):
            share = term_weights * grad_terms[j - 1]
            grad_a[a_slice] += share
            grad_b_reversed[b_slice] += share
        return torch.cat([grad_a, grad_b_reversed.flip(0)], dim=-1), None


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
