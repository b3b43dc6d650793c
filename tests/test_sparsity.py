"""Gradient sparsity (B18 Fig. 2b, G22 Fig. 2): the count of non-zero coordinates of d loss /
d scores (topk.gradients), its history column in a training run (trainer.grad_nonzero), and the
two figures built from a sweep's first epochs (topk.report.sparsity_figures.sparsity)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

from conftest import run_in_process
from topk.gradients import COLUMN, NonZeroGradients
from topk.losses.smooth_svm import SmoothTopKSVM
from topk.records import EMPTY_PROVENANCE, write_history, write_results
from topk.report.figures import make_figure


def counted(loss, scores, labels) -> float:
    gradients = NonZeroGradients()
    scores = scores.clone().requires_grad_()
    gradients.watch(scores)
    loss(scores, labels).backward()
    return gradients.columns()[COLUMN]


def test_counts_the_non_zero_coordinates_of_each_examples_gradient():
    scores = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 5.0, 1.0, 2.0]])
    labels = torch.tensor([4, 0])
    # the non-smooth top-2 SVM (τ = 0): exactly two coordinates per example with a positive loss
    assert counted(SmoothTopKSVM(k=2, tau=0.0), scores, labels) == 2.0
    # cross-entropy: all five
    assert counted(torch.nn.CrossEntropyLoss(), scores, labels) == 5.0
    # a small τ underflows the far coordinates to 0 in float32: fewer than five, more than two
    assert 2.0 < counted(SmoothTopKSVM(k=2, tau=0.01), scores * 10, labels) < 5.0
    # an example whose loss is 0 (label far in the top-2) has an all-zero gradient row
    hinge = SmoothTopKSVM(k=2, tau=0.0)
    assert counted(hinge, torch.tensor([[9.0, 0.0, 0.0]]), torch.tensor([0])) == 0.0


def test_columns_average_over_the_epoch_and_start_afresh():
    gradients = NonZeroGradients()
    for rows in (3, 1):  # 4 examples: 3 with 2 non-zero coordinates, 1 with 2
        scores = torch.zeros(rows, 4, requires_grad=True)
        gradients.watch(scores)
        (scores[:, :2] * torch.tensor([1.0, -1.0])).sum().backward()
    assert gradients.columns() == {COLUMN: 2.0}
    assert pd.isna(gradients.columns()[COLUMN])  # nothing counted since
    gradients.watch(torch.zeros(2, 3))  # scores without a gradient are not counted
    assert pd.isna(gradients.columns()[COLUMN])


def test_a_run_with_grad_nonzero_logs_it_each_epoch_and_lr_zero_keeps_the_weights(tmp_path):
    overrides = ["trainer.epochs=2", "trainer.grad_nonzero=true", "loss=smooth_svm", "loss.k=2",
                 "loss.tau=0.0", "optim.lr=0.0"]
    run_in_process(tmp_path / "run", overrides)
    history = pd.read_csv(tmp_path / "run" / "history.csv")
    assert list(history["epoch"]) == [1, 2] and history[COLUMN].between(0, 2).all()
    # at learning rate 0 both epochs see the same weights and the same full batch
    assert history[COLUMN].iloc[0] == history[COLUMN].iloc[1]
    assert history["train/loss"].iloc[0] == pytest.approx(history["train/loss"].iloc[1])
    run_in_process(tmp_path / "off", ["trainer.epochs=1"])
    assert COLUMN not in pd.read_csv(tmp_path / "off" / "history.csv").columns


# ----------------------------------------------------------------- the figures


def write_sweep(root, experiment, parameter, counts, classes=100):
    """One run per value of ``loss.<parameter>`` with its first epoch's count of non-zero
    coordinates (``None``: a failed run), on ``classes`` classes."""
    for job, (value, count) in enumerate(counts.items()):
        (root / str(job)).mkdir(parents=True)
        write_results(root / str(job), {
            "status": "failed" if count is None else "completed", "error": None, "seed": 0,
            "experiment": experiment, "dataset": "cifar100", "model": "densenet40_12",
            "loss": "smooth_svm", "augment": "standard", "params": {f"loss.{parameter}": value},
            "best_epoch": 1, "selection_metric": "val/top5", "val": {}, "test": {},
            "class_counts": [450] * classes, "epoch_seconds": 1.0, "versions": {"topk": "0"},
            "provenance": EMPTY_PROVENANCE})
        if count is not None:  # a second epoch that must not be read
            write_history(root / str(job), [{"epoch": 1, "train/loss": 1.0, COLUMN: count},
                                            {"epoch": 2, "train/loss": 1.0, COLUMN: 0.5}])
    return root


def read(files):
    assert files["png"].stat().st_size > 10_000
    return pd.read_csv(files["csv"]), re.sub(r" +", " ", files["md"].read_text())


def test_b18_sparsity_gives_the_share_per_tau_and_judges_b18s_claims(tmp_path):
    counts = {0.0: 2.0, 0.001: 30.0, 0.01: 95.0, 0.1: 100.0, 1.0: 100.0, 10.0: 100.0, 100.0: None}
    sweep = write_sweep(tmp_path / "s", "b18_sparsity", "tau", counts, classes=200)
    table, markdown = read(make_figure("b18_sparsity", sweep, tmp_path / "f"))
    assert list(table["τ"]) == list(counts)
    assert table.set_index("τ").loc[0.001, "share_mean"] == 15.0  # 30 of 200 classes
    assert table.set_index("τ").loc[100.0, "counts"] == "0/1 seeds, 1 failed"
    assert "| 0.001 | 30.00 | 15.00 | 1/1 seeds |" in markdown
    # 0.01 → 47.5 % of 200 classes: "not sparse" (≥ 50 %) does not hold there
    assert "| τ ≥ 0.01 |" in markdown and "τ = 0.01 share (%) = 47.50, 1 seed (does not hold)" in markdown
    assert markdown.count("| holds |") == 2  # τ = 0 (2 coordinates) and τ = 0.001 (15 %)


def test_g22_sparsity_judges_growth_with_epsilon_and_four_of_a_hundred(tmp_path):
    counts = {0.0: 1.9, 0.0001: 2.0, 0.1: 3.6, 100.0: 3.2}
    sweep = write_sweep(tmp_path / "s", "g22_sparsity", "epsilon", counts)
    table, markdown = read(make_figure("g22_sparsity", sweep, tmp_path / "f"))
    assert list(table["count_mean"]) == [1.9, 2.0, 3.6, 3.2]  # each run's first epoch
    assert "ε = 0.1 → 100: change in the mean count = -0.40, 1 seed (does not hold)" in markdown
    assert "ε = 100 mean count = 3.20, 1 seed (does not hold)" in markdown
    assert "G22 (§4.1, Fig. 2, numbers not in its text)" in markdown
