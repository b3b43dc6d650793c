"""What a run tells experiment trackers: TensorBoard's HParams data, and MLflow (``logger=mlflow``).

**TensorBoard.** Besides the per-epoch scalars (:class:`topk.records.TensorBoardScalars`), a
completed run writes its hyper-parameters with the selected model's final metrics to its
``tb/<run name>/`` folder (:func:`topk.records.tensorboard_dir`) in the form of TensorBoard's
HParams plugin (:func:`write_hparams`), so that the runs of a sweep compare by ε, τ, k or seed
in the HParams view (``tensorboard --logdir outputs/sweeps``).

**MLflow** (``logger=mlflow``, the optional ``track`` extra): :class:`MLflowTracker` logs the
run's flat configuration as parameters, every epoch's numbers as metrics (step = epoch) and the
selected model's metrics as ``final/<split>/<metric>``, into a tracking store (a local SQLite
database by default, or a tracking server's URI), one MLflow run per run, named by its overrides;
as the run ends it keeps the run record as it ends (``results.json``, with the status and error the
run's own file then gets) and the history of the epochs it was told (``history.csv``) among the
MLflow run's artefacts (:meth:`MLflowTracker.log_record`), which a new experiment of a SQLite
store keeps beside the database (:func:`artifact_location`). A file store (``file:`` or a plain
folder) is refused before the run starts (:func:`tracking_uri_problem`): MLflow 3 put its
filesystem backend in maintenance mode and raises on it unless ``MLFLOW_ALLOW_FILE_STORE=true``
(``mlflow/store/tracking/file_store.py``), which ended the run in MLflow's traceback.

**Weights & Biases** (``logger=wandb``, the ``track`` extra): :class:`WandbTracker` does the same
with a W&B run (configuration, history, summary, exit code), offline by default (``wandb sync``
uploads the runs later; ``logger.mode=online`` logs in directly).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd

from topk.errors import ConfigError
from topk.records import strict_json, tensorboard_dir, utc_now
from topk.run_dir import HARMLESS_KEYS, override_key
from topk.schema.rules import shown
from topk.stopping import RunInterrupted

log = logging.getLogger(__name__)


def numbers(row: Mapping) -> dict[str, float]:
    """The finite numbers of a history row or metrics mapping."""
    return {key: float(value) for key, value in row.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)}


def final_metrics(record: Mapping, prefix: str) -> dict[str, float]:
    """The selected model's metrics of a run record, ``<prefix><split>/<metric>``."""
    return {f"{prefix}{split}/{name}": value for split in ("val", "test")
            for name, value in numbers(record.get(split) or {}).items()}


def hyperparameters(record: Mapping, override_keys: list[str]) -> dict[str, float | int | str | bool]:
    """What a run is compared by: the data set, model and loss chosen, every ``loss.*`` value
    (but the class path ``loss._target_``, which ``loss`` names), ``k``, ``seed`` and every key the
    command line set (``override_keys``), as TensorBoard's HParams takes them (numbers, text,
    switches; anything else as its text)."""
    params = record["params"]
    chosen = {key: params[key] for key in params if key != "loss._target_"
              and (key.startswith("loss.") or key in ("k", "seed") or key in override_keys)}
    chosen.update(dataset=record["dataset"], model=record["model"], loss=record["loss"])
    return {key: value if isinstance(value, (bool, int, float, str)) else str(value) for key, value in chosen.items()}


def described_overrides(overrides: list[str]) -> list[str]:
    """The command-line overrides that say what a run learns: without ``hydra.*``, the tracker's
    own ``logger`` settings and the keys that change nothing it learns
    (:data:`topk.run_dir.HARMLESS_KEYS`: paths, threads, progress, epochs to extend, ...)."""
    def describes(key: str) -> bool:
        return key not in HARMLESS_KEYS and key != "logger" and not key.startswith(("hydra.", "logger."))

    return [override for override in overrides if describes(override_key(override))]


