"""Run records of a sweep → S20 figure and table; failed runs are counted, not averaged."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from test_faults import run_main

from conftest import ROOT, run_cli
from topk.errors import ConfigError
from topk.records import EMPTY_PROVENANCE, find_results, write_history, write_results
from topk.report.figures import make_figure, smallest_k_reaching, summarise
from topk.report.runs import best_sweep_dir, load_sweep


def fake_record(status, loss, seed, d, top1, top2):
    return {
        "status": status, "error": None if status == "completed" else "boom",
        "experiment": "s20_exp2", "dataset": "circles_multimodal", "model": "linear",
        "loss": loss, "seed": seed, "params": {"dataset.d": d}, "best_epoch": 3,
        "selection_metric": "last", "val": {},
        "test": {"top1": top1, "top2": top2} if status == "completed" else {},
        "epoch_seconds": 0.01, "versions": {"topk": "0"}, "provenance": EMPTY_PROVENANCE,
    }


def test_summary_means_min_max_and_failed_runs(tmp_path):
    records = [
        fake_record("completed", "ce", 0, 30, 90.0, 99.0),
        fake_record("completed", "ce", 1, 30, 80.0, 97.0),
        fake_record("failed", "ce", 2, 30, 0, 0),
        fake_record("completed", "topk_group", 0, 30, 50.0, 100.0),
        fake_record("interrupted", "topk_group", 0, 90, 0, 0),
    ]
    for index, record in enumerate(records):
        (tmp_path / str(index)).mkdir()
        write_results(tmp_path / str(index), record)
    summary = summarise(load_sweep(tmp_path).runs, "dataset.d").set_index(["dataset.d", "loss"])
    ce = summary.loc[(30, "ce")]
    assert (ce["runs"], ce["not_completed"]) == (2, 1)
    assert (ce["top1_mean"], ce["top1_min"], ce["top1_max"]) == (85.0, 80.0, 90.0)
    assert ce["top2_mean"] == 98.0
    unfinished = summary.loc[(90, "topk_group")]
    assert (unfinished["runs"], unfinished["not_completed"]) == (0, 1)
    assert pd.isna(unfinished["top1_mean"])
    files = make_figure("s20_exp2", tmp_path, tmp_path / "figures")
    assert files["png"].stat().st_size > 10_000
    table = pd.read_csv(files["csv"])
    assert len(table) == 3 and "not_completed" in table.columns
    assert "| 30 " in files["md"].read_text().replace("|          ", "| ")


def test_a_whole_config_value_prints_as_a_whole_number(tmp_path):
    """Records hold ``dataset.d`` as a float (30.0): the summary's column is whole numbers, so
    the page and the markdown print d = 30 where the accuracies get two decimals; a fractional
    or a huge value (σ = 1e308 of a failed run) stays a float."""
    from topk.report.cells import whole_numbers
    from topk.report.page import html_table

    for index, record in enumerate([fake_record("completed", "ce", 0, 30.0, 90.0, 99.0),
                                    fake_record("completed", "ce", 0, 45.0, 80.0, 97.0)]):
        (tmp_path / str(index)).mkdir()
        write_results(tmp_path / str(index), record)
    summary = summarise(load_sweep(tmp_path).runs, "dataset.d")
    assert str(summary["dataset.d"].dtype) == "Int64"
    page = html_table(summary, index=False, floatfmt=".2f")
    assert "<td>30</td>" in page and "<td>45</td>" in page and "30.00" not in page
    assert "<td>90.00</td>" in page
    assert whole_numbers(pd.Series([0.5, 2.0])).tolist() == [0.5, 2.0]
    assert whole_numbers(pd.Series([10.0, 1e308])).tolist() == [10.0, 1e308]


def test_missing_sweep_names_the_command(tmp_path):
    """(Which sweep is chosen among several: tests/test_report.py.)"""
    with pytest.raises(FileNotFoundError, match=r"python train.py -m \+experiment=s20_exp1"):
        best_sweep_dir(tmp_path, "s20_exp1")
    (tmp_path / "sweeps" / "s20_exp1" / "2026-01-01_00-00-00").mkdir(parents=True)  # empty
    with pytest.raises(FileNotFoundError, match="no sweep of s20_exp1 with a run record"):
        best_sweep_dir(tmp_path, "s20_exp1")


def test_sweep_with_a_failing_run_still_makes_the_figure(tmp_path):
    """A real multirun of the S20 experiment at smoke scale (parallel launcher, 2 epochs):
    runs whose sigma is too wide for the circles' floats (their features are NaN) fail, leave a
    failed record, and the figure is still drawn (``make_figures.py`` in this process). The sweep
    is a new process: its jobs' error lines come from the launcher's workers, on its stderr."""
    sweep_dir = tmp_path / "sweep"
    result = run_cli([
        "-m", "+experiment=s20_exp1", "trainer.epochs=2", "dataset.sigma=10,1e308",
        "loss=ce", "seed=0", f"hydra.sweep.dir={sweep_dir}",
    ])
    assert result.returncode != 0  # the sweep reports its failure ...
    assert "the train split holds NaN or infinite features" in result.stderr
    runs = load_sweep(sweep_dir).runs
    assert sorted(runs["status"]) == ["completed", "failed"]
    out = tmp_path / "figures"
    assert load_script("make_figures").main(["s20_exp1", "--sweep-dir", str(sweep_dir), "--out", str(out)]) == 0
    # ... and the table is not broken by it
    table = pd.read_csv(out / "s20_exp1.csv")
    assert table.set_index(["dataset.sigma", "loss"]).loc[(1e308, "ce"), "not_completed"] == 1
    assert (out / "s20_exp1.png").exists()
    # The same sweep command with trainer.resume=true picks every run up in its own directory.
    before = {record["run_dir"]: record for record in find_results(sweep_dir)}
    code, _ = run_main(["-m", "+experiment=s20_exp1", "trainer.epochs=2", "dataset.sigma=10,1e308", "loss=ce",
                        "seed=0", f"hydra.sweep.dir={sweep_dir}", "trainer.resume=true",
                        "hydra.launcher.n_jobs=1"], quick=False)  # in this process, one job after the other
    assert code == 1 and "resumed from" in (sweep_dir / "0" / "train.log").read_text()
    after = {record["run_dir"]: record for record in find_results(sweep_dir)}
    assert after.keys() == before.keys()
    for run_dir, record in after.items():
        assert record["status"] == before[run_dir]["status"]
        assert record["test"] == before[run_dir]["test"]


def test_figures_refuse_a_sweep_of_another_experiment_or_of_none(b18_tau_sweep, tmp_path):
    others = write_sweep(tmp_path / "others", [fake_record("completed", "ce", 0, 30, 90.0, 99.0)])
    with pytest.raises(ConfigError) as refused:
        make_figure("b18_tau", others, tmp_path / "figures")
    assert str(refused.value) == (
        f"{others} holds runs of experiment s20_exp2, not b18_tau; point --sweep-dir at a sweep "
        "of `python train.py -m +experiment=b18_tau`.")
    with pytest.raises(ConfigError, match="holds runs of experiment b18_tau, not s20_exp2"):
        make_figure("s20_exp2", b18_tau_sweep, tmp_path / "figures")
    nobody = write_sweep(tmp_path / "nobody", [{**fake_record("completed", "ce", 0, 30, 90.0, 99.0),
                                                "experiment": None}])
    with pytest.raises(ConfigError, match=r"holds runs of no experiment \(`experiment: null`"):
        make_figure("s20_exp2", nobody, tmp_path / "figures")
    assert not (tmp_path / "figures").exists()


def test_figures_refuse_a_sweep_mixing_experiments(tmp_path):
    records = [fake_record("completed", "ce", seed, 30, 90.0, 99.0) for seed in (0, 1)]
    mixed = write_sweep(tmp_path / "mixed", [*records, {**records[0], "experiment": "s20_exp1"}])
    with pytest.raises(ConfigError, match=rf"mixes 2 run\(s\) of s20_exp2 with 1 run\(s\) of "
                       rf"experiment s20_exp1 \(e.g. {re.escape(str(mixed / '2'))}\)"):
        make_figure("s20_exp2", mixed, tmp_path / "figures")


def test_make_figures_script_refuses_another_experiments_sweep_in_one_line(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", [fake_record("completed", "ce", 0, 30, 90.0, 99.0)])
    result = run_cli_script(["b18_tau", "--sweep-dir", str(sweep), "--out", str(tmp_path / "f")])
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert "experiment s20_exp2, not b18_tau" in result.stderr and "Traceback" not in result.stderr


def run_cli_script(args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(ROOT / "scripts" / "make_figures.py"), *args],
                          capture_output=True, text=True, timeout=120)


# ----------------------------------------------------------------- s20_cifar, g22_time, b18_tau


def run_record(status, loss, seed=0, params=None, test=None, **top_level):
    """A results.json record of any experiment; ``top_level`` overrides keys like ``model``."""
    return {
        "status": status, "error": None if status == "completed" else "boom",
        "experiment": None, "dataset": "cifar100", "model": "resnet18", "loss": loss,
        "augment": "mixup", "seed": seed, "params": params or {}, "best_epoch": 1,
        "selection_metric": "last", "val": {}, "test": test or {}, "epoch_seconds": 1.0,
        "versions": {"topk": "0"}, "provenance": EMPTY_PROVENANCE, **top_level,
    }


def write_sweep(root, records, histories=None, multirun_yaml=None, experiment=None):
    """Job directories 0/, 1/, … with each record (and its history rows), plus a multirun.yaml;
    ``experiment`` is written into every record that names none."""
    for job, record in enumerate(records):
        (root / str(job)).mkdir(parents=True)
        write_results(root / str(job), {**record, "experiment": record["experiment"] or experiment})
        if histories and histories[job] is not None:
            write_history(root / str(job), histories[job])
    if multirun_yaml is not None:
        (root / "multirun.yaml").write_text(multirun_yaml)
    return root


def top_k_curve(offset):
    """``top{k}`` = min(100, offset + k) for k = 1..30."""
    return {f"top{k}": float(min(100, offset + k)) for k in range(1, 31)}


def check_files(files):
    """The CSV as a frame and the markdown with its table padding squeezed to one space."""
    assert files["png"].stat().st_size > 10_000
    assert files["csv"].exists()
    return pd.read_csv(files["csv"]), re.sub(r" +", " ", files["md"].read_text())


def point(table, **keys):
    rows = table
    for name, value in keys.items():
        rows = rows[rows[name] == value]
    assert len(rows) == 1, keys
    return rows.iloc[0]


S20_PANEL = {"model": "resnet18", "augment": "mixup", "selection_metric": "val/top5"}


@pytest.fixture
def s20_cifar_sweep(tmp_path):
    """ResNet-18 + Mixup selected by val/top5: CE (seeds 0, 1; seed 2 failed) and top-5
    transition (seeds 0, 1 of 3), plus runs of other panels that must stay out."""
    records = [
        run_record("completed", "ce", 0, test=top_k_curve(68), **S20_PANEL),
        run_record("completed", "ce", 1, test=top_k_curve(66), **S20_PANEL),
        run_record("failed", "ce", 2, **S20_PANEL),
        run_record("completed", "topk_transition", 0, {"loss.k": 5}, top_k_curve(74), **S20_PANEL),
        run_record("completed", "topk_transition", 1, {"loss.k": 5}, top_k_curve(76), **S20_PANEL),
        run_record("completed", "ce", 0, test=top_k_curve(0),
                   **{**S20_PANEL, "selection_metric": "val/top1"}),
        run_record("completed", "ce", 0, test=top_k_curve(0),
                   **{**S20_PANEL, "model": "densenet121"}),
    ]
    multirun = "hydra:\n  sweeper:\n    params:\n      seed: 0,1,2\n"
    return write_sweep(tmp_path / "sweep", records, multirun_yaml=multirun, experiment="s20_cifar")


def test_s20_cifar_means_counts_and_smallest_k_reaching_99(s20_cifar_sweep, tmp_path):
    files = make_figure("s20_cifar", s20_cifar_sweep, tmp_path / "figures")
    table, markdown = check_files(files)
    ce, transition = point(table, loss="ce", k=5), point(table, loss="topk_transition", k=24)
    assert ce["accuracy_mean"] == 72.0  # (73 + 71) / 2: the other panels' runs are left out
    # the protocol (not the sweep's multirun.yaml, narrowed to 3 seeds) asks for 10 seeds
    assert (ce["n"], ce["failed"], ce["missing"]) == (2, 1, 7)
    assert ce["counts"] == "2/10 seeds, 1 failed, 7 missing"
    assert transition["accuracy_mean"] == 99.0  # (98 + 100) / 2
    assert transition["counts"] == "2/10 seeds, 8 missing"
    assert sorted(table["k"].unique()) == list(range(1, 31))
    # CE's mean is 67 + k, at most 97 %: it never reaches 99 %; the transition loss does at k = 24.
    assert set(table.loc[table["loss"] == "ce", "smallest_k_99"].astype(str)) == {"none"}
    assert set(table.loc[table["loss"] == "topk_transition", "smallest_k_99"].astype(str)) == {"24"}
    assert "model = resnet18, augment = mixup, models selected by val/top5 (5 runs)" in markdown
    assert "| top-5 transition | 2/10 seeds, 8 missing |" in markdown
    assert "k = 25" in markdown and "| 33 |" in markdown  # S20's numbers beside ours
    # S20's two claims with a verdict each: transition reaches 99 % at k = 24 (25 ± 3), CE never
    assert "| CE best for k<=2; top-5 transition best for k>=3" in markdown
    assert "| top-5 transition reaches 99% top-k accuracy at k=25; CE needs k=33 |" in markdown
    assert "all 2 comparisons hold" in markdown
    assert "1 failed" in markdown


def test_s20_cifar_reads_the_model_kept_by_val_top5_of_a_shared_run(tmp_path):
    """Runs selected by val/top1 that kept the best model by val/top5 (trainer.also_select_on)
    draw the val/top5 panel with that model's test accuracies."""
    def shared(seed, offset):
        kept = {"best_epoch": 9, "val": {"top5": 90.0}, "test": top_k_curve(offset)}
        return run_record("completed", "ce", seed, test=top_k_curve(0), also_selected={"val/top5": kept},
                          **{**S20_PANEL, "selection_metric": "val/top1"})

    sweep = write_sweep(tmp_path / "sweep", [shared(0, 68), shared(1, 66)], experiment="s20_cifar")
    table, markdown = check_files(make_figure("s20_cifar", sweep, tmp_path / "figures"))
    assert point(table, loss="ce", k=5)["accuracy_mean"] == 72.0 and point(table, loss="ce", k=5)["n"] == 2
    assert "models selected by val/top5 (2 runs)" in markdown and "No run with" not in markdown
    top1, _ = check_files(make_figure("s20_cifar", sweep, tmp_path / "top1", selection="val/top1"))
    assert point(top1, loss="ce", k=5)["accuracy_mean"] == 5.0  # the selected model's own curve


