"""scripts/evaluate.py: a finished run's saved model scored again from its own configuration
(ten crops where the protocol says so), into eval.json, leaving every other file as it was.

Runs are trained by ``train.py``'s entry point in this process (:func:`test_faults.run_main`):
what is tested is the evaluation, not a new interpreter's start (``test_trust.py`` and
``test_help.py`` start ``train.py`` as a process)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from test_faults import run_as_typed, run_main


@pytest.fixture(scope="module")
def evaluate():
    from topk.evaluate import main

    return main


def fingerprint(run_dir):
    return {path.relative_to(run_dir): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(run_dir.rglob("*")) if path.is_file()}


def trained_run(run_dir, *overrides):
    code, stderr = run_main(["trainer.progress=false", f"hydra.run.dir={run_dir}", *overrides], quick=False)
    assert code == 0, stderr
    return json.loads((run_dir / "results.json").read_text())


def test_the_selected_model_gives_the_records_metrics_and_nothing_else_changes(tmp_path, evaluate, capsys):
    run_dir = tmp_path / "run"
    record = trained_run(run_dir, "trainer.epochs=6", "trainer.batch_size=120", "model=mlp", "dataset.val_per_class=30",
                         "trainer.selection_metric=val/top2")
    before = fingerprint(run_dir)
    assert evaluate([str(run_dir), "--split", "val", "--split", "test", "trainer.eval_batch_size=7"]) == 0
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["checkpoint"] == "best" and evaluation["epoch"] == record["best_epoch"]
    assert evaluation["val"] == pytest.approx(record["val"]) and evaluation["test"] == pytest.approx(record["test"])
    assert evaluation["overrides"] == ["trainer.eval_batch_size=7"]
    after = fingerprint(run_dir)
    assert after.pop(Path("eval.json")) and after == before
    # eval.json is never overwritten; the last checkpoint is the final epoch's
    assert evaluate([str(run_dir)]) == 1
    assert capsys.readouterr().err.strip().endswith(
        "already exists and is kept as it is; write elsewhere with --out PATH (+eval_out=PATH with train.py).")
    assert evaluate([str(run_dir), "--checkpoint", "last", "--out", str(tmp_path / "last.json")]) == 0
    assert json.loads((tmp_path / "last.json").read_text())["epoch"] == 6


def test_ten_crop_imagenet_is_scored_as_the_run_scored_it(tmp_path, evaluate, tiny_imagenet):
    root, _, _ = tiny_imagenet
    run_dir = tmp_path / "imagenet"
    record = trained_run(run_dir, "dataset=imagenet", f"dataset.root={root}", "dataset.val_per_class=2",
                         "dataset.ten_crop=true", "dataset.marginal_k=2", "dataset.image_size=8",
                         "dataset.resize_size=10", "model=linear", "trainer.batch_size=8", "trainer.epochs=1",
                         "trainer.num_workers=0", "trainer.selection_metric=val/top1", "k=2", "trainer.ks=[1,2]")
    assert evaluate([str(run_dir), "--out", str(tmp_path / "eval.json")]) == 0
    assert json.loads((tmp_path / "eval.json").read_text())["test"] == pytest.approx(record["test"])


def test_missing_pieces_stop_with_one_sentence(tmp_path, evaluate, capsys):
    assert evaluate([str(tmp_path / "nothing")]) == 1
    assert "holds no run configuration" in capsys.readouterr().err
    run_dir = tmp_path / "pruned"
    trained_run(run_dir, "trainer.epochs=2", "trainer.keep_checkpoints=best", "dataset.val_per_class=0",
                "trainer.selection_metric=last")
    assert evaluate([str(run_dir), "--checkpoint", "last"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "last.pt does not exist" in err and "--checkpoint best" in err
    assert evaluate([str(run_dir), "--split", "val"]) == 1
    assert capsys.readouterr().err.strip() == "Error: this run's data set has no val split; evaluate test."
    assert evaluate([str(run_dir), "loss.k=true"]) == 1
    assert "loss" in capsys.readouterr().err
    assert not (run_dir / "eval.json").exists()


def test_train_py_plus_eval_is_the_same_evaluation_and_makes_no_run_directory(tmp_path, monkeypatch):
    from topk import cli

    assert cli.evaluation_argv(["+eval=runs/a", "+eval_split=val,test", "+eval_checkpoint=last",
                                  "dataset.root=/d"]) == ["runs/a", "--split", "val", "--split", "test",
                                                          "--checkpoint", "last", "dataset.root=/d"]
    assert cli.evaluation_argv(["loss=ce"]) is None
    run_dir = tmp_path / "run"
    record = trained_run(run_dir, "trainer.epochs=3", "trainer.selection_metric=val/top2")
    before = fingerprint(run_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # train.py typed in another folder
    code, stderr = run_as_typed([f"+eval={run_dir}", "+eval_split=val,test", "trainer.eval_batch_size=11"])
    assert code == 0, stderr
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["val"] == pytest.approx(record["val"]) and evaluation["test"] == pytest.approx(record["test"])
    assert evaluation["overrides"] == ["trainer.eval_batch_size=11"]
    after = fingerprint(run_dir)
    assert after.pop(Path("eval.json")) and after == before
    assert not list(elsewhere.iterdir())  # Hydra did not start: no outputs/runs/<time>_... of its own
