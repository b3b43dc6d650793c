"""``schedule=cosine`` (topk/schedules.py): linear warm-up then cosine decay, stepped after every
batch, against its closed form; its refusals; a run's recorded rates and an exact resume."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from test_train import read_record, stop_after

from conftest import compose_config, run_in_process
from topk.schedules import WarmupCosineLR
from topk.schema.check import config_problem
from topk.stopping import RunInterrupted


def closed_form(step, total, warmup, min_ratio):
    if step < warmup:
        return (step + 1) / warmup
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


@pytest.mark.parametrize("epochs, steps, warmup_epochs, min_ratio", [(3, 5, 0.0, 0.0), (4, 3, 1.0, 0.1), (2, 7, 0.5, 0.0)])
def test_rates_follow_the_warmup_and_cosine_formula_step_by_step(epochs, steps, warmup_epochs, min_ratio):
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.4)
    schedule = WarmupCosineLR(optimizer, epochs, steps, warmup_epochs, min_ratio)
    warmup = round(warmup_epochs * steps)
    for step in range(epochs * steps):
        expected = 0.4 * closed_form(step, epochs * steps, warmup, min_ratio)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12)
        optimizer.step()
        schedule.step()
    assert schedule.per_batch


def test_bad_values_are_refused_in_python_and_in_the_config():
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="warmup_epochs must be below epochs"):
        WarmupCosineLR(optimizer, 2, 10, warmup_epochs=2)
    with pytest.raises(ValueError, match="steps_per_epoch must be a whole number of at least 1"):
        WarmupCosineLR(optimizer, 2, 0)
    assert "schedule.warmup_epochs must be" in config_problem(
        compose_config(["schedule=cosine", "schedule.warmup_epochs=-1"]))
    assert "schedule.min_lr_ratio must be" in config_problem(
        compose_config(["schedule=cosine", "schedule.min_lr_ratio=2"]))
    assert compose_config(["schedule=cosine", "trainer.epochs=7"]).schedule.epochs == 7


COSINE = ["schedule=cosine", "schedule.warmup_epochs=1", "schedule.min_lr_ratio=0.1", "trainer.epochs=4",
          "trainer.batch_size=360", "optim=sgd", "optim.lr=0.5", "model=mlp"]


def test_a_run_steps_it_per_batch_and_resumes_exactly(tmp_path):
    """1,800 circle points in batches of 360: 5 steps per epoch; the history's rate of each epoch
    is the rate of its first step. A run stopped after epoch 2 resumes to the same history."""
    whole, _ = run_in_process(tmp_path / "whole", COSINE)
    history = pd.read_csv(tmp_path / "whole" / "history.csv")
    expected = [0.5 * closed_form(5 * (epoch - 1), 20, 5, 0.1) for epoch in history["epoch"]]
    assert history["lr"].tolist() == pytest.approx(expected, rel=1e-12)
    with pytest.raises(RunInterrupted):
        run_in_process(tmp_path / "split", COSINE, on_epoch_end=stop_after(2))
    resumed, _ = run_in_process(tmp_path / "split", [*COSINE, "trainer.resume=true"])
    assert read_record(tmp_path / "split")["status"] == "completed" and resumed["test"] == whole["test"]
    pd.testing.assert_frame_equal(history.drop(columns="seconds"),
                                  pd.read_csv(tmp_path / "split" / "history.csv").drop(columns="seconds"))
