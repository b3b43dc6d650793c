"""Several small jobs on one machine at once (``hydra.launcher.n_jobs=k``, :mod:`topk.job_share`)
against one at a time, on the sweeps that need it: a small CIFAR model at batch 64.

    python scripts/bench_share.py                      # or: make bench-share (DenseNet 40-12, k = 1, 2)
    python scripts/bench_share.py --jobs 1 4 8 --train-size 20000    # on a GPU node

For each k, the same sweep (``--runs`` seeds of ``--epochs`` epochs (1) of ``--model`` on
``--train-size`` random CIFAR-shaped images, the standard crop + flip, batch 64, no evaluation but the last) runs
as ``python train.py -m ... hydra/launcher=joblib hydra.launcher.n_jobs=k``, end to end. Reported:
the sweep's wall time, the images it trained per second of wall time (runs x images / wall), the
median of the runs' own epoch times (``epoch_seconds`` in their records: how much k jobs slow
each other down), and the speed-up in images per second over k = 1. Writes
``<out>/share.{json,md}``. On a CPU the jobs share the cores, so the speed-up says little; on a
GPU it says how far k small jobs fill it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from topk.bench.common import BENCH_OUT, available_cores, parser, write_outputs
from topk.records import find_results
from topk.repository import ROOT


def sweep_command(args, jobs: int, sweep_dir: Path) -> list[str]:
    seeds = ",".join(str(seed) for seed in range(args.runs))
    return [sys.executable, str(ROOT / "train.py"), "-m", "dataset=random_images", f"model={args.model}",
            f"dataset.train_size={args.train_size}", "dataset.test_size=64", f"trainer.epochs={args.epochs}",
            "trainer.batch_size=64", "trainer.selection_metric=last", "trainer.progress=false",
            "trainer.tensorboard=false", "trainer.keep_checkpoints=none", f"trainer.device={args.device}",
            f"seed={seeds}", "hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}",
            f"hydra.sweep.dir={sweep_dir}"]


def time_sweep(args, jobs: int, sweep_dir: Path) -> dict:
    """One sweep of ``args.runs`` runs, ``jobs`` at once: its wall time and its records' numbers."""
    started = time.perf_counter()
    result = subprocess.run(sweep_command(args, jobs, sweep_dir), cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        print(result.stderr[-2000:], file=sys.stderr)
    records = [record for record in find_results(sweep_dir) if record["status"] == "completed"]
    epochs = [record["epoch_seconds"] for record in records if record.get("epoch_seconds")]
    devices = sorted({record["provenance"]["device"] for record in records})
    each = [{key: record["provenance"].get(key) for key in ("job_slot", "device", "started_utc", "ended_utc")}
            | {"epoch_s": record.get("epoch_seconds")} for record in records]
    return {"jobs": jobs, "runs": args.runs, "completed": len(records), "wall_s": seconds,
            "images_per_s": len(records) * args.train_size * args.epochs / seconds,
            "median_epoch_s": statistics.median(epochs) if epochs else None, "devices": devices, "each_run": each}


def markdown(rows: list[dict], settings: dict) -> str:
    epochs = settings.get("epochs", 1)
    lines = [f"{settings['model']}, {settings['train_size']:,} random CIFAR-shaped images, "
             f"{epochs} epoch{'s' if epochs != 1 else ''} per run, "
             f"{settings['runs']} runs, batch 64, on {settings['device_name']} ({settings['cores']} cores), "
             f"torch {settings['torch']}.", "",
             "| jobs at once | runs completed | sweep wall (s) | images / s (sweep) | median epoch (s) | speed-up |",
             "|---:|---:|---:|---:|---:|---:|"]
    base = rows[0]["images_per_s"]
    for row in rows:
        epoch = f"{row['median_epoch_s']:.2f}" if row["median_epoch_s"] is not None else "n/a"
        lines.append(f"| {row['jobs']} | {row['completed']}/{row['runs']} | {row['wall_s']:.1f} | "
                     f"{row['images_per_s']:,.0f} | {epoch} | {row['images_per_s'] / base:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    command = parser(__doc__)
    command.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="jobs at once, the first the baseline")
    command.add_argument("--runs", type=int, default=4, help="runs in each sweep (seeds)")
    command.add_argument("--model", default="densenet40_12")
    command.add_argument("--train-size", type=int, default=640, help="random training images per run")
    command.add_argument("--epochs", type=int, default=1, help="epochs of each run")
    command.add_argument("--device", default="auto", help="trainer.device of the runs")
    command.add_argument("--out", type=Path, default=BENCH_OUT)
    args = command.parse_args(argv)
    gpus = torch.cuda.device_count()
    settings = {"model": args.model, "train_size": args.train_size, "runs": args.runs, "epochs": args.epochs,
                "cores": available_cores(),
                "device_name": f"{gpus} x {torch.cuda.get_device_name(0)}" if gpus else "the CPU",
                "torch": torch.__version__}
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    rows = []
    for jobs in args.jobs:
        rows.append(time_sweep(args, jobs, args.out / "share" / stamp / f"jobs_{jobs}"))
        print(f"{jobs} at once: {rows[-1]['completed']}/{args.runs} runs in {rows[-1]['wall_s']:.1f} s", flush=True)
    text = markdown(rows, settings)
    write_outputs(args.out, "share", {"settings": settings, "rows": rows}, text)
    print(text)
    return 0
