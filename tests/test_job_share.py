"""Several jobs of a joblib sweep at once on one machine (topk.job_share): each worker takes a slot
no job running at the same time has, and with it a GPU (trainer.device=auto) and a share of the
cores; the record says which; single runs and other launchers take none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from omegaconf import OmegaConf

from conftest import ROOT, run_cli
from topk import job_share
from topk.records import EMPTY_PROVENANCE, validate_results


@pytest.mark.parametrize(("index", "jobs", "cores", "gpus", "share", "gpu"), [
    (0, 4, 16, 1, (0, 1, 2, 3), 0),        # 4 jobs on one GPU, 4 cores each
    (3, 4, 16, 1, (12, 13, 14, 15), 0),
    (5, 8, 16, 2, (10, 11), 1),            # 8 jobs on 2 GPUs: 4 on each, 2 cores each
    (0, 3, 8, 0, (0, 1, 2), None),         # 8 cores in 3 shares: 3, 3, 2; no GPU
    (2, 3, 8, 0, (6, 7), None),
    (3, 4, 2, 1, (1,), 0),                 # fewer cores than jobs: slot i on core i mod cores
])
def test_a_slot_is_a_gpu_in_turn_and_a_contiguous_share_of_the_cores(index, jobs, cores, gpus, share, gpu):
    slot = job_share.slot_share(index, jobs, tuple(range(cores)), gpus)
    assert (slot.cores, slot.gpu) == (share, gpu)


def test_the_shares_cover_every_core_once():
    cores = (3, 5, 8, 9, 10, 11, 20)  # an affinity with holes (taskset, a cpuset)
    shares = [job_share.slot_share(i, 3, cores, 0).cores for i in range(3)]
    assert sorted(core for share in shares for core in share) == list(cores)


def test_jobs_running_at_once_never_share_a_slot_and_a_closed_one_frees(tmp_path):
    first, handle0 = job_share.claim_slot(tmp_path, 3)
    second, handle1 = job_share.claim_slot(tmp_path, 3)
    assert (first, second) == (0, 1)
    handle0.close()  # that job ended
    third, handle2 = job_share.claim_slot(tmp_path, 3, first=2)  # the worker's previous slot first
    fourth, handle3 = job_share.claim_slot(tmp_path, 3, first=1)  # taken: the lowest free one
    assert (third, fourth) == (2, 0)
    for handle in (handle1, handle2, handle3):
        handle.close()


def test_a_worker_waits_while_every_slot_is_taken_and_a_dead_one_frees_its_slot(tmp_path):
    """Another process holds both slots; when it dies (killed, as loky may retire a worker), the
    waiting claim gets one."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from topk.job_share import claim_slot
        held = [claim_slot(Path({str(tmp_path)!r}), 2) for _ in range(2)]
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout.readline().strip() == "held"
    try:
        import threading

        threading.Timer(0.5, holder.kill).start()
        index, handle = job_share.claim_slot(tmp_path, 2, poll_s=0.05)
        assert index == 0 and holder.poll() is not None
        handle.close()
    finally:
        holder.kill()
        holder.wait()


def hydra_job(launcher: str, n_jobs, mode: str = "MULTIRUN"):
    from hydra.types import RunMode

    return OmegaConf.create({"launcher": {"_target_": launcher, "n_jobs": n_jobs},
                             "mode": RunMode[mode], "sweep": {"dir": "multirun/x"}})


JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"


@pytest.mark.parametrize(("launcher", "n_jobs", "mode", "jobs"), [
    (JOBLIB, 4, "MULTIRUN", 4),
    (JOBLIB, 1, "MULTIRUN", 1),
    (JOBLIB, 4, "RUN", 1),        # a single run composed with the joblib launcher: one job
    ("hydra._internal.core_plugins.basic_launcher.BasicLauncher", None, "MULTIRUN", 1),
    ("hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher", None, "MULTIRUN", 1),
])
def test_only_a_joblib_sweep_of_several_jobs_at_once_shares_the_machine(launcher, n_jobs, mode, jobs):
    assert job_share.jobs_at_once(hydra_job(launcher, n_jobs, mode)) == jobs


def test_a_negative_n_jobs_counts_from_the_cores_as_joblib_does():
    import joblib

    assert job_share.jobs_at_once(hydra_job(JOBLIB, -1)) == joblib.cpu_count()


def test_a_bad_job_slot_in_a_record_is_named():
    record = {"status": "completed", "error": None, "experiment": None, "dataset": "d", "model": "m",
              "loss": "l", "seed": 0, "params": {}, "best_epoch": 0, "selection_metric": "val/top1",
              "val": {}, "test": {}, "epoch_seconds": 1.0, "versions": {},
              "provenance": {**EMPTY_PROVENANCE, "job_slot": {"slot": 1, "jobs_at_once": 2, "cores": 1}}}
    validate_results(record)
    record["provenance"]["job_slot"] = {"slot": "1", "jobs_at_once": 2, "cores": 1}
    with pytest.raises(ValueError, match="provenance job_slot"):
        validate_results(record)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_pinning_moves_every_thread_of_the_process(monkeypatch):
    """torch's thread pool, started by an earlier job, follows the worker to its new share."""
    import threading

    cores = tuple(sorted(os.sched_getaffinity(0)))
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        job_share.pin(cores[:1])
        assert os.sched_getaffinity(thread.native_id) == {cores[0]} == os.sched_getaffinity(0)
    finally:
        job_share.pin(cores)
        stop.set()
        thread.join()
    assert os.sched_getaffinity(0) == set(cores)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")
def test_a_joblib_sweep_runs_each_job_in_its_own_slot_pinned_to_its_share(tmp_path):
    """Four circles runs, two at a time: every record names slot 0 or 1 of 2, and each job ran on
    its share of this machine's cores (one each on 2 cores), the two slots' shares apart."""
    sweep = tmp_path / "sweep"
    result = run_cli(["-m", "seed=0,1,2,3", "trainer.epochs=2", "trainer.progress=false",
                      "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 0, result.stderr
    records = [json.loads(path.read_text()) for path in sorted(sweep.glob("*/results.json"))]
    assert len(records) == 4 and all(record["status"] == "completed" for record in records)
    slots = [record["provenance"]["job_slot"] for record in records]
    cores = len(os.sched_getaffinity(0))
    assert {slot["slot"] for slot in slots} <= {0, 1} and all(slot["jobs_at_once"] == 2 for slot in slots)
    assert all(slot["cores"] == max(1, cores // 2) for slot in slots)
    gpus = torch.cuda.device_count()  # trainer.device=auto: slot i on cuda:<i mod GPUs>, or the CPU
    assert all(record["provenance"]["device"] == (f"cuda:{slot['slot'] % gpus}" if gpus else "cpu")
               for record, slot in zip(records, slots))
    assert not job_share.slot_folder(sweep).exists()  # the sweep's end removed its locks


def test_a_sweep_with_the_basic_launcher_takes_no_slot(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_cli(["-m", "seed=0,1", "trainer.epochs=1", "trainer.progress=false", f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 0, result.stderr
    records = [json.loads(path.read_text()) for path in sorted(sweep.glob("*/results.json"))]
    assert len(records) == 2 and not any("job_slot" in record["provenance"] for record in records)
