r"""Differentiable sorters restricted to the top ``k`` ranks, the relaxations that Petersen,
Kuehne, Borgelt and Deussen ("Differentiable Top-k Classification Learning", ICML 2022, P22)
put under their top-k cross-entropy (:mod:`topk.losses.diffsort`).

Each sorter relaxes the permutation that sorts ``s ∈ R^n`` in descending order into a matrix of
probabilities; only its first ``k`` rows are needed: the **relaxed top-k permutation matrix**
``P ∈ [0, 1]^{k×n}``, ``P[r, c] ≈ Pr(class c holds rank r + 1)``, rank 1 the largest score.
:func:`relaxed_topk` returns it as ``[B, k, n]``; :func:`weighted_topk` returns
``Σ_r w_r P[r, c]`` as ``[B, n]`` for fixed rank weights ``w``, which is all a loss needs and
costs ``k`` times less for the sorting networks.

- ``neuralsort``: NeuralSort (Grover, Wang, Zweig, Ermon, ICLR 2019), its relaxed sort:
  ``P[r, :] = softmax(((n + 1 - 2r) s - A_s 1) / τ)`` with ``A_s[i, j] = |s_i - s_j|``.
- ``softsort``: SoftSort (Prillo and Eisenschlos, ICML 2020), with the distance ``|·|``:
  ``P[r, :] = softmax(-|sort(s)_r - s| / τ)``, ``sort`` descending.
- ``odd_even``, ``bitonic`` and ``splitter_selection``: differentiable sorting (and selection)
  networks (Petersen, Borgelt, Kuehne, Deussen, ICML 2021 and ICLR 2022; P22). Each comparator on a pair of wires ``(lo, hi)`` (``lo``
  receives the smaller value, ``hi`` the larger) swaps its inputs with probability ``1 - α``,
  ``α = F(β (x_hi - x_lo))`` the probability that they are already in order:
  ``x_lo ← α x_lo + (1 - α) x_hi``, ``x_hi ← (1 - α) x_lo + α x_hi``. ``F`` is the
  ``distribution``: ``logistic`` ``σ(v)``, ``logistic_phi`` (the activation replacement trick,
  ART) ``σ(β d / (|d| + 1e-10)^λ)`` with ``d = x_hi - x_lo``, ``cauchy`` ``atan(v)/π + 1/2``,
  ``v = β d``. The relaxed permutation matrix is the product of the layers' 2×2 mixing matrices;
  its top-k rows are obtained by walking the layers backwards from the ``k`` output wires of the
  largest ranks, as P22's code does (the mixing matrices are symmetric), ``O(layers · n · k)``
  memory.

``β`` is the ``steepness`` (the inverse temperature, ``τ = 1/β`` for NeuralSort and SoftSort).
The networks' wires and comparators are those of P22's code (``difftopk`` 0.2.0 and ``diffsort``
0.2.0), so that the values match it: ``odd_even`` is the odd-even transposition network of ``n``
layers; ``bitonic`` is Batcher's bitonic network on ``2^⌈log2 n⌉`` wires of which the first
``2^⌈log2 n⌉ - n`` are dropped, every comparator touching a dropped wire being left out.
``splitter_selection`` is P22's *splitter selection network* (difftopk's
``sparse_splitter_selection_network``, Borgelt's construction after Parberry's pairwise sorting
network): a top-k *selection* network, whose ``k`` output wires of the largest ranks hold the
``k`` largest inputs in order (the other wires are left unsorted), built from splitter cascades
(:func:`splitter_selection_layers`); with ``k ≪ n`` it has far fewer comparators than a sorting
network, and it differs per ``k``.
Everything here runs on any device, reads no value on the host and compiles whole
(``torch.compile(fullgraph=True)``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from topk.functional.arguments import non_negative, positive

SORTERS = ("neuralsort", "softsort", "odd_even", "bitonic", "splitter_selection")
NETWORKS = ("odd_even", "bitonic", "splitter_selection")
DISTRIBUTIONS = ("logistic", "logistic_phi", "cauchy")
# Added to |x_hi - x_lo| before the power of the ART (P22's code): a tie gives α = 1/2.
ART_EPSILON = 1e-10

Layers = tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # per layer: (lo wires, hi wires)


def check_sorter(sorter: str, steepness: float, distribution: str, art_lambda: float) -> None:
    """Raise ``ValueError`` naming the argument unless the sorter's options are valid
    (``distribution`` and ``art_lambda`` are checked for every sorter, though only the networks
    use them)."""
    if sorter not in SORTERS:
        raise ValueError(f"sorter must be one of {', '.join(SORTERS)}, got {sorter!r}")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}")
    positive("steepness", steepness)
    non_negative("art_lambda", art_lambda)


# --- the networks' wiring ---------------------------------------------------------------------

def odd_even_layers(n: int) -> Layers:
    """The odd-even transposition network on ``n`` wires: ``n`` layers, layer ``l`` comparing
    wires ``(i, i + 1)`` for ``i = l mod 2, l mod 2 + 2, …`` (odd-even transposition sort).
    Each layer is ``(lo wires, hi wires)``; wire ``n - 1`` ends with the largest value."""
    layers = ((tuple(range(layer % 2, n - 1, 2)), tuple(range(layer % 2 + 1, n, 2))) for layer in range(n))
    return tuple((lo, hi) for lo, hi in layers if lo)  # n = 2: the second layer is empty


def bitonic_layers(n: int) -> Layers:
    """Batcher's bitonic sorting network, ascending, on ``width = 2^⌈log2 n⌉`` wires, with the
    first ``width - n`` wires dropped as in P22's code: a comparator that touches one of them is
    left out (the wire it would have met keeps its value), and the others are renumbered from 0.

    Stage ``block = 2, 4, …, width``, distance ``d = block/2, …, 1``: wire ``a`` with
    ``a & d = 0`` meets ``a + d``, the pair sorted ascending where ``a & block = 0`` and
    descending otherwise. Each layer is ``(lo wires, hi wires)``.
    """
    width = 1 << (n - 1).bit_length()
    dropped = width - n
    layers = []
    block = 2
    while block <= width:
        distance = block // 2
        while distance >= 1:
            pairs = []
            for a in range(dropped, width):
                if not a & distance:
                    lower, upper = a - dropped, a + distance - dropped
                    pairs.append((lower, upper) if not a & block else (upper, lower))
            layers.append((tuple(lo for lo, _ in pairs), tuple(hi for _, hi in pairs)))
            distance //= 2
        block *= 2
    return tuple(layers)


def splitter_cascade(lanes: Sequence[int]) -> list[list[tuple[int, int]]]:
    """The splitter cascade on ``lanes`` (``c`` of them) as layers of ``(winner, loser)`` lane
    pairs, the larger value going to the winner: ``⌈log2 c⌉`` layers, layer ``i`` comparing
    position ``j`` with ``j + d``, ``d = 2^(⌈log2 c⌉ - 1 - i)``, for ``j`` in the first half of
    each block of ``2d`` positions. Afterwards the value at position ``p`` is beaten by at least
    ``2^popcount(p) - 1`` others of the set (position 0 holds the largest)."""
    depth = (len(lanes) - 1).bit_length()
    layers = []
    for level in range(depth):
        d = 1 << (depth - 1 - level)
        layers.append([(lanes[j], lanes[j + d]) for start in range(0, len(lanes), 2 * d)
                       for j in range(start, min(start + d, len(lanes) - d))])
    return layers


def splitter_selection_layers(n: int, k: int) -> Layers:
    """P22's splitter selection network for the top ``k`` of ``n`` wires (difftopk's
    ``sparse_splitter_selection_network``; C. Borgelt's splitter selection networks): every lane
    starts with a known lower bound 0 on its rank (0 = the largest). Round after round, for each
    rank ``r = k - 1, …, 0`` not yet settled, the lanes whose bound is ``r`` (two or more) get a
    splitter cascade (:func:`splitter_cascade`), placed at the first layer all of them are free,
    and each raises its bound by what its position there proves; a lane whose bound reaches ``k``
    is out of the top ``k`` and left alone. Rounds stop when none adds a cascade: lanes
    ``0 … k - 1`` then hold the ``k`` largest, in order. Lane ``l`` is wire ``n - 1 - l`` (the
    last wire the largest); each layer is ``(lo wires, hi wires)``."""
    beaten_by = [(1 << bin(position).count("1")) - 1 for position in range(n)]
    bound, free, layers = [0] * n, [0] * n, []
    settled, added = -1, True
    while added:
        added = False
        for rank in range(k - 1, settled, -1):
            lanes = [lane for lane in range(n) if bound[lane] == rank]
            if len(lanes) < 2:
                continue
            cascade, start = splitter_cascade(lanes), max(free[lane] for lane in lanes)
            layers.extend([] for _ in range(start + len(cascade) - len(layers)))
            for offset, pairs in enumerate(cascade):
                layers[start + offset].extend(pairs)
            for position, lane in enumerate(lanes):
                bound[lane] += beaten_by[position]
                free[lane] = start + len(cascade)
            added = True
        settled += 1
    return tuple((tuple(n - 1 - loser for _, loser in pairs), tuple(n - 1 - winner for winner, _ in pairs))
                 for pairs in layers if pairs)


def network_layers(sorter: str, n: int, ranks: int) -> Layers:
    """The layers of network ``sorter`` on ``n`` wires that gets the top ``ranks`` right (the
    sorting networks get all ``n``; only the selection network depends on ``ranks``)."""
    if sorter == "odd_even":
        return odd_even_layers(n)
    if sorter == "bitonic":
        return bitonic_layers(n)
    return splitter_selection_layers(n, ranks)


def wired_ranks(sorter: str, n: int, k: int) -> int:
    """The ``ranks`` of :func:`network_layers` for the top ``k``: ``k`` for the selection
    network, ``n`` for a sorting network (one wiring whatever ``k``)."""
    return k if sorter == "splitter_selection" else n


def layer_permutations(sorter: str, n: int, ranks: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]:
    """Each layer of :func:`network_layers` as ``(order, inverse, pairs)``: ``order`` lists the
    layer's ``pairs`` lo wires, then their hi wires, then the untouched wires; ``inverse`` puts
    them back in wire order. Built once per ``(sorter, n, ranks)``; called, not traced, by
    ``torch.compile`` (:data:`DYNAMO_CONSTANT`)."""
    return _layer_permutations(sorter, n, ranks)


# What ``torch.compiler.assume_constant_result`` does to a function (it sets this attribute), done
# without it: the decorator imports torch._dynamo, the largest part of ``import train``, at every
# start of train.py and of each of its worker processes (docs/benchmarks.md, 'Code choices and
# the timings behind them').
# tests/test_losses_diffsort.py checks that the decorator still sets exactly this.
DYNAMO_CONSTANT = "_dynamo_marked_constant"
setattr(layer_permutations, DYNAMO_CONSTANT, True)


@functools.cache
def _layer_permutations(sorter: str, n: int, ranks: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]:
    permutations = []
    for lo, hi in network_layers(sorter, n, ranks):
        order = (*lo, *hi, *sorted(set(range(n)) - set(lo) - set(hi)))
        inverse = tuple(sorted(range(n), key=order.__getitem__))
        permutations.append((order, inverse, len(lo)))
    return tuple(permutations)


class Wiring(NamedTuple):
    """One layer of :func:`layer_permutations` as index tensors on a device."""

    order: torch.Tensor
    inverse: torch.Tensor
    pairs: int


_WIRINGS: dict[tuple[str, int, int, torch.device], tuple[Wiring, ...]] = {}


def network_wiring(sorter: str, n: int, k: int, device: torch.device) -> tuple[Wiring, ...]:
    """The layers of ``sorter``'s network on ``n`` wires for the top ``k`` as :class:`Wiring` on
    ``device``: built once per ``(sorter, n, device)`` (and ``k`` for the selection network) in
    eager mode, constants of the graph under ``torch.compile``."""
    ranks = wired_ranks(sorter, n, k)
    if torch.compiler.is_compiling():
        return _wiring(sorter, n, ranks, device)
    key = (sorter, n, ranks, torch.device(device))
    if key not in _WIRINGS:
        _WIRINGS[key] = _wiring(sorter, n, ranks, device)
    return _WIRINGS[key]


def _wiring(sorter: str, n: int, ranks: int, device: torch.device) -> tuple[Wiring, ...]:
    return tuple(Wiring(torch.tensor(order, dtype=torch.long, device=device),
                        torch.tensor(inverse, dtype=torch.long, device=device), pairs)
                 for order, inverse, pairs in layer_permutations(sorter, n, ranks))


# --- the networks' relaxation -----------------------------------------------------------------

def in_order_probability(difference: torch.Tensor, steepness: float, distribution: str,
                         art_lambda: float) -> torch.Tensor:
    """``α = F(β d)``, ``d = x_hi - x_lo``: the probability that a comparator leaves its pair
    as it is: the logistic sigmoid and its activation replacement trick (ART) of Petersen et al.,
    ICML 2021, and the Cauchy CDF of their monotonic networks, ICLR 2022."""
    if distribution == "logistic":
        return torch.sigmoid(steepness * difference)
    if distribution == "logistic_phi":
        return torch.sigmoid(steepness * difference / (difference.abs() + ART_EPSILON) ** art_lambda)
    if distribution == "cauchy":
        return torch.atan(steepness * difference) / math.pi + 0.5
    raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}")


def pair_up(x: torch.Tensor, wiring: Wiring) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The lo wires, the hi wires and the untouched wires of ``x`` (``[…, wires]``) for one layer."""
    untouched = x.shape[-1] - 2 * wiring.pairs
    paired = x.gather(-1, wiring.order.expand(x.shape))
    return paired.split([wiring.pairs, wiring.pairs, untouched], dim=-1)


