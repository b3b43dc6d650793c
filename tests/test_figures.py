"""Run records of a sweep → S20 figure and table; failed runs are counted, not averaged."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import ROOT, run_cli
from topk.figures import latest_sweep_dir, load_runs, make_s20_figure, summarise
from topk.records import find_results, write_results


def fake_record(status, loss, seed, d, top1, top2):
    return {
        "status": status, "error": None if status == "completed" else "boom",
        "experiment": "s20_exp2", "dataset": "circles_multimodal", "model": "linear",
        "loss": loss, "seed": seed, "params": {"dataset.d": d}, "best_epoch": 3,
        "selection_metric": "last", "val": {},
        "test": {"top1": top1, "top2": top2} if status == "completed" else {},
        "epoch_seconds": 0.01, "versions": {"topk": "0"},
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
    runs = load_runs(tmp_path, "dataset.d")
    summary = summarise(runs, "dataset.d").set_index(["dataset.d", "loss"])
    ce = summary.loc[(30, "ce")]
    assert (ce["runs"], ce["not_completed"]) == (2, 1)
    assert (ce["top1_mean"], ce["top1_min"], ce["top1_max"]) == (85.0, 80.0, 90.0)
    assert ce["top2_mean"] == 98.0
    unfinished = summary.loc[(90, "topk_group")]
    assert (unfinished["runs"], unfinished["not_completed"]) == (0, 1)
    assert pd.isna(unfinished["top1_mean"])
    files = make_s20_figure("s20_exp2", tmp_path, tmp_path / "figures")
    assert files["png"].stat().st_size > 10_000
    table = pd.read_csv(files["csv"])
    assert len(table) == 3 and "not_completed" in table.columns
    assert "| 30 " in files["md"].read_text().replace("|          ", "| ")


def test_latest_sweep_dir_and_missing_sweep(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"python train.py -m \+experiment=s20_exp1"):
        latest_sweep_dir(tmp_path, "s20_exp1")
    for name in ("2026-01-01_00-00-00", "2026-02-01_00-00-00"):
        (tmp_path / "sweeps" / "s20_exp1" / name).mkdir(parents=True)
    assert latest_sweep_dir(tmp_path, "s20_exp1").name == "2026-02-01_00-00-00"


def test_sweep_with_a_failing_run_still_makes_the_figure(tmp_path):
    """A real multirun of the S20 experiment at smoke scale (parallel launcher, 2 epochs):
    runs with a negative sigma fail, leave a failed record, and the figure is still drawn."""
    sweep_dir = tmp_path / "sweep"
    result = run_cli([
        "-m", "+experiment=s20_exp1", "trainer.epochs=2", "dataset.sigma=10,-1",
        "loss=ce,topk_transition", "seed=0", f"hydra.sweep.dir={sweep_dir}",
    ])
    assert result.returncode != 0  # the sweep reports its failure ...
    assert "dataset.sigma is the width of a class in degrees and must be >= 0" in result.stderr
    runs = load_runs(sweep_dir, "dataset.sigma")
    assert sorted(runs["status"]) == ["completed", "completed", "failed", "failed"]
    out = tmp_path / "figures"
    figure = run_cli_script(["s20_exp1", "--sweep-dir", str(sweep_dir), "--out", str(out)])
    assert figure.returncode == 0, figure.stderr  # ... and the table is not broken by it
    table = pd.read_csv(out / "s20_exp1.csv")
    assert table.set_index(["dataset.sigma", "loss"]).loc[(-1, "ce"), "not_completed"] == 1
    assert (out / "s20_exp1.png").exists()
    # The same sweep command with trainer.resume=true picks every run up in its own directory.
    before = {record["run_dir"]: record for record in find_results(sweep_dir)}
    again = run_cli([
        "-m", "+experiment=s20_exp1", "trainer.epochs=2", "dataset.sigma=10,-1",
        "loss=ce,topk_transition", "seed=0", f"hydra.sweep.dir={sweep_dir}", "trainer.resume=true",
    ])
    assert "resumed from" in again.stdout + again.stderr
    after = {record["run_dir"]: record for record in find_results(sweep_dir)}
    assert after.keys() == before.keys()
    for run_dir, record in after.items():
        assert record["status"] == before[run_dir]["status"]
        assert record["test"] == before[run_dir]["test"]


def run_cli_script(args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(ROOT / "scripts" / "make_figures.py"), *args],
                          capture_output=True, text=True, timeout=120)
