"""The run record (DESIGN §3): ``results.json``, ``history.csv`` and TensorBoard scalars.

Every run, finished or not, leaves a ``results.json`` whose ``status`` is ``completed``,
``failed`` or ``interrupted``; the table and figure scripts read only these files.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import time
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
    """TensorBoard event file with one event per epoch holding all of that epoch's scalars.

    One event with many values is what ``SummaryWriter.add_scalar`` would write as many events;
    grouping them keeps a 1,000-epoch run's logging cost small. :meth:`write` only keeps the
    epoch's numbers; the events are built (TensorBoard's own protocol buffers and
    ``RecordWriter``) and written to disk together at most every ``flush_seconds``, and by
    :meth:`flush` (the engine calls it at every checkpoint) and :meth:`close`. Measured inside
    S20's 5 ms circles epochs: building and writing each event as it came cost 79 µs per epoch
    (TensorBoard computes the records' CRC-32C in Python), 1.6% of the epoch; torch's
    ``SummaryWriter``, which hands each event to a background thread, about 0.35 ms. A process
    killed outright loses the same last seconds either way (the file is flushed on that clock).
    ``purge_step`` (on resume) tells TensorBoard to drop the events a previous session wrote from
    that step on.
    """

    def __init__(self, log_dir: Path, purge_step: int | None = None, flush_seconds: float = 10.0):
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary, self._clock = Event, Summary, time.time
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        # the file name TensorBoard looks for: events.out.tfevents.<time>.<host>.<pid>.<n>
        name = f"events.out.tfevents.{int(self._clock()):010d}.{socket.gethostname()}.{os.getpid()}.0"
        self._file = open(log_dir / name, "wb")  # noqa: SIM115 (closed in close())
        self._records = RecordWriter(self._file)
        self._pending: list[tuple[float, int, dict]] = []  # (wall time, step, scalars)
        self._add(Event(wall_time=self._clock(), file_version="brain.Event:2"))
        if purge_step is not None:
            self._add(Event(wall_time=self._clock(), step=purge_step, session_log=SessionLog(status=SessionLog.START)))
        self.flush_seconds = flush_seconds
        self.flush()

    def _add(self, event) -> None:
        self._records.write(event.SerializeToString())

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        """Record ``scalars`` (the numbers among them) at ``step``, with the current wall time."""
        now = self._clock()
        self._pending.append((now, step, dict(scalars)))
        if now - self._flushed >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        for wall_time, step, scalars in self._pending:
            values = [
                self._summary.Value(tag=name, simple_value=float(value))
                for name, value in scalars.items()
                if isinstance(value, (int, float))
            ]
            self._add(self._event(wall_time=wall_time, step=step, summary=self._summary(value=values)))
        self._pending.clear()
        self._records.flush()
        self._flushed = self._clock()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._records.close()


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
