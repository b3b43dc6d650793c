"""Hydra's Optuna sweeper tunes a loss parameter: each job returns its selected model's
selection metric (train.selected_value); a sweep under Optuna that selects on nothing is refused."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import run_cli

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="the tune extra (hydra-optuna-sweeper)")

TUNE = ["-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=maximize", "hydra.sweeper.sampler.seed=0",
        "loss=smooth_svm", "loss.k=2", "loss.tau=interval(0.1,2.0)", "trainer.epochs=5", "trainer.progress=false",
        "trainer.tensorboard=false"]


def test_selected_value_is_the_selection_metric_of_the_selected_model():
    import train

    assert train.selected_value({"selection_metric": "val/top2", "val": {"top2": 61.5}}) == 61.5
    assert train.selected_value({"selection_metric": "val/loss", "val": {"loss": 0.25}}) == 0.25
    assert train.selected_value({"selection_metric": "last", "val": {"top2": 61.5}}) is None
    assert train.selected_value({"selection_metric": "val/top2", "val": {}}) is None


def test_a_small_study_on_circles_finds_the_best_of_its_trials(tmp_path):
    sweep = tmp_path / "study"
    result = run_cli([*TUNE, "hydra.sweeper.n_trials=3", "dataset.val_per_class=50",
                      "trainer.selection_metric=val/top2", f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 0, result.stderr
    records = [json.loads((sweep / str(job) / "results.json").read_text()) for job in range(3)]
    values = [record["val"]["top2"] for record in records]
    taus = [record["params"]["loss.tau"] for record in records]
    assert len(set(taus)) == 3 and all(0.1 <= tau <= 2.0 for tau in taus)
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == max(values)
    assert best["best_params"]["loss.tau"] == taus[values.index(max(values))]


def test_tuning_on_no_validation_metric_is_refused_in_one_sentence(tmp_path):
    result = run_cli([*TUNE, "hydra.sweeper.n_trials=1", "trainer.selection_metric=last",
                      f"hydra.sweep.dir={tmp_path / 'study'}"])
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(
        "Error: hydra/sweeper=optuna tunes the selected model's trainer.selection_metric, and last is not a "
        "validation metric; set trainer.selection_metric=val/top5")
    assert result.stderr.strip().endswith("Nothing was run.") and not (tmp_path / "study").exists()
