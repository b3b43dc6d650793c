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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from topk import distributed as dist_setup
from topk.checkpoints import check_resume_epochs, load_checkpoint, selected_weights
from topk.distributed import Distributed, resolve_device
from topk.errors import ConfigError, RunRefused
from topk.locks import LOCK_NAME, SWEEP_LOCK_NAME, acquire_lock, check_lock
from topk.progress import log_to_file_only
from topk.records import (
    device_provenance,
    flatten,
    provenance,
    read_results,
    utc_now,
    versions,
    write_atomically,
    write_json_atomic,
    write_results,
)
from topk.stopping import RunInterrupted, preemption_signal

log = logging.getLogger(__name__)

# Keys that may change when a run is resumed: they change how long, how fast, where or how
# verbosely it trains, never what it learns from one epoch to the next.
HARMLESS_KEYS = frozenset({
    "trainer.epochs", "trainer.resume", "trainer.progress", "trainer.progress_every", "trainer.tensorboard",
    "trainer.num_workers", "trainer.num_threads", "trainer.device", "trainer.distributed_backend",
    "trainer.eval_batch_size", "trainer.eval_every", "trainer.checkpoint_every",
    "trainer.compile", "trainer.channels_last", "trainer.keep_checkpoints", "loss.compile",
    "trainer.grad_nonzero",
    "data_root", "dataset.root", "dataset.lists_root", "dataset.check_images",
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
ADDED_KEYS = {"trainer.also_select_on": []}


def differing_keys(remembered: Mapping, params: Mapping) -> list[str]:
    """The keys whose values differ between two flat configs, harmless keys left out (a run
    recorded under a key's old name, :data:`RENAMED_KEYS`, is compared under the new one; a key
    one side lacks that was added since, :data:`ADDED_KEYS`, has its default there)."""
    remembered = {RENAMED_KEYS.get(key, key): value for key, value in remembered.items()}
    keys = sorted((set(remembered) | set(params)) - HARMLESS_KEYS)
    return [key for key in keys if remembered.get(key, ADDED_KEYS.get(key, _MISSING))
            != params.get(key, ADDED_KEYS.get(key, _MISSING))]


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


# --- a run's life in its directory -------------------------------------------------------------

def new_record(cfg: DictConfig, choices, run_provenance: dict) -> dict:
    """A new run's record (status ``running``): what was asked for, and ``run_provenance``
    (:func:`topk.records.provenance`)."""
    return {
        "status": "running",
        "error": None,
        "experiment": cfg.get("experiment"),
        "dataset": choices.get("dataset") or "custom",
        "model": choices.get("model") or "custom",
        "loss": choices.get("loss") or "custom",
        "augment": choices.get("augment") or "custom",
        "seed": int(cfg.seed),
        "params": run_params(cfg),
        "best_epoch": None,
        "selection_metric": cfg.trainer.selection_metric,
        "val": {},
        "test": {},
        "epoch_seconds": None,
        "versions": versions(),
        "provenance": run_provenance,
    }


def keep_first_start(run_dir: Path, record: dict) -> None:
    """A resumed run keeps the ``started_utc`` of its first session, read from the
    ``results.json`` it continues (when it continues a checkpoint and that record holds one), so
    that ``started_utc`` to ``ended_utc`` spans the whole run, pauses included. The other
    provenance keys are this session's."""
    if not (run_dir / "checkpoints" / "last.pt").exists():
        return  # trains from scratch: a new start
    try:
        started = json.loads((run_dir / "results.json").read_text())["provenance"]["started_utc"]
    except (OSError, ValueError, KeyError, TypeError):  # no earlier record, or one without provenance
        return
    if isinstance(started, str):
        record["provenance"]["started_utc"] = started


def end_record(run_dir: Path, record: dict, distributed, status: str, error: str | None) -> None:
    """Write the run's final ``status`` and end time (rank 0); a failed or interrupted run's
    ``error`` goes to ``train.log`` too."""
    record.update(status=status, error=error)
    record["provenance"]["ended_utc"] = utc_now()
    if distributed.is_main:
        write_results(run_dir, record)
        if error is not None:
            log_to_file_only(f"{status}: {error}", logging.ERROR)


def check_output_dir(run_dir: Path) -> None:
    """One sentence, before anything is written, if the run directory cannot be written or a
    file stands where the run keeps one of its folders."""
    reason = unwritable_reason(run_dir)
    if reason is not None:
        raise ConfigError(
            f"the output directory {run_dir} cannot be written ({reason}); "
            "choose another with hydra.run.dir=... (or hydra.sweep.dir=... for -m)."
        )
    misplaced = file_in_place_of_folder(run_dir)
    if misplaced is not None:
        raise ConfigError(f"{misplaced} with hydra.run.dir=... (or hydra.sweep.dir=... for -m).")


def resumes_by_itself(run_dir: Path) -> bool:
    """A submitit job whose directory holds an interrupted run is that run requeued (by submitit
    after the preemption signal, :meth:`topk.engine.StopRequests.requeue_if_preempted`, or by
    SLURM itself) and resumes it. Nothing else leaves one there: a sweep started again into its
    directory is refused before any job is submitted unless it says ``trainer.resume=true``."""
    return preemption_signal() is not None and record_status(run_dir) == "interrupted"


def written_by_hydra(hydra_cfg) -> list[str]:
    """What Hydra wrote in the job's directory before the run starts: its output folder
    (``.hydra``) and the job's log (``train.log``)."""
    names = [f"{hydra_cfg.job.name}.log"]
    return [hydra_cfg.output_subdir, *names] if hydra_cfg.get("output_subdir") else names


def save_job_config(run_dir: Path, cfg: DictConfig, hydra_cfg: DictConfig) -> None:
    """Write the job's ``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml``, the files
    Hydra writes when ``hydra.output_subdir`` is set: here once the run directory is checked and
    locked, so that a refused run leaves its directory as it was (``conf/train.yaml`` sets
    ``hydra.output_subdir: null``). Each file is written whole or not at all."""
    files = {"config.yaml": cfg, "hydra.yaml": OmegaConf.create({"hydra": hydra_cfg}),
             "overrides.yaml": OmegaConf.create(list(hydra_cfg.overrides.task))}
    (run_dir / ".hydra").mkdir(exist_ok=True)
    for name, config in files.items():
        write_atomically(run_dir / ".hydra" / name, partial(OmegaConf.save, config))


@dataclass
class RunSession:
    """A run in its directory (:func:`run_session`): where, its record (filled by the training),
    its processes and device; ``finished`` for a completed run resumed after its ``last.pt`` was
    pruned, which has nothing to train and keeps its record as it is."""

    run_dir: Path
    record: dict
    distributed: Distributed
    device: torch.device | None = None
    finished: bool = False


@contextlib.contextmanager
def run_session(cfg: DictConfig, hydra_cfg: DictConfig, code_dir: Path, argv: list[str]) -> Iterator[RunSession]:
    """The life of one run in its Hydra job directory, around the training.

    On entry, before anything is written: the directory is checked (writable; no other run in it,
    or the run this resumes with the configuration its checkpoint remembers: :func:`check_run_dir`)
    and locked (``run.lock``, :class:`topk.locks.RunLock`); then the run is claimed (a new
    ``results.json``, status ``running``) or resumed (a requeued submitit job resumes its
    interrupted run by itself), the job's config is saved, and torchrun's processes are set up.
    On exit the record gets its status, ``completed``, ``failed`` (the error's sentence) or
    ``interrupted`` (re-raised as :class:`~topk.stopping.RunInterrupted`, whose epoch a resume
    continues), and its end time; a completed run's checkpoints are pruned to
    ``trainer.keep_checkpoints``; the lock goes however the run ends. Under torchrun every process
    enters; the directory is rank 0's (the others' Hydra output went to a scratch directory,
    :func:`topk.distributed.worker_argv`), and only rank 0 writes in it and holds its lock.
    ``argv`` and ``code_dir`` go into the record's provenance (the command, the git commit)."""
    run_dir = Path(hydra_cfg.runtime.output_dir)
    distributed = dist_setup.from_environment()
    run_provenance = provenance(code_dir, list(hydra_cfg.overrides.task), argv, distributed.world_size)
    if resumes_by_itself(run_dir):
        log.info("%s holds this submitit job's interrupted run: the requeued job resumes it", run_dir)
        cfg.trainer.resume = True
    session = RunSession(run_dir, new_record(cfg, hydra_cfg.runtime.choices, run_provenance), distributed)
    lock = None
    if distributed.is_main:
        check_output_dir(run_dir)
        check_run_dir(run_dir, session.record["params"], bool(cfg.trainer.resume),
                      in_sweep=getattr(hydra_cfg.mode, "name", None) == "MULTIRUN",
                      written_by_hydra=written_by_hydra(hydra_cfg))
        lock = acquire_lock(run_dir)
    try:
        yield from _locked_session(session, cfg, hydra_cfg)
    finally:
        if lock is not None:
            lock.release()


def _locked_session(session: RunSession, cfg: DictConfig, hydra_cfg: DictConfig) -> Iterator[RunSession]:
    """:func:`run_session` once the directory is checked (and, on rank 0, locked)."""
    resume, record = bool(cfg.trainer.resume), session.record
    if session.distributed.is_main:
        session.finished = resume and finished_without_checkpoint(session.run_dir)
        if not resume:
            claim(session.run_dir, record)
        elif not session.finished:
            keep_first_start(session.run_dir, record)
            write_results(session.run_dir, record)
    try:
        if session.distributed.is_main:
            save_job_config(session.run_dir, cfg, hydra_cfg)
        start_processes(session, cfg.trainer)
        if session.finished:
            log.info("%s holds a completed run without checkpoints/last.pt: its record is kept as it is",
                     session.run_dir)
            session.record = read_results(session.run_dir / "results.json")
            yield session
            return
        yield session
    except KeyboardInterrupt as stop:  # fit's RunInterrupted, or a stop before training: nothing saved
        interruption = stop if isinstance(stop, RunInterrupted) else RunInterrupted(0)
        end_record(session.run_dir, record, session.distributed, "interrupted", str(interruption))
        raise interruption from None
    except Exception as error:
        end_record(session.run_dir, record, session.distributed, "failed", f"{type(error).__name__}: {error}")
        raise
    end_record(session.run_dir, record, session.distributed, "completed", None)
    if session.distributed.is_main:
        prune_checkpoints(session.run_dir, cfg.trainer.keep_checkpoints)
    top = {k: round(v, 2) for k, v in record["test"].items() if k in ("top1", "top2", "top3", "top5")}
    log.info("completed: test %s; record in %s", top, session.run_dir / "results.json")


def start_processes(session: RunSession, trainer: DictConfig) -> None:
    """torchrun's process group and this process's device (:func:`topk.distributed.setup`), into
    ``session`` and the record's provenance; every process learns rank 0's run directory and
    whether its run is already finished."""
    session.distributed, session.device = dist_setup.setup(trainer.distributed_backend,
                                                           resolve_device(trainer.device))
    session.record["provenance"].update(device_provenance(session.device, session.distributed.world_size))
    run_dir, session.finished = session.distributed.broadcast((str(session.run_dir), session.finished))
    session.run_dir = Path(run_dir)
    dist_setup.remove_worker_scratch()