def run_name(overrides: list[str], fallback: str = "default") -> str:
    """A run's name for TensorBoard, MLflow and W&B: its :func:`described_overrides` joined as
    Hydra's ``override_dirname`` joins them (``loss=smooth_svm,loss.tau=0.5,seed=1``), "/" as "_"
    (it is a folder name), at most 200 characters; ``fallback`` without any.

    >>> run_name(["loss=smooth_svm", "loss.tau=0.5", "data_root=/data", "hydra.sweep.dir=/tmp/s"])
    'loss.tau=0.5,loss=smooth_svm'
    """
    return ",".join(sorted(described_overrides(overrides))).replace("/", "_")[:200] or fallback


def write_hparams(log_dir: Path, hparams: dict, metrics: dict[str, float], varied=()) -> None:
    """TensorBoard's HParams summaries of one run (``hparams`` and its final ``metrics``) in
    ``log_dir``, beside its scalars: what ``SummaryWriter.add_hparams`` writes, without the
    sub-folder it would add (which TensorBoard shows as a second run), and with the keys in
    ``varied`` (the command line's: a sweep's swept values) marked as differing between runs, so
    that the HParams view lists and shows them first rather than the first five by name."""
    from tensorboard.plugins.hparams import plugin_data_pb2
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    experiment, start, end = hparams_summaries(hparams, metrics)
    plugin_data = experiment.value[0].metadata.plugin_data
    described = plugin_data_pb2.HParamsPluginData.FromString(plugin_data.content)
    for info in described.experiment.hparam_infos:
        info.differs = info.name in varied
    plugin_data.content = described.SerializeToString()
    with SummaryWriter(str(log_dir)) as writer:
        for summary in (experiment, start, end):
            writer.file_writer.add_summary(summary)
        for name, value in metrics.items():
            writer.add_scalar(name, value)


def write_run_hparams(run_dir: Path, name: str, record: Mapping, overrides: list[str]) -> None:
    """A completed run's hyper-parameters and final metrics into its ``tb/<name>/`` folder
    (:func:`write_hparams`), the keys its ``overrides`` vary marked as varied."""
    override_keys = [override_key(override) for override in described_overrides(overrides)]
    write_hparams(tensorboard_dir(run_dir, name), hyperparameters(record, override_keys),
                  final_metrics(record, "hparams/"), varied=override_keys)


@contextlib.contextmanager
def tracking(tracker, name: str, record: dict, on_epoch_end=None) -> Iterator:
    """The run's experiment ``tracker`` (``logger=mlflow`` or ``wandb``; ``None``: none) around
    its training: started with the run's flat configuration under ``name``, handed each epoch's
    history row through the callback this yields (``on_epoch_end`` too, :func:`tracked`), and
    finished with the run's status, and when it completed, the selected model's metrics of
    ``record`` (``final/<split>/<metric>``), filled by then."""
    if tracker is None:
        yield on_epoch_end
        return
    tracker.start(name, record["params"])
    try:
        yield tracked(on_epoch_end, tracker)
    except BaseException as stop:
        status = "interrupted" if isinstance(stop, KeyboardInterrupt) else "failed"
        try:  # the run's own error goes on, whatever the tracker's files do
            keep_record(tracker, ended(record, status, stop))
        except Exception as problem:
            log.warning("the experiment tracker could not keep the run's record: %s", problem)
        tracker.finish(status, {})
        raise
    keep_record(tracker, ended(record, "completed"))
    tracker.finish("completed", final_metrics(record, "final/"))


def ended(record: Mapping, status: str, stop: BaseException | None = None) -> dict:
    """``record`` as the run ends with ``status``: what :func:`topk.run_session.end_record` then
    writes to ``results.json`` (the status, the error's sentence, the end time)."""
    if isinstance(stop, KeyboardInterrupt):  # a stop before training resumes from epoch 0, as there
        error = str(stop if isinstance(stop, RunInterrupted) else RunInterrupted(0))
    else:
        error = None if stop is None else f"{type(stop).__name__}: {stop}"
    provenance = {**record.get("provenance", {}), "ended_utc": utc_now()}
    return {**record, "status": status, "error": error, "provenance": provenance}


def keep_record(tracker, record: Mapping) -> None:
    """Hand the ended run ``record`` to a tracker that keeps it (:meth:`MLflowTracker.log_record`)."""
    if hasattr(tracker, "log_record"):
        tracker.log_record(record)