def mix_pairs(lower: torch.Tensor, upper: torch.Tensor, untouched: torch.Tensor, wiring: Wiring,
              alpha: torch.Tensor) -> torch.Tensor:
    """The wires after one layer's relaxed swaps, in wire order (``[…, wires]``), from
    :func:`pair_up`'s parts: ``x_lo ← α x_lo + (1 - α) x_hi``, ``x_hi ← (1 - α) x_lo + α x_hi``.
    (Two gathers and a concatenation per layer, the wires on the last dimension: faster on a CPU
    than ``x[:, lo]`` and ``index_copy``, whose ``index_select`` on a middle dimension has a much
    slower backward; docs/benchmarks.md, 'Code choices and the timings behind them'.)"""
    shift = alpha * (upper - lower)
    mixed = torch.cat([upper - shift, lower + shift, untouched], dim=-1)
    return mixed.gather(-1, wiring.inverse.expand(mixed.shape))


def network_topk(scores: torch.Tensor, rank_weights: torch.Tensor, sorter: str, steepness: float,
                 distribution: str, art_lambda: float) -> torch.Tensor:
    r"""``Σ_r W[r, j] P[r, c]`` for a sorting network's relaxed top-k matrix ``P``: a
    ``[B, J, n]`` tensor for ``rank_weights`` ``W [k, J]`` (``W = I`` gives ``P``).

    The scores run forwards through the layers, each comparator's ``α`` kept; the weights start
    on the output wires of ranks ``1 … k`` (wires ``n - 1 … n - k``) and run backwards through the
    same layers: with ``M_l`` the (symmetric) mixing matrix of layer ``l``,
    ``Pᵀ W = M_1 ⋯ M_L E W``, ``E`` the top-k columns of the identity.
    """
    batch, n = scores.shape
    k, width = rank_weights.shape
    wirings = network_wiring(sorter, n, k, scores.device)
    values, alphas = scores, []
    for wiring in wirings:
        lower, upper, untouched = pair_up(values, wiring)
        alpha = in_order_probability(upper - lower, steepness, distribution, art_lambda)
        values = mix_pairs(lower, upper, untouched, wiring, alpha)
        alphas.append(alpha)
    seed = torch.cat([rank_weights.new_zeros(width, n - k), rank_weights.flip(0).T], dim=1)
    attribution = seed.expand(batch, width, n)
    for wiring, alpha in zip(reversed(wirings), reversed(alphas)):
        attribution = mix_pairs(*pair_up(attribution, wiring), wiring, alpha.unsqueeze(1))
    return attribution


