"""Run records of a sweep → paper tables beside the published numbers (topk.report.tables)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT
from topk import paper_results
from topk.errors import ConfigError
from topk.records import EMPTY_PROVENANCE, write_history, write_results
from topk.report.tables import (
    TABLES,
    build_table,
    make_table,
    normalise_key,
    paper_cells,
    write_table,
)


def record(status="completed", seed=0, loss="ce", params=None, test=None, val=None, **extra):
    done = status == "completed"
    return {
        "status": status, "error": None if done else "boom", "experiment": extra.pop("experiment", None),
        "dataset": "cifar100", "model": extra.pop("model", "densenet40_40"), "loss": loss,
        "augment": extra.pop("augment", "standard"), "seed": seed, "params": dict(params or {}),
        "best_epoch": extra.pop("best_epoch", 2), "selection_metric": extra.pop("selection", "val/top5"),
        "val": (val or {}) if done else {}, "test": (test or {}) if done else {},
        "epoch_seconds": extra.pop("epoch_seconds", 1.0), "versions": {"topk": "0"}, "provenance": EMPTY_PROVENANCE, **extra,
    }


def write_sweep(root, records, sweeper_params=None, task=(), histories=None, experiment=None):
    """Job directories 0/, 1/, … with the records (and history rows), plus a multirun.yaml;
    ``experiment`` is written into every record that names none."""
    root.mkdir(parents=True, exist_ok=True)
    for job, rec in enumerate(records):
        (root / str(job)).mkdir()
        write_results(root / str(job), {**rec, "experiment": rec["experiment"] or experiment})
        if histories and histories[job] is not None:
            write_history(root / str(job), histories[job])
    if sweeper_params is not None:
        params = "".join(f"      {key}: {value}\n" for key, value in sweeper_params.items())
        overrides = "".join(f"    - {line}\n" for line in task)
        (root / "multirun.yaml").write_text(
            "hydra:\n  sweeper:\n    params:\n" + params
            + "  overrides:\n    task:\n" + (overrides or "    []\n") + "seed: 0\n"
        )
    return root


def cell(tidy, **keys):
    rows = tidy
    for name, value in keys.items():
        rows = rows[rows[name] == value]
    assert len(rows) == 1, keys
    return rows.iloc[0]


def paper_row(name, **keys):
    return cell(paper_results.load(name), **keys)


# ------------------------------------------------------------------------- b18_cifar_noise


@pytest.fixture
def noise_sweep(tmp_path):
    """p = 0.2 only: CE over 3 seeds; smooth SVM 1 completed, 1 failed, 1 interrupted run;
    p = 0 has no run at all; the multirun asks for p ∈ {0, 0.2} × 2 losses × 3 seeds."""
    ce = [(76.0, 94.0), (74.0, 93.0), (75.0, 95.5)]
    records = [record("completed", seed, "ce", {"dataset.noise": 0.2},
                      test={"top1": t1, "top5": t5}) for seed, (t1, t5) in enumerate(ce)]
    records += [
        record("completed", 0, "smooth_svm", {"dataset.noise": 0.2}, test={"top1": 70.0, "top5": 90.0}),
        record("failed", 1, "smooth_svm", {"dataset.noise": 0.2}),
        record("interrupted", 2, "smooth_svm", {"dataset.noise": 0.2}),
    ]
    sweep = {"dataset.noise": "0.0,0.2", "loss": "ce,smooth_svm", "seed": "range(3)"}
    return write_sweep(tmp_path / "sweep", records, sweep, task=["+experiment=b18_cifar_noise"],
                       experiment="b18_cifar_noise")


def test_noise_table_statistics_counts_and_paper(noise_sweep, tmp_path):
    table, files = make_table("b18_cifar_noise", tmp_path / "tables", sweep_dir=noise_sweep)
    assert {kind: path.exists() for kind, path in files.items()} == {"md": True, "csv": True, "tex": True}
    tidy = pd.read_csv(files["csv"])

    ce = cell(tidy, noise=0.2, loss="ce", metric="top1")
    assert (ce["n"], ce["runs"], ce["failed"], ce["missing"]) == (3, 3, 0, 0)
    assert ce["mean"] == pytest.approx(75.0)
    assert ce["std"] == pytest.approx(np.std([76.0, 74.0, 75.0], ddof=1))
    published = paper_row("b18_table1_cifar100_noise", noise=0.2, loss="ce")
    assert ce["paper"] == published["top1"] and ce["paper_std"] == published["top1_std"]
    assert ce["diff"] == pytest.approx(75.0 - published["top1"])
    top5 = cell(tidy, noise=0.2, loss="ce", metric="top5")
    assert top5["mean"] == pytest.approx(94.1666666) and top5["paper"] == published["top5"]

    published_svm = paper_row("b18_table1_cifar100_noise", noise=0.2, loss="smooth_svm")
    svm = cell(tidy, noise=0.2, loss="smooth_svm", metric="top5")
    assert (svm["n"], svm["runs"], svm["failed"], svm["interrupted"]) == (1, 3, 1, 1)
    assert svm["mean"] == 90.0 and math.isnan(svm["std"])  # the failed runs are not averaged in
    assert svm["counts"] == "1/3 seeds, 1 failed, 1 interrupted"

    empty = cell(tidy, noise=0.0, loss="smooth_svm", metric="top1")
    assert empty["runs"] == 0 and math.isnan(empty["mean"]) and empty["counts"] == "no run"
    assert empty["paper"] == paper_row("b18_table1_cifar100_noise", noise=0.0, loss="smooth_svm")["top1"]
    assert len(tidy) == len(paper_results.load("b18_table1_cifar100_noise")) * 2  # every paper cell

    wide = table.sections[0][1]
    assert list(wide.index[:2]) == ["0", "0.2"]  # the paper's row order
    assert wide.loc["0.2", ("ce", "top1", "ours")] == "75.00 ± 1.00 [72.52, 77.48] (3/3 seeds)"  # t(.975, 2) = 4.303
    within = abs(75.0 - published["top1"]) <= 4.303 / 3**0.5 + published["top1_std"]
    assert wide.loc["0.2", ("ce", "top1", "verdict")] == ("agrees" if within else "differs")
    assert wide.loc["0.2", ("smooth_svm", "top5", "verdict")] == (
        "agrees" if abs(90.0 - published_svm["top5"]) <= 2 * published_svm["top5_std"] else "differs")
    assert wide.loc["0.2", ("ce", "top1", "paper")] == f"{published['top1']:.2f} ± {published['top1_std']:.2f}"
    assert wide.loc["0.2", ("ce", "top1", "ours − paper")] == f"{75.0 - published['top1']:+.2f}"
    assert wide.loc["0.2", ("smooth_svm", "top5", "ours")] == "90.00 (1/3 seeds, 1 failed, 1 interrupted)"
    assert wide.loc["0", ("ce", "top5", "ours")] == "no run"

    markdown = files["md"].read_text()
    assert ("6 found, 4 completed, 1 failed, 1 interrupted, 0 running, 30 of the protocol's 36 "
            "runs missing") in markdown
    assert "1/3 seeds, 1 failed, 1 interrupted" in markdown and "no run" in markdown
    tex = files["tex"].read_text()
    assert "\\begin{tabular}" in tex and "smooth\\_svm" in tex and "$\\pm$" in tex


def test_expected_runs_come_from_the_protocol_not_multirun_yaml(tmp_path):
    """With or without a multirun.yaml, and whatever narrowed sweep it describes, the runs and
    seeds expected are those of +experiment=b18_cifar_noise (6 noise levels × 2 losses × 3 seeds)."""
    records = [record("completed", 0, "ce", {"dataset.noise": 0.2}, test={"top1": 70.0, "top5": 90.0})]
    bare = write_sweep(tmp_path / "bare", records, experiment="b18_cifar_noise")
    swept = write_sweep(tmp_path / "swept", records, {"seed": "0"},
                        task=["loss=ce", "dataset.noise=0.2"], experiment="b18_cifar_noise")
    for sweep in (bare, swept):
        table = build_table("b18_cifar_noise", sweep_dir=sweep)
        assert "35 of the protocol's 36 runs missing" in table.preamble[0]
        assert cell(table.tidy, noise=0.2, loss="ce", metric="top1")["counts"] == "1/3 seeds, 2 missing"


def test_unreadable_record_is_counted_not_fatal(noise_sweep, tmp_path):
    (noise_sweep / "9").mkdir()
    (noise_sweep / "9" / "results.json").write_text('{"status": "compl')
    table = build_table("b18_cifar_noise", sweep_dir=noise_sweep)
    assert "7 found" in table.preamble[0] and "1 unreadable" in table.preamble[0]


# ------------------------------------------------------------------------- the sweep's experiment


def tau_records(experiment):
    return [record(seed=seed, loss="smooth_svm", params={"loss.tau": 0.1}, test={"top5": 90.0},
                   experiment=experiment) for seed in (0, 1)]


def test_a_sweep_of_another_experiment_is_refused(tmp_path):
    sweep = write_sweep(tmp_path / "s", tau_records("s20_exp1"))
    with pytest.raises(ConfigError) as refused:
        build_table("b18_tau", sweep_dir=sweep)
    assert str(refused.value) == (
        f"{sweep} holds runs of experiment s20_exp1, not b18_tau; point --sweep-dir at a sweep "
        "of `python train.py -m +experiment=b18_tau`.")


def test_a_sweep_of_no_experiment_is_refused(tmp_path):
    sweep = write_sweep(tmp_path / "s", tau_records(None))
    with pytest.raises(ConfigError, match=r"holds runs of no experiment \(`experiment: null` in "
                       r"their results.json, a sweep run without \+experiment\), not b18_tau"):
        build_table("b18_tau", sweep_dir=sweep)


def test_a_sweep_mixing_experiments_is_refused_not_filtered(tmp_path):
    records = tau_records("b18_tau") + tau_records("s20_exp1") + tau_records(None)
    sweep = write_sweep(tmp_path / "s", records)
    with pytest.raises(ConfigError) as refused:
        build_table("b18_tau", sweep_dir=sweep)
    message = str(refused.value)
    assert message.startswith(f"{sweep} mixes 2 run(s) of b18_tau with 4 run(s) of experiment "
                              "s20_exp1 and of no experiment")
    assert f"(e.g. {sweep / '2'}); move those out of the sweep" in message


def test_cli_refuses_another_experiments_sweep_in_one_line(tmp_path):
    sweep = write_sweep(tmp_path / "s", tau_records("s20_exp1"))
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tables.py"), "b18_tau",
                             "--sweep-dir", str(sweep), "--out", str(tmp_path / "t")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert "experiment s20_exp1, not b18_tau" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "t").exists()


# ------------------------------------------------------------------------- other sweep tables


def test_s20_takes_top1_from_val_top1_runs_and_top5_from_val_top5_runs(tmp_path):
    keys = {"model": "resnet18", "augment": "cutout"}
    records = [
        record(seed=0, selection="val/top1", test={"top1": 80.0, "top5": 1.0}, **keys),
        record(seed=1, selection="val/top1", test={"top1": 78.0, "top5": 1.0}, **keys),
        record(seed=0, selection="val/top5", test={"top1": 1.0, "top5": 95.0}, **keys),
    ]
    sweep = write_sweep(tmp_path / "s", records, experiment="s20_cifar")
    table = build_table("s20_cifar", sweep_dir=sweep)
    published = paper_row("s20_table1_cifar100", model="resnet18", augment="cutout", loss="ce")
    top1 = cell(table.tidy, model="resnet18", augment="cutout", loss="ce", metric="top1")
    top5 = cell(table.tidy, model="resnet18", augment="cutout", loss="ce", metric="top5")
    assert (top1["mean"], top1["n"], top1["paper"]) == (79.0, 2, published["top1"])
    assert (top5["mean"], top5["n"], top5["paper"]) == (95.0, 1, published["top5"])
    assert "top1: models selected by val/top1 (as S20)." in table.preamble

    only_top5 = [record(seed=0, selection="val/top5", test={"top1": 70.0, "top5": 95.0}, **keys)]
    sweep = write_sweep(tmp_path / "t", only_top5, experiment="s20_cifar")
    table = build_table("s20_cifar", sweep_dir=sweep)
    assert cell(table.tidy, model="resnet18", augment="cutout", loss="ce", metric="top1")["mean"] == 70.0
    assert any("top1: models selected by val/top5 (no run selected by val/top1" in n for n in table.preamble)


def test_s20_reads_both_columns_from_one_run_per_seed(tmp_path):
    """trainer.also_select_on=[val/top5]: each run's top-1 is its selected model's (val/top1),
    its top-5 the model it kept by val/top5 (the record's also_selected), never the other way."""
    keys = {"model": "resnet18", "augment": "cutout"}

    def shared(seed, top1, top5):
        kept = {"best_epoch": 7, "val": {"top5": 90.0}, "test": {"top1": 1.0, "top5": top5}}
        return record(seed=seed, selection="val/top1", test={"top1": top1, "top5": 2.0},
                      also_selected={"val/top5": kept}, **keys)

    sweep = write_sweep(tmp_path / "s", [shared(0, 80.0, 95.0), shared(1, 78.0, 93.0)], experiment="s20_cifar")
    table = build_table("s20_cifar", sweep_dir=sweep)
    top1 = cell(table.tidy, model="resnet18", augment="cutout", loss="ce", metric="top1")
    top5 = cell(table.tidy, model="resnet18", augment="cutout", loss="ce", metric="top5")
    assert (top1["mean"], top1["n"], top5["mean"], top5["n"]) == (79.0, 2, 94.0, 2)
    assert "top1: models selected by val/top1 (as S20)." in table.preamble
    assert ("top5: models selected by val/top5 (as S20); in 2 run(s) the best model by it was kept beside "
            "the selected one (trainer.also_select_on), one training run for both columns.") in table.preamble


def test_b18_margin_reads_val_top_k_at_each_runs_k_beside_tables_7_and_8(tmp_path):
    def margin(k, tau, alpha, value, seed=0):  # the other k's accuracy 20 points off
        val = {"top1": value, "top5": value - 20} if k == 1 else {"top1": value - 20, "top5": value}
        return record(seed=seed, loss="smooth_svm", val=val, samples={"val": 50000, "test": 50000},
                      params={"k": k, "loss.tau": tau, "loss.alpha": alpha})
    records = [margin(1, 1.0, 0.0, 71.10), margin(1, 1.0, 1.0, 70.00), margin(5, 0.1, 0.0, 89.12),
               margin(5, 0.1, 1.0, 89.40), margin(5, 0.1, 1.0, 89.50, seed=1)]
    table = build_table("b18_margin", sweep_dir=write_sweep(tmp_path / "s", records, experiment="b18_margin"))
    tidy = table.tidy
    assert list(zip(tidy["k"], tidy["tau"], tidy["alpha"])) == [(1, 1, 0), (1, 1, 1), (5, 0.1, 0), (5, 0.1, 1)]
    ce = cell(tidy, k=1, alpha=0)  # (1, 1, 0) is cross-entropy; k = 1 reads val top-1
    assert (ce["mean"], ce["paper"]) == (71.10, 71.03)
    # one run: judged on the binomial error of B18's 71.15 % on 50,000 validation images (0.20)
    assert cell(tidy, k=1, alpha=1)["verdict"] == "differs"  # 70.00 is 1.15 points off
    assert ce["verdict"] == "agrees" and cell(tidy, k=5, alpha=0)["verdict"] == "agrees"
    top5 = cell(tidy, k=5, alpha=1)
    assert (top5["mean"], top5["n"], top5["paper"]) == (pytest.approx(89.45), 2, 89.45)
    assert any("(k, τ, α) = (1, 1, 0) is cross-entropy" in line for line in table.preamble)


def test_b18_tau_reads_train_top5_at_the_best_epoch_and_hinge_is_tau_zero(tmp_path):
    history = [{"epoch": e, "train/top5": 50.0 + e, "val/top5": 40.0} for e in (1, 2, 3)]
    records = [
        record(seed=0, loss="smooth_svm", params={"loss.tau": 0.1}, test={"top5": 91.0}, best_epoch=2),
        record(seed=1, loss="smooth_svm", params={"loss.tau": 0.1}, test={"top5": 92.0}, best_epoch=3),
        record(seed=0, loss="hinge", params={"loss.k": 5}, test={"top5": 11.0}, best_epoch=1),
        record(seed=0, loss="ce", test={"top5": 99.0}),  # not part of Table 6
    ]
    sweep = write_sweep(tmp_path / "s", records, histories=[history, history, history, None],
                        experiment="b18_tau")
    tidy = build_table("b18_tau", sweep_dir=sweep).tidy
    train = cell(tidy, tau=0.1, metric="train_top5")
    assert (train["mean"], train["n"]) == (52.5, 2)
    assert train["paper"] == paper_row("b18_table6_temperature", tau=0.1)["train_top5"]
    hinge = cell(tidy, tau=0.0, metric="test_top5")
    assert hinge["mean"] == 11.0 and hinge["paper"] == paper_row("b18_table6_temperature", tau=0)["test_top5"]
    assert cell(tidy, tau=0.0, metric="train_top5")["mean"] == 51.0
    assert len(tidy) == 2 * len(paper_results.load("b18_table6_temperature"))


def test_b18_imagenet_null_train_size_is_the_full_row(tmp_path):
    records = [record(loss=loss, params={"dataset.train_size": size}, test={"top5": 80.0})
               for loss in ("ce", "smooth_svm") for size in (None, 64000)]
    sweep = write_sweep(tmp_path / "s", records, experiment="b18_imagenet")
    table = build_table("b18_imagenet", sweep_dir=sweep)
    full = cell(table.tidy, train_images=1230000, loss="smooth_svm")
    assert full["n"] == 1 and full["paper"] == paper_row(
        "b18_table2_imagenet_subsets", train_images=1230000, loss="smooth_svm")["top5"]
    assert list(table.sections[0][1].index) == ["1230000", "640000", "320000", "128000", "64000"]


def test_g22_epsilon_val_top5(tmp_path):
    records = [record(seed=s, loss="noised_bal", params={"loss.epsilon": 0.1}, val={"top5": v})
               for s, v in enumerate((94.0, 95.0))]
    sweep = write_sweep(tmp_path / "s", records, experiment="g22_epsilon")
    table = build_table("g22_epsilon", sweep_dir=sweep)
    row = cell(table.tidy, epsilon=0.1)
    assert (row["mean"], row["paper"]) == (94.5, paper_row("g22_table2_epsilon", epsilon=0.1)["val_top5"])
    assert list(table.sections[0][1].columns) == ["ours", "paper", "ours − paper", "verdict"]


def test_g22_plantnet_uses_each_rows_k(tmp_path):
    records = [
        record(loss="ce", params={"k": 3}, test={"top3": 93.0, "macro_top3": 60.0, "top5": 1.0}),
        record(loss="noised_imbal", params={"loss.k": 5}, test={"top5": 96.0, "macro_top5": 73.0}),
    ]
    sweep = write_sweep(tmp_path / "s", records, experiment="g22_plantnet")
    table, files = make_table("g22_plantnet", tmp_path / "t", sweep_dir=sweep)
    macro = cell(table.tidy, k=3, loss="ce", metric="macro_topK")
    assert (macro["mean"], macro["paper"]) == (60.0, paper_row("g22_tables5_7_plantnet", k=3, loss="ce")["macro_topk"])
    plain = cell(table.tidy, k=5, loss="noised_imbal", metric="topK")
    assert (plain["mean"], plain["paper"]) == (96.0, paper_row("g22_tables5_7_plantnet", k=5, loss="noised_imbal")["topk"])
    assert [caption for caption, _ in table.sections] == ["macro_topK", "topK"]  # Tables 5 and 7
    records[0]["test"].update(avg3=95.0, macro_avg3=70.0)  # average-K: ours only
    table = build_table("g22_plantnet", sweep_dir=write_sweep(tmp_path / "a", records, experiment="g22_plantnet"))
    assert [caption for caption, _ in table.sections] == ["macro_topK", "topK", "macro_avgK", "avgK"]
    assert cell(table.tidy, k=3, loss="ce", metric="avgK")["mean"] == 95.0
    losses = list(dict.fromkeys(table.sections[0][1].columns.get_level_values(0)))
    assert losses == ["ce", "smooth_svm", "noised_bal", "focal", "ldam", "noised_imbal"]  # G22's order


def test_g22_imagenet_lt_has_no_paper_numbers(tmp_path):
    test = {"top5": 70.0, "many_top5": 80.0, "medium_top5": 65.0, "few_top5": 40.0}
    records = [record(loss="ce", params={"k": 5}, test=test),
               record("failed", 1, "ce", {"k": 5}), record("running", 2, "ce", {"k": 5}),
               record(loss="noised_bal", params={"loss.k": 5}, test=test)]
    sweep = write_sweep(tmp_path / "s", records, experiment="g22_imagenet_lt")
    table, files = make_table("g22_imagenet_lt", tmp_path / "t", sweep_dir=sweep)
    few = cell(table.tidy, k=5, loss="ce", metric="few_topK")
    assert (few["mean"], few["failed"], few["running"]) == (40.0, 1, 1) and math.isnan(few["paper"])
    wide = table.sections[0][1]
    # the protocol asks for 4 seeds
    assert wide.loc[("5", "ce"), ("few_topK", "ours")] == "40.00 (1/4 seeds, 1 failed, 1 running, 1 missing)"
    assert wide.loc[("5", "ce"), ("few_topK", "paper")] == ""


def test_g22_imagenet_lt_and_imagenet_tables_have_a_row_per_k(tmp_path):
    """The preprint's Tables 6 (ImageNet-LT: K = 1, 3, 5) and 9 (ImageNet: K = 1, 5) in its
    order of K and losses; their numbers are lost from the preprint's text."""
    test = {"top1": 40.0, "top3": 60.0, "top5": 70.0, "many_top1": 50.0, "avg1": 45.0}
    lt = [record(loss=loss, params={"k": k}, test=test) for k in (5, 1, 3)
          for loss in ("noised_imbal", "ce", "ldam")]
    table = build_table("g22_imagenet_lt", sweep_dir=write_sweep(tmp_path / "lt", lt, experiment="g22_imagenet_lt"))
    assert list(table.sections[0][1].index)[:4] == [("1", "ce"), ("1", "ldam"), ("1", "noised_imbal"), ("3", "ce")]
    assert cell(table.tidy, k=3, loss="ldam", metric="topK")["mean"] == 60.0
    imagenet = [record(seed=seed, loss=loss, params={"k": k}, test={"top1": 70.0 + seed, "top5": 89.0, "avg1": 1.0})
                for seed in range(3) for k in (5, 1) for loss in ("noised_bal", "smooth_svm", "ce")]
    sweep = write_sweep(tmp_path / "in", imagenet, experiment="g22_imagenet")
    table = build_table("g22_imagenet", sweep_dir=sweep)
    assert [caption for caption, _ in table.sections] == ["topK", "avgK"]
    wide = table.sections[0][1]
    assert list(wide.index) == ["1", "5"]
    assert list(dict.fromkeys(wide.columns.get_level_values(0))) == ["ce", "smooth_svm", "noised_bal"]
    top1 = cell(table.tidy, k=1, loss="noised_bal", metric="topK")
    assert (top1["mean"], top1["n"]) == (71.0, 3) and math.isnan(top1["paper"])
    assert cell(table.tidy, k=5, loss="ce", metric="topK")["mean"] == 89.0


def test_g22_time_ratios_to_ce(tmp_path):
    records = [
        record(seed=0, loss="ce", epoch_seconds=10.0), record(seed=1, loss="ce", epoch_seconds=14.0),
        record(loss="smooth_svm", params={"loss.k": 10}, epoch_seconds=18.0),
        record(loss="noised_bal", params={"loss.k": 5, "loss.n_samples": 3}, epoch_seconds=13.2),
    ]
    sweep = write_sweep(tmp_path / "s", records, experiment="g22_time")
    table = build_table("g22_time", sweep_dir=sweep)
    paper = paper_results.load("g22_fig3_epoch_time")
    paper_ce = paper[paper["loss"] == "ce"]["epoch_seconds"].iloc[0]  # given once, at K = 5
    svm = cell(table.tidy, k=10, loss="smooth_svm")
    assert svm["mean"] == pytest.approx(18.0 / 12.0)
    assert svm["paper"] == pytest.approx(paper_row("g22_fig3_epoch_time", k=10, loss="smooth_svm")["epoch_seconds"] / paper_ce)
    noised = cell(table.tidy, k=5, loss="noised_bal (B=3)")
    assert noised["mean"] == pytest.approx(1.1)
    assert noised["paper"] == pytest.approx(paper_row("g22_fig3_epoch_time", k=5, loss="noised_bal")["epoch_seconds"] / paper_ce)
    assert "ce" not in set(table.tidy["loss"])
    wide = table.sections[0][1]
    assert list(wide.index) == ["5", "10"]
    assert list(dict.fromkeys(wide.columns.get_level_values(0))) == ["noised_bal (B=3)", "smooth_svm"]
    assert any("CE baseline: 12.000 s per epoch" in note for note in table.preamble)


# ------------------------------------------------------------------------- b18_speed


def test_b18_speed_ratios_and_stability_flags(tmp_path):
    bench = {
        "batch": 256, "threads": 1, "torch": "x",
        "speed": [{"loss": "smooth_svm", "n": 1000, "k": 5, "seconds": 0.02, "ce_seconds": 0.001, "ratio_to_ce": 20.0}],
        "log_esp_forward": [{"n": 1000, "divide_conquer_log_seconds": 0.002, "summation_seconds": 0.01,
                             "summation_over_divide_conquer": 5.0}],
        "stability": [
            {"tau": 0.1, "algorithm": "summation", "precision": "float32", "stable": 1,
             "max_relative_error_vs_float64_log": 1e-7},
            {"tau": 0.01, "algorithm": "divide_conquer_log", "precision": "float32", "stable": 1,
             "max_relative_error_vs_float64_log": 1e-7},
        ],
    }
    bench_file = tmp_path / "losses.json"
    bench_file.write_text(json.dumps(bench))
    table, files = make_table("b18_speed", tmp_path / "t", bench_file=bench_file)
    tidy = pd.read_csv(files["csv"])
    paper = paper_results.load("b18_tables3_4_speed").set_index(["n_classes", "pass", "algorithm"])["seconds"]
    paper_ratio = paper[(1000, "forward", "summation")] / paper[(1000, "forward", "divide_conquer")]
    forward = cell(tidy, section="forward", n=1000)
    assert forward["ours_ratio"] == 5.0 and forward["paper_ratio"] == pytest.approx(paper_ratio)
    assert forward["diff"] == pytest.approx(5.0 - paper_ratio)
    assert forward["ours_divide_conquer_ms"] == pytest.approx(2.0)
    assert cell(tidy, section="forward", n=100000)["paper_ratio"] == pytest.approx(6.258 / 0.146, rel=1e-3)
    flags = cell(tidy, section="stability", tau=0.1, algorithm="summation", precision="float32")
    assert (flags["ours_stable"], flags["paper_stable"], flags["agree"]) == (1, 0, False)
    assert "1 of 2 compared flags agree" in table.markdown()
    stability = table.sections[1][1]
    assert stability.loc[("summation", "float32"), "τ = 0.1"] == "✓ / ✗ (differs)"
    assert stability.loc[("summation", "float64"), "τ = 10"] == "– / ✓"
    # B18 Table 5's "DC log (D)" row: stable at every τ, beside ours where measured
    assert list(stability.loc[("divide_conquer_log", "float64")]) == ["– / ✓"] * 6
    assert files["tex"].read_text().count("\\begin{tabular}") == 2


# ------------------------------------------------------------------------- script


def load_script():
    """The module of ``scripts/make_tables.py``'s command line."""
    from topk.report import make_tables

    return make_tables


def test_cli_without_a_sweep_says_which_command_runs_it(tmp_path, capsys):
    script = load_script()
    assert script.main(["b18_cifar_noise", "--outputs", str(tmp_path)]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("Error: no sweep of b18_cifar_noise")
    assert "`python train.py -m +experiment=b18_cifar_noise`" in error and "\n" not in error
    assert script.main(["b18_speed", "--bench-file", str(tmp_path / "nope.json")]) == 1
    assert "scripts/bench_losses.py" in capsys.readouterr().err
    (tmp_path / "sweeps" / "g22_epsilon" / "2026-01-01_00-00-00").mkdir(parents=True)
    assert script.main(["g22_epsilon", "--outputs", str(tmp_path)]) == 1
    assert "no sweep of g22_epsilon with a run record" in capsys.readouterr().err


def test_cli_uses_the_newest_sweep_and_prints_paths(noise_sweep, tmp_path, capsys):
    newest = tmp_path / "outputs" / "sweeps" / "b18_cifar_noise" / "2026-02-01_00-00-00"
    newest.parent.mkdir(parents=True)
    noise_sweep.rename(newest)
    script = load_script()
    assert script.main(["b18_cifar_noise", "--outputs", str(tmp_path / "outputs")]) == 0
    printed = capsys.readouterr().out
    assert "# B18 Table 1" in printed and "2026-02-01_00-00-00" in printed
    for kind in ("md", "csv", "tex"):
        assert (tmp_path / "outputs" / "tables" / f"b18_cifar_noise.{kind}").exists()
        assert f"wrote {kind}:" in printed


def test_write_table_creates_the_directory(noise_sweep, tmp_path):
    files = write_table(build_table("b18_cifar_noise", sweep_dir=noise_sweep), tmp_path / "a" / "b")
    assert all(path.parent == tmp_path / "a" / "b" for path in files.values())


@pytest.mark.parametrize("table_id", sorted(
    table_id for table_id, spec in TABLES.items() if spec is not None and spec.paper
))
def test_every_published_number_stands_in_its_cell(tmp_path, table_id):
    """Each table has a cell for every (row, column, metric) of its published CSV, holding that
    number, even when no run has finished (here: one failed run)."""
    spec = TABLES[table_id]
    sweep = write_sweep(tmp_path / "s", [record(status="failed")], experiment=table_id)
    table = build_table(table_id, sweep_dir=sweep)
    published = paper_cells(spec)
    assert len(published) > 0
    tidy = table.tidy.assign(
        row=[tuple(normalise_key(r[name]) for name in spec.row_names) for _, r in table.tidy.iterrows()],
        column=[tuple(normalise_key(r[name]) for name in spec.column_names) for _, r in table.tidy.iterrows()],
    )
    for _, expected in published.iterrows():
        match = tidy[(tidy["row"] == expected["row"]) & (tidy["column"] == expected["column"])
                     & (tidy["metric"] == expected["metric"])]
        assert len(match) == 1, (table_id, expected["row"], expected["column"], expected["metric"])
        assert match.iloc[0]["paper"] == pytest.approx(expected["paper"])


def test_p22_takes_test_top1_and_top5_each_at_its_own_best_validation_epoch(tmp_path):
    """P22's methods as its sweep runs them: cross-entropy (its p_K = (1, 0, 0, 0, 0) row), the
    smooth top-5 SVM (its (0, 0, 0, 0, 1) row), each sorter a column."""
    history = [{"epoch": 1, "val/top1": 30.0, "val/top5": 60.0, "test/top1": 29.0, "test/top5": 58.0},
               {"epoch": 2, "val/top1": 35.0, "val/top5": 59.0, "test/top1": 33.0, "test/top5": 57.0},
               {"epoch": 3, "val/top1": 35.0, "val/top5": 58.0, "test/top1": 34.0, "test/top5": 56.0}]
    grid = ([0, 0, 0, 0, 1], [0.5, 0, 0, 0, 0.5])
    records = [record(loss="diffsort_topk_ce", params={"loss.p_k": p_k, "loss.sorter": sorter},
                      test={"top1": 0.0, "top5": 0.0}) for p_k in grid for sorter in ("bitonic", "neuralsort")]
    records += [record(loss="smooth_svm", params={"loss.k": 5, "loss.tau": 1.0}, test={"top1": 0.0, "top5": 0.0}),
                record(loss="ce", test={"top1": 0.0, "top5": 0.0})]
    sweep = write_sweep(tmp_path / "s", records, histories=[history] * 6, experiment="p22_cifar")
    table = build_table("p22_cifar", sweep_dir=sweep)
    top1 = cell(table.tidy, p_K="(0.5, 0, 0, 0, 0.5)", method="bitonic", metric="top1")
    assert top1["mean"] == 33.0 and math.isnan(top1["paper"])  # the first epoch with the best val top-1
    assert cell(table.tidy, p_K="(0, 0, 0, 0, 1)", method="neuralsort", metric="top5")["mean"] == 58.0
    assert cell(table.tidy, p_K="(1, 0, 0, 0, 0)", method="ce", metric="top5")["mean"] == 58.0
    assert cell(table.tidy, p_K="(0, 0, 0, 0, 1)", method="smooth_svm", metric="top1")["mean"] == 33.0
    assert [caption for caption, _ in table.sections] == ["top1", "top5"]
    top1_section = table.sections[0][1]  # P22's order of p_K, then of methods
    assert list(top1_section.index) == ["(1, 0, 0, 0, 0)", "(0, 0, 0, 0, 1)", "(0.5, 0, 0, 0, 0.5)"]
    assert list(dict.fromkeys(top1_section.columns.get_level_values(0))) == ["ce", "smooth_svm", "neuralsort", "bitonic"]


def test_zoo_ranks_every_loss_best_top5_first(tmp_path):
    test = {"ce": (70.0, 90.0, 85.0, 88.0), "smooth_svm": (69.0, 92.0, 86.0, 87.0),
            "topk_entropy": (71.0, 91.0, 84.0, 89.0)}
    records = [record(seed=seed, loss=loss, test=dict(zip(("top1", "top5", "macro_top5", "avg5"),
                                                            (v + seed for v in values))))
               for loss, values in test.items() for seed in (0, 1)]
    records.append(record("failed", 0, "hinge"))
    sweep = write_sweep(tmp_path / "s", records, experiment="zoo_cifar100")
    table = build_table("zoo_cifar100", sweep_dir=sweep)
    assert list(table.sections[0][1].index) == ["smooth_svm", "topk_entropy", "ce", "hinge"]
    avg5 = cell(table.tidy, loss="topk_entropy", metric="avg5")
    assert (avg5["mean"], avg5["n"]) == (89.5, 2)
    assert ("Ranks (1 = best mean over completed seeds), by top1, top5, macro_top5, avg5: "
            "smooth_svm 3/1/1/3; topk_entropy 1/2/3/1; ce 2/3/2/2") in table.preamble


def test_average_k_stands_beside_top_k_when_the_records_hold_it(tmp_path):
    records = [record(seed=s, loss="ce", params={"dataset.noise": 0.2},
                      test={"top1": 70.0, "top5": 90.0, "avg1": 60.0 + s, "avg5": 95.0}) for s in (0, 1)]
    table = build_table("b18_cifar_noise", sweep_dir=write_sweep(tmp_path / "s", records, experiment="b18_cifar_noise"))
    avg1 = cell(table.tidy, noise=0.2, loss="ce", metric="avg1")
    assert (avg1["mean"], avg1["n"]) == (60.5, 2) and math.isnan(avg1["paper"])
    assert list(dict.fromkeys(table.sections[0][1].columns.get_level_values(1))) == ["top1", "top5", "avg1", "avg5"]
    assert "average-k accuracy beside it (not in the paper)" in table.title
