"""A small model's training step on image files with ``trainer.num_workers: auto`` against a fixed
number of workers, on the same JPEG tree: ``make bench-data``'s ``--step-time MODEL`` (issue 38).

Each setting is one ``python train.py`` run (``dataset=image_folder`` on the benchmark's tree, a
tenth of each class held out as the test split, ``--step-epochs`` epochs, batch 32, k = 1, no
TensorBoard or checkpoints); its record's ``epoch_seconds`` (the median epoch) over its steps per
epoch is the time per step, and ``provenance.num_workers`` the workers ``auto`` chose.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from topk.records import read_results
from topk.repository import ROOT

SETTINGS = ("auto", 4)
BATCH = 32


def step_time(tree: Path, run_dir: Path, model: str, image_size: int, workers, epochs: int) -> dict:
    """One run on ``tree`` with ``trainer.num_workers=workers``: its seconds per step."""
    command = [sys.executable, str(ROOT / "train.py"), "dataset=image_folder", f"dataset.root={tree}",
               "dataset.test_fraction=0.1", "dataset.check_images=false", f"model={model}",
               f"image_size={image_size}", f"dataset.resize_size={image_size}", f"trainer.epochs={epochs}",
               f"trainer.batch_size={BATCH}", f"trainer.num_workers={workers}", "k=1", "trainer.progress=false",
               "trainer.tensorboard=false", "trainer.keep_checkpoints=none", f"hydra.run.dir={run_dir}"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"the step-time run with trainer.num_workers={workers} failed: "
                           f"{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}")
    record = read_results(run_dir / "results.json")
    steps = math.ceil(sum(record["class_counts"]) / BATCH)  # the training images, by class
    return {"setting": str(workers), "workers": record["provenance"]["num_workers"],
            "epoch_s": record["epoch_seconds"], "step_s": record["epoch_seconds"] / steps, "steps": steps}


def step_times(tree: Path, out: Path, model: str, image_size: int, epochs: int) -> list[dict]:
    """:func:`step_time` for each of :data:`SETTINGS`, each run under ``out``."""
    return [step_time(tree, out / f"workers_{setting}", model, image_size, setting, epochs) for setting in SETTINGS]


def step_markdown(rows: list[dict], model: str, image_size: int) -> list[str]:
    """The table of :func:`step_times`, each row's step time over the ``auto`` row's."""
    base = rows[0]["step_s"]
    lines = ["", f"Training step of `model={model}` at {image_size} px, batch {BATCH}, on the same JPEGs "
             "(`python train.py dataset=image_folder ...`, the median epoch over its steps):", "",
             "| trainer.num_workers | workers | s per step | × auto |", "|---|---:|---:|---:|"]
    lines += [f"| {row['setting']} | {row['workers']} | {row['step_s']:.3f} | {row['step_s'] / base:.2f} |"
              for row in rows]
    return lines
