"""P22's top-k cross-entropy over differentiable sorters (topk/losses/diffsort.py) and the sorters
(topk/functional/sorting.py) against float64 brute force written from the papers' definitions:
each network run comparator by comparator in the order Batcher's recursive bitonic sort and the
odd-even transposition sort apply them (the splitter selection network in its layers' order, its
wiring checked on every 0-1 input: the zero-one principle), carrying the full relaxed permutation matrix forwards
(not the top-k rows backwards, as the library does); NeuralSort and SoftSort as explicit n×n
matrices; the loss from ``Pr(y ∈ top-k) = Σ_{r≤k} P[r, y]``. Values and gradients (autograd).
Parity with P22's own code (``difftopk``) is in tests/test_parity.py.
"""

from __future__ import annotations

import math

import pytest
import test_loss_edges as edges
import torch
import torch.nn.functional as F

from helpers import mixup_target, value_and_grad
from topk.functional.sorting import (
    DISTRIBUTIONS,
    DYNAMO_CONSTANT,
    NETWORKS,
    SORTERS,
    bitonic_layers,
    layer_permutations,
    network_wiring,
    odd_even_layers,
    relaxed_topk,
    splitter_selection_layers,
    weighted_topk,
)
from topk.losses import DiffSortTopKCrossEntropyLoss
from topk.losses.diffsort import TOP1_MODES
from topk.losses.weights import ClassWeighted
from topk.sync import sync_free

BETA, LAMBDA = 0.7, 0.5
P22_GRID = [[1, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0.5, 0, 0, 0, 0.5], [0.25, 0, 0, 0, 0.75],
            [0.1, 0, 0, 0, 0.9], [0.2, 0.2, 0.2, 0.2, 0.2]]
SHORT_P_K = [[0.3, 0.7], [0.5, 0.2, 0.3]]


def close(actual, expected, tolerance=1e-10):
    torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance)


def random_scores(batch, n, seed):
    generator = torch.Generator().manual_seed(seed)
    scores = 2 * torch.randn(batch, n, generator=generator, dtype=torch.float64)
    return scores, torch.randint(0, n, (batch,), generator=generator)


# --- brute force ----------------------------------------------------------------------------------

def in_order(d, distribution):
    """F(β d) of each distribution, from its formula."""
    if distribution == "logistic":
        return 1 / (1 + torch.exp(-BETA * d))
    if distribution == "logistic_phi":
        return 1 / (1 + torch.exp(-BETA * d / (d.abs() + 1e-10) ** LAMBDA))
    return torch.atan(BETA * d) / math.pi + 0.5


def odd_even_comparators(n):
    """(i, j, ascending) in the order applied: n rounds of neighbour exchanges."""
    return [(i, i + 1, True) for round_ in range(n) for i in range(round_ % 2, n - 1, 2)]


def bitonic_comparators(n):
    """Batcher's recursive bitonic sort on 2^⌈log2 n⌉ wires, the first 2^⌈log2 n⌉ - n dropped
    (P22's code: a comparator touching one is left out), the others renumbered from 0."""
    def merge(low, count, up):
        half = count // 2
        if half == 0:
            return []
        return [(i, i + half, up) for i in range(low, low + half)] + merge(low, half, up) + merge(low + half, half, up)

    def sort(low, count, up):
        half = count // 2
        if half == 0:
            return []
        return sort(low, half, True) + sort(low + half, half, False) + merge(low, count, up)

    width = 2 ** math.ceil(math.log2(n))
    dropped = width - n
    return [(i - dropped, j - dropped, up) for i, j, up in sort(0, width, True) if i >= dropped and j >= dropped]


def splitter_selection_comparators(n, k):
    """The library's splitter selection network for the top k, comparator by comparator."""
    return [(lo, hi, True) for los, his in splitter_selection_layers(n, k) for lo, hi in zip(los, his)]


def network_matrix(scores, comparators, distribution):
    """[B, n, n]: row r is the relaxed distribution of the class at rank r + 1 (rank 1 = the last wire)."""
    batch, n = scores.shape
    values = list(scores.T)  # wire w: [B]
    rows = [torch.zeros(batch, n, dtype=scores.dtype).index_fill(1, torch.tensor([w]), 1.0) for w in range(n)]
    for i, j, up in comparators:
        alpha = in_order(values[j] - values[i], distribution)
        small = alpha * values[i] + (1 - alpha) * values[j]
        large = (1 - alpha) * values[i] + alpha * values[j]
        small_row = alpha[:, None] * rows[i] + (1 - alpha[:, None]) * rows[j]
        large_row = (1 - alpha[:, None]) * rows[i] + alpha[:, None] * rows[j]
        values[i], values[j] = (small, large) if up else (large, small)
        rows[i], rows[j] = (small_row, large_row) if up else (large_row, small_row)
    return torch.stack(rows[::-1], dim=1)