def test_smallest_k_reaching_uses_the_mean_curve():
    points = pd.DataFrame({"loss": ["a", "a", "a", "b"], "k": [1, 2, 3, 1],
                           "accuracy_mean": [98.0, 99.0, 100.0, float("nan")]})
    assert smallest_k_reaching(points) == {"a": 2, "b": None}


def test_s20_cifar_panel_falls_back_and_says_so(s20_cifar_sweep, tmp_path):
    files = make_figure("s20_cifar", s20_cifar_sweep, tmp_path / "figures", model="vgg",
                        selection="val/top1")
    table, markdown = check_files(files)
    assert "No run with model = vgg in this sweep (it has densenet121, resnet18): showing " \
           "model = resnet18 instead." in markdown
    assert set(table["loss"]) == {"ce"} and point(table, loss="ce", k=1)["accuracy_mean"] == 1.0


@pytest.fixture
def g22_time_sweep(tmp_path):
    """CE at 2, 4 (K = 5, two seeds) and 3 s (K = 10): baseline 3 s; a failed CE run of 100 s
    (another seed: the same job again would be a duplicate, left out) stays out."""
    def timed(status, loss, k, seconds, n_samples=None, seed=0):
        params = {"k": k, "loss.k": k}
        if n_samples is not None:
            params["loss.n_samples"] = n_samples
        return run_record(status, loss, seed=seed, params=params, epoch_seconds=seconds)

    records = [
        timed("completed", "ce", 5, 2.0), timed("completed", "ce", 5, 4.0, seed=1),
        timed("completed", "ce", 10, 3.0), timed("failed", "ce", 10, 100.0, seed=1),
        timed("completed", "smooth_svm", 5, 6.0), timed("completed", "smooth_svm", 10, 9.0),
        timed("completed", "noised_bal", 5, 3.3, 3),
        timed("interrupted", "noised_bal", 10, None, 3),
        timed("completed", "noised_bal", 5, 4.5, 10),
    ]
    return write_sweep(tmp_path / "sweep", records, experiment="g22_time")


