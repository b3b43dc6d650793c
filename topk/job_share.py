"""Several jobs of a sweep on one machine, each with its own GPU and share of the cores.

    python train.py -m +experiment=g22_cifar_noise hydra/launcher=joblib hydra.launcher.n_jobs=8

Hydra's joblib launcher runs ``hydra.launcher.n_jobs`` = k jobs at once, each in a worker process
of its own (joblib's loky backend), and a worker runs job after job. Each job takes one of k
*slots* when it starts (:func:`take_slot`; the worker's previous slot first, if free) and gives it
back when it ends (:func:`give_back`); the slot gives it (:func:`slot_share`):

- a GPU: ``trainer.device=auto`` becomes ``cuda:<slot mod GPUs>``, so k jobs fill the visible GPUs
  in turn (k = 8 on 2 GPUs: 4 jobs on each); a device named on the command line wins;
- a share of the cores: the process's CPU affinity, cut into k contiguous shares, slot i pinned to
  share i (``os.sched_setaffinity`` on every thread of the worker, torch's thread pool included,
  Linux); torch's threads are the share's cores unless
  ``trainer.num_threads`` says otherwise, and ``trainer.num_workers: auto`` gives each image loader
  the share less one (:func:`topk.data.workers.resolve_workers` counts the narrowed affinity).
  With fewer cores than jobs, slot i shares core i mod cores with others.

Why: a small CIFAR model (DenseNet 40-12 at batch 64) leaves most of a large GPU idle, and k jobs
at once fill it (docs/scaling.md, "Several small jobs per GPU", says how to choose k). Without
slots the k jobs would all land on ``cuda:0`` and each start a full set of torch threads.

A slot is an exclusive ``fcntl.flock`` on ``<tmp>/topk-job-slots/<sweep key>/<i>.lock``, held
through an open file while the job runs: jobs running at once never share a slot, a job that
finds every slot taken waits for one (a worker of the same sweep ending its job), and a worker
that dies frees its slot with its file descriptors. The locks are local to the machine, as the
joblib launcher is, and never in the sweep's folder, which may be on a network file system; the
sweep's end removes them (:func:`remove_slots`). The run record's ``provenance.job_slot`` says
which slot of how many a run had and its cores; single runs and the other launchers take no slot.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

JOBLIB = "JoblibLauncher"


@dataclass(frozen=True)
class Slot:
    """This worker's place among the k jobs a joblib sweep runs at once."""
    index: int
    jobs: int
    cores: tuple[int, ...]
    gpu: int | None  # the CUDA device index for trainer.device=auto; None without a GPU

    def provenance(self) -> dict:
        """The run record's ``provenance.job_slot``."""
        return {"slot": self.index, "jobs_at_once": self.jobs, "cores": len(self.cores)}


# The slot of this process's running job: (Slot, open lock file); and the last slot it had.
_held: tuple[Slot, Any] | None = None
_last_index: int | None = None
_first_affinity: tuple[int, ...] | None = None


def jobs_at_once(hydra_cfg) -> int:
    """How many jobs the sweep's launcher runs at once: ``hydra.launcher.n_jobs`` for Hydra's joblib
    launcher (a negative n, joblib's meaning: the cores plus 1 plus n, ``joblib.cpu_count``), 1 for
    a single run and any other launcher (whose jobs run one after another or on machines of
    their own)."""
    launcher = hydra_cfg.get("launcher") or {}
    if not str(launcher.get("_target_", "")).endswith(JOBLIB) or getattr(hydra_cfg.mode, "name", None) != "MULTIRUN":
        return 1
    n_jobs = int(launcher.get("n_jobs") or 1)
    if n_jobs < 0:
        import joblib

        n_jobs = joblib.cpu_count() + 1 + n_jobs
    return max(1, n_jobs)


def slot_share(index: int, jobs: int, cores: tuple[int, ...], gpus: int) -> Slot:
    """Slot ``index`` of ``jobs``: GPU ``index mod gpus`` (none when ``gpus`` is 0), and the
    ``index``-th of ``jobs`` contiguous shares of ``cores`` (the first ``len(cores) mod jobs``
    shares one core larger); with fewer cores than jobs, core ``index mod len(cores)``."""
    cores = tuple(sorted(cores))
    if len(cores) < jobs:
        share = (cores[index % len(cores)],)
    else:
        size, larger = divmod(len(cores), jobs)
        start = index * size + min(index, larger)
        share = cores[start:start + size + (index < larger)]
    return Slot(index, jobs, share, index % gpus if gpus else None)


def slot_folder(sweep_dir: str | Path) -> Path:
    """Where a sweep's slot locks live on this machine: a folder of the temporary directory named
    after the sweep's absolute path (never the sweep folder itself)."""
    key = hashlib.sha1(str(Path(sweep_dir).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "topk-job-slots" / key


def claim_slot(folder: Path, jobs: int, poll_s: float = 0.1, first: int | None = None):
    """A free slot of ``jobs`` in ``folder``, ``first`` tried first, then the lowest:
    ``(index, open lock file)``, the lock held until that file is closed. Waits while every slot
    is taken (a worker of the same sweep still ending its job), logging once."""
    folder.mkdir(parents=True, exist_ok=True)
    order = ([first] if first is not None and first < jobs else []) + [i for i in range(jobs) if i != first]
    waiting = False
    while True:
        for index in order:
            handle = open(folder / f"{index}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            return index, handle
        if not waiting:
            log.info("all %d job slots in %s are taken: waiting for one to free", jobs, folder)
            waiting = True
        time.sleep(poll_s)


def process_cores() -> tuple[int, ...]:
    """The cores this process could use before it took a slot (its affinity at its first job)."""
    global _first_affinity
    if _first_affinity is None:
        _first_affinity = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") \
            else tuple(range(os.cpu_count() or 1))
    return _first_affinity


def pin(cores: tuple[int, ...]) -> None:
    """Every thread of this process (torch's pool, created by an earlier job, included) on
    ``cores``; threads started later inherit it. Linux only: elsewhere nothing is pinned."""
    if not hasattr(os, "sched_setaffinity"):
        return
    threads = Path("/proc/self/task")
    for tid in ([int(t.name) for t in threads.iterdir()] if threads.is_dir() else [0]):
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


def take_slot(hydra_cfg, gpus: int) -> Slot | None:
    """The slot of this job of a joblib sweep running several at once (``None`` otherwise), its
    worker pinned to the slot's cores; held until :func:`give_back`."""
    global _held, _last_index
    jobs = jobs_at_once(hydra_cfg)
    if jobs == 1:
        return None
    give_back()
    index, handle = claim_slot(slot_folder(hydra_cfg.sweep.dir), jobs, first=_last_index)
    slot = slot_share(index, jobs, process_cores(), gpus)
    pin(slot.cores)
    _held, _last_index = (slot, handle), index
    return slot


def remove_slots(sweep_dir: str | Path) -> None:
    """Delete a finished sweep's slot locks (:func:`slot_folder`); the sweep's end calls it
    (:class:`topk.hydra_callbacks.CheckOutputDir`), when no job of it runs any more."""
    shutil.rmtree(slot_folder(sweep_dir), ignore_errors=True)


def give_back() -> None:
    """Free the running job's slot (its worker stays pinned until its next job takes one)."""
    global _held
    if _held is not None:
        _held[1].close()
        _held = None
