"""Speed and stability of every loss (B18 Tables 3–5, G22 Fig. 3 in spirit), and ours against
the published codes.

    python scripts/bench_losses.py              # or: make bench-losses
    python scripts/bench_losses.py --quick      # n = 1000 only, fewer repeats
    python scripts/bench_losses.py --device cuda
    python scripts/bench_losses.py --threads 2  # CPU threads (default 1)

Speed: forward+backward time of each loss in ``conf/loss/`` (with its config's parameters) on
float32 scores 4·N(0,1) [256, n] for n ∈ {10, 100, 1000, 10000} and k ∈ {1, 2, 5, 10, 20} (losses
without k once per n), each as a ratio to torch's cross-entropy timed alternately with it on the
same scores (so both see the same cache state and machine load); medians over repeats, one
thread unless ``--threads`` says otherwise; the noised losses also with ``loss.compile=true``
(timed after the call that compiles). The noised losses' cost depends on the spread of the scores relative to ε (noise is
drawn only where it can change the result), so the ratio at 4·N(0,1) is not a worst case. The
smooth SVM's cost depends on that spread too: at 4·N(0,1) and τ = 1 ``log_esp`` keeps every row
from linear space; rows spread much wider come from log space. Also B18's divide and conquer in
log space (``log_space_esp``, forward alone) against the summation algorithm up to n = 100,000
(k = 5). Stability: ``log_space_esp`` against the summation algorithm on scores/(kτ), k = 5,
for τ ∈ {10, 1, 0.1, 1e-2, 1e-3, 1e-4} in float32 and float64, on logits with ImageNet-like
spread (4·N(0,1), the label raised by 15: about -15 to +30).
Head-to-head (when ``pip install -e '.[peers]'`` has installed them): ``smooth_svm`` against
difftopk's copy of B18's published loss (``difftopk.SmoothHardTopKLoss``), ``noised_bal`` and
``noised_imbal`` against G22's ``pytopk.BalNoisedTopK`` and ``pytopk.ImbalNoisedTopK``, with our
configs' parameters, at n = 10 and 100 (batch 64 and 256) and n ∈ {1000, 10000, 100000} (batch
256; B18 Table 3's range) for k ∈ {1, 5, 20}; ``diffsort_topk_ce`` against P22's
``difftopk.TopKCrossEntropyLoss`` at n = 10 and 100 with each sorter difftopk runs as installed
(see ``DIFFTOPK_SORTERS``): cross-entropy, ours and theirs timed alternately in one loop, the peak memory of one
forward+backward of each, and the two values and gradients on the same scores (the noised losses
given the same noise). Writes ``outputs/bench/losses.json`` and ``outputs/bench/losses.md``.
``--device cuda`` (the default where CUDA is present) runs it all on the GPU, synchronising around
every timed call; the stability part runs on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import importlib.metadata
import inspect
import io
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate

from topk.functional.esp import log_esp_summation, log_space_esp
from topk.losses.margin import margins_for
from topk.losses.noised import noised_topk_hinge
from topk.schema.store import register

register()  # the config groups' schemas, which conf/ names in its defaults lists

ROOT = Path(__file__).resolve().parents[1]

BATCH = 256
TAUS = (10.0, 1.0, 0.1, 1e-2, 1e-3, 1e-4)

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


def no_sync() -> None:
    pass


def synchronizer(device: torch.device):
    """What to call before and after a timed call so that it measures the device's work."""
    return torch.cuda.synchronize if device.type == "cuda" else no_sync


def alternate_medians(steps, budget: float, min_repeats: int, max_repeats: int, sync=no_sync) -> list[float]:
    """Median wall times of the functions ``steps``, called in turn (one warm-up call each first)
    for repeats that fit in about ``budget`` seconds, so that all see the same machine state
    (caches, other load); ``sync`` is called around every timed call."""
    for step in steps:
        step()
    times = [[] for _ in steps]
    started = time.perf_counter()
    while len(times[0]) < max_repeats and (len(times[0]) < min_repeats or time.perf_counter() - started < budget):
        for step, step_times in zip(steps, times):
            sync()
            begin = time.perf_counter()
            step()
            sync()
            step_times.append(time.perf_counter() - begin)
    return [statistics.median(step_times) for step_times in times]


def median_seconds(step, budget: float, min_repeats: int = 3, max_repeats: int = 50, sync=no_sync) -> float:
    """Median wall time of ``step()`` over repeats that fit in about ``budget`` seconds."""
    return alternate_medians([step], budget, min_repeats, max_repeats, sync)[0]


