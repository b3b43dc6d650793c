"""Parity with the published codes (the ``peers`` extra, ``pip install -e '.[peers]'``; skipped
without it): G22's ``pytopk`` for the noised losses, given the same noise, ``difftopk``'s copy
of B18's smooth top-k SVM loss, and P22's own ``difftopk`` for its top-k cross-entropy and its
sorters, values and gradients in float64. Where they differ, the brute-force definition decides
(``tests/test_smooth_svm.py``, ``tests/test_losses_diffsort.py``): difftopk's gradient at k = 1."""

from __future__ import annotations

import contextlib
import io
import itertools
from types import SimpleNamespace

import pytest
import torch

from helpers import value_and_grad
from topk.functional.sorting import DISTRIBUTIONS, NETWORKS, relaxed_topk
from topk.losses import DiffSortTopKCrossEntropyLoss, NoisedImbalancedTopKHingeLoss, SmoothTopKSVM
from topk.losses.diffsort import TOP1_MODES
from topk.losses.margin import margins_for
from topk.losses.noised import noised_topk_hinge

pytopk = pytest.importorskip("pytopk")
with contextlib.redirect_stdout(io.StringIO()):  # difftopk prints a torch-sparse notice
    difftopk = pytest.importorskip("difftopk")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # difftopk's autograd Function

CASES = [(n, k) for n in (10, 100) for k in (1, 2, 5)]


def assert_agree(ours, theirs):
    """Values to float64 rounding; gradients to 1e-7 relative: pytopk's backward rounds its averaging
    weights to float32 (relative differences of 6e-8, float32's rounding)."""
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-7, atol=1e-8)


def scores_labels_noise(n, k, n_samples, seed=0):
    generator = torch.Generator().manual_seed(seed + 100 * n + k)
    scores = 2 * torch.randn(16, n, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, n, (16,), generator=generator)
    noise = torch.randn(16, n, n_samples, generator=generator, dtype=torch.float64)  # pytopk's layout
    return scores, labels, noise


@pytest.mark.parametrize("n, k", CASES)
def test_noised_balanced_loss_equals_pytopk_on_the_same_noise(n, k):
    scores, labels, noise = scores_labels_noise(n, k, 10)
    smoothed = pytopk.noised_topk._noised_topk
    ones = torch.ones(n, dtype=torch.float64)
    ours = value_and_grad(lambda s: noised_topk_hinge(s, labels, ones, k, 0.2, 10, noise=noise.permute(2, 0, 1)).mean(), scores)
    theirs = value_and_grad(lambda s: pytopk.functional.bal_noised_topk_loss(s, labels, k, 0.2, smoothed, noise), scores)
    assert_agree(ours, theirs)


@pytest.mark.parametrize("n, k", CASES)
def test_noised_imbalanced_loss_equals_pytopk_on_the_same_noise(n, k):
    scores, labels, noise = scores_labels_noise(n, k, 5, seed=1)
    counts = [100 + 10 * c for c in range(n)]
    ours_module = NoisedImbalancedTopKHingeLoss(k, 0.01, 5, 0.2, 60.0, class_counts=counts)
    theirs_module = pytopk.ImbalNoisedTopK(k, 0.01, 0.2, counts, scale=60.0, n_sample=5)
    margins = margins_for(ours_module.margins, scores)
    torch.testing.assert_close(margins, theirs_module.m_list.to(margins), rtol=1e-6, atol=1e-7)
    smoothed = pytopk.noised_topk._noised_topk

    def ours(s):
        return 60.0 * noised_topk_hinge(s, labels, margins, k, 0.01, 5, noise=noise.permute(2, 0, 1)).mean()

    def theirs(s):
        return pytopk.functional.imbal_noised_topk_loss(s, labels, k, margins, 0.01, smoothed, noise, 60.0)

    assert_agree(value_and_grad(ours, scores), value_and_grad(theirs, scores))


