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

import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose

from topk.bench.common import BENCH_OUT, compose_loss, conf_options, configs, parser, write_outputs
from topk.bench.peers import (
    BATCH,
    PEER_LOSSES,
    PEERS_HINT,
    bench_head_to_head,
    head_to_head_markdown,
    load_peers,
    peer_versions,
)
from topk.bench.timing import forward_backward, median_seconds, paired_median_seconds, synchronizer
from topk.functional.esp import log_esp_summation, log_space_esp

TAUS = (10.0, 1.0, 0.1, 1e-2, 1e-3, 1e-4)


def speed_cases(ks, n: int):
    """``(row name, loss, overrides, k)`` of every row of the speed table at ``n`` classes: each
    loss as configured at each ``k < n`` (once if it has no k), and the losses that have a
    ``compile`` switch (the noised ones) also with ``loss.compile=true``."""
    for name in conf_options("loss"):
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
            if "loss.compile=true" in overrides:  # compiled afresh: the rows' many k and n would pass
                torch._dynamo.reset()  # dynamo's recompile limit, a hard failure under fullgraph
            loss_fn = compose_loss(name, k, n, overrides).to(device)
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
    command = parser(__doc__)
    command.add_argument("--quick", action="store_true", help="n = 1000 only and short timing budgets")
    command.add_argument("--device", default=default_device(), help="cpu or cuda (default: cuda if available)")
    command.add_argument("--out", type=Path, default=BENCH_OUT)
    command.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: steadier timings)")
    args = command.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    ns = [1000] if args.quick else [10, 100, 1000, 10000]
    ks = [5, 20] if args.quick else [1, 2, 5, 10, 20]
    budget = 0.3 if args.quick else 1.0
    peers = load_peers()
    if len(peers) < len({package for package, _ in PEER_LOSSES.values()}):
        print(f"{PEERS_HINT}.", flush=True)
    with configs():
        speed = bench_speed(ns, ks, budget, device)
        head_to_head = bench_head_to_head([1000] if args.quick else [10, 100, 1000, 10000, 100000],
                                          [5] if args.quick else [1, 5, 20], budget, peers, device)
    esp_rows = bench_esp_forward([1000] if args.quick else [100, 1000, 10000, 100000], budget, device)
    stability = bench_stability()
    result = {"batch": BATCH, "threads": args.threads, "torch": torch.__version__, "device": describe(device),
              "speed": speed, "log_esp_forward": esp_rows, "stability": stability,
              "peers": peer_versions(peers), "head_to_head": head_to_head}
    table = (markdown(speed, esp_rows, stability, threads_text() if device.type == "cpu" else describe(device))
             + "\n" + head_to_head_markdown(head_to_head, peer_versions(peers), describe(device)))
    write_outputs(args.out, "losses", result, table)
    print(table)
    return 0
