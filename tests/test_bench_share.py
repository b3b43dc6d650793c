"""make bench-share's sweep command and table (topk/bench/share.py); the slots its sweeps rely on
are tests/test_job_share.py's."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

from topk.bench import share


def test_each_sweep_is_the_same_runs_k_at_a_time_under_joblib():
    args = Namespace(runs=3, model="densenet40_12", train_size=640, device="auto", epochs=2)
    command = share.sweep_command(args, 4, Path("/tmp/s"))
    assert "seed=0,1,2" in command and "hydra/launcher=joblib" in command
    assert "hydra.launcher.n_jobs=4" in command and "hydra.sweep.dir=/tmp/s" in command
    assert "model=densenet40_12" in command and "dataset.train_size=640" in command
    assert "trainer.epochs=2" in command


def test_the_table_gives_images_per_second_and_the_speed_up_over_the_first_row():
    settings = {"model": "densenet40_12", "train_size": 10_000, "runs": 4, "cores": 16,
                "device_name": "1 x NVIDIA H100", "torch": "2.14.1"}
    rows = [{"jobs": 1, "runs": 4, "completed": 4, "wall_s": 40.0, "images_per_s": 1000.0, "median_epoch_s": 5.0},
            {"jobs": 4, "runs": 4, "completed": 4, "wall_s": 16.0, "images_per_s": 2500.0, "median_epoch_s": None}]
    lines = share.markdown(rows, settings).splitlines()
    assert lines[0].startswith("densenet40_12, 10,000 random CIFAR-shaped images, 1 epoch per run")
    assert "1 x NVIDIA H100" in lines[0]
    assert lines[-2] == "| 1 | 4/4 | 40.0 | 1,000 | 5.00 | 1.00x |"
    assert lines[-1] == "| 4 | 4/4 | 16.0 | 2,500 | n/a | 2.50x |"
