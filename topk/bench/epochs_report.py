"""The tables and notes of ``make bench-epochs`` (:mod:`topk.bench.epochs`): each experiment's
rows and sweep totals, how the numbers were made and how busy the machine was, and the one
published GPU epoch time for scale."""

from __future__ import annotations

import csv
import json
import os
import platform
from pathlib import Path

import torch

from topk.bench.common import available_cores
from topk.repository import ROOT

G22_FIG3 = ROOT / "topk" / "paper_results" / "g22_fig3_epoch_time.csv"
# Below this CPU use (see topk.bench.epochs.time_repeats) a timing most likely shared the cores
# with other processes (an idle 2-core run measured 0.8 to 1.0; runs beside a test suite 0.5).
BUSY_CPU_USE = 0.75


def fmt(value: float) -> str:
    """Three significant figures, thousands separated."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def machine() -> dict:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": available_cores(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version(),
            "load_average_start": list(os.getloadavg())}


def g22_gpu_epoch_seconds() -> float | None:
    try:
        with G22_FIG3.open() as handle:
            for row in csv.DictReader(handle):
                if row["loss"] == "ce" and row["k"] == "5":
                    return float(row["epoch_seconds"])
    except (OSError, KeyError, ValueError):
        return None
    return None


def report_tables(results: dict, lines: list[dict]) -> list[str]:
    """5a. The table of rows and the table of sweep totals, as Markdown lines."""
    table = ["| experiment | model | input | batch | loss timed | step s | epoch s | epochs | runs | "
             "hours per run | sweep CPU-hours |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in lines:
        mark = "" if row["measured"] else " †"
        table.append(
            f"| {row['experiment']} | {row['model']} | {row['input']} | {row['batch']} | {row['loss']} | "
            f"{row['step_seconds']:.2f}{mark} | {fmt(row['epoch_seconds'])} | {row['epochs']} | "
            f"{row['runs']} | {fmt(row['hours_per_run'])} | {fmt(row['sweep_cpu_hours'])} |")
    totals = ["| experiment | runs | sweep CPU-hours | CPU-days | CPU-years | all runs at the timed loss |",
              "|---|---:|---:|---:|---:|---:|"]
    for experiment, result in results.items():
        hours = result["sweep_cpu_hours"]
        totals.append(f"| {experiment} | {result['runs']} | {fmt(hours)} | {fmt(hours / 24)} | "
                      f"{hours / 24 / 365.25:.2g} | {fmt(result['sweep_cpu_hours_at_timed_loss'])} |")
    return [*table, "", *totals]


def method_notes(lines: list[dict], steps: dict, loss_cpu_use: float, info: dict, budget: float) -> list[str]:
    """5b. How the numbers were made, and how busy the machine was."""
    notes = [
        f"- Training steps only (forward, loss, backward, SGD step) on random inputs; evaluation, "
        f"data loading and decoding, augmentation and checkpoints are not included, so real runs "
        f"take longer. Step: median of up to 5 steps after one warm-up (`--budget` {budget:g} s).",
        f"- CPU-hours: hours of this whole machine ({info['cores']} cores, {info['threads']} torch "
        f"threads), runs one after another; core-hours are {info['cores']}x that.",
        "- `hours per run`: the row's own run (b18_imagenet: the full training set); `sweep "
        "CPU-hours`: the sum over the runs the row stands for, each with its own loss and "
        "training-set size.",
        "- † the network was timed once for several experiments with another loss; this step is "
        "that time minus the difference of the two losses' own forward + backward times.",
        "- Losses timed alone: " + "; ".join(
            f"{row['experiment']} {row['loss']}: {1000 * row['loss_seconds']:.1f} ms "
            f"({100 * row['loss_seconds'] / row['step_seconds']:.2g}% of the step)" for row in lines) + ".",
        "- CPU use of the timed steps (process CPU seconds / (wall seconds x threads); 1 = every "
        "thread busy, lower: other processes shared the machine and the times above are inflated; "
        "CPU seconds per thread and step, about what an idle machine would take, in brackets): "
        + ", ".join(f"{m['model']} {m['cpu_use']:.2f} ({m['cpu_seconds_per_thread']:.2f} s)"
                    for m in steps.values())
        + f"; the losses timed alone: median {loss_cpu_use:.2f}. Load average at start "
          f"{info['load_average_start'][0]:.2f}, at end {info['load_average_end'][0]:.2f}.",
    ]
    busy = [m["model"] for m in steps.values() if m["cpu_use"] < BUSY_CPU_USE]
    if busy or loss_cpu_use < BUSY_CPU_USE:
        notes.append(f"- **Other processes were probably running**: CPU use under {BUSY_CPU_USE} for "
                     + ", ".join(busy + (["the losses timed alone"] if loss_cpu_use < BUSY_CPU_USE else []))
                     + "; those times are too long (short parallel operations, as a loss, suffer "
                       "most: up to 100x). Rerun on an idle machine.")
    return notes


def scale_notes(results: dict, lines: list[dict], loss_seconds: dict) -> list[str]:
    """5c. ImageNet's hours by training-set size, and the one published GPU epoch time for scale."""
    notes = []
    if "b18_imagenet" in results:
        sizes = results["b18_imagenet"]["hours_per_run_by_train_images"]
        notes.append("- b18_imagenet hours per run by training images: " + ", ".join(
            f"{size:,}: {fmt(hours)}" for size, hours in sizes.items()) + ".")
    gpu = g22_gpu_epoch_seconds()
    dense = next((row for row in lines if row["model"] == "DenseNet 40-40"), None)
    if not (gpu and dense):
        return [*notes, "- No GPU estimate: nothing here measures a GPU; every experiment above needs one."]
    network_only = dense["step_seconds"] - dense["loss_seconds"]
    ce = next((s for k, s in loss_seconds.items()
               if json.loads(k)[0]["_target_"] == "torch.nn.CrossEntropyLoss" and json.loads(k)[2:] == [100, 64]), 0.0)
    here = dense["steps_per_epoch"] * (network_only + ce)
    notes.append(
        f"- No GPU estimate: nothing here measures a GPU, and the speed-up depends on the model "
        f"and the GPU. Every experiment above needs one. For scale only: G22 Fig. 3 reports "
        f"{gpu:g} s per DenseNet 40-40 CIFAR-100 epoch with cross-entropy on a GPU it does not "
        f"name; this machine needs {fmt(here)} s ({fmt(here / gpu)}x longer).")
    return notes
