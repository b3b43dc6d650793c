"""Verdicts a single run can reach (topk.report.verdicts.CELL_RULE): where the paper reports no
std, its number's standard error from the sample it was counted on; the metrics that rule cannot
judge stay *too few runs* and the table says why; runs record their test split's class sizes."""

from __future__ import annotations

import math

import pytest
from test_tables import cell  # one row of a tidy table by its keys

from conftest import run_in_process
from topk import paper_results
from topk.records import EMPTY_PROVENANCE, write_results
from topk.report.tables import build_table
from topk.report.verdicts import (
    AGREES,
    DIFFERS,
    TOO_FEW,
    binomial_se,
    cell_verdict,
    macro_se,
)


def record(loss, params, test=None, val=None, samples=None, seed=0, **extra):
    return {"status": "completed", "error": None, "experiment": None, "dataset": "d", "model": "m",
            "loss": loss, "augment": "standard", "seed": seed, "params": params, "best_epoch": 1,
            "selection_metric": "val/top5", "val": val or {}, "test": test or {},
            "epoch_seconds": 1.0, "versions": {}, "provenance": EMPTY_PROVENANCE,
            **({} if samples is None else {"samples": samples}), **extra}


def table(tmp_path, experiment, records):
    for job, rec in enumerate(records):
        (tmp_path / "sweep" / str(job)).mkdir(parents=True, exist_ok=True)
        write_results(tmp_path / "sweep" / str(job), {**rec, "experiment": experiment})
    return build_table(experiment, sweep_dir=tmp_path / "sweep")


def published(name, column, **keys):
    rows = paper_results.load(name)
    for key, value in keys.items():
        rows = rows[rows[key] == value]
    return float(rows[column].iloc[0])


# ------------------------------------------------------------------------ the rule


def test_binomial_and_macro_standard_errors():
    assert binomial_se(90.0, 10_000) == pytest.approx(0.3)  # 100·√(0.9·0.1/10⁴)
    assert binomial_se(50.0, 100) == pytest.approx(5.0)
    assert math.isnan(binomial_se(90.0, None)) and math.isnan(binomial_se(90.0, 0))
    # two classes: 50 % of 5 (v = 0.25/4) and 100 % of 3 (v = 0); a class absent from the split
    # (None, 0 samples) is not averaged
    assert macro_se([50.0, 100.0, None], [5, 3, 0]) == pytest.approx(100 * math.sqrt(0.0625) / 2)
    # a class with one sample counts the largest variance a hit-or-miss can have, 1/4
    assert macro_se([100.0, 0.0], [1, 1]) == pytest.approx(100 * math.sqrt(0.5) / 2)
    assert math.isnan(macro_se([None], [0]))


def test_one_run_is_judged_on_the_papers_sampling_error():
    se = binomial_se(90.0, 10_000)  # 0.3
    assert cell_verdict(90.55, math.nan, 1, 90.0, math.nan, se) == AGREES  # within 2 se
    assert cell_verdict(90.65, math.nan, 1, 90.0, math.nan, se) == DIFFERS
    assert cell_verdict(90.65, math.nan, 1, 90.0, 0.5, se) == AGREES  # the paper's std comes first
    assert cell_verdict(90.0, math.nan, 1, 90.0, math.nan) == TOO_FEW  # no spread known
    # with seeds, the half-width of our interval and the paper's se add up
    half = 4.303 * 0.1 / math.sqrt(3)
    assert cell_verdict(90.0, 0.1, 3, 90.0 + half + 0.29, math.nan, se) == AGREES
    assert cell_verdict(90.0, 0.1, 3, 90.0 + half + 0.31, math.nan, se) == DIFFERS
    assert cell_verdict(90.0, 0.1, 3, 90.0 + half + 0.01, math.nan) == DIFFERS  # no se: s = 0


# ------------------------------------------------------------------------ tables


def test_one_seed_of_b18_imagenet_agrees_or_differs(tmp_path):
    paper = published("b18_table2_imagenet_subsets", "top5", train_images=1230000, loss="ce")
    se = binomial_se(paper, 50_000)
    tidy = table(tmp_path, "b18_imagenet", [
        record("ce", {"dataset.train_size": None}, test={"top5": paper + 1.5 * se},
               samples={"val": 50_000, "test": 50_000}),
        record("smooth_svm", {"dataset.train_size": None}, test={"top5": 80.0},
               samples={"val": 50_000, "test": 50_000}),
        record("ce", {"dataset.train_size": 64000}, test={"top5": 60.0}),  # a record without samples
    ]).tidy
    ce = cell(tidy, train_images=1230000, loss="ce", metric="top5")
    assert ce["sampling_se"] == pytest.approx(se) and ce["verdict"] == AGREES
    assert cell(tidy, train_images=1230000, loss="smooth_svm", metric="top5")["verdict"] == DIFFERS
    old = cell(tidy, train_images=64000, loss="ce", metric="top5")
    assert old["verdict"] == TOO_FEW and "samples" in old["no_error"]


