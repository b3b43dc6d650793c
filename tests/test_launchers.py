"""Sweeps through Hydra's submitit launcher: locally here, on SLURM with the project's settings."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from test_faults import run_main

from conftest import ROOT, compose_config
from topk.records import find_results, read_results


def test_submitit_local_sweep_writes_every_record(tmp_path, monkeypatch):
    # train.py's entry point in this process, typed in the repository (submitit starts each job as
    # a process of its own there, which imports train.py's module)
    monkeypatch.chdir(ROOT)
    code, stderr = run_main(["-m", "hydra/launcher=submitit_local", "seed=0,1", "trainer.epochs=2",
                             "trainer.progress=false", f"hydra.sweep.dir={tmp_path}"], quick=False)
    assert code == 0, stderr[-2000:]
    records = find_results(tmp_path)
    assert sorted(record["seed"] for record in records) == [0, 1]
    assert {record["status"] for record in records} == {"completed"}


def test_slurm_launcher_is_configured_for_long_gpu_runs():
    cfg = compose_config(["+experiment=g22_cifar_noise", "hydra/launcher=slurm",
                          "hydra.launcher.partition=gpu"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "gpu"
    assert launcher.gpus_per_node == 1 and launcher.timeout_min == 4320
    assert launcher.signal_delay_s == 300 and launcher.max_num_timeout == 3  # requeued at the time limit


def submitit_job_pids(folder: Path) -> list[int]:
    """The processes running a submitit job whose pickles are below ``folder``."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in words and any(str(folder).encode() in word for word in words):
            pids.append(int(cmdline.parent.name))
    return pids


def test_a_preempted_submitit_job_is_requeued_and_resumes_exactly(tmp_path):
    """submitit's preemption signal (USR2, what SLURM sends before a time limit) stops the run at a
    batch boundary; the job is requeued (submitit's checkpoint hook), finds its interrupted run and
    resumes it by itself: the same history as the run never stopped."""
    args = ["seed=0", "trainer.epochs=300", "trainer.progress=false", "trainer.num_threads=1"]
    sweep = tmp_path / "sweep"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=submitit_local", *args,
         f"hydra.sweep.dir={sweep}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (sweep / "0" / "checkpoints" / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    (pid,) = submitit_job_pids(sweep / ".submitit")
    os.kill(pid, signal.SIGUSR2)
    stderr = process.communicate(timeout=240)[1]
    assert process.returncode == 0, stderr[-2000:]
    log = (sweep / "0" / "train.log").read_text()
    assert "holds this submitit job's interrupted run: the requeued job resumes it" in log
    assert re.search(r"resumed from \S+/last.pt after epoch \d+", log)
    assert read_results(sweep / "0" / "results.json")["status"] == "completed"
    whole = tmp_path / "whole"
    assert run_main([*args, f"hydra.run.dir={whole}"], quick=False)[0] == 0  # never stopped: train.py in this process
    pd.testing.assert_frame_equal(pd.read_csv(sweep / "0" / "history.csv").drop(columns="seconds"),
                                  pd.read_csv(whole / "history.csv").drop(columns="seconds"))