def test_g22_time_ratios_to_the_sweeps_ce_and_the_papers_points(g22_time_sweep, tmp_path):
    files = make_figure("g22_time", g22_time_sweep, tmp_path / "figures")
    table, markdown = check_files(files)
    # one smooth SVM run per K: its growth with K has no interval, so G22's claim is undecided
    assert "smooth_svm ratio at K = 10 − at K = 5 = +1.00, 1 seed (undecided)" in markdown
    assert "| undecided |" in markdown
    ours, paper = table[table["source"] == "ours"], table[table["source"] == "paper"]
    assert point(ours, line="smooth_svm", k=5)["ratio_to_ce_mean"] == pytest.approx(2.0)
    assert point(ours, line="smooth_svm", k=10)["ratio_to_ce_mean"] == pytest.approx(3.0)
    assert point(ours, line="noised_bal (B=3)", k=5)["ratio_to_ce_mean"] == pytest.approx(1.1)
    assert point(ours, line="noised_bal (B=10)", k=5)["ratio_to_ce_mean"] == pytest.approx(1.5)
    ce_at_5 = point(ours, line="ce", k=5)
    assert (ce_at_5["ratio_to_ce_mean"], ce_at_5["n"]) == (pytest.approx(1.0), 2)
    failed_ce = point(ours, line="ce", k=10)
    assert (failed_ce["ratio_to_ce_mean"], failed_ce["failed"]) == (pytest.approx(1.0), 1)
    unfinished = point(ours, line="noised_bal (B=3)", k=10)
    assert unfinished["interrupted"] == 1 and pd.isna(unfinished["ratio_to_ce_mean"])
    assert point(paper, line="smooth_svm", k=5)["ratio_to_ce_mean"] == pytest.approx(81 / 65)
    assert point(paper, line="noised_bal (B=3)", k=10)["ratio_to_ce_mean"] == pytest.approx(60 / 65)
    assert point(paper, line="ce", k=5)["ratio_to_ce_mean"] == 1.0
    assert "CE baseline: 3.000 s per epoch" in markdown
    assert "| noised_bal (B=3) | 10 | – | 0/1 runs, 1 interrupted | 0.923 | 60 |" in markdown
    assert "65 s with CE" in markdown


