"""Run directories hold one run each, never two (README "Run directories and resuming").

- A new run refuses a directory that already holds a run (a ``results.json`` or a
  ``checkpoints/last.pt``), with one sentence saying how to continue it or where else to go. The
  directory is claimed by creating its ``results.json`` exclusively, so two runs started at once
  into one directory cannot both pass.
- ``trainer.resume=true`` continues the run whose checkpoint is in the directory, and only with
  the training configuration that checkpoint remembers: every key of the flat resolved config must
  be equal, except :data:`HARMLESS_KEYS` (more epochs, progress, workers, devices, speed switches,
  data moved to another folder). Without a checkpoint there is nothing to mix, and the run starts
  from scratch in that directory; a single run asked to resume a directory that holds no run at
  all is refused (a sweep's jobs that never started simply start).
- A completed run may keep fewer checkpoints (``trainer.keep_checkpoints``: ``best`` drops
  ``last.pt``, ``none`` both): resuming it keeps its record as it is, and refuses another training
  configuration or more epochs (nothing is left to continue from).
- A directory that is not empty but holds no run of ours (no ``results.json``) holds someone's
  files: it is refused, new run or resume, and the refusal names a few of them. Only the files
  Hydra wrote for this very job (``written_by_hydra``: ``.hydra/`` and ``train.log``) and a
  stale ``run.lock`` do not count.
- A run holds ``run.lock`` (its pid, host and start time, :class:`topk.locks.RunLock`) from the moment it
  claims or resumes the directory until it ends, however it ends; a sweep holds ``sweep.lock``
  in its directory the same way from before Hydra writes there until it ends. A second writer
  is refused in one sentence naming the live one while that process runs; a lock whose process
  is gone from this host, or whose pid now belongs to a process started after the lock was
  written (a reused pid), is taken over with a log line; one written on another host cannot be
  checked and is refused until the user deletes it.
- A resume is refused when ``trainer.epochs`` is below the checkpoint's epoch, and when the
  weights of the selected epoch (``best.pt``) are gone and that epoch is earlier than the
  checkpoint's (:func:`topk.checkpoints.selected_weights`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from topk.checkpoints import check_resume_epochs, load_checkpoint, selected_weights
from topk.errors import RunRefused
from topk.locks import LOCK_NAME, SWEEP_LOCK_NAME, check_lock
from topk.records import (
    flatten,
    utc_now,
    write_json_atomic,
    write_results,
)

log = logging.getLogger(__name__)

# Keys that may change when a run is resumed: they change how long, how fast, where or how
# verbosely it trains, never what it learns from one epoch to the next.
HARMLESS_KEYS = frozenset({
    "trainer.epochs", "trainer.resume", "trainer.progress", "trainer.progress_every", "trainer.tensorboard",
    "trainer.num_workers", "trainer.num_threads", "trainer.device", "trainer.distributed_backend",
    "trainer.eval_batch_size", "trainer.eval_every", "trainer.checkpoint_every",
    "trainer.compile", "trainer.channels_last", "trainer.keep_checkpoints", "loss.compile", "trainer.test_every_epoch",
    "trainer.grad_nonzero",
    "data_root", "dataset.root", "dataset.lists_root", "dataset.check_images",
    # the same pixels by auto, pil and, on a CPU, device (tests/test_decoding.py); device on a GPU is
    # within a grey level, the kind of change trainer.device makes: how fast, not what
    "dataset.decoder",
})

_MISSING = object()


def override_key(override: str) -> str:
    """The key a command-line override sets: ``loss.tau`` of ``loss.tau=0.5``, ``scale`` of
    ``+scale=smoke``."""
    return override.partition("=")[0].lstrip("+~")


def run_params(cfg: DictConfig) -> dict:
    """The flat resolved configuration of a run (``results.json``'s ``params``), without Hydra's
    own node."""
    task = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
    return flatten(OmegaConf.to_container(task, resolve=True))


RUN_FOLDERS = {"checkpoints": "checkpoints", "tb": "TensorBoard events"}  # folders a run writes


def file_in_place_of_folder(directory: Path) -> str | None:
    """One sentence if a file stands where a run keeps one of its folders (it would stop the run
    later with an ``OSError``), else ``None``."""
    for name, holds in RUN_FOLDERS.items():
        if (Path(directory) / name).exists() and not (Path(directory) / name).is_dir():
            return (f"{Path(directory) / name} is a file where the run keeps its {holds} folder; "
                    "move that file away, or choose another directory")
    return None


def unwritable_reason(directory: Path) -> str | None:
    """Why ``directory`` cannot be created and written, or ``None`` if it can (found by trying:
    as root, ``os.access`` says yes even for ``/proc``)."""
    probe = Path(directory) / f".write_test.{os.getpid()}"
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
    except OSError as error:
        return error.strerror or type(error).__name__
    finally:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
    return None


# Keys renamed since a run was recorded: its old name -> the name compared now.
RENAMED_KEYS = {"loss.class_weights": "loss.weight"}
# Keys added since: a config remembered without one had the value it now defaults to.
ADDED_KEYS = {"trainer.also_select_on": [], "augment.images.randaugment_ops": None,
              "augment.images.randaugment_magnitude": 9, "augment.images.random_erasing": 0.0}
ADDED_KEYS |= {"trainer.accumulate_grad_batches": 1, "trainer.clip_grad_norm": None,  # topk/training_steps.py's
               "trainer.ema_decay": None, "trainer.early_stopping_patience": None}
ADDED_KEYS |= {"trainer.test_every_epoch": True}  # runs before it scored the test split at every evaluation
# Keys added since to one option of a group: the option's ``_target_`` -> its keys' defaults, which a
# config of that option remembered without them had (the other options of the group have no such key).
ADDED_OPTION_KEYS = {"torch.nn.CrossEntropyLoss": {"loss.label_smoothing": 0.0},
                     "topk.schedules.WarmupCosineLR": {"schedule.accumulate_grad_batches": 1}}


def added_defaults(params: Mapping) -> dict:
    """The keys added since (:data:`ADDED_KEYS`, and :data:`ADDED_OPTION_KEYS` of the options the
    flat config ``params`` chose) with the values a config that lacks them had."""
    defaults = dict(ADDED_KEYS)
    for target, keys in ADDED_OPTION_KEYS.items():
        defaults.update({key: value for key, value in keys.items()
                         if params.get(f"{key.rpartition('.')[0]}._target_") == target})
    return defaults


def differing_keys(remembered: Mapping, params: Mapping) -> list[str]:
    """The keys whose values differ between two flat configs, harmless keys left out (a run
    recorded under a key's old name, :data:`RENAMED_KEYS`, is compared under the new one; a key
    one side lacks that was added since, :data:`ADDED_KEYS`, has its default there)."""
    remembered = {RENAMED_KEYS.get(key, key): value for key, value in remembered.items()}
    remembered, params = {**added_defaults(remembered), **remembered}, {**added_defaults(params), **params}
    keys = sorted((set(remembered) | set(params)) - HARMLESS_KEYS)
    return [key for key in keys if remembered.get(key, _MISSING) != params.get(key, _MISSING)]


def record_status(run_dir: Path) -> str | None:
    """The ``status`` of ``run_dir``'s ``results.json`` (``None`` without one)."""
    record_path = Path(run_dir) / "results.json"
    if not record_path.exists():
        return None
    try:
        return json.loads(record_path.read_text()).get("status", "unknown status")
    except (OSError, ValueError, AttributeError):
        return "unreadable results.json"


def held_run(run_dir: Path) -> str | None:
    """A few words on the run ``run_dir`` holds, or ``None`` if it holds none. Called once no live
    process holds the directory (:func:`check_lock`): a run still ``running`` there was stopped
    before it could write its end."""
    status = record_status(run_dir)
    if status == "running":
        return "a run marked running whose process has stopped (it ended before writing its status)"
    if status is not None:
        return f"a {status} run" if " " not in status else f"a run with an {status}"
    if (Path(run_dir) / "checkpoints" / "last.pt").exists():
        return "a run's checkpoint"
    return None


def remembered_params(run_dir: Path, checkpoint: dict | None = None) -> dict:
    """The configuration the run in ``run_dir`` trained with: its checkpoint's (``checkpoint``,
    else ``last.pt`` read here), else its record's."""
    path = Path(run_dir) / "checkpoints" / "last.pt"
    if checkpoint is None and path.exists():
        checkpoint = load_checkpoint(path)
    config = checkpoint.get("config") if checkpoint is not None else None
    if config is None and (Path(run_dir) / "results.json").exists():
        config = json.loads((Path(run_dir) / "results.json").read_text()).get("params")
    return config or {}


def finished_without_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a completed run whose ``last.pt`` was not kept
    (``trainer.keep_checkpoints``): a resume has nothing to continue, and keeps its record."""
    return record_status(run_dir) == "completed" and not (Path(run_dir) / "checkpoints" / "last.pt").exists()


# What a completed run keeps of its checkpoints, by ``trainer.keep_checkpoints`` (file name
# patterns: ``best*.pt`` is ``best.pt`` and the best model of each ``trainer.also_select_on`` metric).
KEPT_CHECKPOINTS = {"all": ("last.pt", "best*.pt"), "best": ("best*.pt",), "none": ()}


def prune_checkpoints(run_dir: Path, keep: str) -> None:
    """Delete the checkpoints of a completed run that ``keep`` (a key of
    :data:`KEPT_CHECKPOINTS`) does not keep; the records (results, history, TensorBoard) stay."""
    directory = Path(run_dir) / "checkpoints"
    for path in directory.glob("*.pt"):
        if not any(fnmatch.fnmatch(path.name, kept) for kept in KEPT_CHECKPOINTS[keep]):
            path.unlink()
    if directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()


# --- what a directory holds ------------------------------------------------------------------

def foreign_entries(run_dir: Path, written_by_hydra: Iterable[str] = ()) -> list[str]:
    """The entries of ``run_dir`` (``name/`` for a folder), but for ``run.lock`` and the files
    Hydra wrote for this very job (``written_by_hydra``); none if it does not exist."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    skipped = {LOCK_NAME, SWEEP_LOCK_NAME, *written_by_hydra}
    return sorted(f"{path.name}/" if path.is_dir() else path.name
                  for path in run_dir.iterdir() if path.name not in skipped)


def _some(names: list[str], shown: int = 4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _describe(key: str, remembered: Mapping, params: Mapping) -> str:
    old, new = (repr(config[key]) if key in config else "unset" for config in (remembered, params))
    return f"{key} ({old} in the run, {new} now)"


def check_run_dir(run_dir: Path, params: Mapping, resume: bool, in_sweep: bool = False,
                  written_by_hydra: Iterable[str] = ()) -> bool:
    """Apply the rules above to ``run_dir`` before anything is written in it.

    ``written_by_hydra`` names what Hydra already wrote there for this job (``.hydra``,
    ``train.log``), which does not make the directory someone else's. Returns whether training
    continues from the directory's checkpoint. Raises :class:`~topk.errors.RunRefused` (one
    sentence) when the run must not start, :class:`~topk.errors.CheckpointError` when its
    checkpoint cannot be used.
    """
    run_dir = Path(run_dir)
    check_lock(run_dir)
    held = held_run(run_dir)
    option = "hydra.sweep.dir" if in_sweep else "hydra.run.dir"
    if held is None and not (resume and not in_sweep):
        foreign = foreign_entries(run_dir, written_by_hydra)
        if foreign:
            raise RunRefused(
                f"{run_dir} is not empty but holds no run (no results.json): it holds {_some(foreign)}; "
                f"choose another directory with {option}=PATH (nothing was changed in it)."
            )
    if not resume:
        if held is not None:
            raise RunRefused(
                f"{run_dir} already holds {held}; continue it with trainer.resume=true, or "
                f"choose another directory with {option}=PATH (nothing was changed in it)."
            )
        return False
    if finished_without_checkpoint(run_dir):
        check_finished_params(run_dir, params)
        return False
    if not (run_dir / "checkpoints" / "last.pt").exists():
        if held is None and not in_sweep:
            raise RunRefused(
                f"trainer.resume=true but {run_dir} holds no run to resume; give the directory "
                "of the run to continue with hydra.run.dir=PATH, or leave out trainer.resume."
            )
        log.info("no checkpoint in %s: the run starts from scratch there", run_dir)
        return False
    checkpoint = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    check_same_training(run_dir, remembered_params(run_dir, checkpoint), params)
    if params.get("trainer.epochs") is not None:
        check_resume_epochs(run_dir, checkpoint["epoch"], params["trainer.epochs"])
    selected_weights(run_dir / "checkpoints" / "best.pt", checkpoint, note=lambda *args: None)
    return True


def check_same_training(run_dir: Path, remembered: Mapping, params: Mapping) -> None:
    """Refuse, in one sentence, a resume whose training configuration differs from the run's."""
    differing = differing_keys(remembered, params)
    if differing:
        shown = "; ".join(_describe(key, remembered, params) for key in differing[:6])
        more = f" and {len(differing) - 6} more" if len(differing) > 6 else ""
        raise RunRefused(
            f"cannot resume {run_dir} with another training configuration: {shown}{more}; "
            "resume with the run's values, or start a new run in another directory."
        )


def check_finished_params(run_dir: Path, params: Mapping) -> None:
    """A completed run without ``last.pt`` resumes only to keep its record: with the same
    training configuration and no more epochs."""
    remembered = remembered_params(run_dir)
    check_same_training(run_dir, remembered, params)
    epochs, more = remembered.get("trainer.epochs"), params.get("trainer.epochs")
    if epochs is not None and more is not None and more < epochs:
        raise RunRefused(
            f"{run_dir} holds a completed run of {epochs} epochs, which trainer.epochs={more} cannot "
            f"resume; resume with trainer.epochs={epochs}, or start a new run in another directory."
        )
    if epochs is not None and more is not None and more > epochs:
        raise RunRefused(
            f"{run_dir} holds a completed run of {epochs} epochs whose checkpoints/last.pt was not "
            f"kept (trainer.keep_checkpoints), so it cannot be extended to {more} epochs; start a "
            "new run in another directory."
        )


def claim(run_dir: Path, record: Mapping) -> None:
    """Create ``results.json`` exclusively, holding the run's first ``record``, so that no second
    run can start in ``run_dir``. It is written to a temporary file first and hard-linked into
    place: a full disk leaves no ``results.json`` at all rather than an empty one."""
    path = Path(run_dir) / "results.json"
    temporary = path.with_name(f"results.json.{os.getpid()}.tmp")
    try:
        write_results(run_dir, record, temporary.name)
        os.link(temporary, path)
    except FileExistsError:
        raise RunRefused(
            f"{run_dir} was claimed by another run that started at the same moment; choose "
            "another directory with hydra.run.dir=PATH."
        ) from None
    finally:
        temporary.unlink(missing_ok=True)


def _held_by_a_live_process(run_dir: Path) -> bool:
    """Whether ``run_dir``'s ``run.lock`` names a process still running (on this host, or one that
    cannot be checked from here)."""
    try:
        check_lock(run_dir)
    except RunRefused:
        return True
    return False


def mark_stopped_runs(sweep_dir: Path) -> int:
    """Mark every record below ``sweep_dir`` still ``running`` as ``interrupted``: its process
    was stopped before it could write (a launcher's worker killed when the sweep was interrupted).
    The resume point is the last checkpoint, whose epoch is the length of ``history.csv`` (both
    are written together). Returns how many records were marked."""
    marked = 0
    for path in Path(sweep_dir).rglob("results.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("status") != "running" or _held_by_a_live_process(path.parent):
            continue
        history = path.parent / "history.csv"
        epochs = max(len(history.read_text().splitlines()) - 1, 0) if history.exists() else 0
        record.update(status="interrupted", error=f"interrupted; resume continues after epoch {epochs}")
        if isinstance(record.get("provenance"), dict):  # it ended about now
            record["provenance"]["ended_utc"] = utc_now()
        write_json_atomic(path, record)
        marked += 1
    return marked
