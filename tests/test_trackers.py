"""Experiment trackers (topk/trackers.py): every run's hyper-parameters and final metrics in
TensorBoard's HParams data, and MLflow runs (logger=mlflow) comparable by their parameters."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from test_faults import run_main

from conftest import compose_config, run_in_process
from topk.errors import ConfigError, NonFiniteLossError

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")  # MLflow's use of SQLAlchemy

TAU_RUN = ["loss=smooth_svm", "trainer.epochs=3", "dataset.val_per_class=20", "trainer.selection_metric=val/top2"]


def hparams_of(tb_dir):
    """The hyper-parameters and the scalar values TensorBoard's HParams view reads from ``tb_dir``
    (its one folder of events, named by the run's overrides)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    [folder] = tb_dir.iterdir()
    events = EventAccumulator(str(folder), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    hparams = {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
               for name, value in start.hparams.items()}
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    hparams["differing"] = sorted(info.name for info in experiment.hparam_infos if info.differs)
    scalars = {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}
    return hparams, scalars


def test_tensorboard_holds_each_runs_hyperparameters_and_final_metrics(tmp_path):
    records = {tau: run_in_process(tmp_path / str(tau), [*TAU_RUN, f"loss.tau={tau}", "trainer.tensorboard=true"])[0]
               for tau in (0.5, 2.0)}
    for tau, record in records.items():
        hparams, scalars = hparams_of(tmp_path / str(tau) / "tb")
        assert hparams["loss.tau"] == tau and hparams["loss"] == "smooth_svm" and hparams["seed"] == 0
        assert "loss._target_" not in hparams  # the loss's name says it
        # the command line's keys are the ones TensorBoard lists and shows first
        assert hparams["differing"] == ["dataset.val_per_class", "loss", "loss.tau", "trainer.selection_metric"]
        assert scalars["hparams/val/top2"] == pytest.approx(record["val"]["top2"])
        assert scalars["hparams/test/top1"] == pytest.approx(record["test"]["top1"])
        assert "train/loss" in scalars  # the per-epoch scalars are still there


def test_mlflow_gets_one_run_per_run_with_its_parameters_history_and_status(tmp_path):
    mlflow = pytest.importorskip("mlflow", reason="the track extra (mlflow-skinny)")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logger = ["logger=mlflow", f"logger.tracking_uri={uri}", "logger.experiment=taus"]
    records = [run_in_process(tmp_path / str(tau), [*TAU_RUN, *logger, f"loss.tau={tau}"])[0] for tau in (0.5, 2.0)]
    with pytest.raises(NonFiniteLossError):  # a diverging run
        run_in_process(tmp_path / "diverged", [*TAU_RUN, *logger, "optim=sgd", "optim.lr=1e38", "loss.tau=1.0"])
    client = mlflow.tracking.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("taus").experiment_id], order_by=["start_time ASC"])
    assert [run.data.params["loss.tau"] for run in runs] == ["0.5", "2.0", "1.0"]
    assert [run.info.status for run in runs] == ["FINISHED", "FINISHED", "FAILED"]
    for run, record in zip(runs, records):
        assert f"loss.tau={record['params']['loss.tau']}" in run.info.run_name.split(",")  # named by its overrides
        assert run.data.metrics["final/val/top2"] == pytest.approx(record["val"]["top2"])
        assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2, 3]
    # the run record as it ended and its history, among each MLflow run's artefacts, beside the database
    for run, folder in zip(runs, ["0.5", "2.0", "diverged"]):
        files = artefacts(client, run, tmp_path / "mlflow-artifacts")
        kept, written = json.loads(files["results.json"]), json.loads((tmp_path / folder / "results.json").read_text())
        for record in (kept, written):
            record["provenance"].pop("ended_utc")
        assert kept == written
        if folder != "diverged":
            assert files["history.csv"] == (tmp_path / folder / "history.csv").read_text()
    assert kept["status"] == "failed" and kept["error"].startswith("NonFiniteLossError: ")


def artefacts(client, run, root) -> dict[str, str]:
    """The text of each file among ``run``'s artefacts, which must lie below ``root``."""
    from urllib.parse import urlparse

    folder = urlparse(run.info.artifact_uri).path
    assert folder.startswith(str(root)), (folder, root)
    return {item.path: (Path(folder) / item.path).read_text() for item in client.list_artifacts(run.info.run_id)}