def test_g22_time_without_a_completed_ce_run_has_no_ratios(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", [
        run_record("failed", "ce", params={"k": 5}),
        run_record("completed", "smooth_svm", params={"k": 5}, epoch_seconds=2.0),
    ], experiment="g22_time")
    table, markdown = check_files(make_figure("g22_time", sweep, tmp_path / "figures"))
    assert table.loc[table["source"] == "ours", "ratio_to_ce_mean"].isna().all()
    assert "No completed CE run in this sweep" in markdown


@pytest.mark.parametrize("growth", [12, 40])
def test_g22_time_claim_names_the_network_its_runs_timed(tmp_path, growth):
    """DenseNet 40-12 in the sweep, 40-40 in make gpu-check; G22's 40-40 on a GPU beside it."""
    sweep = write_sweep(tmp_path / "sweep", [
        run_record("completed", loss, params={"k": k, "loss.k": k, "model.depth": 40,
                                              "model.growth_rate": growth}, epoch_seconds=1.0)
        for loss in ("ce", "smooth_svm") for k in (5, 10)], experiment="g22_time")
    _, markdown = check_files(make_figure("g22_time", sweep, tmp_path / "figures"))
    assert (f"| DenseNet 40-{growth} on random CIFAR-100-shaped images (G22: DenseNet 40-40 on "
            "CIFAR-100, on a GPU) |") in markdown