def paired_median_seconds(baseline, step, budget: float, min_repeats: int = 5, max_repeats: int = 60, sync=no_sync):
    """Medians of ``baseline()`` and ``step()`` timed alternately; returns ``(baseline_seconds, step_seconds)``."""
    baseline_seconds, step_seconds = alternate_medians([baseline, step], budget, min_repeats, max_repeats, sync)
    return baseline_seconds, step_seconds


def forward_backward(loss_fn, scores, labels):
    def step():
        leaf = scores.detach().requires_grad_(True)
        loss_fn(leaf, labels).backward()

    return step


def build_loss(name: str, k: int | None, num_classes: int, more_overrides=()):
    overrides = [f"loss={name}"] + ([f"loss.k={k}"] if k is not None else []) + list(more_overrides)
    cfg = compose("train", overrides=overrides).loss
    extra = {}
    if "class_counts" in inspect.signature(get_class(cfg._target_)).parameters:
        extra["class_counts"] = class_counts(num_classes)
    return instantiate(cfg, **extra)


def class_counts(num_classes: int) -> list[int]:
    return [100 + 10 * c for c in range(num_classes)]


def loss_names() -> list[str]:
    return sorted(path.stem for path in (ROOT / "conf" / "loss").glob("*.yaml"))


def speed_cases(ks, n: int):
    """``(row name, loss, overrides, k)`` of every row of the speed table at ``n`` classes: each
    loss as configured at each ``k < n`` (once if it has no k), and the losses that have a
    ``compile`` switch (the noised ones) also with ``loss.compile=true``."""
    for name in loss_names():
        config = compose("train", overrides=[f"loss={name}"]).loss
        variants = [(name, [])] + ([(f"{name}, compile=true", ["loss.compile=true"])] if "compile" in config else [])
        for row_name, overrides in variants:
            for k in (ks if "k" in config else [None]):
                if k is None or k < n:
                    yield row_name, name, overrides, k


def bench_speed(ns, ks, budget, device=torch.device("cpu")) -> list[dict]:
    rows = []
    generator = torch.Generator().manual_seed(0)
    sync = synchronizer(device)
    for n in ns:
        scores = (4 * torch.randn(BATCH, n, generator=generator)).to(device)
        labels = torch.randint(0, n, (BATCH,), generator=generator).to(device)
        cross_entropy = forward_backward(F.cross_entropy, scores, labels)
        for row_name, name, overrides, k in speed_cases(ks, n):
            loss_fn = build_loss(name, k, n, overrides).to(device)
            ce_seconds, seconds = paired_median_seconds(
                cross_entropy, forward_backward(loss_fn, scores, labels), budget, sync=sync
            )
            rows.append({"loss": row_name, "n": n, "k": k, "seconds": seconds,
                         "ce_seconds": ce_seconds, "ratio_to_ce": seconds / ce_seconds})
            print(f"n={n:>6} {row_name:>28} k={k!s:>4}: {1e3 * seconds:9.2f} ms  x{seconds / ce_seconds:7.1f} CE", flush=True)
    return rows


def bench_esp_forward(ns, budget, device=torch.device("cpu")) -> list[dict]:
    rows = []
    generator = torch.Generator().manual_seed(1)
    sync = synchronizer(device)
    for n in ns:
        x = (torch.randn(BATCH, n, generator=generator) / 5).to(device)
        with torch.no_grad():
            log_space = median_seconds(lambda x=x: log_space_esp(x, 5), budget, sync=sync)
            summation = median_seconds(lambda x=x: log_esp_summation(x, 5), budget, sync=sync)
        rows.append({"n": n, "divide_conquer_log_seconds": log_space, "summation_seconds": summation,
                     "summation_over_divide_conquer": summation / log_space})
        print(f"log_space_esp forward n={n}: DC {1e3 * log_space:.2f} ms, summation {1e3 * summation:.2f} ms", flush=True)
    return rows


