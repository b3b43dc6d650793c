"""The perturbed (stochastically smoothed) K-th largest value of Garcin et al. 2022 (G22), §3.2.

``top_K(s)`` is the K-th largest entry of ``s`` (G22 eq. 1). Its smoothing by Gaussian
perturbation (G22 Definition 3.2, eq. 6) is ``top_{K,ε}(s) = E_Z[top_K(s + εZ)]``, estimated
with B noise vectors ``Z_b ~ N(0, I)`` (eq. 11) and differentiated with the average one-hot of
the K-th largest coordinate of each perturbed vector (eq. 12).
"""

from __future__ import annotations

import math

import torch

from topk.errors import ConfigError
from topk.sync import reads_are_free

# A standard normal exceeds NOISE_BOUND with probability Φ̄(8) = erfc(8/√2)/2 ≈ 6.2e-16.
NOISE_BOUND = 8.0


def check_perturbation(epsilon: float, n_samples: int) -> None:
    """Raise ConfigError unless ``epsilon ≥ 0`` and ``n_samples`` is a positive integer."""
    if not epsilon >= 0:
        raise ConfigError(f"loss.epsilon must be >= 0, got {epsilon}.")
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ConfigError(f"loss.n_samples must be a positive integer, got {n_samples}.")


def candidate_columns(scores: torch.Tensor, k: int, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The columns of each row that can hold the k-th largest perturbed score, and their scores:
    two ``[batch, M]`` tensors, the rows' candidates packed to the left, the rest of each row
    padded with column 0 and the score ``-inf`` (which no noise lifts into the k largest).

    With ``c`` the k-th largest score of a row and ``t = NOISE_BOUND``, the candidates are the
    columns with ``s_j ≥ c - 2εt`` (they include the k largest). If no dropped column has
    ``Z_j > t`` and none of the k largest has ``Z_i < -t``, the k-th largest of ``s + εZ`` is
    at least ``c - εt`` while every dropped column stays below ``c - εt``, so the k-th largest
    value and its column are the same over the candidates as over the whole row. Restricting to
    the candidates therefore changes the result with probability at most ``n·Φ̄(t) ≈ n·6e-16``
    per perturbed vector. ``M`` is the largest candidate count over the rows. When ``M > n/2``,
    all columns are returned: the selection then costs about what it saves.

    ``M`` depends on the data and is read on the host. No bound on it follows from ``k``, ``n``
    and ``ε`` alone (scores within ``2εt`` of each other make every column a candidate), so where
    that read is not free (:func:`topk.sync.reads_are_free`: on an accelerator, where it would
    wait for the device, and under ``torch.compile``, whose graph it would break) all columns are
    returned, and noise is drawn for every column. On a CPU the candidates pay: ``noised_bal``
    (k = 5, batch 256, n = 1000, scores 4·N(0, 1), one thread) takes about a third of the time it
    takes on every column (``make bench-losses``). The candidates are packed with ``nonzero``
    rather than a partial sort of width ``M``, which measured 2.5x slower there.
    """
    batch, num_classes = scores.shape
    every_column = torch.arange(num_classes, device=scores.device).expand(batch, num_classes)
    if not reads_are_free(scores):
        return every_column, scores
    kth_largest = torch.topk(scores, k, dim=1).values[:, -1:]
    is_candidate = scores >= kth_largest - 2 * epsilon * NOISE_BOUND
    counts = is_candidate.sum(dim=1)
    width = int(counts.max())
    if width > num_classes // 2:
        return every_column, scores
    rows, found = is_candidate.nonzero(as_tuple=True)  # row by row, columns ascending
    slots = torch.arange(rows.numel(), device=scores.device) - (counts.cumsum(0) - counts)[rows]
    columns = torch.zeros((batch, width), dtype=torch.long, device=scores.device)
    columns[rows, slots] = found
    candidates = scores.new_full((batch, width), -math.inf)
    candidates[rows, slots] = scores[rows, found]
    return columns, candidates


class _KthLargestOfPerturbed(torch.autograd.Function):
    """Eq. 11 forward and eq. 12 backward, given the perturbed candidates of ``scores``.

    ``perturbed [n_samples, batch, M]`` holds ``s_j + εZ_j`` for the candidate ``columns [batch, M]``
    of each row; it is built outside autograd, and its derivative in ``s`` is the identity, so
    the gradient is the average one-hot of the column holding each k-th largest value.
    """

    @staticmethod
    def forward(ctx, scores, perturbed, columns, k):
        values, positions = torch.topk(perturbed, k, dim=2)
        kth_columns = columns.gather(1, positions[:, :, -1].T)  # [batch, n_samples]
        ctx.save_for_backward(kth_columns)
        ctx.num_classes = scores.shape[1]
        return values[:, :, -1].mean(dim=0)

    @staticmethod
    def backward(ctx, grad_output):
        (kth_columns,) = ctx.saved_tensors
        batch, n_samples = kth_columns.shape
        weights = (grad_output / n_samples).unsqueeze(1).expand(batch, n_samples)
        grad = grad_output.new_zeros(batch, ctx.num_classes).scatter_add_(1, kth_columns, weights)
        return grad, None, None, None


def perturbed_topk(
    scores: torch.Tensor,
    k: int,
    epsilon: float,
    n_samples: int,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Monte Carlo smoothed K-th largest score ``top̂_{K,ε,B}(s)`` of G22 eq. 11, a ``[batch]`` tensor.

    .. math::
        \widehat{\mathrm{top}}_{K,ε,B}(s) = \frac{1}{B} \sum_{b=1}^{B} \mathrm{top}_K(s + ε Z_b),
        \qquad Z_b \sim \mathcal N(0, I),

    with gradient the average one-hot of the K-th largest coordinate of each perturbed vector,
    ``(1/B) Σ_b argtop_K(s + εZ_b)`` (G22 eq. 12; the worked example of §3.2 gives 2.47 and
    ``[1/3, 1/3, 1/3, 0]``). Fresh noise is drawn at every call, on the scores' device and in
    their dtype. ``ε = 0`` gives ``top_K(s)`` exactly (no noise is drawn). In eager mode on the
    CPU, noise is drawn only for the columns that can hold the K-th largest perturbed value (see
    :func:`candidate_columns`; the result differs from drawing every column with probability
    below ``n·6.2e-16`` per perturbed vector); on an accelerator and under ``torch.compile``,
    for every column (nothing is read on the host). The same seed therefore draws different
    noise on the two paths; given ``noise`` gives the same result on both.

    Parameters
    ----------
    scores : Tensor ``[batch, n]``
    k : int
        Rank ``K`` of the value, ``1 ≤ K ≤ n``.
    epsilon : float
        Noise scale ``ε ≥ 0``.
    n_samples : int
        Number ``B`` of noise vectors per score vector.
    generator : torch.Generator, optional
        Source of the noise (on the scores' device), for reproducible draws.
    noise : Tensor ``[n_samples, batch, n]``, optional
        Given standard normal noise instead of drawn noise (e.g. G22's worked example).
    """
    check_perturbation(epsilon, n_samples)
    batch, num_classes = scores.shape
    if not 1 <= k <= num_classes:
        raise ValueError(f"perturbed_topk needs 1 <= k <= n = {num_classes}, got k={k}")
    if noise is not None and noise.shape != (n_samples, batch, num_classes):
        raise ValueError(
            f"noise must have shape [n_samples, batch, classes] = {[n_samples, batch, num_classes]}, "
            f"got {list(noise.shape)}"
        )
    columns, candidates = candidate_columns(scores.detach(), k, epsilon)
    if epsilon == 0:
        return _KthLargestOfPerturbed.apply(scores, candidates.unsqueeze(0), columns, k)
    if noise is None:
        noise = torch.randn(
            (n_samples, *columns.shape), generator=generator, device=scores.device, dtype=scores.dtype
        )
    else:
        noise = noise.to(scores.device, scores.dtype).gather(2, columns.expand(n_samples, -1, -1))
    # In place on the fresh noise tensor (drawn or gathered, never the caller's): on CPU, a
    # second [n_samples, batch, M] buffer measured as costly as the arithmetic itself.
    perturbed = noise.mul_(epsilon).add_(candidates)
    return _KthLargestOfPerturbed.apply(scores, perturbed, columns, k)
