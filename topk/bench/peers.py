"""Ours against the published codes (``make bench-losses``' head-to-head, see
:mod:`topk.bench.losses`): B18's smooth SVM as difftopk copies it, G22's noised losses (pytopk)
and P22's top-k cross-entropy (difftopk), timed alternately with cross-entropy on the same
scores, their peak memory, and their values and gradients on the same scores (the noised losses
given the same noise). The published codes are the ``peers`` extra (``pip install -e '.[peers]'``)."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.metadata
import io

import torch
import torch.nn.functional as F

from topk.bench.common import compose_loss, made_up_class_counts
from topk.bench.timing import alternate_medians, forward_backward, synchronizer
from topk.losses.margin import margins_for
from topk.losses.noised import noised_topk_hinge

BATCH = 256  # the loss benchmark's batch (B18 Table 3's): scores [BATCH, n]
# Head-to-head: our loss (conf/loss) -> (the package of the published code, what of it is compared).
PEER_LOSSES = {
    "smooth_svm": ("difftopk", "difftopk.SmoothHardTopKLoss"),
    "noised_bal": ("pytopk", "pytopk.BalNoisedTopK"),
    "noised_imbal": ("pytopk", "pytopk.ImbalNoisedTopK"),
    "diffsort_topk_ce": ("difftopk", "difftopk.TopKCrossEntropyLoss"),
}
# The sorters of difftopk's top-k cross-entropy that run without torch-sparse (its bitonic network
# needs it, and torch-sparse has no wheel for every torch), and the class counts they are timed at:
# its odd-even network takes about 2 s per forward+backward at n = 100 and batch 256.
DIFFTOPK_SORTERS = ("odd_even", "neuralsort", "softsort")
DIFFSORT_MAX_N = 100
# Class counts up to which the head-to-head also times batch 64 (the small-n case: fixed costs).
SMALL_N = 100
PEERS_HINT = "pip install -e '.[peers]' to include the published codes"
# On a CPU, difftopk's smooth SVM takes about 8 s per forward+backward at n = 100,000 and a batch
# of only 32 (k = 20), so the head-to-head uses that batch there; on a GPU it keeps 256.
CPU_BATCH_AT_100K = 32


def load_peers() -> dict:
    """The published implementations that are installed, ``{package name: module}``."""
    peers = {}
    for name in sorted({package for package, _ in PEER_LOSSES.values()}):
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # difftopk prints a torch-sparse notice
                peers[name] = importlib.import_module(name)
        except ImportError:
            continue
    return peers


def peer_versions(peers: dict) -> dict:
    return {name: importlib.metadata.version(name) for name in peers}


def peer_loss(name: str, ours, peers: dict, num_classes: int, device: torch.device):
    """The published loss with the parameters of ``ours`` (our config's loss)."""
    if name == "diffsort_topk_ce":
        return peers["difftopk"].TopKCrossEntropyLoss(
            ours.sorter, ours.steepness, list(ours.p_k), num_classes, m=ours.m, distribution=ours.distribution,
            art_lambda=ours.art_lambda, top1_mode=ours.top1_mode, device=device)
    if name == "smooth_svm":
        if ours.alpha != 1:
            raise ValueError(f"difftopk's smooth SVM has α = 1; our config has α = {ours.alpha}")
        return peers["difftopk"].SmoothHardTopKLoss(num_classes, ours.k, ours.tau, device=device)
    pytopk = peers["pytopk"]
    if name == "noised_bal":
        return pytopk.BalNoisedTopK(ours.k, ours.epsilon, n_sample=ours.n_samples)
    return pytopk.ImbalNoisedTopK(ours.k, ours.epsilon, ours.max_margin, made_up_class_counts(num_classes),
                                  scale=ours.scale, n_sample=ours.n_samples).to(device)


def same_noise_functions(name: str, ours, theirs, peers: dict, scores, labels):
    """Ours and theirs as functions of the scores that draw no noise: both get the same noise
    ``Z`` (pytopk's layout ``[batch, n, B]``; ours takes ``[B, batch, n]``), so that their values
    and gradients can be compared exactly. Ours is :func:`noised_topk_hinge`, the function the
    module calls; theirs pytopk's functional form, which its module calls."""
    pytopk = peers["pytopk"]
    batch, num_classes = scores.shape
    generator = torch.Generator(device=scores.device).manual_seed(3)
    z = torch.randn(batch, num_classes, ours.n_samples, generator=generator, device=scores.device)
    noise = z.permute(2, 0, 1)
    smoothed = pytopk.noised_topk._noised_topk
    k, epsilon, b = ours.k, ours.epsilon, ours.n_samples
    if name == "noised_bal":
        ones = scores.new_ones(num_classes)
        return (lambda s: noised_topk_hinge(s, labels, ones, k, epsilon, b, noise=noise).mean(),
                lambda s: pytopk.functional.bal_noised_topk_loss(s, labels, k, epsilon, smoothed, z))
    margins = margins_for(ours.margins, scores)
    return (lambda s: ours.scale * noised_topk_hinge(s, labels, margins, k, epsilon, b, noise=noise).mean(),
            lambda s: pytopk.functional.imbal_noised_topk_loss(
                s, labels, k, theirs.m_list, epsilon, smoothed, z, theirs.scale))


def value_and_grad(function, scores):
    leaf = scores.detach().clone().requires_grad_(True)
    value = function(leaf)
    value.backward()
    return float(value.detach()), leaf.grad


def agreement(name: str, ours, theirs, peers: dict, scores, labels) -> dict:
    """Both losses' values on the same scores, their difference and the largest difference of
    their gradients (the noised losses with the same noise)."""
    if name in ("noised_bal", "noised_imbal"):
        ours_fn, theirs_fn = same_noise_functions(name, ours, theirs, peers, scores, labels)
    else:
        ours_fn, theirs_fn = (lambda s: ours(s, labels)), (lambda s: theirs(s, labels))
    ours_value, ours_grad = value_and_grad(ours_fn, scores)
    theirs_value, theirs_grad = value_and_grad(theirs_fn, scores)
    return {"ours_value": ours_value, "theirs_value": theirs_value,
            "abs_value_difference": abs(ours_value - theirs_value),
            "max_abs_grad_difference": float((ours_grad - theirs_grad).abs().max())}


def resident_bytes(key: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_memory_bytes(step, device: torch.device) -> int | None:
    """Peak memory that one call of ``step`` adds to what is in use before it: on CUDA,
    ``torch.cuda.max_memory_allocated`` (tensors); on a Linux CPU the growth of the process's
    peak resident memory (``VmHWM``, reset through ``/proc/self/clear_refs`` after freed heap
    memory has been returned with ``malloc_trim``), which counts every allocation, torch's
    included, to the page. ``None`` where neither is available."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(device) - before
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return None
    before = resident_bytes("VmRSS")
    step()
    after = resident_bytes("VmHWM")
    return None if before is None or after is None else max(after - before, 0)


def head_to_head_batches(num_classes: int, device: torch.device) -> list[int]:
    """The batches the head-to-head times at ``num_classes``: 64 and 256 up to ``SMALL_N``, else
    256 (``CPU_BATCH_AT_100K`` on a CPU from 100,000 classes)."""
    if num_classes <= SMALL_N:
        return [64, BATCH]
    return [CPU_BATCH_AT_100K if device.type == "cpu" and num_classes >= 100_000 else BATCH]


def peer_cases(name: str, ks, num_classes: int):
    """``(row name, k, overrides)`` of the head-to-head rows of our loss ``name`` at
    ``num_classes``: each ``k`` below it, or for ``diffsort_topk_ce`` (whose K is its p_K's length)
    each sorter of ``DIFFTOPK_SORTERS`` up to ``DIFFSORT_MAX_N`` classes."""
    if name != "diffsort_topk_ce":
        return [(name, k, []) for k in ks if k < num_classes]
    if num_classes > DIFFSORT_MAX_N:
        return []
    return [(f"{name}, sorter={sorter}", None, [f"loss.sorter={sorter}"]) for sorter in DIFFTOPK_SORTERS]


def compare(name: str, k: int | None, scores, labels, peers: dict, budget: float, min_repeats: int,
            overrides=(), row_name: str | None = None) -> dict:
    """One head-to-head row: cross-entropy, ours and theirs timed alternately, peak memory,
    agreement of the values."""
    batch, num_classes = scores.shape
    ours = compose_loss(name, k, num_classes, overrides).to(scores.device)
    theirs = peer_loss(name, ours, peers, num_classes, scores.device)
    steps = [forward_backward(fn, scores, labels) for fn in (F.cross_entropy, ours, theirs)]
    ce, ours_seconds, theirs_seconds = alternate_medians(
        steps, budget, min_repeats, max_repeats=30, sync=synchronizer(scores.device))
    ours_peak, theirs_peak = (peak_memory_bytes(step, scores.device) for step in steps[1:])
    return {"loss": row_name or name, "published": PEER_LOSSES[name][1], "n": num_classes, "k": k, "batch": batch,
            "ce_seconds": ce, "ours_seconds": ours_seconds, "theirs_seconds": theirs_seconds,
            "ours_ratio_to_ce": ours_seconds / ce, "theirs_ratio_to_ce": theirs_seconds / ce,
            "speedup": theirs_seconds / ours_seconds,
            "ours_peak_bytes": ours_peak, "theirs_peak_bytes": theirs_peak,
            **agreement(name, ours, theirs, peers, scores, labels)}


def bench_head_to_head(ns, ks, budget, peers: dict, device=torch.device("cpu"), min_repeats: int = 3,
                       batches_for=head_to_head_batches) -> list[dict]:
    """Ours against every installed published code (``load_peers()``), float32 scores
    4·N(0,1) [batch, n]; ``batches_for(n, device)`` gives the batches (see ``SMALL_N``)."""
    rows = []
    generator = torch.Generator().manual_seed(2)
    for n in ns:
        for batch in batches_for(n, device):
            scores = (4 * torch.randn(batch, n, generator=generator)).to(device)
            labels = torch.randint(0, n, (batch,), generator=generator).to(device)
            for name, (package, _) in PEER_LOSSES.items():
                for row_name, k, overrides in (peer_cases(name, ks, n) if package in peers else []):
                    row = compare(name, k, scores, labels, peers, budget, min_repeats, overrides, row_name)
                    rows.append(row)
                    print(f"n={n:>6} {row_name:>12} k={k!s:>4} batch {batch}: CE {1e3 * row['ce_seconds']:.2f} ms, "
                          f"ours {1e3 * row['ours_seconds']:.2f} ms, theirs {1e3 * row['theirs_seconds']:.2f} ms, "
                          f"|Δ loss| {row['abs_value_difference']:.1e}", flush=True)
    return rows


def megabytes(count: int | None) -> str:
    return "n/a" if count is None else f"{count / 1e6:.1f}"


def head_to_head_markdown(rows, versions: dict, where: str) -> str:
    """The head-to-head table, or the one sentence that says how to include the published codes."""
    lines = [f"### Ours against the published codes (forward+backward, float32, {where})", ""]
    missing = sorted({package for package, _ in PEER_LOSSES.values()} - set(versions))
    if missing:
        lines += [f"{', '.join(missing)} not installed: {PEERS_HINT}.", ""]
    if not rows:
        return "\n".join(lines)
    memory = ("CUDA tensor memory (`torch.cuda.max_memory_allocated`)" if "CUDA" in where else
              "growth of the process's peak resident memory (Linux VmHWM)")
    lines += [
        "Published: " + ", ".join(f"{name} {version}" for name, version in sorted(versions.items()))
        + ". CE, ours and theirs timed alternately on the same scores 4·N(0,1), medians; "
        f"peak memory: what one forward+backward adds at its peak, {memory}, in MB; "
        "|Δ loss|: the two batch-mean values on the same scores (the noised losses given the same "
        "noise), max |Δ grad|: the largest difference of their gradients.", "",
        "| loss | published | n | k | batch | ours / theirs speed-up | CE (ms) | ours (ms, ×CE) | theirs (ms, ×CE) "
        "| peak memory ours / theirs (MB) | abs Δ loss | max abs Δ grad |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = list(PEER_LOSSES)
    for row in sorted(rows, key=lambda row: (order.index(row["loss"].split(",")[0]), row["n"], row["batch"],
                                             row["k"] or 0, row["loss"])):
        lines.append(
            f"| {row['loss']} | `{row['published']}` | {row['n']} | {'–' if row['k'] is None else row['k']} "
            f"| {row['batch']} | {row['speedup']:.{2 if row['speedup'] < 10 else 1}f}× "
            f"| {1e3 * row['ce_seconds']:.2f} "
            f"| {1e3 * row['ours_seconds']:.2f} ({row['ours_ratio_to_ce']:.1f}×) "
            f"| {1e3 * row['theirs_seconds']:.2f} ({row['theirs_ratio_to_ce']:.1f}×) "
            f"| {megabytes(row['ours_peak_bytes'])} / {megabytes(row['theirs_peak_bytes'])} "
            f"| {row['abs_value_difference']:.1e} | {row['max_abs_grad_difference']:.1e} |")
    return "\n".join(lines) + "\n"
