"""A run's life in its Hydra job directory (:func:`run_session`), around the training: the
directory checked and locked before anything is written, the run claimed (a new
``results.json``, status ``running``) or resumed, the job's config saved, torchrun's processes
set up; on exit its status (``completed``, ``failed``, ``interrupted``) and end time, its
checkpoints pruned, the lock released. The rules it applies are :mod:`topk.run_dir`'s (one run per
directory), :mod:`topk.locks`' (one writer) and :mod:`topk.records`' (the record)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from topk import distributed as dist_setup
from topk import job_share
from topk.distributed import Distributed, resolve_device
from topk.errors import ConfigError
from topk.locks import acquire_lock
from topk.progress import log_to_file_only
from topk.records import (
    device_provenance,
    provenance,
    read_results,
    utc_now,
    versions,
    write_atomically,
    write_results,
)
from topk.run_dir import (
    check_run_dir,
    claim,
    file_in_place_of_folder,
    finished_without_checkpoint,
    prune_checkpoints,
    record_status,
    run_params,
    unwritable_reason,
)
from topk.stopping import RunInterrupted, preemption_signal

log = logging.getLogger("train")


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
    ``trainer.keep_checkpoints``; the lock (and a joblib sweep's job slot) goes however the run ends. Under torchrun every process
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
        job_share.give_back()  # a joblib sweep's slot, if this job took one (start_processes)
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
        start_processes(session, cfg.trainer, hydra_cfg)
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
    if session.distributed.is_main:  # one line for the run, not one per torchrun process
        top = {k: round(v, 2) for k, v in record["test"].items() if k in ("top1", "top2", "top3", "top5")}
        log.info("completed: test %s; record in %s", top, session.run_dir / "results.json")


def start_processes(session: RunSession, trainer: DictConfig, hydra_cfg: DictConfig) -> None:
    """torchrun's process group and this process's device (:func:`topk.distributed.setup`), into
    ``session`` and the record's provenance; every process learns rank 0's run directory and
    whether its run is already finished. A job of a joblib sweep running several at once first
    takes its slot: a GPU for ``trainer.device=auto`` and a share of the cores
    (:mod:`topk.job_share`)."""
    device = resolve_device(trainer.device)
    slot = None if dist_setup.from_environment().enabled else job_share.take_slot(hydra_cfg, torch.cuda.device_count())
    if slot is not None:
        if trainer.device == "auto" and slot.gpu is not None:
            device = torch.device("cuda", slot.gpu)
            torch.cuda.set_device(device)  # what code that names no index (cudnn, compile) uses
        if not trainer.num_threads:
            torch.set_num_threads(len(slot.cores))
        session.record["provenance"]["job_slot"] = slot.provenance()
    session.distributed, session.device = dist_setup.setup(trainer.distributed_backend, device)
    session.record["provenance"].update(device_provenance(session.device, session.distributed.world_size))
    run_dir, session.finished = session.distributed.broadcast((str(session.run_dir), session.finished))
    session.run_dir = Path(run_dir)
    dist_setup.remove_worker_scratch()