def test_the_paper_column_shows_the_standard_error_it_was_judged_on(tmp_path):
    built = table(tmp_path, "g22_epsilon", [
        record("noised_bal", {"loss.epsilon": 0.1}, val={"top5": 94.0},
               samples={"val": 5000, "test": 10_000})])
    paper = published("g22_table2_epsilon", "val_top5", epsilon=0.1)
    wide = built.sections[0][1]
    assert wide.loc["0.1", "paper"] == f"{paper:.2f} (se {binomial_se(paper, 5000):.2f})"  # the val split
    assert wide.loc["0.1", "verdict"] in (AGREES, DIFFERS)


def test_a_cell_without_a_value_gets_no_reason(tmp_path):
    built = table(tmp_path, "b18_tau", [
        record("smooth_svm", {"loss.tau": 0.1}, test={"top5": 91.7}, samples={"test": 10_000})])
    test = cell(built.tidy, tau=0.1, metric="test_top5")
    assert test["verdict"] == AGREES  # test top-5: the binomial error of 10,000 test images
    train = cell(built.tidy, tau=0.1, metric="train_top5")  # no history.csv: no value
    assert train["n"] == 0 and train["verdict"] == TOO_FEW
    assert not any(line.startswith("train_top5: one run") for line in built.preamble)


def test_one_run_of_a_training_accuracy_is_too_few_runs_and_the_table_says_why(tmp_path):
    (tmp_path / "sweep" / "0").mkdir(parents=True)
    (tmp_path / "sweep" / "0" / "history.csv").write_text("epoch,train/top5\n1,99.7\n")
    built = table(tmp_path, "b18_tau", [
        record("smooth_svm", {"loss.tau": 0.1}, test={"top5": 91.7}, samples={"test": 10_000})])
    assert cell(built.tidy, tau=0.1, metric="train_top5")["verdict"] == TOO_FEW
    reason = [line for line in built.preamble if line.startswith("train_top5: one run")]
    assert len(reason) == 1 and "training accuracy" in reason[0] and "two seeds" in reason[0]


def plantnet_record(macro, sizes, per_class, **extra):
    return record("ce", {"k": 5}, test={"top5": 95.75, "macro_top5": macro},
                  samples={"val": 10, "test": sum(sizes)}, test_per_class={"top5": per_class}, **extra)


def test_a_macro_average_is_judged_on_its_class_errors(tmp_path):
    paper = published("g22_tables5_7_plantnet", "macro_topk", k=5, loss="ce")
    sizes, per_class = [40, 40, 20], [50.0, 75.0, 50.0]
    se = macro_se(per_class, sizes)  # √(0.25/39 + 0.1875/39 + 0.25/19)/3: 5.2 points
    near = table(tmp_path / "near", "g22_plantnet", [
        plantnet_record(paper + 1.9 * se, sizes, per_class, test_class_samples=sizes)]).tidy
    macro = cell(near, k=5, loss="ce", metric="macro_topK")
    assert macro["sampling_se"] == pytest.approx(se) and macro["verdict"] == AGREES
    far = table(tmp_path / "far", "g22_plantnet", [
        plantnet_record(paper - 2.1 * se, sizes, per_class, test_class_samples=sizes)]).tidy
    assert cell(far, k=5, loss="ce", metric="macro_topK")["verdict"] == DIFFERS


def test_a_macro_average_without_class_sizes_stays_too_few_runs(tmp_path):
    paper = published("g22_tables5_7_plantnet", "macro_topk", k=5, loss="ce")
    built = table(tmp_path, "g22_plantnet", [plantnet_record(paper, [4, 4], [50.0, 75.0])])
    assert cell(built.tidy, k=5, loss="ce", metric="macro_topK")["verdict"] == TOO_FEW
    assert any(line.startswith("macro_topK: one run is *too few runs*, as no run recorded its "
                               "test split's class sizes") for line in built.preamble)


# ------------------------------------------------------------------------ the record


def test_a_run_records_its_test_splits_class_sizes(run_dir):
    record_, _ = run_in_process(run_dir, ["trainer.limit_batches=1", "trainer.eval_batch_size=12",
                                          "trainer.epochs=1"])
    sizes = record_["test_class_samples"]
    assert sum(sizes) == record_["samples"]["test"] == 12 and len(sizes) == 6
    assert [size > 0 for size in sizes] == [value is not None for value in record_["test_per_class"]["top1"]]