def allows_file_store() -> bool:
    """Whether MLflow is told to write to a file store all the same (``MLFLOW_ALLOW_FILE_STORE``,
    a boolean as MLflow reads it: ``true`` or ``1``)."""
    return os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("true", "1")


NAMED_STORES = ("databricks", "databricks-uc", "uc")  # URIs without a scheme that MLflow's registry takes by name


def tracking_uri_problem(key: str, uri) -> str | None:
    """The sentence refusing ``logger.tracking_uri`` (``key``), or ``None``: any URI of a scheme
    (``sqlite:///``, ``postgresql://``, ``http(s)://``, ``databricks``), but not a file store
    (``file:`` or a folder: MLflow's registry gives both to its ``FileStore``,
    ``mlflow/tracking/_tracking_service/utils.py``) unless ``MLFLOW_ALLOW_FILE_STORE`` says so;
    ``databricks``, ``databricks-uc`` and ``uc`` are stores by name (``mlflow/tracking/registry.py``)."""
    key = key or "logger.tracking_uri"
    if not isinstance(uri, str) or not uri.strip():
        return f"{key} must be a tracking URI (sqlite:///path.db, http(s)://host), got {shown(uri)}."
    scheme = uri if uri in NAMED_STORES else urlparse(uri).scheme
    if (len(scheme) > 1 and scheme != "file") or allows_file_store():  # one letter: a Windows drive
        return None
    return (f"{key}={uri} is an MLflow file store, which MLflow 3 no longer writes to (its "
            f"filesystem backend is in maintenance mode) unless MLFLOW_ALLOW_FILE_STORE=true is set; "
            f"give a database instead, e.g. {key}=sqlite:///outputs/mlflow.db (`mlflow "
            f"migrate-filestore` moves an existing store into one), or a tracking server's http(s):// URI.")


def artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment keeps its runs' files: for a SQLite store, ``mlflow-artifacts/``
    beside the database (``outputs/mlflow-artifacts`` for the default), not MLflow's default
    ``./mlruns`` in whatever folder ``train.py`` runs from; ``None`` (MLflow's or the server's
    choice) for any other store."""
    if not tracking_uri.startswith("sqlite:///") or tracking_uri.endswith(":memory:"):
        return None
    database = Path(tracking_uri.removeprefix("sqlite:///").split("?")[0])
    return (database.parent / "mlflow-artifacts").resolve().as_uri()


def tracked(on_epoch_end, tracker):
    """``on_epoch_end`` that also hands each epoch's history row to ``tracker`` (``None``: no
    tracker, ``on_epoch_end`` as it is)."""
    if tracker is None:
        return on_epoch_end

    def each_epoch(epoch: int, row: dict) -> None:
        tracker.log(row)
        if on_epoch_end is not None:
            on_epoch_end(epoch, row)

    return each_epoch


class MLflowTracker:
    """One MLflow run per training run (``logger=mlflow``; see the module docstring).

    Parameters
    ----------
    tracking_uri : str
        Where MLflow stores the runs: ``sqlite:///outputs/mlflow.db`` (a local database, the
        default) or a tracking server's ``http(s)://`` URI.
    experiment : str
        The MLflow experiment the runs go to.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from topk.trackers import MLflowTracker
    >>> store = pathlib.Path(tempfile.mkdtemp()) / "mlflow.db"
    >>> tracker = MLflowTracker(f"sqlite:///{store}", experiment="doc")  # doctest: +SKIP
    >>> tracker.start("loss=smooth_svm loss.tau=0.5", {"loss.tau": 0.5})  # doctest: +SKIP
    >>> tracker.log({"epoch": 1, "train/loss": 0.7, "val/top5": 61.0})  # doctest: +SKIP
    >>> tracker.finish("completed", {"final/val/top5": 61.0})  # doctest: +SKIP
    """

    STATUSES = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}

    def __init__(self, tracking_uri: str = "sqlite:///outputs/mlflow.db", experiment: str = "topk"):
        problem = tracking_uri_problem("tracking_uri", tracking_uri)
        if problem:
            raise ConfigError(problem)
        try:
            import mlflow
        except ImportError:
            raise ConfigError("logger=mlflow needs MLflow, which is not installed; pip install "
                              "'topk[track]' (mlflow-skinny), or leave out logger=mlflow.") from None
        self.mlflow, self.tracking_uri, self.experiment = mlflow, tracking_uri, experiment
        self.history: list[dict] = []

    def start(self, name: str, params: Mapping) -> None:
        self.mlflow.set_tracking_uri(self.tracking_uri)
        if self.mlflow.get_experiment_by_name(self.experiment) is None:
            try:
                self.mlflow.create_experiment(self.experiment, artifact_location(self.tracking_uri))
            except self.mlflow.exceptions.MlflowException:  # another job of the sweep created it first
                if self.mlflow.get_experiment_by_name(self.experiment) is None:
                    raise
        self.mlflow.set_experiment(self.experiment)
        self.mlflow.start_run(run_name=name)
        self.mlflow.log_params({key: str(value) for key, value in params.items()})

    def log(self, row: Mapping) -> None:
        """One epoch's numbers (``row["epoch"]`` the step), kept for the history artefact."""
        self.history.append(dict(row))
        self.mlflow.log_metrics(numbers(row), step=int(row["epoch"]))

    def log_record(self, record: Mapping) -> None:
        """The ended run's ``record`` as the artefact ``results.json`` (strict JSON, as the run's
        own file, :func:`topk.records.write_json_atomic`) and the epochs this tracker was told as
        ``history.csv`` (the run's columns; after a resume, the epochs trained since)."""
        text = json.dumps(strict_json(record), indent=2, allow_nan=False) + "\n"
        self.mlflow.log_text(text, "results.json")
        if self.history:
            self.mlflow.log_text(pd.DataFrame(self.history).to_csv(index=False), "history.csv")

    def finish(self, status: str, metrics: Mapping[str, float]) -> None:
        """End the MLflow run with the run's ``status`` (completed, failed, interrupted)."""
        if metrics:
            self.mlflow.log_metrics(dict(metrics))
        self.mlflow.end_run(status=self.STATUSES[status])


