"""The command line around Hydra (:mod:`topk.cli`): ``trainer.resume=<folder>`` and the resume
command an interrupted run prints."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from topk.cli import resume_argv, resume_command, run_summary


@pytest.mark.parametrize("argv,read", [
    (["trainer.resume=outputs/runs/a"], ["trainer.resume=true", "hydra.run.dir=outputs/runs/a"]),
    (["-m", "seed=0,1", "trainer.resume=/abs/sweep"],
     ["-m", "seed=0,1", "trainer.resume=true", "hydra.sweep.dir=/abs/sweep"]),
    (["trainer.resume=true", "hydra.run.dir=x"], ["trainer.resume=true", "hydra.run.dir=x"]),
    (["trainer.resume=False"], ["trainer.resume=False"]),
    (["loss=ce"], ["loss=ce"]),
])
def test_trainer_resume_names_the_folder_to_continue(argv, read):
    assert resume_argv(argv) == read


def test_the_resume_command_replaces_the_folder_and_quotes(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["train.py", "loss=smooth_svm", "+note=a b", "hydra.run.dir=old",
                                      "trainer.resume=true"])
    command = resume_command(tmp_path / "run")
    assert shlex.split(command) == ["python", "train.py", "loss=smooth_svm", "+note=a b",
                                    f"trainer.resume={tmp_path / 'run'}"]
    # pasted back, it names the same folder again
    assert resume_argv(shlex.split(command)[2:])[-1] == f"hydra.run.dir={tmp_path / 'run'}"


def test_the_run_line_says_the_losss_k_beside_the_study_k():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"k": 5, "seed": 0, "loss": {"k": 2}, "trainer": {"epochs": 1}})
    splits = type("Splits", (), {"num_classes": 6})()
    single = type("Single", (), {"enabled": False})()
    line = run_summary(cfg, splits, "cpu", single)
    assert "loss.k=2 (study K=5)" in line and "1 epoch," in line
    cfg.loss.k = 5
    cfg.trainer.epochs = 3
    line = run_summary(cfg, splits, "cpu", single)
    assert "k=5," in line and "study K" not in line and "3 epochs" in line


def test_shown_paths_are_relative_below_the_working_folder(monkeypatch, tmp_path):
    from topk.cli import shown

    monkeypatch.chdir(tmp_path)
    assert shown(tmp_path / "runs" / "a") == str(Path("runs") / "a")
    assert shown(Path("/elsewhere/b")) == "/elsewhere/b"


def test_the_run_line_names_the_job_slot_of_a_joblib_sweep():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"k": 5, "seed": 0, "loss": {}, "trainer": {"epochs": 1}})
    splits = type("Splits", (), {"num_classes": 6})()
    single = type("Single", (), {"enabled": False})()
    line = run_summary(cfg, splits, "cuda:1", single, {"slot": 3, "jobs_at_once": 4, "cores": 2})
    assert line.endswith("device cuda:1, job slot 4 of 4 (2 cores)")
    assert run_summary(cfg, splits, "cpu", single, None).endswith("device cpu")