# --- NeuralSort and SoftSort --------------------------------------------------------------------

def absolute_deviation_sums(s: torch.Tensor) -> torch.Tensor:
    """``(A_s 1)_c = Σ_l |s_c - s_l|`` per row of ``s [B, n]``, in ``O(n log n)``: with ``v`` the
    sorted row and ``S_p = v_0 + … + v_p``, position ``p`` gets ``(2p + 2 - n) v_p + S_{n-1} - 2 S_p``
    (its gradient is ``Σ_l sign(s_c - s_l)``, exact except at ties)."""
    n = s.shape[1]
    values, order = s.sort(dim=1)
    prefix = values.cumsum(dim=1)
    position = torch.arange(n, device=s.device, dtype=s.dtype)
    sums = (2 * position + 2 - n) * values + prefix[:, -1:] - 2 * prefix
    return torch.zeros_like(s).scatter(1, order, sums)


def neuralsort_topk(scores: torch.Tensor, k: int, steepness: float) -> torch.Tensor:
    r"""NeuralSort's relaxed top-k permutation matrix ``[B, k, n]`` (Grover et al. 2019):

    .. math:: \hat P[r, :] = \mathrm{softmax}\big(β\,((n + 1 - 2r)\,s - A_s 1)\big), \quad r = 1 … k.

    The rows are invariant to a shift of ``s``; it is centred first (no change but rounding).
    """
    n = scores.shape[1]
    s = scores - scores.detach().mean(dim=1, keepdim=True)
    ranks = torch.arange(1, k + 1, device=s.device, dtype=s.dtype)
    logits = (n + 1 - 2 * ranks)[:, None] * s[:, None, :] - absolute_deviation_sums(s)[:, None, :]
    return torch.softmax(steepness * logits, dim=-1)


