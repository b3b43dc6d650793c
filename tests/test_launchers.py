"""Sweeps through Hydra's submitit launcher: locally here, on SLURM with the project's settings."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, compose_config
from topk.records import find_results


def test_submitit_local_sweep_writes_every_record(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=submitit_local", "seed=0,1",
         "trainer.epochs=2", "trainer.progress=false", f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    records = find_results(tmp_path)
    assert sorted(record["seed"] for record in records) == [0, 1]
    assert {record["status"] for record in records} == {"completed"}


def test_slurm_launcher_is_configured_for_long_gpu_runs():
    cfg = compose_config(["+experiment=g22_cifar_noise", "hydra/launcher=slurm",
                          "hydra.launcher.partition=gpu"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "gpu"
    assert launcher.gpus_per_node == 1 and launcher.timeout_min == 4320
