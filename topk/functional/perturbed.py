"""The perturbed (stochastically smoothed) K-th largest value of Garcin et al. 2022 (G22), §3.2.

``top_K(s)`` is the K-th largest entry of ``s`` (G22 eq. 1). Its smoothing by Gaussian
perturbation (G22 Definition 3.2, eq. 6) is ``top_{K,ε}(s) = E_Z[top_K(s + εZ)]``, estimated
with B noise vectors ``Z_b ~ N(0, I)`` (eq. 11) and differentiated with the average one-hot of
the K-th largest coordinate of each perturbed vector (eq. 12).
"""

from __future__ import annotations

import functools
import math

import torch

from topk.errors import ConfigError
from topk.functional.arguments import non_negative, whole_number
from topk.sync import reads_are_free

# A standard normal exceeds NOISE_BOUND with probability Φ̄(8) = erfc(8/√2)/2 ≈ 6.2e-16.
NOISE_BOUND = 8.0
# Perturbed scores (batch · n_samples · n) up to which every column is perturbed and torch.kthvalue
# selects along the classes (see perturbed_kth_largest).
SMALL_PERTURBATION = 32_768


def check_perturbation(epsilon: float, n_samples: int) -> None:
    """Raise ``ValueError`` unless ``epsilon`` is a finite number ``≥ 0`` and ``n_samples`` a
    whole number ``≥ 1`` (:mod:`topk.functional.arguments`)."""
    non_negative("epsilon", epsilon)
    whole_number("n_samples", n_samples)


def noise_source(n_samples: int, scores: torch.Tensor, generator: torch.Generator | None = None,
                 noise: torch.Tensor | None = None):
    """A function giving the standard normal noise ``[n_samples, *shape]`` of the entries
    ``scores[rows, columns]`` (index tensors that broadcast to ``shape``): drawn on the scores'
    device, in their dtype, from ``generator`` (for every entry, the draw of
    ``torch.randn(n_samples, batch, n)``), or read from ``noise [n_samples, batch, n]``."""
    if noise is None:
        def draw(rows, columns):
            shape = (n_samples, *torch.broadcast_shapes(rows.shape, columns.shape))
            return torch.randn(shape, generator=generator, device=scores.device, dtype=scores.dtype)
        return draw
    noise = noise.to(scores.device, scores.dtype)
    return lambda rows, columns: noise[:, rows, columns]


def every_column_noise(n_samples: int, scores: torch.Tensor, generator: torch.Generator | None = None,
                       noise: torch.Tensor | None = None) -> torch.Tensor:
    """Standard normal noise ``[n_samples, batch, n]`` for every score, a fresh tensor: drawn on
    the scores' device in their dtype from ``generator`` (the draw :func:`noise_source` makes for
    every entry), or a copy of ``noise``."""
    if noise is None:
        return torch.randn((n_samples, *scores.shape), generator=generator, device=scores.device, dtype=scores.dtype)
    return noise.to(scores.device, scores.dtype, copy=True)


def every_column(scores: torch.Tensor) -> torch.Tensor:
    """The column index of every score, laid out ``[n, batch]`` as the candidates are."""
    batch, num_classes = scores.shape
    return torch.arange(num_classes, device=scores.device).unsqueeze(1).expand(num_classes, batch)


def every_column_perturbed(scores: torch.Tensor, epsilon: float, draw) -> tuple[torch.Tensor, torch.Tensor]:
    """Every column ``[n, batch]`` and ``s + εZ`` for each, ``[n, n_samples, batch]``."""
    columns = every_column(scores)
    rows = torch.arange(scores.shape[0], device=scores.device).unsqueeze(1)
    perturbed = draw(rows, columns.T).mul_(epsilon).add_(scores)  # fresh noise (drawn, or indexed: a copy)
    return columns, perturbed.permute(2, 0, 1)