def test_an_mlflow_file_store_is_refused_before_the_run_starts(tmp_path, monkeypatch):
    """Issue 37: logger.tracking_uri=file:... ended the run in MLflow's traceback (MLflow 3's file
    store raises unless MLFLOW_ALLOW_FILE_STORE=true), its directory written."""
    from topk.trackers import tracking_uri_problem

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    store = tmp_path / "mlruns"
    code, stderr = run_main(["logger=mlflow", f"logger.tracking_uri=file:{store}", f"hydra.run.dir={tmp_path / 'run'}"])
    assert code == 1 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"Error: logger.tracking_uri=file:{store} is an MLflow file store, which MLflow 3 no longer writes to (its "
        "filesystem backend is in maintenance mode) unless MLFLOW_ALLOW_FILE_STORE=true is set; give a database "
        "instead, e.g. logger.tracking_uri=sqlite:///outputs/mlflow.db (`mlflow migrate-filestore` moves an "
        "existing store into one), or a tracking server's http(s):// URI.")
    assert not (tmp_path / "run").exists() and not store.exists()
    assert tracking_uri_problem("logger.tracking_uri", "mlruns").startswith("logger.tracking_uri=mlruns is an MLflow file store")
    for accepted in ("sqlite:///outputs/mlflow.db", "http://localhost:5000", "postgresql://db/mlflow", "databricks"):
        assert tracking_uri_problem("logger.tracking_uri", accepted) is None
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's own opt-out, respected
    assert tracking_uri_problem("logger.tracking_uri", f"file:{store}") is None


def test_the_file_store_refusal_follows_the_installed_mlflow(tmp_path, monkeypatch):
    """What the refusal above relies on: this MLflow raises on a file store unless told otherwise."""
    mlflow = pytest.importorskip("mlflow", reason="the track extra (mlflow-skinny)")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(mlflow.exceptions.MlflowException, match="MLFLOW_ALLOW_FILE_STORE"):
        mlflow.MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}").search_experiments()


def test_logger_mlflow_without_mlflow_is_one_sentence(monkeypatch):
    from topk.trackers import MLflowTracker

    real_import = builtins.__import__

    def no_mlflow(name, *args, **kwargs):
        if name == "mlflow":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mlflow)
    with pytest.raises(ConfigError, match=r"^logger=mlflow needs MLflow, which is not installed; pip install"):
        MLflowTracker()
    assert compose_config(["logger=mlflow"]).logger.tracking_uri == "sqlite:///outputs/mlflow.db"


def test_wandb_offline_gets_one_run_per_run_with_its_config_summary_and_exit_code(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the track extra (wandb)")
    from topk import trackers

    seen = []
    real_finish = trackers.WandbTracker.finish

    def finish(self, status, metrics):  # what the run holds as it ends (the summary as finish sets it)
        summary = {**dict(self.run.summary), **metrics}
        seen.append((self.run.name, dict(self.run.config), summary, status))
        real_finish(self, status, metrics)

    monkeypatch.setattr(trackers.WandbTracker, "finish", finish)
    logger = ["logger=wandb", f"logger.dir={tmp_path / 'wb'}", "logger.project=taus"]
    record, _ = run_in_process(tmp_path / "run", [*TAU_RUN, *logger, "loss.tau=0.5"])
    with pytest.raises(NonFiniteLossError):
        run_in_process(tmp_path / "diverged", [*TAU_RUN, *logger, "optim=sgd", "optim.lr=1e38"])
    (name, config, summary, status), failed = seen
    assert "loss.tau=0.5" in name.split(",") and config["loss.tau"] == 0.5 and status == "completed"
    assert summary["final/val/top2"] == pytest.approx(record["val"]["top2"])
    assert failed[3] == "failed"
    offline = sorted((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 2 and all(path.stat().st_size > 0 for path in offline)



def test_the_kept_record_ends_as_the_runs_own_file_does():
    """The status and error that topk.run_session.end_record writes, for each way a run ends."""
    from topk.stopping import RunInterrupted
    from topk.trackers import ended

    record = {"status": "running", "error": None, "provenance": {"started_utc": "2026-11-27T00:00:00Z"}}
    assert ended(record, "completed")["error"] is None and ended(record, "completed")["status"] == "completed"
    assert ended(record, "failed", ValueError("no data"))["error"] == "ValueError: no data"
    assert ended(record, "interrupted", RunInterrupted(3))["error"] == "interrupted; resume continues after epoch 3"
    assert ended(record, "interrupted", KeyboardInterrupt())["error"] == "interrupted; resume continues after epoch 0"
    assert ended(record, "failed")["provenance"]["started_utc"] == "2026-11-27T00:00:00Z"
    assert record["status"] == "running" and "ended_utc" not in record["provenance"]  # the run's own is left as it is