def neuralsort_matrix(scores):
    """Grover et al. 2019 eq. 5 with explicit A_s, every rank."""
    n = scores.shape[1]
    spread = (scores[:, :, None] - scores[:, None, :]).abs().sum(dim=2)
    return torch.stack([torch.softmax(BETA * ((n + 1 - 2 * i) * scores - spread), dim=1)
                        for i in range(1, n + 1)], dim=1)


def softsort_matrix(scores):
    """Prillo and Eisenschlos 2020 eq. 1, every rank."""
    ranked = scores.sort(dim=1, descending=True).values
    return torch.softmax(-BETA * (ranked[:, :, None] - scores[:, None, :]).abs(), dim=2)


def brute_force_matrix(scores, sorter, distribution="cauchy", k=None):
    """Every rank's row (the selection network: its top ``k`` rows are the ones that mean anything)."""
    n = scores.shape[1]
    if sorter == "neuralsort":
        return neuralsort_matrix(scores)
    if sorter == "softsort":
        return softsort_matrix(scores)
    comparators = {"odd_even": odd_even_comparators, "bitonic": bitonic_comparators}.get(
        sorter, lambda n: splitter_selection_comparators(n, k))(n)
    return network_matrix(scores, comparators, distribution)


def floored(p):
    return -torch.log(p * (1 - 2e-7) + 1e-7)


def brute_force_loss(scores, labels, matrix, p_k, mode):
    """P22's loss from its definition, sample by sample, the batch mean."""
    losses = []
    for s, y, P in zip(scores, labels, matrix):
        in_top = [P[:k, y].sum() for k in range(1, len(p_k) + 1)]  # Pr(y in top-k)
        softmax_y = torch.softmax(s, dim=0)[y]
        rest = sum((p * t for p, t in zip(p_k[1:], in_top[1:])), torch.zeros((), dtype=s.dtype))
        if mode == "sort":
            losses.append(floored(p_k[0] * in_top[0] + rest))
        elif mode == "sm":
            losses.append(floored(p_k[0] * softmax_y + rest))
        else:
            losses.append(-p_k[0] * torch.log(softmax_y) + sum(p_k[1:]) * floored(rest))
    return torch.stack(losses).mean()


# --- the sorters --------------------------------------------------------------------------------

SORTING_NETWORKS = ("odd_even", "bitonic")  # every rank right: the full matrix is compared
MATRIX_CASES = ([(sorter, n, d) for sorter in SORTING_NETWORKS for n in range(2, 9) for d in DISTRIBUTIONS]
                + [("bitonic", n, d) for n in (11, 13) for d in DISTRIBUTIONS]
                + [(sorter, n, "cauchy") for sorter in ("neuralsort", "softsort") for n in range(2, 9)])