def history(top5_at_even_epochs, epochs=4):
    """History rows: ``train/top5`` logged on the even epochs only (the others not evaluated)."""
    logged = iter(top5_at_even_epochs)
    return [{"epoch": epoch, "lr": 0.1, "train/loss": 1.0,
             **({"train/top5": next(logged)} if epoch % 2 == 0 else {})}
            for epoch in range(1, epochs + 1)]


@pytest.fixture
def b18_tau_sweep(tmp_path):
    records = [
        run_record("completed", "smooth_svm", 0, {"loss.tau": 0.01}),
        run_record("completed", "smooth_svm", 0, {"loss.tau": 1.0}),
        run_record("completed", "smooth_svm", 1, {"loss.tau": 1.0}),
        run_record("completed", "hinge", 0, {"loss.tau": 1.0}),  # hinge: τ = 0
        run_record("failed", "smooth_svm", 0, {"loss.tau": 0.1}),
        run_record("completed", "ce", 0),  # not a run of this figure
    ]
    histories = [history([50.0, 90.0]), history([60.0, 99.5]), history([70.0, 98.5]),
                 history([5.0, 8.0]), history([1.0], epochs=3), history([1.0, 1.0])]
    return write_sweep(tmp_path / "sweep", records, histories, experiment="b18_tau")