class WandbTracker:
    """One Weights & Biases run per training run (``logger=wandb``; see the module docstring).

    Parameters
    ----------
    project : str
        The W&B project.
    mode : str
        ``offline`` (the default: no network; ``wandb sync <dir>/wandb/offline-run-*`` uploads
        later), ``online`` or ``disabled``.
    dir : str
        Where W&B writes its files (``<dir>/wandb/``).
    entity : str, optional
        The W&B user or team (``None``: the account's default).

    Examples
    --------
    >>> from topk.trackers import WandbTracker
    >>> tracker = WandbTracker(project="topk", mode="offline", dir="outputs")  # doctest: +SKIP
    >>> tracker.start("loss=smooth_svm loss.tau=0.5", {"loss.tau": 0.5})  # doctest: +SKIP
    >>> tracker.log({"epoch": 1, "train/loss": 0.7})  # doctest: +SKIP
    >>> tracker.finish("completed", {"final/val/top5": 61.0})  # doctest: +SKIP
    """

    def __init__(self, project: str = "topk", mode: str = "offline", dir: str = "outputs", entity: str | None = None):
        try:
            import wandb
        except ImportError:
            raise ConfigError("logger=wandb needs Weights & Biases, which is not installed; pip install wandb, "
                              "or leave out logger=wandb.") from None
        self.wandb, self.project, self.mode, self.dir, self.entity = wandb, project, mode, dir, entity
        self.run = None

    def start(self, name: str, params: Mapping) -> None:
        Path(self.dir).mkdir(parents=True, exist_ok=True)
        self.run = self.wandb.init(project=self.project, entity=self.entity, name=name, config=dict(params),
                                   mode=self.mode, dir=self.dir, settings=self.wandb.Settings(silent=True))

    def log(self, row: Mapping) -> None:
        """One epoch's numbers (``row["epoch"]`` the step)."""
        self.run.log(numbers(row), step=int(row["epoch"]))

    def finish(self, status: str, metrics: Mapping[str, float]) -> None:
        """The final ``metrics`` in the run's summary; exit code 0 for a completed run, else 1."""
        self.run.summary.update(dict(metrics))
        self.run.finish(exit_code=0 if status == "completed" else 1)