@pytest.mark.parametrize("sorter, n, distribution", MATRIX_CASES)
def test_relaxed_topk_matrix_matches_brute_force(sorter, n, distribution):
    scores, _ = random_scores(3, n, seed=n)
    probe = torch.randn(3, n, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    expected = value_and_grad(lambda s: brute_force_matrix(s, sorter, distribution), scores)
    for k in sorted({1, min(3, n), n}):
        ours = relaxed_topk(scores, k, sorter, BETA, distribution, LAMBDA)
        close(ours, expected[0][:, :k])
    ours = value_and_grad(lambda s: (relaxed_topk(s, n, sorter, BETA, distribution, LAMBDA) * probe).sum(), scores)
    reference = value_and_grad(lambda s: (brute_force_matrix(s, sorter, distribution) * probe).sum(), scores)
    close(ours, reference)
    weights = [0.5, 0.25, 0.125][:n]
    mass = value_and_grad(lambda s: weighted_topk(s, weights, sorter, BETA, distribution, LAMBDA), scores)
    close(mass[0], sum(w * expected[0][:, r] for r, w in enumerate(weights)))


@pytest.mark.parametrize("n", [*range(2, 9), 11, 13, 16, 100])
def test_splitter_selection_top_k_matches_brute_force(n):
    """Its top-k rows for k = 1, 3 and 5 (each k its own network), every distribution: values,
    gradients through a random probe, and the weighted rows of :func:`weighted_topk`."""
    scores, _ = random_scores(2, n, seed=n)
    for k in sorted({1, min(3, n), min(5, n)}):
        probe = torch.randn(2, k, n, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
        weights = [0.5, 0.25, 0.125, 0.0625, 0.03125][:k]
        for distribution in DISTRIBUTIONS if n < 100 else ["logistic_phi"]:
            def ours(s, k=k, distribution=distribution):
                return relaxed_topk(s, k, "splitter_selection", BETA, distribution, LAMBDA)

            def reference(s, k=k, distribution=distribution):
                return brute_force_matrix(s, "splitter_selection", distribution, k)[:, :k]

            close(value_and_grad(lambda s, f=ours, probe=probe: (f(s) * probe).sum(), scores),
                  value_and_grad(lambda s, f=reference, probe=probe: (f(s) * probe).sum(), scores))
            mass = weighted_topk(scores, weights, "splitter_selection", BETA, distribution, LAMBDA)
            close(mass, sum(w * reference(scores)[:, r] for r, w in enumerate(weights)))


@pytest.mark.parametrize("n", range(2, 13))
def test_splitter_selection_selects_the_top_k_of_every_0_1_input(n):
    """The zero-one principle (a comparator network puts the r-th largest of every input on a
    wire if it does so for every input of 0s and 1s): each of the 2^n inputs through the
    infinitely steep network (logistic, β = 10^4, α exactly 0 or 1; tied wires mix equal values),
    for every k: its top k values come out in descending order."""
    inputs = torch.tensor([[(i >> bit) & 1 for bit in range(n)] for i in range(2 ** n)], dtype=torch.float64)
    for k in range(1, n + 1):
        matrix = relaxed_topk(inputs, k, "splitter_selection", 1e4, "logistic")
        close(matrix @ inputs[:, :, None], inputs.sort(dim=1, descending=True).values[:, :k, None], 0.0)


@pytest.mark.parametrize("sorter", SORTERS)
@pytest.mark.parametrize("n", [3, 5, 6, 7, 8, 11, 13])
def test_steep_sorters_select_the_exact_top_k(sorter, n):
    scores = torch.randperm(n, generator=torch.Generator().manual_seed(n)).double()[None, :] * 0.1
    k = min(n, 5)
    relaxed = relaxed_topk(scores, k, sorter, 1e4, "logistic")
    close(relaxed, F.one_hot(scores.topk(k).indices, n).double(), 1e-8)


def test_the_network_wiring_is_marked_as_assume_constant_result_marks_a_function():
    """layer_permutations is marked a constant of torch.compile by hand (the decorator imports
    torch._dynamo, 1.1 s): the mark must stay the one the decorator sets."""
    def probe():
        return 0

    assert vars(torch.compiler.assume_constant_result(probe)) == {DYNAMO_CONSTANT: True}
    assert getattr(layer_permutations, DYNAMO_CONSTANT) is True


def test_networks_are_built_once_per_size_and_device():
    """A sorting network once per size whatever k; the selection network once per (size, k)."""
    assert network_wiring("bitonic", 12, 5, torch.device("cpu")) is network_wiring("bitonic", 12, 3, "cpu")
    selection = network_wiring("splitter_selection", 12, 5, "cpu")
    assert selection is network_wiring("splitter_selection", 12, 5, torch.device("cpu"))
    assert selection is not network_wiring("splitter_selection", 12, 3, "cpu")
    assert len(odd_even_layers(9)) == 9 and len(bitonic_layers(16)) == 10 and len(bitonic_layers(1000)) == 55
    comparators = [sum(len(lo) for lo, _ in splitter_selection_layers(n, 5)) for n in (16, 100, 1000)]
    assert comparators == [50, 385, 5085]  # bitonic: 80, 1,334 and 27,268
    for layers in (odd_even_layers(9), bitonic_layers(13), splitter_selection_layers(100, 5)):
        for lo, hi in layers:  # each layer's pairs touch distinct wires
            assert len(set(lo) | set(hi)) == 2 * len(lo)


def test_one_thousand_classes_give_a_doubly_substochastic_top_k():
    scores = torch.randn(2, 1000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    matrix = relaxed_topk(scores, 5, "bitonic", 1.0, "logistic_phi", 0.5)
    close(matrix.sum(dim=2), torch.ones(2, 5, dtype=torch.float64))
    assert bool((matrix.sum(dim=1) <= 1 + 1e-12).all()) and bool((matrix >= 0).all())


# --- the loss -----------------------------------------------------------------------------------

LOSS_CASES = ([(sorter, d, n) for sorter in NETWORKS for d in DISTRIBUTIONS for n in (6, 7, 8)]
              + [(sorter, "cauchy", n) for sorter in ("neuralsort", "softsort") for n in (4, 6, 8)])


# Every top1_mode with every p_K of P22's grid (K = 5) and shorter ones: a third of them per
# case, all of them over the three sizes of each sorter and distribution.
MODES_AND_P_KS = [(mode, p_k) for mode in TOP1_MODES for p_k in P22_GRID + SHORT_P_K]


@pytest.mark.parametrize("case", range(len(LOSS_CASES)), ids=["-".join(map(str, c)) for c in LOSS_CASES])
def test_loss_matches_brute_force(case):
    """Values and gradients."""
    sorter, distribution, n = LOSS_CASES[case]
    scores, labels = random_scores(4, n, seed=10 + case)
    scores.requires_grad_(True)
    for mode, p_k in MODES_AND_P_KS[case % 3::3]:
        if len(p_k) < n:
            matrix = brute_force_matrix(scores, sorter, distribution, k=len(p_k))
            expected = brute_force_loss(scores, labels, matrix, p_k, mode)
            (expected_grad,) = torch.autograd.grad(expected, scores, retain_graph=True)
            loss = DiffSortTopKCrossEntropyLoss(p_k, sorter, BETA, distribution, LAMBDA, mode)
            close(value_and_grad(loss, scores.detach(), labels), (expected.detach(), expected_grad))


@pytest.mark.parametrize("sorter", SORTERS)
def test_top_m_truncation_is_the_loss_of_the_kept_scores(sorter):
    """m = 6 of n = 10: the label's score first, then the 5 largest others in descending order."""
    scores, labels = random_scores(5, 10, seed=4)

    def explicit(s):
        rows = []
        for row, y in zip(s, labels.tolist()):
            others = sorted((c for c in range(10) if c != y), key=lambda c: -row[c].item())[:5]
            rows.append(torch.stack([row[y]] + [row[c] for c in others]))
        return torch.stack(rows)

    for mode in TOP1_MODES:
        truncated = DiffSortTopKCrossEntropyLoss(P22_GRID[5], sorter, BETA, "logistic_phi", LAMBDA, mode, m=6)
        plain = DiffSortTopKCrossEntropyLoss(P22_GRID[5], sorter, BETA, "logistic_phi", LAMBDA, mode)
        close(value_and_grad(truncated, scores, labels),
              value_and_grad(lambda s, plain=plain: plain(explicit(s), torch.zeros_like(labels)), scores))


@pytest.mark.parametrize("sorter", SORTERS)
def test_p_k_one_at_k_1_is_cross_entropy(sorter):
    """Exactly with smce; with sm up to P22's log floor (-log(p (1 - 2e-7) + 1e-7))."""
    scores, labels = random_scores(6, 9, seed=5)
    cross_entropy = value_and_grad(lambda s: F.cross_entropy(s, labels), scores)
    smce = DiffSortTopKCrossEntropyLoss([1, 0, 0, 0, 0], sorter, top1_mode="smce")
    close(value_and_grad(smce, scores, labels), cross_entropy, 1e-14)
    sm = DiffSortTopKCrossEntropyLoss([1, 0, 0, 0, 0], sorter, top1_mode="sm")
    torch.testing.assert_close(value_and_grad(sm, scores, labels), cross_entropy, rtol=0, atol=1e-4)


@pytest.mark.parametrize("sorter", SORTERS)
def test_soft_targets_give_the_expected_loss_over_labels(sorter):
    scores, _ = random_scores(6, 8, seed=6)
    generator = torch.Generator().manual_seed(7)
    target = mixup_target(generator, 6, 8)
    weights, labels = target.topk(2, dim=1)
    loss = DiffSortTopKCrossEntropyLoss(P22_GRID[3], sorter, BETA, "logistic", m=7)
    per_label = DiffSortTopKCrossEntropyLoss(P22_GRID[3], sorter, BETA, "logistic", m=7, reduction="none")
    expected = (weights[:, 0] * per_label(scores, labels[:, 0]) + weights[:, 1] * per_label(scores, labels[:, 1])).mean()
    close(loss(scores, target), expected)
    with sync_free():  # the path of an accelerator and of torch.compile (two labels a row)
        close(loss(scores, target), expected)


def test_class_weights_weigh_each_sample_by_its_label():
    scores, labels = random_scores(7, 6, seed=8)
    weights = torch.tensor([0.5, 2.0, 1.0, 0.0, 3.0, 1.5], dtype=torch.float64)
    per_sample = DiffSortTopKCrossEntropyLoss(sorter="softsort", reduction="none")(scores, labels)
    weighted = ClassWeighted(DiffSortTopKCrossEntropyLoss(sorter="softsort"), weights)(scores, labels)
    close(weighted, (weights[labels] * per_sample).sum() / weights[labels].sum())


@pytest.mark.parametrize("sorter", SORTERS)
def test_the_loss_contract_at_its_edges(sorter):
    """tests/test_loss_edges.py's checks (5 classes, so K = 3 here)."""
    loss = DiffSortTopKCrossEntropyLoss([0.5, 0.3, 0.2], sorter)
    for dtype in edges.INTEGER_DTYPES:
        edges.test_every_integer_label_dtype_gives_the_int64_value(loss, dtype)
    for shape in [(5,), (2, 3, 5), ()]:
        edges.test_scores_that_are_not_a_matrix_are_refused(loss, shape)
    edges.test_an_empty_batch_is_refused(loss)
    for bad in (math.nan, math.inf, -math.inf):
        edges.test_non_finite_scores_are_refused(loss, bad)
    edges.test_a_non_finite_probability_target_is_refused(loss)
    edges.test_scores_must_be_floating_and_labels_integer(loss)
    for dtype in edges.HALF_DTYPES:
        edges.test_half_precision_scores_are_computed_in_float32(loss, dtype)
        edges.test_half_precision_probability_targets_are_accepted(loss, dtype)
    edges.test_float64_scores_stay_float64(loss)


@pytest.mark.slow
def test_every_sorter_mode_and_truncation_compiles_whole():
    """tests/test_compile.py compiles the YAML's loss (bitonic, sm); here the other sorters, modes
    and top-m truncation, under ``torch.compile(fullgraph=True)``: no value is read on the host."""
    scores, labels = random_scores(6, 9, seed=11)
    losses = [DiffSortTopKCrossEntropyLoss(P22_GRID[3], sorter, BETA, "logistic_phi", LAMBDA, mode, m)
              for sorter, mode, m in zip(SORTERS, ["smce", "sort", "sm", "smce", "sm"], [None, 6, 6, None, 7])]

    def total(s, y):
        return sum(loss(s, y) for loss in losses)

    torch._dynamo.reset()
    compiled = value_and_grad(torch.compile(total, fullgraph=True, backend="aot_eager"), scores, labels)
    with sync_free():
        close(compiled, value_and_grad(total, scores, labels), 1e-12)


@pytest.mark.parametrize("arguments, message", [
    ({"sorter": "quicksort"}, "^sorter must be one of neuralsort, softsort, odd_even, bitonic, splitter_selection, "
     "got 'quicksort'$"),
    ({"distribution": "gaussian"}, "^distribution must be one of logistic, logistic_phi, cauchy"),
    ({"top1_mode": "ce"}, "^top1_mode must be one of sm, smce, sort, got 'ce'$"),
    ({"p_k": [0.5, 0.6]}, "^p_k must hold non-negative probabilities summing to 1"),
    ({"p_k": [-0.5, 1.5]}, "^p_k must hold non-negative probabilities summing to 1"),
    ({"p_k": [0.5, "a", 0.5]}, "^p_k must hold non-negative probabilities summing to 1"),
    ({"p_k": []}, "^p_k must be a non-empty list"),
    ({"p_k": "0.2"}, "^p_k must be a non-empty list"),
    ({"steepness": 0.0}, "^steepness must be a finite number > 0, got 0.0$"),
    ({"steepness": math.inf}, "^steepness must be a finite number > 0, got inf$"),
    ({"art_lambda": -0.5}, "^art_lambda must be a finite number >= 0, got -0.5$"),
    ({"m": 5}, r"^m must be None or a whole number above len\(p_k\) = 5"),
    ({"m": 6.5}, "^m must be None or a whole number above"),
    ({"m": True}, "^m must be None or a whole number above"),
    ({"reduction": "avg"}, "^reduction must be one of mean, sum, none, got 'avg'$"),
])
def test_bad_parameters_are_refused_in_one_sentence(arguments, message):
    with pytest.raises(ValueError, match=message):
        DiffSortTopKCrossEntropyLoss(**arguments)


def test_too_few_classes_are_refused_at_the_call():
    scores, labels = random_scores(2, 5, seed=9)
    with pytest.raises(ValueError, match=r"^p_k has 5 entries but the scores have only 5 classes"):
        DiffSortTopKCrossEntropyLoss()(scores, labels)
    with pytest.raises(ValueError, match=r"^m=8 must be below the class count 8 \(len\(p_k\) < m < n\)"):
        DiffSortTopKCrossEntropyLoss(m=8)(*random_scores(2, 8, seed=9))
    with pytest.raises(ValueError, match="relaxed_topk needs 1 <= k <= n = 5, got k=6"):
        relaxed_topk(scores, 6, "softsort", 1.0)
