"""One training run for every K of a loss whose training ignores K (issue 34, item 6): G22's
sweeps train cross-entropy, focal and LDAM once per seed (``conf/g22_method/``), selected at
K = 1 and keeping the best model at each other K (``trainer.also_select_on`` over ``g22_ks``);
the record keeps that model's metrics and class accuracies, and the table spreads the run over
its K rows (:func:`topk.report.runs.spread_over_k`)."""

from __future__ import annotations

import pytest
from test_tables import cell, paper_row, record, write_sweep

from topk.errors import ConfigError
from topk.report.fidelity import protocol
from topk.report.runs import spread_over_k
from topk.report.tables import build_table
from topk.report.verdicts import macro_se
from topk.schema.store import at_ks


def test_at_ks_names_the_selection_metric_at_every_other_k():
    assert at_ks("val/macro_top1", [1, 3, 5, 10]) == ["val/macro_top3", "val/macro_top5", "val/macro_top10"]
    assert at_ks("val/top5", [1, 5]) == ["val/top1"]
    with pytest.raises(ConfigError, match="trainer.selection_metric is last"):
        at_ks("last", [1, 5])


@pytest.mark.parametrize("experiment, runs", [("g22_plantnet", 45), ("g22_imagenet_lt", 48), ("g22_imagenet", 15)])
def test_g22_sweeps_train_each_distinct_job_once(experiment, runs):
    """72, 72 and 18 runs when every loss trained once per K."""
    assert len(protocol(experiment).jobs) == runs


def shared_record(seed, macro, per_class):
    """A cross-entropy run of g22_plantnet (g22_method=ce): selected at K = 1, keeping the best
    model at K = 5 with its own test metrics and class accuracies."""
    kept = {"best_epoch": 7, "val": {"macro_top5": 70.0}, "test": {"top5": 90.0 + seed, "macro_top5": macro},
            "test_per_class": {"top5": per_class}}
    return record(seed=seed, loss="ce", params={"k": 1, "g22_method": "ce"}, selection="val/macro_top1",
                  test={"top1": 50.0, "macro_top1": 30.0 + seed, "top5": 1.0, "macro_top5": 1.0},
                  test_per_class={"top1": [30.0, 30.0], "top5": [1.0, 1.0]}, test_class_samples=[40, 20],
                  samples={"val": 60, "test": 60}, also_selected={"val/macro_top5": kept})


def test_one_run_per_seed_fills_every_k_row_with_the_model_kept_for_that_k(tmp_path):
    records = [shared_record(0, 60.0, [70.0, 40.0]), shared_record(1, 62.0, [74.0, 38.0]),
               record(loss="smooth_svm", params={"k": 5, "loss.k": 5, "g22_method": "smooth_svm_k5"},
                      selection="val/macro_top5", test={"top5": 91.0, "macro_top5": 65.0})]
    table = build_table("g22_plantnet", sweep_dir=write_sweep(tmp_path / "s", records, experiment="g22_plantnet"))
    one = cell(table.tidy, k=1, loss="ce", metric="macro_topK")
    five = cell(table.tidy, k=5, loss="ce", metric="macro_topK")
    assert (one["mean"], one["n"]) == (30.5, 2)  # the selected models
    assert (five["mean"], five["n"]) == (61.0, 2)  # the kept ones, not the selected models' 1.0
    assert five["paper"] == paper_row("g22_tables5_7_plantnet", k=5, loss="ce")["macro_topk"]
    assert cell(table.tidy, k=5, loss="ce", metric="topK")["mean"] == 90.5
    errors = [macro_se([70.0, 40.0], [40, 20]), macro_se([74.0, 38.0], [40, 20])]
    assert five["sampling_se"] == pytest.approx(((errors[0] ** 2 + errors[1] ** 2) / 2) ** 0.5)  # their classes
    assert cell(table.tidy, k=5, loss="smooth_svm", metric="topK")["mean"] == 91.0
    assert table.sweep.counts()["found"] == 3  # spread in the table only: three runs, not five


def test_only_a_kept_model_at_another_k_of_the_selection_metric_is_spread():
    """A run selected on val/top1 that kept the best model by val/macro_top5 or val/loss (another
    metric, not the same at another K) stays one row; one that kept val/top5 gains a K = 5 row."""
    import pandas as pd

    from topk.records import flatten

    kept = {"best_epoch": 1, "val": {}, "test": {"top5": 80.0}}
    runs = pd.DataFrame([flatten(record(selection="val/top1", params={"k": 1}, also_selected={
        "val/macro_top5": kept, "val/loss": kept, "val/top5": kept}))], dtype=object)
    spread = spread_over_k(runs)
    assert list(spread.index) == [0, "0@k5"]
    assert spread.at["0@k5", "params.k"] == 5 and spread.at["0@k5", "test.top5"] == 80.0
    assert spread.at["0@k5", "selection_metric"] == "val/top5" and spread.at[0, "params.k"] == 1