def test_b18_tau_training_error_per_epoch_and_table_6(b18_tau_sweep, tmp_path):
    files = make_figure("b18_tau", b18_tau_sweep, tmp_path / "figures")
    table, markdown = check_files(files)
    assert sorted(table["epoch"].dropna().unique()) == [2, 4]  # epochs without train/top5 skipped
    assert point(table, tau=1.0, epoch=2)["train_top5_error_mean"] == pytest.approx(35.0)
    assert point(table, tau=1.0, epoch=4)["train_top5_error_mean"] == pytest.approx(1.0)
    assert point(table, tau=1.0, epoch=4)["n"] == 2
    assert point(table, tau=0.01, epoch=4)["train_top5_error_mean"] == pytest.approx(10.0)
    assert point(table, tau=0.0, epoch=4)["train_top5_error_mean"] == pytest.approx(92.0)
    failed = table[table["tau"] == 0.1].iloc[0]
    assert (failed["failed"], failed["n"]) == (1, 0) and pd.isna(failed["epoch"])
    assert set(table["tau"]) == {0.0, 0.01, 0.1, 1.0}
    # tau = 1: our last epoch 1.00 % error = 99.00 % accuracy beside B18's 99.78 %.
    assert "| 1 | 2/2 seeds | 4 | 1.00 ± 0.71 | 99.00 | 99.78 | 0.22 | -0.78 |" in markdown
    assert "| 0.1 | 0/2 seeds, 1 failed, 1 missing | – | – | – | 99.73 | 0.27 | – |" in markdown  # two seeds
    assert "| 100 | no run |" in markdown
    assert "random predictions" in markdown
    # B18's claim, read as thresholds on the last training top-5 accuracy: τ = 0.01 ends at 90 %
    assert "| does not hold |" in markdown
    assert "τ = 0.01 last training top-5 accuracy = 90.00, 1 seed (does not hold)" in markdown


def test_make_figures_script_new_ids_and_missing_sweep(b18_tau_sweep, tmp_path, capsys):
    out = tmp_path / "figures"
    # in this process (test_make_figures_script_refuses_another_experiments_sweep_in_one_line: a new one)
    make_figures = load_script("make_figures")
    assert make_figures.main(["b18_tau", "--sweep-dir", str(b18_tau_sweep), "--out", str(out)]) == 0
    assert all((out / f"b18_tau.{kind}").exists() for kind in ("png", "csv", "md"))
    assert make_figures.main(["g22_time", "--outputs", str(tmp_path / "nothing")]) == 1
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "+experiment=g22_time" in error
    with pytest.raises(SystemExit) as wrong:
        make_figures.main(["b18_tau", "--sweep-dir", str(b18_tau_sweep), "--model", "resnet18"])
    assert wrong.value.code == 2 and "s20_cifar only" in capsys.readouterr().err


def load_script(name):
    """The module of ``scripts/<name>.py``'s command line (``topk.report.<name>``)."""
    import importlib

    return importlib.import_module(f"topk.report.{name}")


def test_s20_cifar_ce_reaching_99_is_judged_at_33_where_runs_record_k_to_40():
    from topk.report.claims import HOLDS, UNDECIDED, ce_reaching

    assert ce_reaching(34, 40).verdict == HOLDS and ce_reaching(29, 40).verdict != HOLDS
    assert ce_reaching(None, 40).verdict not in (HOLDS, UNDECIDED)  # never reaching 99 % by 40 fails
    assert ce_reaching(None, 30).verdict == HOLDS  # older runs to k = 30 show only "not by 30"