def candidates_perturbed(scores: torch.Tensor, k: int, epsilon: float, draw) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The columns of each row that can hold the k-th largest perturbed score, ``[M, batch]``,
    and ``s_j + εZ_j`` for each, ``[M, n_samples, batch]`` (``Z`` from ``draw``, see
    :func:`noise_source`). Rows with fewer than ``M`` candidates are padded with column 0 and
    the value ``-inf`` (which no noise lifts into the k largest).

    The first ``k`` columns of each row are ``k`` of its largest scores (:func:`top_columns`),
    whose noise is drawn first. For each noise sample, the k-th largest perturbed score is at least the smallest of
    those ``k`` perturbed scores; let ``L`` be the smallest of them over the samples. A column
    with ``s_j < L - εt`` (``t = NOISE_BOUND``) whose noise is at most ``t`` stays below every
    sample's k-th largest, so the k largest perturbed values, and the column of the k-th, are
    the same over the candidates ``s_j ≥ L - εt`` as over the whole row. Restricting to the
    candidates changes the result with probability at most ``n·Φ̄(t) ≈ n·6e-16`` per perturbed
    vector. When ``M > 2n/3``, every column is returned (with fresh noise, independent of that
    choice): the selection then costs about what it saves.

    ``M`` depends on the data and is read on the host. No bound on it follows from ``k``, ``n``
    and ``ε`` alone (scores within ``εt`` of each other make every column a candidate), so
    :func:`chosen_path` takes this path only where that read is free
    (:func:`topk.sync.reads_are_free`: not on an accelerator, where it would wait for the device,
    nor under ``torch.compile``, whose graph it would break). Noise is drawn for the real
    candidates alone, ``[n_samples, R]`` for ``R`` of them, and copied in place through one flat
    index, where its rows are contiguous; the comparison writes floats, made bools only for
    ``nonzero``.
    """
    batch, num_classes = scores.shape
    seeds, seed_values = top_columns(scores, k)
    every_row = torch.arange(batch, device=scores.device)
    seed_perturbed = draw(every_row.unsqueeze(1), seeds).mul_(epsilon).add_(seed_values)  # [n_samples, batch, k]
    lowest = seed_perturbed.amin(2).amin(0)  # L, [batch]
    threshold = (lowest - epsilon * NOISE_BOUND).unsqueeze(1)
    others = torch.ge(scores, threshold, out=torch.empty_like(scores)).scatter_(1, seeds, 0.0)
    counts = others.sum(1)
    width = int(counts.max())
    if 3 * (k + width) > 2 * num_classes:
        return every_column_perturbed(scores, epsilon, draw)
    rows, found = others.bool().nonzero(as_tuple=True)  # row by row, columns ascending
    slots = torch.arange(k, k + rows.numel(), device=scores.device) - (counts.cumsum(0) - counts).long()[rows]
    columns = torch.zeros((k + width, batch), dtype=torch.long, device=scores.device)
    columns[:k] = seeds.T
    columns.view(-1).index_copy_(0, slots * batch + rows, found)
    n_samples = seed_perturbed.shape[0]
    perturbed = scores.new_full((k + width, n_samples, batch), -math.inf)
    perturbed[:k] = seed_perturbed.permute(2, 0, 1)
    places = (slots * (n_samples * batch) + rows) + batch * torch.arange(n_samples, device=scores.device).unsqueeze(1)
    values = draw(rows, found).mul_(epsilon).add_(scores[rows, found])  # [n_samples, R], contiguous
    perturbed.view(-1).index_copy_(0, places.view(-1), values.view(-1))
    return columns, perturbed


def top_columns(scores: torch.Tensor, k: int, groups: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` distinct columns ``[batch, k]`` of each row and their scores, in decreasing order:
    the columns of the ``k`` largest maxima of ``groups`` disjoint groups of columns, which
    are the row's ``k`` largest scores when those lie in different groups: one pass over the
    scores and a few small operations, where ``torch.topk`` sorts partially. It paid at
    n = 10,000 and was even at n = 1000 when it was introduced, timed inside the loss;
    docs/benchmarks.md, 'Noised-loss paths', found it no faster than ``torch.topk`` at the
    papers' settings, so it is a candidate for removal once ``make bench-losses`` agrees. Rows of
    fewer than ``8 · groups`` columns, or ``k`` above ``groups / 4``, get the exact
    ``torch.topk``.
    """
    batch, num_classes = scores.shape
    if num_classes < 8 * groups or 4 * k > groups:
        values, columns = torch.topk(scores, k, dim=1)
        return columns, values
    size = num_classes // groups  # column g + groups·i (i < size) is in group g; the rest alone
    maxima = scores[:, : groups * size].view(batch, size, groups).amax(1)
    values, slots = torch.topk(torch.cat([maxima, scores[:, groups * size :]], dim=1), k, dim=1)
    members = slots.clamp(max=groups - 1).unsqueeze(2) + groups * torch.arange(size, device=scores.device)
    first = scores.gather(1, members.view(batch, -1)).view(batch, k, size).argmax(2)
    columns = torch.where(slots < groups, slots + groups * first, slots + groups * (size - 1))
    return columns, values