@pytest.mark.parametrize("n, k", [case for case in CASES if case[1] > 1])
def test_smooth_svm_equals_difftopk(n, k):
    scores, labels, _ = scores_labels_noise(n, k, 1, seed=2)
    ours = value_and_grad(lambda s: SmoothTopKSVM(k, tau=1.0)(s, labels), scores)
    theirs = value_and_grad(lambda s: difftopk.SmoothHardTopKLoss(n, k, 1.0)(s, labels), scores)
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-9)


def test_at_k_1_difftopk_gradient_is_off_and_ours_is_the_definitions():
    """B18 eq. 10 at k = 1 is τ·softplus(α/τ + log Σ_{j≠y} e^{s_j/τ} - s_y/τ); its float64 autograd
    is the reference. difftopk's custom backward gives a different gradient (its values agree)."""
    scores, labels, _ = scores_labels_noise(20, 1, 1, seed=3)

    def definition(s):
        rivals = s.scatter(1, labels[:, None], -torch.inf)
        margin = 1.0 + torch.logsumexp(rivals, 1) - s.gather(1, labels[:, None]).squeeze(1)
        return torch.nn.functional.softplus(margin).mean()

    reference = value_and_grad(definition, scores)
    ours = value_and_grad(lambda s: SmoothTopKSVM(1, tau=1.0)(s, labels), scores)
    theirs = value_and_grad(lambda s: difftopk.SmoothHardTopKLoss(20, 1, 1.0)(s, labels), scores)
    torch.testing.assert_close(ours, reference, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(theirs[0], reference[0], rtol=1e-9, atol=1e-9)
    assert (theirs[1] - reference[1]).abs().max() > 1e-3


# --- P22's top-k cross-entropy and its sorters (difftopk.TopKCrossEntropyLoss) --------------------
#
# difftopk computes in float32 whatever the scores' dtype: its networks are float32 matrices
# (torch.from_numpy(...).float()), its top-k attribution starts from torch.eye in the default dtype
# and its NeuralSort builds torch.FloatTensor constants (float64 scores raise a dtype error there).
# The fixture below makes it compute in float64: the default dtype float64, the networks converted,
# NeuralSort given a float64 FloatTensor. P22's experiments use difftopk's sparse bitonic network
# ("bitonic") and its splitter selection network ("splitter_selection", sparse only), which need
# torch-sparse's spmm: the fixture supplies the same product on a dense matrix.
# "bitonic__non_sparse" is the same bitonic network, dense.

P22_GRID = [[1, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0.5, 0, 0, 0, 0.5], [0.25, 0, 0, 0, 0.75],
            [0.1, 0, 0, 0, 0.9], [0.2, 0.2, 0.2, 0.2, 0.2]]
BETA = 0.7
# difftopk's method -> our sorter
DIFFTOPK_SORTERS = {"bitonic": "bitonic", "bitonic__non_sparse": "bitonic", "odd_even": "odd_even",
                    "splitter_selection": "splitter_selection", "neuralsort": "neuralsort", "softsort": "softsort"}
SPARSE = ("bitonic", "splitter_selection")  # difftopk's sparse networks
# difftopk's sparse network warns about torch's sparse tensors and a deprecated transpose.
quiet_difftopk = pytest.mark.filterwarnings("ignore::UserWarning:difftopk")


class _Float64Torch:
    """torch as difftopk's NeuralSort module sees it, its FloatTensor float64."""

    FloatTensor = torch.DoubleTensor

    def __getattr__(self, name):
        return getattr(torch, name)


def _dense_spmm(index, value, rows, columns, matrix):
    """torch_sparse.spmm: the rows x columns matrix with ``value`` at ``index`` (repeats summed) times ``matrix``."""
    dense = value.new_zeros(rows, columns).index_put((index[0], index[1]), value, accumulate=True)
    return dense @ matrix.to(value.dtype)


@pytest.fixture
def difftopk_float64(monkeypatch):
    monkeypatch.setattr(difftopk.neuralsort, "torch", _Float64Torch())
    monkeypatch.setattr(difftopk.functional, "torch_sparse", SimpleNamespace(spmm=_dense_spmm), raising=False)
    monkeypatch.setattr(difftopk.functional, "SPARSE_INSTALLED", True)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def in_float64(network):
    network.sorting_network = [[t.double() if t.is_floating_point() else t for t in layer]
                               for layer in network.sorting_network]
    return network


def difftopk_matrix(method, scores, k, distribution):
    """difftopk's top-k matrix laid out as ours, ``[B, k, n]`` rank 1 first (theirs is
    ``[B, n, k]``, rank 1 last)."""
    if method == "neuralsort":
        matrix = difftopk.NeuralSort(tau=1 / BETA)(scores)[:, :, -k:]
    elif method == "softsort":
        matrix = difftopk.SoftSort(tau=1 / BETA)(-scores).transpose(-2, -1)[:, :, -k:]
    else:
        sorter = DIFFTOPK_SORTERS[method]
        network = difftopk.DiffTopkNet(sorter, scores.shape[1], k, sparse=method in SPARSE, steepness=BETA,
                                       art_lambda=0.5, distribution=distribution)
        matrix = in_float64(network)(scores)[1]
    return matrix.flip(-1).transpose(1, 2)


def scores_and_labels(n, seed):
    generator = torch.Generator().manual_seed(seed)
    return 2 * torch.randn(8, n, generator=generator, dtype=torch.float64), torch.randint(0, n, (8,), generator=generator)


def distributions_for(sorter, n):
    """The networks' distributions (P22's logistic_phi alone from n = 100, where difftopk's dense
    networks take a fraction of a second a call); one placeholder for NeuralSort and SoftSort."""
    if sorter not in NETWORKS:
        return ["cauchy"]
    return DISTRIBUTIONS if n < 100 else ["logistic_phi"]


@quiet_difftopk
@pytest.mark.parametrize("n", [5, 8, 13, 100])
@pytest.mark.parametrize("method", sorted(DIFFTOPK_SORTERS))
def test_relaxed_topk_equals_difftopk(difftopk_float64, method, n):
    scores, _ = scores_and_labels(n, seed=n)
    probe = torch.randn(8, 5, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sorter = DIFFTOPK_SORTERS[method]
    for distribution in distributions_for(sorter, n):
        ours = value_and_grad(lambda s: (relaxed_topk(s, 5, sorter, BETA, distribution, 0.5) * probe).sum(), scores)  # noqa: B023
        theirs = value_and_grad(lambda s: (difftopk_matrix(method, s, 5, distribution) * probe).sum(), scores)  # noqa: B023
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


# Sizes: P22's CIFAR-100 (n = 100, all sorted) and ImageNet (m = 16) settings and two small ones
# (11: bitonic drops 5 of 16 wires).
CE_CASES = [(method, n, m) for method in sorted(DIFFTOPK_SORTERS)
            for n, m in [(8, None), (11, None), (100, 16), (100, None)]]


@quiet_difftopk
@pytest.mark.parametrize("method, n, m", CE_CASES)
def test_diffsort_topk_ce_equals_difftopk(difftopk_float64, method, n, m):
    """Every top1_mode with every p_K of P22's grid (one p_K per mode at n = 100 without m), the
    networks' distributions in turn; values and gradients (the batch mean, as difftopk's)."""
    scores, labels = scores_and_labels(n, seed=2 * n + (m or 0))
    sorter = DIFFTOPK_SORTERS[method]
    settings = list(itertools.product(TOP1_MODES, P22_GRID))
    if n == 100 and m is None:
        settings = settings[::7]
    for (mode, p_k), distribution in zip(settings, itertools.cycle(distributions_for(sorter, n=0))):
        ours = DiffSortTopKCrossEntropyLoss(p_k, sorter, BETA, distribution, 0.5, mode, m)
        theirs = difftopk.TopKCrossEntropyLoss(method, BETA, p_k, n, m=m, distribution=distribution,
                                               art_lambda=0.5, top1_mode=mode)
        if hasattr(theirs, "top_k_net"):
            in_float64(theirs.top_k_net)
        torch.testing.assert_close(value_and_grad(ours, scores, labels), value_and_grad(theirs, scores, labels),
                                   rtol=1e-10, atol=1e-12)
