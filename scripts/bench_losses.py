"""Speed and stability of every loss (B18 Tables 3–5, G22 Fig. 3 in spirit).

    python scripts/bench_losses.py              # or: make bench-losses
    python scripts/bench_losses.py --quick      # n = 1000 only, fewer repeats

Speed: forward+backward time of each loss in ``conf/loss/`` (with its config's parameters) on
float32 scores 4·N(0,1) [256, n] for n ∈ {100, 1000, 10000} and k ∈ {1, 2, 5, 10, 20} (losses
without k once per n), each as a ratio to torch's cross-entropy timed alternately with it on the
same scores (so both see the same cache state and machine load); medians over repeats, one
thread. The noised losses' cost depends on the spread of the scores relative to ε (noise is
drawn only where it can change the result), so the ratio at 4·N(0,1) is not a worst case. Also ``log_esp`` forward alone against the summation algorithm up to n = 100,000 (k = 5).
Stability: ``log_esp`` (divide and conquer in log-space) against the summation algorithm on
scores/(kτ), k = 5, for τ ∈ {10, 1, 0.1, 1e-2, 1e-3, 1e-4} in float32 and float64, on logits with
ImageNet-like spread (4·N(0,1), the label raised by 15: about -15 to +30). Writes
``outputs/bench/losses.json`` and ``outputs/bench/losses.md``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate

from topk.functional.esp import log_esp, log_esp_summation

ROOT = Path(__file__).resolve().parents[1]

BATCH = 256
TAUS = (10.0, 1.0, 0.1, 1e-2, 1e-3, 1e-4)


def median_seconds(step, budget: float, min_repeats: int = 3, max_repeats: int = 50) -> float:
    """Median wall time of ``step()`` over repeats that fit in about ``budget`` seconds."""
    step()  # warm-up
    times = []
    started = time.perf_counter()
    while len(times) < max_repeats and (len(times) < min_repeats or time.perf_counter() - started < budget):
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def paired_median_seconds(baseline, step, budget: float, min_repeats: int = 5, max_repeats: int = 60):
    """Medians of ``baseline()`` and ``step()`` timed alternately, so that both see the same
    machine state (caches, other load); returns ``(baseline_seconds, step_seconds)``."""
    baseline()
    step()
    baseline_times, step_times = [], []
    started = time.perf_counter()
    while len(step_times) < max_repeats and (
        len(step_times) < min_repeats or time.perf_counter() - started < budget
    ):
        for function, times in ((baseline, baseline_times), (step, step_times)):
            begin = time.perf_counter()
            function()
            times.append(time.perf_counter() - begin)
    return statistics.median(baseline_times), statistics.median(step_times)


def forward_backward(loss_fn, scores, labels):
    def step():
        leaf = scores.detach().requires_grad_(True)
        loss_fn(leaf, labels).backward()

    return step


def build_loss(name: str, k: int | None, num_classes: int):
    overrides = [f"loss={name}"] + ([f"loss.k={k}"] if k is not None else [])
    cfg = compose("train", overrides=overrides).loss
    extra = {}
    if "class_counts" in inspect.signature(get_class(cfg._target_)).parameters:
        extra["class_counts"] = [100 + 10 * c for c in range(num_classes)]
    return instantiate(cfg, **extra)


def loss_names() -> list[str]:
    return sorted(path.stem for path in (ROOT / "conf" / "loss").glob("*.yaml"))


def has_k(name: str) -> bool:
    return "k" in compose("train", overrides=[f"loss={name}"]).loss


def bench_speed(ns, ks, budget) -> list[dict]:
    rows = []
    generator = torch.Generator().manual_seed(0)
    for n in ns:
        scores = 4 * torch.randn(BATCH, n, generator=generator)
        labels = torch.randint(0, n, (BATCH,), generator=generator)
        cross_entropy = forward_backward(F.cross_entropy, scores, labels)
        for name in loss_names():
            for k in (ks if has_k(name) else [None]):
                if k is not None and k >= n:
                    continue
                loss_fn = build_loss(name, k, n)
                ce_seconds, seconds = paired_median_seconds(
                    cross_entropy, forward_backward(loss_fn, scores, labels), budget
                )
                rows.append({"loss": name, "n": n, "k": k, "seconds": seconds,
                             "ce_seconds": ce_seconds, "ratio_to_ce": seconds / ce_seconds})
                print(f"n={n:>6} {name:>16} k={k!s:>4}: {1e3 * seconds:9.2f} ms  x{seconds / ce_seconds:7.1f} CE", flush=True)
    return rows


def bench_esp_forward(ns, budget) -> list[dict]:
    rows = []
    generator = torch.Generator().manual_seed(1)
    for n in ns:
        x = torch.randn(BATCH, n, generator=generator) / 5
        with torch.no_grad():
            log_space = median_seconds(lambda x=x: log_esp(x, 5), budget)
            summation = median_seconds(lambda x=x: log_esp_summation(x, 5), budget)
        rows.append({"n": n, "divide_conquer_log_seconds": log_space, "summation_seconds": summation,
                     "summation_over_divide_conquer": summation / log_space})
        print(f"log_esp forward n={n}: DC {1e3 * log_space:.2f} ms, summation {1e3 * summation:.2f} ms", flush=True)
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
        reference = log_esp(scores / (k * tau), k)
        for dtype in (torch.float32, torch.float64):
            x = (scores / (k * tau)).to(dtype)
            for algorithm, function in (("divide_conquer_log", log_esp), ("summation", log_esp_summation)):
                with torch.no_grad():
                    value = function(x, k).double()
                finite = bool(torch.isfinite(value).all())
                error = float(((value - reference).abs() / reference.abs().clamp(min=1)).max()) if finite else None
                rows.append({"tau": tau, "algorithm": algorithm, "precision": str(dtype).removeprefix("torch."),
                             "stable": int(finite), "max_relative_error_vs_float64_log": error})
    return rows


def markdown(speed, esp_rows, stability) -> str:
    lines = ["### Forward+backward time, ratio to cross-entropy (batch 256, float32, 1 thread)", ""]
    ns = sorted({row["n"] for row in speed})
    header = "| loss | k | " + " | ".join(f"n = {n}" for n in ns) + " |"
    lines += [header, "|---|---|" + "---|" * len(ns)]
    keys = []
    for row in speed:
        key = (row["loss"], row["k"])
        if key not in keys:
            keys.append(key)
    for loss, k in keys:
        cells = []
        for n in ns:
            match = [r for r in speed if (r["loss"], r["k"], r["n"]) == (loss, k, n)]
            cells.append(f"{match[0]['ratio_to_ce']:.1f}×" if match else "–")
        lines.append(f"| {loss} | {'–' if k is None else k} | " + " | ".join(cells) + " |")
    ce = {n: statistics.median(r["ce_seconds"] for r in speed if r["n"] == n) for n in ns}
    lines += ["", "Cross-entropy itself (median of its paired timings): "
              + ", ".join(f"{1e3 * ce[n]:.2f} ms at n = {n}" for n in ns), ""]
    lines += ["### `log_esp` forward, k = 5 (batch 256)", "", "| n | divide & conquer, log-space (ms) | summation (ms) | ratio |", "|---|---|---|---|"]
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="n = 1000 only and short timing budgets")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    ns = [1000] if args.quick else [100, 1000, 10000]
    ks = [5, 20] if args.quick else [1, 2, 5, 10, 20]
    budget = 0.3 if args.quick else 1.0
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        speed = bench_speed(ns, ks, budget)
    esp_rows = bench_esp_forward([1000] if args.quick else [100, 1000, 10000, 100000], budget)
    stability = bench_stability()
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"batch": BATCH, "threads": 1, "torch": torch.__version__, "speed": speed,
              "log_esp_forward": esp_rows, "stability": stability}
    (args.out / "losses.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(speed, esp_rows, stability)
    (args.out / "losses.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