def softsort_topk(scores: torch.Tensor, k: int, steepness: float) -> torch.Tensor:
    r"""SoftSort's relaxed top-k permutation matrix ``[B, k, n]`` (Prillo and Eisenschlos 2020):

    .. math:: \hat P[r, :] = \mathrm{softmax}\big(-β\,|s_{[r]} - s|\big), \quad r = 1 … k,

    ``s_[r]`` the r-th largest score (differentiable, as in the paper)."""
    largest = scores.topk(k, dim=1).values
    return torch.softmax(-steepness * (largest[:, :, None] - scores[:, None, :]).abs(), dim=-1)


# --- the entry points ---------------------------------------------------------------------------

def relaxed_topk(scores: torch.Tensor, k: int, sorter: str, steepness: float,
                 distribution: str = "cauchy", art_lambda: float = 0.25) -> torch.Tensor:
    """The relaxed top-k permutation matrix ``P [B, k, n]`` of ``scores [B, n]`` by ``sorter``
    (see the module docstring): ``P[b, r, c] ≈ Pr(class c holds rank r + 1)``."""
    check_sorter(sorter, steepness, distribution, art_lambda)
    if not 1 <= k <= scores.shape[1]:
        raise ValueError(f"relaxed_topk needs 1 <= k <= n = {scores.shape[1]}, got k={k}")
    if sorter == "neuralsort":
        return neuralsort_topk(scores, k, steepness)
    if sorter == "softsort":
        return softsort_topk(scores, k, steepness)
    identity = torch.eye(k, dtype=scores.dtype, device=scores.device)
    return network_topk(scores, identity, sorter, steepness, distribution, art_lambda)


