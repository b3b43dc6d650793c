"""The run record (docs/design.md §4): ``results.json``, ``history.csv`` and TensorBoard scalars.

Every run, finished or not, leaves a ``results.json`` whose ``status`` is ``completed``,
``failed`` or ``interrupted``; the table and figure scripts read only these files.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
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
    "provenance": dict,
}

# the keys of a record's ``provenance``: where, when, from which code and by which command it ran;
# besides them, once the data is built, ``num_workers``: the image-decoding workers of each loader
# (``topk.build.fit_settings``; records made before it, or runs stopped before, lack it), and
# ``job_slot`` for a job of a joblib sweep running several at once (``topk.job_share``)
PROVENANCE_KEYS = (
    "git_commit", "git_dirty", "git", "host", "device", "gpu_name", "gpu_count", "world_size",
    "started_utc", "ended_utc", "command", "argv",
)
# the provenance of a record made by hand (tests, imported results): nothing is known. Copy it
# before changing it, it is shared.
EMPTY_PROVENANCE = dict.fromkeys(PROVENANCE_KEYS)
NOT_A_GIT_CHECKOUT = {"git_commit": None, "git_dirty": None, "git": "not a git checkout"}
GIT_TIMEOUT_SECONDS = 5


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


def utc_now() -> str:
    """The time now in UTC, ISO 8601 to the second with a ``Z``: ``2026-11-25T08:01:02Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _git(directory: Path, *args: str) -> str | None:
    """The output of ``git -C directory ARGS``, or ``None`` when git is missing, fails or takes
    longer than ``GIT_TIMEOUT_SECONDS``: provenance never stops a run. ``--no-optional-locks``
    keeps ``git status`` from taking the index lock, which would break a commit made meanwhile."""
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(directory), *args],
                              capture_output=True, text=True, timeout=GIT_TIMEOUT_SECONDS)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(directory: Path) -> dict:
    """The commit checked out where ``directory`` lies and whether tracked files differ from it
    (untracked files do not count): ``git_commit``, ``git_dirty`` and ``git``, a short readable
    form (``"<12-char sha>"``, ``"<12-char sha> (dirty)"`` or ``"not a git checkout"``)."""
    commit = _git(directory, "rev-parse", "HEAD")
    status = _git(directory, "status", "--porcelain", "--untracked-files=no") if commit else None
    if not commit or status is None:
        return dict(NOT_A_GIT_CHECKOUT)
    dirty = bool(status)
    return {"git_commit": commit, "git_dirty": dirty, "git": commit[:12] + (" (dirty)" if dirty else "")}


def reproduce_command(overrides: Sequence[str]) -> str:
    """``python train.py`` followed by a run's overrides, each quoted for a POSIX shell."""
    return " ".join(["python train.py", *(shlex.quote(str(override)) for override in overrides)])


def provenance(code_dir: Path, overrides: Sequence[str], argv: Sequence[str], world_size: int = 1) -> dict:
    """A new record's ``provenance`` (docs/design.md §4): the code's git state (``code_dir``, where
    ``train.py`` lies), the host, the number of processes, the start time, the command that
    reproduces this one run (``overrides``: the job's own, sweep values chosen) and the process's
    ``argv``. The device is not known yet (``None``): :func:`device_provenance` fills it in."""
    return {
        **git_state(code_dir),
        "host": socket.gethostname(),
        "device": None,
        "gpu_name": None,
        "gpu_count": torch.cuda.device_count(),
        "world_size": world_size,
        "started_utc": utc_now(),
        "ended_utc": None,
        "command": reproduce_command(overrides),
        "argv": [str(arg) for arg in argv],
    }