# --- ours against the published codes -------------------------------------------------------------

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
    return pytopk.ImbalNoisedTopK(ours.k, ours.epsilon, ours.max_margin, class_counts(num_classes),
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
    ours = build_loss(name, k, num_classes, overrides).to(scores.device)
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


def realistic_logits(batch=128, n=1000, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    scores = 4 * torch.randn(batch, n, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, n, (batch,), generator=generator)
    scores[torch.arange(batch), labels] += 15
    return scores


def bench_stability(k: int = 5) -> list[dict]:
    scores = realistic_logits()
    rows = []
    for tau in TAUS:
        reference = log_space_esp(scores / (k * tau), k)
        for dtype in (torch.float32, torch.float64):
            x = (scores / (k * tau)).to(dtype)
            for algorithm, function in (("divide_conquer_log", log_space_esp), ("summation", log_esp_summation)):
                with torch.no_grad():
                    value = function(x, k).double()
                finite = bool(torch.isfinite(value).all())
                error = float(((value - reference).abs() / reference.abs().clamp(min=1)).max()) if finite else None
                rows.append({"tau": tau, "algorithm": algorithm, "precision": str(dtype).removeprefix("torch."),
                             "stable": int(finite), "max_relative_error_vs_float64_log": error})
    return rows


def markdown(speed, esp_rows, stability, where: str = "1 thread") -> str:
    lines = [f"### Forward+backward time, ratio to cross-entropy (batch 256, float32, {where})", ""]
    ns = sorted({row["n"] for row in speed})
    header = "| loss | k | " + " | ".join(f"n = {n}" for n in ns) + " |"
    lines += [header, "|---|---|" + "---|" * len(ns)]
    keys = sorted({(row["loss"], row["k"]) for row in speed}, key=lambda key: (key[0], key[1] or 0))
    for loss, k in keys:
        cells = []
        for n in ns:
            match = [r for r in speed if (r["loss"], r["k"], r["n"]) == (loss, k, n)]
            cells.append(f"{match[0]['ratio_to_ce']:.1f}×" if match else "–")
        lines.append(f"| {loss} | {'–' if k is None else k} | " + " | ".join(cells) + " |")
    ce = {n: statistics.median(r["ce_seconds"] for r in speed if r["n"] == n) for n in ns}
    lines += ["", "Cross-entropy itself (median of its paired timings): "
              + ", ".join(f"{1e3 * ce[n]:.2f} ms at n = {n}" for n in ns), ""]
    lines += ["### `log_space_esp` forward, k = 5 (batch 256)", "", "| n | divide & conquer, log-space (ms) | summation (ms) | ratio |", "|---|---|---|---|"]
    for row in esp_rows:
        lines.append(f"| {row['n']} | {1e3 * row['divide_conquer_log_seconds']:.2f} | {1e3 * row['summation_seconds']:.2f} | "
                     f"{row['summation_over_divide_conquer']:.1f} |")
    lines += ["", "### Stability on realistic logits (k = 5; ✓ finite, ✗ overflow)", "",
              "| algorithm | precision | " + " | ".join(f"τ = {t:g}" for t in TAUS) + " |", "|---|---|" + "---|" * len(TAUS)]
    for algorithm in ("summation", "divide_conquer_log"):
        for precision in ("float32", "float64"):
            cells = [("✓" if r["stable"] else "✗") for t in TAUS for r in stability
                     if (r["tau"], r["algorithm"], r["precision"]) == (t, algorithm, precision)]
            lines.append(f"| {algorithm} | {precision} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"CUDA, {torch.cuda.get_device_name(device)}"
    return f"CPU, {threads_text()}"


def threads_text() -> str:
    threads = torch.get_num_threads()
    return f"{threads} thread{'s' if threads > 1 else ''}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="n = 1000 only and short timing budgets")
    parser.add_argument("--device", default=default_device(), help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: steadier timings)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    ns = [1000] if args.quick else [10, 100, 1000, 10000]
    ks = [5, 20] if args.quick else [1, 2, 5, 10, 20]
    budget = 0.3 if args.quick else 1.0
    peers = load_peers()
    if len(peers) < len({package for package, _ in PEER_LOSSES.values()}):
        print(f"{PEERS_HINT}.", flush=True)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        speed = bench_speed(ns, ks, budget, device)
        head_to_head = bench_head_to_head([1000] if args.quick else [10, 100, 1000, 10000, 100000],
                                          [5] if args.quick else [1, 5, 20], budget, peers, device)
    esp_rows = bench_esp_forward([1000] if args.quick else [100, 1000, 10000, 100000], budget, device)
    stability = bench_stability()
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"batch": BATCH, "threads": args.threads, "torch": torch.__version__, "device": describe(device),
              "speed": speed, "log_esp_forward": esp_rows, "stability": stability,
              "peers": peer_versions(peers), "head_to_head": head_to_head}
    (args.out / "losses.json").write_text(json.dumps(result, indent=2) + "\n")
    table = (markdown(speed, esp_rows, stability, threads_text() if device.type == "cpu" else describe(device))
             + "\n" + head_to_head_markdown(head_to_head, peer_versions(peers), describe(device)))
    (args.out / "losses.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