def weighted_topk(scores: torch.Tensor, rank_weights: Sequence[float], sorter: str, steepness: float,
                  distribution: str = "cauchy", art_lambda: float = 0.25) -> torch.Tensor:
    """``Σ_r w_r P[r, c]``, a ``[B, n]`` tensor, for rank weights ``w = rank_weights`` (``k`` of
    them, rank 1 first) and the relaxed top-k matrix ``P`` of :func:`relaxed_topk`. A network
    carries the one weighted vector backwards instead of ``k`` columns."""
    check_sorter(sorter, steepness, distribution, art_lambda)
    k = len(rank_weights)
    if not 1 <= k <= scores.shape[1]:
        raise ValueError(f"weighted_topk needs 1 to n = {scores.shape[1]} rank weights, got {k}")
    # Filled on the device: torch.tensor(rank_weights, device=...) would copy from the host and,
    # on an accelerator, wait for the device at every call.
    weights = torch.stack([scores.new_full((), weight) for weight in rank_weights])
    if sorter in NETWORKS:
        return network_topk(scores, weights[:, None], sorter, steepness, distribution, art_lambda)[:, 0]
    matrix = neuralsort_topk(scores, k, steepness) if sorter == "neuralsort" else softsort_topk(scores, k, steepness)
    return (weights[:, None] * matrix).sum(dim=1)