def device_provenance(device: torch.device | str, world_size: int) -> dict:
    """The provenance keys known once the run's device is resolved: ``device`` (``"cpu"``,
    ``"cuda:0"``), the GPU's name on CUDA, and the number of processes."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"device": str(device), "gpu_name": gpu_name, "world_size": world_size}


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


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(temporary)`` then rename the temporary file (``<name>.tmp``) to ``path``: a kill
    mid-write never leaves half a file at ``path``, and a write that fails (a full disk, an
    interruption) removes its temporary file before the error goes on."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Mapping) -> None:
    """Write strict JSON whole or not at all (:func:`write_atomically`)."""
    text = json.dumps(strict_json(data), indent=2, sort_keys=False, allow_nan=False) + "\n"
    write_atomically(path, lambda tmp: tmp.write_text(text))


def validate_results(record: Mapping) -> None:
    """Raise ``ValueError`` naming the first key of ``record`` that breaks the contract."""
    for key, kind in REQUIRED_KEYS.items():
        if key not in record:
            raise ValueError(f"results.json lacks the key {key!r}")
        if not isinstance(record[key], kind):
            raise ValueError(f"results.json key {key!r} has type {type(record[key]).__name__}")
    if record["status"] not in STATUSES:
        raise ValueError(f"results.json status {record['status']!r} is not one of {STATUSES}")
    missing = [key for key in PROVENANCE_KEYS if key not in record["provenance"]]
    if missing:
        raise ValueError(f"results.json provenance lacks the key {missing[0]!r}")
    workers = record["provenance"].get("num_workers", 0)  # optional: records before it lack it
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise ValueError("results.json provenance num_workers is not a whole number of at least 0")
    slot = record["provenance"].get("job_slot", {"slot": 0, "jobs_at_once": 1, "cores": 1})  # optional
    if not isinstance(slot, dict) or sorted(slot) != ["cores", "jobs_at_once", "slot"] \
            or not all(isinstance(value, int) and not isinstance(value, bool) for value in slot.values()):
        raise ValueError("results.json provenance job_slot is not {slot, jobs_at_once, cores} as whole numbers")
    for split in ("val", "test"):
        for name, value in record[split].items():
            if not isinstance(value, (int, float, type(None))):
                raise ValueError(f"results.json {split}/{name} is not a number or null")
    validate_also_selected(record.get("also_selected", {}))


def validate_also_selected(also_selected) -> None:
    """Raise ``ValueError`` unless ``also_selected`` (optional: the best model by each
    ``trainer.also_select_on`` metric) maps each metric to ``best_epoch`` and its ``val`` and
    ``test`` metrics, as the record's own keys are, and optionally (records older than it lack
    it) its ``test_per_class``: ``top<k>`` to a list of class accuracies."""
    if not isinstance(also_selected, dict):
        raise ValueError("results.json key 'also_selected' is not a mapping")
    for metric, selected in also_selected.items():
        if not isinstance(selected, dict) or not isinstance(selected.get("best_epoch"), (int, type(None))):
            raise ValueError(f"results.json also_selected[{metric!r}] lacks an integer best_epoch")
        for split in ("val", "test"):
            values = selected.get(split)
            if not isinstance(values, dict) or not all(isinstance(v, (int, float, type(None))) for v in values.values()):
                raise ValueError(f"results.json also_selected[{metric!r}] {split} is not a mapping of numbers")
        per_class = selected.get("test_per_class", {})
        if not isinstance(per_class, dict) or not all(isinstance(v, list) for v in per_class.values()):
            raise ValueError(f"results.json also_selected[{metric!r}] test_per_class is not a mapping of lists")


def add_fit_result(record: dict, result, class_counts: list[int], class_groups: Mapping | None,
                   world_size: int) -> None:
    """What :func:`topk.engine.fit` found (its ``FitResult``), into the run's ``record``: the
    selected model's epoch and metrics, its test class accuracies and class sizes, the models
    kept by ``trainer.also_select_on`` with theirs, and the data's class counts and groups."""
    record.update(
        best_epoch=result.best_epoch,
        val=result.metrics.get("val", {}),
        test=result.metrics.get("test", {}),
        epoch_seconds=result.epoch_seconds,
        test_per_class={f"top{k}": v for k, v in result.per_class.get("test", {}).items()},
        test_class_samples=result.class_samples.get("test", []),
        class_counts=class_counts,
        samples=result.samples,
        processes=world_size,
        also_selected={metric: {"best_epoch": selected["best_epoch"], "val": selected["metrics"].get("val", {}),
                                "test": selected["metrics"].get("test", {}),
                                "test_per_class": {f"top{k}": v for k, v in
                                                   selected["per_class"].get("test", {}).items()}}
                       for metric, selected in result.also_selected.items()},
    )
    if class_groups:
        record["class_groups"] = class_groups
    if result.stopped_early is not None:  # trainer.early_stopping_patience ended the epochs early
        record["stopped_early"] = result.stopped_early


