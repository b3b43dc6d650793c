"""End-to-end runs of train.py: records, resume, failures and bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from test_faults import run_main

from conftest import ROOT, run_in_process
from topk.engine import check_selection_metric
from topk.errors import CheckpointError, ConfigError, NonFiniteLossError
from topk.records import read_results, validate_results
from topk.stopping import RunInterrupted


def read_record(run_dir):
    record = read_results(run_dir / "results.json")
    validate_results(record)
    return record


LOSSES = sorted(path.stem for path in (ROOT / "conf" / "loss").glob("*.yaml"))


@pytest.mark.parametrize("loss", LOSSES)
def test_each_loss_writes_a_valid_record(run_dir, loss):
    overrides = [f"loss={loss}", "dataset.val_per_class=20", "trainer.selection_metric=val/top2"]
    record, _ = run_in_process(run_dir, overrides)
    on_disk = read_record(run_dir)
    assert on_disk["status"] == "completed" and on_disk["error"] is None
    assert (on_disk["dataset"], on_disk["model"], on_disk["loss"]) == ("circles", "linear", loss)
    assert on_disk["params"]["trainer.epochs"] == 4 and on_disk["seed"] == 0
    assert set(on_disk["test"]) == {"loss", *(f"{name}{k}" for name in ("top", "macro_top", "avg", "macro_avg")
                                              for k in (1, 2, 3, 5))}
    assert 1 <= on_disk["best_epoch"] <= 4
    assert on_disk["selection_metric"] == "val/top2"
    history = pd.read_csv(run_dir / "history.csv")
    assert history["epoch"].tolist() == [1, 2, 3, 4]
    for column in ("lr", "train/loss", "train/top1", "val/top2", "seconds"):
        assert column in history.columns
    assert not [column for column in history.columns if column.startswith("test/")]  # scored once, at the end
    best = history.set_index("epoch").loc[on_disk["best_epoch"]]
    assert best["val/top2"] == pytest.approx(on_disk["val"]["top2"])
    assert best["val/top2"] == history["val/top2"].max()
    assert (run_dir / "checkpoints" / "last.pt").exists() and (run_dir / "checkpoints" / "best.pt").exists()
    assert list((run_dir / "tb").glob("*/events.out.tfevents.*"))
    assert on_disk["versions"]["torch"]


def first_best_epoch(history: pd.DataFrame, metric: str) -> int:
    """The first epoch with the best ``metric`` (lowest loss, else highest), as BestModel picks."""
    values = history.set_index("epoch")[metric]
    return int(values.idxmin() if metric.endswith("/loss") else values.idxmax())


ALSO_SELECTED = ["dataset.val_per_class=20", "trainer.selection_metric=val/top1", "trainer.epochs=6",
                 "optim.lr=0.3", "trainer.batch_size=64", "trainer.test_every_epoch=true"]


def test_the_test_split_is_scored_once_unless_asked_every_epoch(run_dir, tmp_path, monkeypatch):
    """By default the test split is evaluated once, on the selected model at the end (no test/*
    in the history); trainer.test_every_epoch=true scores it at every evaluation too, and the
    selected model's test metrics are then its epoch's row."""
    import topk.engine as engine

    splits_seen = []
    real = engine.evaluate

    def counting(model, loss_fn, batches, *args, **kwargs):
        splits_seen.append(batches)
        return real(model, loss_fn, batches, *args, **kwargs)

    monkeypatch.setattr(engine, "evaluate", counting)
    overrides = ["dataset.val_per_class=20", "trainer.selection_metric=val/top1", "trainer.epochs=3"]
    record, _ = run_in_process(run_dir, overrides)
    assert len(splits_seen) == 3 + 2  # val at each of 3 epochs, then val and test once for the kept model
    assert not [column for column in pd.read_csv(run_dir / "history.csv").columns if column.startswith("test/")]
    splits_seen.clear()
    every, _ = run_in_process(tmp_path / "every", [*overrides, "trainer.test_every_epoch=true"])
    assert len(splits_seen) == 3 * 2 + 2
    history = pd.read_csv(tmp_path / "every" / "history.csv").set_index("epoch")
    assert history.loc[every["best_epoch"], "test/top1"] == pytest.approx(every["test"]["top1"])
    assert (every["best_epoch"], every["test"]) == (record["best_epoch"], record["test"])  # same run, same model


def test_also_select_on_keeps_a_best_model_per_metric_from_one_run(tmp_path):
    """One run with trainer.also_select_on=[val/top2,val/loss] keeps, beside best.pt, the best
    model by each of those metrics (its own file, kept by keep_checkpoints=best) and records its
    epoch, metrics and test class accuracies; they are what a run selecting on that metric
    records (S20 Table I's two columns, G22's K rows of a loss that ignores K, from one run)."""
    shared, _ = run_in_process(tmp_path / "shared", [*ALSO_SELECTED, "trainer.keep_checkpoints=best",
                                                      "trainer.also_select_on=[val/top2,val/loss,val/top1]"])
    record, history = read_record(tmp_path / "shared"), pd.read_csv(tmp_path / "shared" / "history.csv")
    assert set(record["also_selected"]) == {"val/top2", "val/loss"}  # val/top1 is best.pt's own
    checkpoints = tmp_path / "shared" / "checkpoints"
    assert {path.name for path in checkpoints.iterdir()} == {"best.pt", "best_val_top2.pt", "best_val_loss.pt"}
    epochs = {metric: selected["best_epoch"] for metric, selected in record["also_selected"].items()}
    assert epochs == {metric: first_best_epoch(history, metric) for metric in epochs}
    assert len({record["best_epoch"], *epochs.values()}) > 1, "every metric chose the same epoch: a weak test"
    for metric, selected in record["also_selected"].items():
        assert torch.load(checkpoints / f"best_val_{metric[4:]}.pt")["epoch"] == selected["best_epoch"]
        row = history.set_index("epoch").loc[selected["best_epoch"]]
        assert selected["test"]["top1"] == pytest.approx(row["test/top1"])
        alone, _ = run_in_process(tmp_path / metric[4:], [*ALSO_SELECTED, f"trainer.selection_metric={metric}"])
        assert (alone["best_epoch"], alone["val"], alone["test"], alone["test_per_class"]) == (
            selected["best_epoch"], selected["val"], selected["test"], selected["test_per_class"]), metric
    assert (shared["best_epoch"], shared["test"]) == (first_best_epoch(history, "val/top1"), record["test"])


def test_average_k_selects_the_model_and_is_recorded(run_dir):
    """Average-k accuracy (Garcin et al. 2021) at the val split's threshold, in the history, the
    record and as the selection metric."""
    overrides = ["dataset.val_per_class=20", "trainer.selection_metric=val/avg2", "trainer.epochs=3",
                 "trainer.test_every_epoch=true"]
    record, _ = run_in_process(run_dir, overrides)
    on_disk = read_record(run_dir)
    assert on_disk["selection_metric"] == "val/avg2"
    history = pd.read_csv(run_dir / "history.csv").set_index("epoch")
    for split in ("val", "test"):
        for name in ("avg1", "avg5", "macro_avg2", "macro_avg5"):
            assert history[f"{split}/{name}"].between(0, 100).all()
    best = history.loc[on_disk["best_epoch"]]
    assert best["val/avg2"] == history["val/avg2"].max() == pytest.approx(on_disk["val"]["avg2"])
    assert best["test/macro_avg5"] == pytest.approx(on_disk["test"]["macro_avg5"])
    values = [on_disk["test"][f"avg{k}"] for k in (1, 2, 3, 5)]
    assert values == sorted(values)  # λ falls as k grows: the sets only gain labels


def test_average_k_is_absent_without_a_val_split(run_dir):
    run_in_process(run_dir, ["trainer.epochs=1", "dataset.val_per_class=0", "trainer.selection_metric=last"])
    assert not [name for name in read_record(run_dir)["test"] if "avg" in name]
    assert not [column for column in pd.read_csv(run_dir / "history.csv").columns if "avg" in column]
    with pytest.raises(ConfigError, match=r"'test/avg5' is not available in this run, as average-k accuracies "
                                          r"need a val split to set their threshold; choose one of last, test/loss"):
        check_selection_metric("test/avg5", ["test"], [1, 5])
    check_selection_metric("test/avg5", ["val", "test"], [1, 5])


def test_tensorboard_holds_the_history_scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_in_process(run_dir, ["trainer.epochs=3", "trainer.test_every_epoch=true"])
    [folder] = (run_dir / "tb").iterdir()  # named by the run's overrides, as TensorBoard shows it
    assert folder.name == "ce,seed=0"  # trainer.* keys change nothing it learns: its loss and seed
    events = EventAccumulator(str(folder))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"train/loss", "test/top1", "test/macro_top2", "lr"} <= set(tags)
    history = pd.read_csv(run_dir / "history.csv")
    values = [event.value for event in events.Scalars("test/top2")]
    assert values == pytest.approx(history["test/top2"].tolist(), abs=1e-4)


def test_tensorboard_names_a_run_by_its_overrides_and_a_resume_keeps_the_folder(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from topk.trackers import run_name

    assert run_name(["loss=smooth_svm", "loss.tau=0.5", "+experiment=g22_epsilon", "data_root=/data/x",
                     "trainer.num_threads=1", "hydra.sweep.dir=/tmp/s", "trainer.selection_metric=val/top5",
                     "logger=mlflow", "logger.experiment=taus"]) == (
        "+experiment=g22_epsilon,loss.tau=0.5,loss=smooth_svm,trainer.selection_metric=val_top5")
    assert run_name([], fallback="ce,seed=0") == "ce,seed=0"
    run_in_process(run_dir, ["loss=smooth_svm", "trainer.epochs=2"])
    run_in_process(run_dir, ["loss=smooth_svm", "trainer.epochs=4", "trainer.resume=true", "seed=0"])
    [folder] = (run_dir / "tb").iterdir()  # the resume's other overrides name no second folder
    assert folder.name == "loss=smooth_svm"
    events = EventAccumulator(str(folder))
    events.Reload()
    # each session wrote its own events file in the folder; files started in the same second are
    # read in the order of their names, whose last part, a counter, sorts as text ("10" before
    # "9"): compare the steps as each epoch once
    assert sorted(event.step for event in events.Scalars("train/loss")) == [1, 2, 3, 4]


def stop_after(epoch):
    def callback(current, row):
        if current == epoch:
            raise KeyboardInterrupt

    return callback


def test_resume_after_interrupt_matches_an_uninterrupted_run(tmp_path):
    overrides = [
        "trainer.epochs=7", "loss=topk_transition", "trainer.batch_size=128", "model=mlp",
        "dataset.val_per_class=30", "trainer.selection_metric=val/top1", "optim=sgd", "optim.lr=0.5",
        "schedule.milestones=[2,5]", "trainer.also_select_on=[val/top3,val/loss]",
    ]
    whole, _ = run_in_process(tmp_path / "whole", overrides)
    with pytest.raises(RunInterrupted):
        run_in_process(tmp_path / "split", overrides, on_epoch_end=stop_after(3))
    interrupted = read_record(tmp_path / "split")
    assert interrupted["status"] == "interrupted" and "after epoch 3" in interrupted["error"]
    assert len(pd.read_csv(tmp_path / "split" / "history.csv")) == 3
    resumed, _ = run_in_process(tmp_path / "split", [*overrides, "trainer.resume=true"])
    assert resumed["status"] == "completed"
    for key in ("test", "val", "best_epoch", "also_selected"):
        assert resumed[key] == whole[key], key
    whole_history = pd.read_csv(tmp_path / "whole" / "history.csv").drop(columns="seconds")
    resumed_history = pd.read_csv(tmp_path / "split" / "history.csv").drop(columns="seconds")
    pd.testing.assert_frame_equal(whole_history, resumed_history)


def sigterm_at_epoch_end(epoch):
    def callback(current, row):
        if current == epoch:
            os.kill(os.getpid(), signal.SIGTERM)

    return callback


def test_sigterm_is_taken_at_a_batch_boundary_and_the_handler_restored(run_dir):
    """The signal only sets a flag: the epoch that saw it ends cleanly (checkpoint, TensorBoard
    closed), the run stops as interrupted, and the process's own SIGTERM handler is back."""
    handler_before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted, match="after epoch 2"):
        run_in_process(run_dir, ["trainer.epochs=6", "trainer.batch_size=256"],
                       on_epoch_end=sigterm_at_epoch_end(2))
    assert read_record(run_dir)["status"] == "interrupted"
    assert len(pd.read_csv(run_dir / "history.csv")) == 2
    assert signal.getsignal(signal.SIGTERM) is handler_before


def test_a_second_signal_close_behind_the_first_is_the_same_stop(monkeypatch):
    """SIGTERM to a process group and a launcher forwarding it arrive together: one stop, taken
    at the batch boundary; a signal later than StopRequests.REPEAT_SECONDS raises at once."""
    from topk import stopping

    requests = stopping.StopRequests()
    clock = iter([100.0, 100.5, 100.0 + requests.REPEAT_SECONDS + 0.1])
    monkeypatch.setattr(stopping.time, "monotonic", lambda: next(clock))
    with requests.deferred():
        requests._handle(signal.SIGTERM, None)
        requests._handle(signal.SIGTERM, None)
        assert requests.requested
        with pytest.raises(KeyboardInterrupt):
            requests._handle(signal.SIGTERM, None)


def test_sigterm_inside_an_epoch_resumes_from_the_last_checkpoint(tmp_path):
    import torch

    from topk.data import TensorBatches
    from topk.data.splits import TensorSplit
    from topk.engine import FitSettings, fit

    generator = torch.Generator().manual_seed(0)
    inputs, labels = torch.randn(64, 2, generator=generator), torch.randint(0, 3, (64,), generator=generator)
    model = torch.nn.Linear(2, 3)
    calls = {"count": 0}

    def loss_that_signals(scores, target):
        calls["count"] += 1
        if calls["count"] == 10:  # epoch 3, second of four batches
            os.kill(os.getpid(), signal.SIGTERM)
        return torch.nn.functional.cross_entropy(scores, target)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[100])
    batches = TensorBatches(TensorSplit(inputs, labels), 16, shuffle=True, seed=0)
    with pytest.raises(RunInterrupted) as stopped:
        fit(model, loss_that_signals, optimizer, scheduler, batches, {}, 3, tmp_path,
            FitSettings(epochs=5, progress=False))
    assert stopped.value.resume_epoch == 2 and calls["count"] == 10


def test_resume_of_a_run_without_checkpoint_trains_from_scratch(run_dir):
    with pytest.raises(ConfigError, match="needs a validation split"):
        run_in_process(run_dir, ["dataset.val_per_class=0", "trainer.selection_metric=val/top1"])
    assert not (run_dir / "checkpoints" / "last.pt").exists()
    record, _ = run_in_process(run_dir, ["trainer.resume=true", "dataset.val_per_class=0", "trainer.selection_metric=last"])
    assert record["status"] == "completed" and read_record(run_dir)["best_epoch"] == 4


def test_resume_without_any_run_is_refused(run_dir):
    with pytest.raises(ConfigError, match="holds no run to resume"):
        run_in_process(run_dir, ["trainer.resume=true"])
    assert not (run_dir / "results.json").exists()


@pytest.mark.parametrize("keep,kept", [("all", {"last.pt", "best.pt"}), ("best", {"best.pt"}), ("none", set())])
def test_keep_checkpoints_prunes_a_completed_run_and_keeps_its_records(run_dir, keep, kept):
    record, _ = run_in_process(run_dir, [f"trainer.keep_checkpoints={keep}"])
    checkpoints = run_dir / "checkpoints"
    assert {path.name for path in checkpoints.glob("*")} == kept and checkpoints.is_dir() == bool(kept)
    assert read_record(run_dir)["status"] == "completed" and (run_dir / "history.csv").exists()
    assert any((run_dir / "tb").iterdir())


def test_resume_of_a_pruned_completed_run_keeps_its_record(run_dir):
    first, _ = run_in_process(run_dir, ["trainer.keep_checkpoints=best"])
    before = (run_dir / "results.json").read_bytes()
    again, _ = run_in_process(run_dir, ["trainer.keep_checkpoints=best", "trainer.resume=true"])
    assert (run_dir / "results.json").read_bytes() == before and again["test"] == first["test"]
    with pytest.raises(ConfigError, match="cannot be extended to 6 epochs; start a new run"):
        run_in_process(run_dir, ["trainer.resume=true", "trainer.epochs=6"])
    with pytest.raises(ConfigError, match="another training configuration: optim.lr"):
        run_in_process(run_dir, ["trainer.resume=true", "optim.lr=0.5"])
    assert (run_dir / "results.json").read_bytes() == before


def test_corrupt_checkpoint_stops_with_one_sentence_and_the_record_stays(run_dir):
    run_in_process(run_dir, [])
    (run_dir / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot be read .* delete it to train from scratch"):
        run_in_process(run_dir, ["trainer.resume=true"])
    assert read_record(run_dir)["status"] == "completed"


def test_nan_loss_fails_the_run_with_a_record(run_dir):
    with pytest.raises(NonFiniteLossError, match="training loss became (nan|inf) at epoch 1"):
        run_in_process(run_dir, ["optim=sgd", "optim.lr=1e30", "trainer.batch_size=100"])
    record = read_record(run_dir)
    assert record["status"] == "failed" and "lower optim.lr" in record["error"]


def test_class_weights_train_and_are_recorded(run_dir):
    run_in_process(run_dir, ["loss=smooth_svm", "loss.weight=balanced"])
    on_disk = read_record(run_dir)
    assert on_disk["status"] == "completed" and on_disk["params"]["loss.weight"] == "balanced"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["loss=topk_group", "loss.k=6"], "loss.k=6 must be between 1 and the number of classes minus one"),
        (["k=7"], "k=7 is more than the 6 classes of this data set, so there is no top-7 accuracy; "
                  "choose k of at most 6"),
        (["dataset.val_per_class=0", "trainer.selection_metric=val/top1"], "needs a validation split"),
        (["dataset.val_per_class=0", "trainer.selection_metric=val/avg5"], "needs a validation split"),
        (["dataset.val_per_class=0", "trainer.selection_metric=last", "trainer.also_select_on=[val/top5]"],
         r"trainer.also_select_on=\['val/top5'\] needs a validation split"),
        (["trainer.also_select_on=[val/top7]", "dataset.val_per_class=5"],
         "trainer.also_select_on='val/top7' is not available in this run; choose one of last"),
        (["trainer.selection_metric=val/top7", "dataset.val_per_class=5"], "is not available in this run; choose one of last"),
        (["augment=cutout"], r"augment.images \(crop_padding=4, flip=true, cutout_size=8\) transforms images"),
        (["loss.weight=[1,2]"], "loss.weight must hold 6 finite non-negative weights"),
    ],
)
def test_bad_input_for_the_data_stops_before_training(run_dir, overrides, message):
    with pytest.raises(ConfigError, match=message):
        run_in_process(run_dir, overrides)
    assert read_record(run_dir)["status"] == "failed"
    assert not (run_dir / "history.csv").exists()


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["loss=topk_transition", "loss.k=0"], r"loss.k must be a whole number of at least 1, got 0\.$"),
        (["dataset.sigma=-10"], r"dataset.sigma must be a finite number of at least 0, got -10.0\.$"),
        (["trainer.selection_metric=test/top1"], r"never test/, got 'test/top1'\.$"),
        (["trainer.also_select_on=[val/top1,test/top5]"], r"never test/, got \['val/top1', 'test/top5'\]\.$"),
        (["trainer.keep_checkpoints=last"], "trainer.keep_checkpoints must be one of all, best, none, got 'last'"),
        (["model=mlp", "model.hidden=0"], r"model.hidden must be a whole number of at least 1, got 0\.$"),
    ],
)
def test_a_config_breaking_the_schema_writes_nothing(run_dir, overrides, message):
    with pytest.raises(ConfigError, match=message):
        run_in_process(run_dir, overrides)
    assert not any(run_dir.iterdir())


def test_cli_bad_input_is_one_sentence_without_traceback(tmp_path):
    # train.py's entry point in this process; test_faults.py's test_cli_exit_code_and_sentence_in_a_new_process
    # is the same through a new interpreter
    code, stderr = run_main(["loss=topk_group", "loss.k=6", f"hydra.run.dir={tmp_path / 'run'}"], quick=False)
    assert code == 1
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error")]
    assert errors == [
        "Error: loss.k=6 must be between 1 and the number of classes minus one (5); choose a smaller k."
    ]


def test_cli_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code, stderr = run_main([f"hydra.run.dir={blocker / 'run'}", "trainer.epochs=1"], quick=False)
    assert code == 1 and "Traceback" not in stderr
    assert "cannot be written" in stderr and "hydra.run.dir=PATH" in stderr


def test_sigterm_writes_interrupted_and_the_run_resumes(tmp_path):
    run_dir = tmp_path / "run"
    args = [f"hydra.run.dir={run_dir}", "trainer.selection_metric=last", "trainer.epochs=1000000",
            "trainer.progress=false", "trainer.eval_every=1000"]
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (run_dir / "checkpoints" / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    record = json.loads((run_dir / "results.json").read_text())
    assert record["status"] == "interrupted"
    resume_epoch = int(record["error"].split("after epoch ")[1])
    assert resume_epoch >= 1
    # the resume: train.py in this process
    code, stderr = run_main([*args[:2], f"trainer.epochs={resume_epoch + 2}", "trainer.resume=true",
                             "trainer.progress=false"], quick=False)
    assert code == 0, stderr
    record = json.loads((run_dir / "results.json").read_text())
    assert record["status"] == "completed" and record["best_epoch"] == resume_epoch + 2
    assert len(pd.read_csv(run_dir / "history.csv")) == resume_epoch + 2


def test_device_auto_picks_cuda_only_when_present():
    import torch

    from topk.distributed import resolve_device

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device"):
            resolve_device("cuda")
    # Nothing hard-codes a device: no `.cuda()` call anywhere in the product.
    for path in [ROOT / "train.py", *sorted((ROOT / "topk").rglob("*.py"))]:
        assert ".cuda(" not in path.read_text(), path
