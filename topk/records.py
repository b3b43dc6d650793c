"""The run record (docs/design.md §4): ``results.json``, ``history.csv`` and TensorBoard scalars.

Every run, finished or not, leaves a ``results.json`` whose ``status`` is ``completed``,
``failed`` or ``interrupted``; the table and figure scripts read only these files.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd
import torch

import topk

STATUSES = ("completed", "failed", "interrupted", "running")
REQUIRED_KEYS = {
    "status": str,
    "error": (str, type(None)),
    "experiment": (str, type(None)),
    "dataset": str,
    "model": str,
    "loss": str,
    "seed": int,
    "params": dict,
    "best_epoch": (int, type(None)),
    "selection_metric": str,
    "val": dict,
    "test": dict,
    "epoch_seconds": (float, int, type(None)),
    "versions": dict,
}


def flatten(config: Mapping, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def versions() -> dict:
    found = {"topk": topk.__version__, "torch": torch.__version__, "python": platform.python_version()}
    try:
        import torchvision

        found["torchvision"] = torchvision.__version__
    except ImportError:  # torchvision is a dependency; a broken install should not hide a record
        found["torchvision"] = None
    return found


def strict_json(value):
    """``value`` with every NaN or infinite float replaced by ``None``: strict JSON, which any
    reader accepts (a failed run's ``error`` says why a number is missing)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value


def write_json_atomic(path: Path, data: Mapping) -> None:
    """Write strict JSON through a temporary file, so a kill mid-write never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(strict_json(data), indent=2, sort_keys=False, allow_nan=False) + "\n")
    os.replace(tmp, path)


def validate_results(record: Mapping) -> None:
    """Raise ``ValueError`` naming the first key of ``record`` that breaks the contract."""
    for key, kind in REQUIRED_KEYS.items():
        if key not in record:
            raise ValueError(f"results.json lacks the key {key!r}")
        if not isinstance(record[key], kind):
            raise ValueError(f"results.json key {key!r} has type {type(record[key]).__name__}")
    if record["status"] not in STATUSES:
        raise ValueError(f"results.json status {record['status']!r} is not one of {STATUSES}")
    for split in ("val", "test"):
        for name, value in record[split].items():
            if not isinstance(value, (int, float, type(None))):
                raise ValueError(f"results.json {split}/{name} is not a number or null")


def write_results(run_dir: Path, record: Mapping) -> Path:
    validate_results(record)
    path = Path(run_dir) / "results.json"
    write_json_atomic(path, record)
    return path


def read_results(path: Path) -> dict:
    record = json.loads(Path(path).read_text())
    record["run_dir"] = str(Path(path).parent)
    return record


def write_history(run_dir: Path, rows: Iterable[Mapping]) -> Path:
    path = Path(run_dir) / "history.csv"
    tmp = path.with_name("history.csv.tmp")
    pd.DataFrame(list(rows)).to_csv(tmp, index=False)
    os.replace(tmp, path)
    return path


def find_results(root: Path) -> list[dict]:
    """Every ``results.json`` below ``root``, read, each with its ``run_dir``."""
    return [read_results(path) for path in sorted(Path(root).rglob("results.json"))]


class TensorBoardScalars:
    """The history's numbers as TensorBoard scalars in ``log_dir``, through torch's
    ``SummaryWriter``: one event per epoch holding all of that epoch's numbers, handed to the
    writer in a bunch at every :meth:`flush` (the engine calls it with each checkpoint, so that the
    events on disk follow ``last.pt``) and at :meth:`close`.

    Hand-written (``add_scalar`` at every epoch would do) because it pays on the S20 sweeps
    (``make bench``): their runs are 1,000 epochs of about half a millisecond of training, and
    ``SummaryWriter``'s writing thread, woken at every epoch, cost 0.12 s of CPU per run here
    (+20%) with one event per epoch, more with ``add_scalar``'s one event per number; handing the
    events over at the checkpoints costs what the earlier hand-made event file did (within the
    noise of a shared machine). ``purge_step`` (on resume) tells TensorBoard to drop the events a
    previous session wrote from that step on.
    """

    def __init__(self, log_dir: Path, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter  # imports TensorBoard: only when used

        # a queue as long as a bunch of rows, so that flush() never waits for the writing thread
        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step, max_queue=1000)
        self.rows: list[dict] = []

    def write(self, row: Mapping[str, float]) -> None:
        """Keep the numbers of a history ``row`` (one epoch's, ``row["epoch"]`` the step)."""
        self.rows.append(dict(row))

    def flush(self) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary  # imported by SummaryWriter

        for row in self.rows:
            values = [Summary.Value(tag=name, simple_value=float(value))
                      for name, value in row.items() if isinstance(value, (int, float))]
            self.writer.file_writer.add_summary(Summary(value=values), row["epoch"])
        self.rows.clear()
        self.writer.flush()

    def close(self) -> None:
        self.flush()
        self.writer.close()


def latest_sweep_dir(outputs: Path, experiment: str) -> Path:
    """The newest ``outputs/sweeps/<experiment>/<time>`` directory."""
    root = Path(outputs) / "sweeps" / experiment
    candidates = sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []
    if not candidates:
        raise FileNotFoundError(
            f"no sweep of {experiment} under {root}; run "
            f"`python train.py -m +experiment={experiment}` first."
        )
    return candidates[-1]