def write_results(run_dir: Path, record: Mapping, name: str = "results.json") -> Path:
    """Check ``record`` against the contract and write it to ``run_dir/name``, whole or not at all."""
    validate_results(record)
    path = Path(run_dir) / name
    write_json_atomic(path, record)
    return path


def read_results(path: Path) -> dict:
    record = json.loads(Path(path).read_text())
    record["run_dir"] = str(Path(path).parent)
    return record


def write_history(run_dir: Path, rows: Iterable[Mapping]) -> Path:
    path = Path(run_dir) / "history.csv"
    frame = pd.DataFrame(list(rows))
    write_atomically(path, lambda tmp: frame.to_csv(tmp, index=False))
    return path


def find_results(root: Path) -> list[dict]:
    """Every ``results.json`` below ``root``, read, each with its ``run_dir``."""
    return [read_results(path) for path in sorted(Path(root).rglob("results.json"))]


def tensorboard_dir(run_dir: Path, name: str) -> Path:
    """Where a run's TensorBoard events go: ``<run_dir>/tb/<name>/``, so that TensorBoard, which
    names a run by the folder of its events, shows a sweep's runs as ``0/tb/loss.tau=0.5,seed=1``
    rather than ``0/tb``. A run that already has events keeps their folder (a resumed run whose
    overrides changed, or a run from before the names: its ``tb/`` itself)."""
    tb = Path(run_dir) / "tb"
    if any(tb.glob("events.out.tfevents.*")):
        return tb
    earlier = sorted(path for path in tb.glob("*") if path.is_dir()) if tb.is_dir() else []
    return earlier[0] if earlier else tb / name


def _quiet_writer_thread(args) -> None:
    """``threading.excepthook`` that leaves out the traceback of TensorBoard's writing thread
    (a full disk): the writer raises the same error again in the run's next call to it, where the
    run reports it in one sentence. Every other thread's error is printed as usual."""
    if type(args.thread).__name__ != "_AsyncWriterThread":
        threading.__excepthook__(args)


class TensorBoardScalars:
    """The history's numbers as TensorBoard scalars in ``log_dir``, through torch's
    ``SummaryWriter``: one event per epoch holding all of that epoch's numbers, handed to the
    writer in a bunch at every :meth:`flush` (the engine calls it with each checkpoint, so that the
    events on disk follow ``last.pt``) and at :meth:`close`.

    Hand-written (``add_scalar`` at every epoch would do) because it pays on the S20 sweeps
    (``make bench``): their runs are 1,000 epochs of about half a millisecond of training, and
    ``SummaryWriter``'s writing thread, woken at every epoch, cost a measurable share of each
    run's CPU with one event per epoch, more with ``add_scalar``'s one event per number
    (docs/benchmarks.md, 'Code choices and the timings behind them', and its 'Engine overhead');
    handing the events over at the checkpoints costs what the earlier hand-made event file did
    (within the noise of a shared machine). ``purge_step`` (on resume) tells TensorBoard to drop the events a
    previous session wrote from that step on.
    """

    def __init__(self, log_dir: Path, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter  # imports TensorBoard: only when used

        if threading.excepthook is not _quiet_writer_thread:
            threading.excepthook = _quiet_writer_thread

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