def kth_largest(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k-th largest of ``values [M, …]`` along dim 0 and its position there (the last of
    equal ones), ties counted with their multiplicity as :func:`torch.topk` does.

    ``k`` rounds of a maximum over dim 0, each lowering the entries equal to it by ``1e30``
    (below any score) and counting them: the k-th largest is the maximum of the round that
    reaches k. A maximum across the lanes of dim 0 vectorises where the per-row selection of
    ``torch.topk`` or ``torch.kthvalue`` does not, and the comparisons write float masks, faster
    than bool ones. Nothing is read on the host. ``values`` are float32 or float64, whose
    positions stay exact up to 2^24 (:func:`kth_largest_of` compares half precision in float32).
    """
    lowered = values.clone(memory_format=torch.contiguous_format)  # one copy, even of a view
    mask = torch.empty_like(lowered)
    kth = lowered.amax(0)
    taken = values.new_zeros(values.shape[1:])
    for _ in range(k - 1):
        torch.ge(lowered, kth, out=mask)  # the entries equal to this round's maximum
        taken += mask.sum(0)
        lowered.add_(mask, alpha=-1e30)
        kth = torch.where(taken < k, lowered.amax(0), kth)
    return kth, last_position(values, kth, mask)


def last_position(values: torch.Tensor, value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The position along dim 0 of the last entry of ``values`` equal to ``value`` (one per
    column of dim 0); ``mask`` is scratch space of ``values``' shape and dtype."""
    torch.eq(values, value, out=mask)
    positions = torch.arange(values.shape[0], dtype=values.dtype, device=values.device)
    return mask.mul_(positions.view(-1, *[1] * (values.dim() - 1))).amax(0).long()


def kth_largest_of_distinct_maxima(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`kth_largest` of float32 or float64 ``values``, in the form that ``torch.compile``
    makes fast: each of the ``k`` rounds takes the largest value below the last one and counts
    the entries at or above it, reading ``values`` itself; the k-th largest is the value of the
    round whose count reaches k. Inductor turns each round into two fused passes, where the
    rounds of :func:`kth_largest`, each depending on all earlier ones, are recomputed; in eager
    mode this form, allocating as it goes, is the slower one. Used through
    :func:`compiled_kth_largest` alone.
    """
    kth = values.amax(0)
    count = (values >= kth).sum(0)
    for _ in range(k - 1):
        below = torch.where(values < kth, values, -math.inf).amax(0)  # the next distinct value
        kth = torch.where(count < k, below, kth)
        count = (values >= kth).sum(0)
    return kth, last_position(values, kth, torch.empty_like(values, memory_format=torch.contiguous_format))


@functools.cache
def compiled_kth_largest():
    """:func:`kth_largest_of_distinct_maxima` through ``torch.compile`` (``fullgraph``, any
    number of candidates and batch size; one compilation per ``k`` and dtype), for
    ``loss.compile=true``. The values and positions are those of :func:`kth_largest` exactly.
    It needs what ``torch.compile`` needs: a C++ compiler on the CPU, Triton on a GPU. Whether
    it pays depends on the setting (see docs/benchmarks.md, 'Noised-loss paths')."""
    return torch.compile(kth_largest_of_distinct_maxima, dynamic=True, fullgraph=True)


def kth_largest_of(perturbed: torch.Tensor, k: int, compile: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`kth_largest`, compiled if ``compile``; a failed compilation raises
    :class:`~topk.errors.ConfigError` with the compiler's first line. Half-precision values are
    compared in float32: in bfloat16 the positions would be exact only up to 256."""
    if perturbed.dtype not in (torch.float32, torch.float64):
        kth, position = kth_largest_of(perturbed.float(), k, compile)
        return kth.to(perturbed.dtype), position
    if not compile:
        return kth_largest(perturbed, k)
    from torch._dynamo.exc import BackendCompilerFailed  # slow to import: only when compiling

    try:
        return compiled_kth_largest()(perturbed, k)
    except BackendCompilerFailed as error:
        cause = error.inner_exception
        reason = f"{type(cause).__name__}: {str(cause).strip().splitlines()[0]}"
        raise ConfigError(
            f"loss.compile=true could not compile the k-th largest kernel ({reason}); install a C++ "
            "compiler (on a CPU) or Triton (on a GPU), or set loss.compile=false."
        ) from None


PATHS = ("kthvalue", "candidates", "every column")


def chosen_path(scores: torch.Tensor, n_samples: int) -> str:
    """The path :func:`perturbed_kth_largest` takes for ``scores [batch, n]`` and ``B = n_samples``
    (one of ``PATHS``): ``kthvalue`` up to ``SMALL_PERTURBATION`` perturbed scores,
    ``candidates`` above that where reading on the host is free (eager mode on the CPU),
    ``every column`` elsewhere."""
    batch, num_classes = scores.shape
    if batch * n_samples * num_classes <= SMALL_PERTURBATION:
        return "kthvalue"
    return "candidates" if reads_are_free(scores) else "every column"


def perturbed_kth_largest(
    scores: torch.Tensor,
    k: int,
    epsilon: float,
    n_samples: int,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
    compile: bool = False,
    path: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k-th largest value of each perturbed vector ``s + εZ_b`` and its column, both
    ``[n_samples, batch]`` (``[1, batch]`` for ``ε = 0``, where no noise is drawn), computed from
    the values of ``scores`` outside autograd. One of three paths (``path``, by default
    :func:`chosen_path`'s, from shapes and the device), each kept because a row of ``make
    bench-losses`` or of ``make bench-noised-paths`` (docs/benchmarks.md, 'Noised-loss paths')
    needs it:

    - ``kthvalue``, for **small inputs**, up to ``SMALL_PERTURBATION`` perturbed scores
      ``batch · B · n``: every column is perturbed and ``torch.kthvalue`` selects along the
      classes, on every device; one operation where the rounds take several per k (the
      head-to-head rows at n = 10);
    - ``candidates``, **in eager mode on the CPU**: noise only for the columns that can hold the
      k-th largest value (:func:`candidates_perturbed`), the k rounds of :func:`kth_largest_of`
      over them (ImageNet's and Pl@ntNet-300K's label sets, and n = 100 at k = 20);
    - ``every column``, **on an accelerator and under torch.compile**: the same rounds over every
      column (nothing is read on the host: docs/design.md §5).

    The candidates' path draws its noise in another order, so the same seed gives other noise
    there; given ``noise`` gives the same result on every path. ``path`` forces one (the
    benchmark does); ``candidates`` then reads on the host even on an accelerator.
    """
    scores = scores.detach()
    if epsilon == 0:  # top_K(s) itself, over every column
        values, positions = kth_largest_of(scores.T.unsqueeze(1), k, compile)
        return values, every_column(scores).gather(0, positions)
    path = path or chosen_path(scores, n_samples)
    if path == "kthvalue":
        perturbed = every_column_noise(n_samples, scores, generator, noise).mul_(epsilon).add_(scores)
        return torch.kthvalue(perturbed, scores.shape[1] - k + 1, dim=2)
    draw = noise_source(n_samples, scores, generator, noise)
    if path == "candidates":
        columns, perturbed = candidates_perturbed(scores, k, epsilon, draw)
    elif path == "every column":
        columns, perturbed = every_column_perturbed(scores, epsilon, draw)
    else:
        raise ValueError(f"path must be one of {', '.join(PATHS)}; got {path!r}")
    values, positions = kth_largest_of(perturbed, k, compile)
    return values, columns.gather(0, positions)


def mean_of_one_hots(grad_output: torch.Tensor, kth_columns: torch.Tensor, num_classes: int,
                     labels: torch.Tensor | None = None) -> torch.Tensor:
    """``grad_output[i] · ((1/B) Σ_b e_{c_bi} - e_{y_i})``, the gradient ``[batch, n]`` of eq. 12 for
    the k-th largest columns ``c = kth_columns [B, batch]`` (less the labels' ``e_y`` if given)."""
    n_samples, batch = kth_columns.shape
    weights = (grad_output / n_samples).unsqueeze(1).expand(batch, n_samples)
    grad = grad_output.new_zeros(batch, num_classes).scatter_add_(1, kth_columns.T, weights)
    if labels is not None:
        grad.scatter_add_(1, labels.unsqueeze(1), -grad_output.unsqueeze(1))
    return grad


class _MeanOfKthLargest(torch.autograd.Function):
    """Eq. 11 forward and eq. 12 backward, given the k-th largest perturbed ``values`` and their
    ``columns`` (:func:`perturbed_kth_largest`): the perturbed scores are built outside autograd
    and their derivative in ``s`` is the identity, so the gradient is the average one-hot of the
    columns holding the k-th largest values."""

    @staticmethod
    def forward(ctx, scores, values, columns):
        ctx.save_for_backward(columns)
        ctx.num_classes = scores.shape[1]
        return values.mean(dim=0)

    @staticmethod
    def backward(ctx, grad_output):
        (columns,) = ctx.saved_tensors
        return mean_of_one_hots(grad_output, columns, ctx.num_classes), None, None


def perturbed_topk(
    scores: torch.Tensor,
    k: int,
    epsilon: float,
    n_samples: int,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
    compile: bool = False,
) -> torch.Tensor:
    r"""Monte Carlo smoothed K-th largest score ``top̂_{K,ε,B}(s)`` of G22 eq. 11, a ``[batch]`` tensor.

    .. math::
        \widehat{\mathrm{top}}_{K,ε,B}(s) = \frac{1}{B} \sum_{b=1}^{B} \mathrm{top}_K(s + ε Z_b),
        \qquad Z_b \sim \mathcal N(0, I),

    with gradient the average one-hot of the K-th largest coordinate of each perturbed vector,
    ``(1/B) Σ_b argtop_K(s + εZ_b)`` (G22 eq. 12; the worked example of §3.2 gives 2.47 and
    ``[1/3, 1/3, 1/3, 0]``). Fresh noise is drawn at every call, on the scores' device and in
    their dtype. ``ε = 0`` gives ``top_K(s)`` exactly (no noise is drawn). In eager mode on the
    CPU, above ``SMALL_PERTURBATION`` perturbed scores, noise is drawn only for the columns that
    can hold the K-th largest perturbed value (see :func:`candidates_perturbed`; the result
    differs from drawing every column with probability below ``n·6.2e-16`` per perturbed
    vector); elsewhere for every column (see :func:`perturbed_kth_largest`).

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
    compile : bool
        Select the K-th largest values with :func:`compiled_kth_largest` (same results, one
        kernel; the noise is drawn as without it; small inputs use ``torch.kthvalue`` either way).

    Examples
    --------
    G22's worked example (§3.2): the 2nd largest of ``s = (2.4, 2.6, 2.3, 0.5)`` under the paper's
    three noise vectors at ε = 1 is 2.47 on average, and its gradient spreads over three scores.

    >>> import torch
    >>> from topk.functional.perturbed import perturbed_topk
    >>> s = torch.tensor([[2.4, 2.6, 2.3, 0.5]], requires_grad=True)
    >>> z = torch.tensor([[[0.2, -0.1, 0.1, 0.3]], [[0.1, 0.1, -0.1, 0.1]], [[-0.1, -0.1, 0.1, -0.1]]])
    >>> value = perturbed_topk(s, 2, 1.0, 3, noise=z)
    >>> round(value.item(), 2)
    2.47
    >>> value.backward(); s.grad
    tensor([[0.3333, 0.3333, 0.3333, 0.0000]])
    """
    check_perturbation_inputs(scores, k, epsilon, n_samples, noise)
    return _MeanOfKthLargest.apply(scores, *perturbed_kth_largest(scores, k, epsilon, n_samples, generator, noise,
                                                                   compile))


def check_perturbation_inputs(scores: torch.Tensor, k: int, epsilon: float, n_samples: int,
                              noise: torch.Tensor | None) -> None:
    """Raise ``ValueError`` unless ``k``, ``ε``, ``B`` and the given ``noise`` fit ``scores``."""
    check_perturbation(epsilon, n_samples)
    batch, num_classes = scores.shape
    if not 1 <= k <= num_classes:
        raise ValueError(f"perturbed_topk needs 1 <= k <= n = {num_classes}, got k={k}")
    if noise is not None and noise.shape != (n_samples, batch, num_classes):
        raise ValueError(
            f"noise must have shape [n_samples, batch, classes] = {[n_samples, batch, num_classes]}, "
            f"got {list(noise.shape)}"
        )
