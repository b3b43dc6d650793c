"""The one training entrypoint.

    python train.py                                  # circles, linear model, cross-entropy
    python train.py loss=topk_transition loss.k=2    # any config group option, any value
    python train.py -m +experiment=s20_exp2          # a paper sweep (multirun)
    torchrun --nproc_per_node=2 train.py ...         # data-parallel over 2 processes (DDP)

Hydra composes ``conf/train.yaml``; this file is the only place that turns configuration into
objects (docs/design.md §2). Every run leaves its record in its Hydra run directory.
"""

from __future__ import annotations

import errno
import json
import logging
import signal
import sys
from functools import partial
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from topk import distributed as dist_setup
from topk import engine
from topk.build import (
    build,
    build_augment,
    build_loss,
    build_model,
    check_study_k,
    check_validation_split,
    eval_scores,
    has_batch_norm,
    make_batches,
    normalisation,
    schedule_arguments,
    seed_everything,
    without_lone_last_batch,
)
from topk.cli import (
    close_log_file,
    evaluation_argv,
    exit_on_composition_problem,
    exit_with_help_if_asked,
    no_space_sentence,
    report_error,
    selected_value,
    warn_if_single_run_of_a_sweep,
)
from topk.data.batches import close_batches
from topk.engine import (
    FitSettings,
    RunInterrupted,
    StopRequests,
    fit,
    preemption_signal,
    resolve_device,
)
from topk.errors import ConfigError, RunRefused, TopkError
from topk.hydra_callbacks import close_interrupted_sweep, note_refused_run
from topk.locks import acquire_lock
from topk.metrics import clip_ks
from topk.records import (
    device_provenance,
    provenance,
    read_results,
    tensorboard_dir,
    utc_now,
    versions,
    write_atomically,
    write_results,
)
from topk.run_dir import (
    check_run_dir,
    claim,
    file_in_place_of_folder,
    finished_without_checkpoint,
    override_key,
    prune_checkpoints,
    record_status,
    run_params,
    unwritable_reason,
)
from topk.schema import check_config
from topk.schema import store as schema_store
from topk.trackers import (
    described_overrides,
    final_metrics,
    hyperparameters,
    run_name,
    write_hparams,
)

log = logging.getLogger("train")
CODE_DIR = Path(__file__).resolve().parent  # whose git commit the records name

CONF_DIR = CODE_DIR / "conf"
schema_store.register()  # the typed schema of every config group, before Hydra composes conf/


def base_record(cfg: DictConfig, choices, run_provenance: dict) -> dict:
    """A new run's record (status ``running``): what was asked for, and ``run_provenance``
    (:func:`topk.records.provenance`)."""
    return {
        "status": "running",
        "error": None,
        "experiment": cfg.get("experiment"),
        "dataset": choices.get("dataset") or "custom",
        "model": choices.get("model") or "custom",
        "loss": choices.get("loss") or "custom",
        "augment": choices.get("augment") or "custom",
        "seed": int(cfg.seed),
        "params": run_params(cfg),
        "best_epoch": None,
        "selection_metric": cfg.trainer.selection_metric,
        "val": {},
        "test": {},
        "epoch_seconds": None,
        "versions": versions(),
        "provenance": run_provenance,
    }


def run_summary(cfg: DictConfig, splits, device, distributed) -> str:
    """One line saying what runs: data set, model, loss, K, epochs, device and processes."""
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    processes = f", {distributed.world_size} processes" if distributed.enabled else ""
    return (f"dataset={choices.get('dataset', '?')} ({splits.num_classes} classes), "
            f"model={choices.get('model', '?')}, loss={choices.get('loss', '?')}, k={cfg.k}, "
            f"{cfg.trainer.epochs} epochs, seed {cfg.seed}, device {device}{processes}")


def check_output_dir(run_dir: Path) -> None:
    """One sentence, before anything is written, if the run directory cannot be written or a
    file stands where the run keeps one of its folders."""
    reason = unwritable_reason(run_dir)
    if reason is not None:
        raise ConfigError(
            f"the output directory {run_dir} cannot be written ({reason}); "
            "choose another with hydra.run.dir=... (or hydra.sweep.dir=... for -m)."
        )
    misplaced = file_in_place_of_folder(run_dir)
    if misplaced is not None:
        raise ConfigError(f"{misplaced} with hydra.run.dir=... (or hydra.sweep.dir=... for -m).")


def fit_settings(trainer: DictConfig, ks: list[int], splits, record: dict) -> FitSettings:
    """``trainer.*`` as the engine takes it; checkpoints remember the run's flat config."""
    return FitSettings(
        epochs=int(trainer.epochs),
        ks=ks,
        selection_metric=trainer.selection_metric,
        also_select_on=list(trainer.also_select_on),
        eval_every=int(trainer.eval_every),
        checkpoint_every=int(trainer.checkpoint_every),
        resume=bool(trainer.resume),
        progress=bool(trainer.progress),
        progress_every=int(trainer.progress_every),
        log_line=log_to_file_only,
        tensorboard=bool(trainer.tensorboard),
        tensorboard_name=tracking_name(record),
        description=f"{record['loss']} seed {record['seed']}",
        class_groups=splits.class_groups,
        amp=str(trainer.amp),
        config=record["params"],
        eval_scores=eval_scores(splits),
        grad_nonzero=bool(trainer.grad_nonzero),
    )


def run(cfg: DictConfig, run_dir: Path, record: dict, on_epoch_end=None,
        distributed=dist_setup.SINGLE_PROCESS, device=None) -> dict:
    """Build everything from ``cfg``, train, and fill ``record``; returns the record.

    ``distributed`` and ``device`` come from :func:`topk.distributed.setup` under torchrun.
    """
    trainer = cfg.trainer
    if trainer.num_threads:
        torch.set_num_threads(int(trainer.num_threads))
    device = device or resolve_device(trainer.device)
    dist_setup.check_global_batch(trainer.batch_size, distributed)
    seed = int(cfg.seed)
    seed_everything(seed)

    splits = build(cfg.dataset, "dataset", seed=seed)
    if distributed.is_main:
        splits.record_run_facts(run_dir, record)
        log.info("%s: %s", run_dir, run_summary(cfg, splits, device, distributed))
    check_study_k(int(cfg.k), splits.num_classes)
    loss_fn = build_loss(cfg.loss, splits).to(device)
    ks = clip_ks([*trainer.ks, cfg.k], splits.num_classes)  # the study's K is always reported
    check_validation_split(trainer, splits)

    model = build_model(cfg.model, splits, trainer, device, distributed)
    if distributed.enabled:  # independent noise (noised losses), Mixup and augmentation draws in each process
        seed_everything(dist_setup.process_seed(seed, distributed))
    optimizer = build(cfg.optim, "optim", model.parameters())
    image_augment, mix = build_augment(cfg.augment, splits)  # per-image transforms; batch -> target step
    normalize = normalisation(splits)

    train_batches = make_batches(splits, "train", trainer, seed, device, image_augment, normalize, distributed)
    if has_batch_norm(model):
        train_batches = without_lone_last_batch(train_batches, len(splits.train), trainer.batch_size, distributed)
    scheduler = build(cfg.schedule, "schedule", optimizer, **schedule_arguments(cfg.schedule, train_batches))
    eval_batches = {
        name: make_batches(splits, name, trainer, seed, device, image_augment, normalize, distributed)
        for name in ("val", "test")
        if getattr(splits, name) is not None
    }

    settings = fit_settings(trainer, ks, splits, record)
    tracker = start_tracker(cfg, record) if distributed.is_main else None
    try:
        result = fit(
            model, loss_fn, optimizer, scheduler, train_batches, eval_batches,
            splits.num_classes, run_dir, settings, mix=mix,
            on_epoch_end=tracked(on_epoch_end, tracker), distributed=distributed,
        )
    except BaseException as stop:
        if tracker is not None:
            tracker.finish("interrupted" if isinstance(stop, KeyboardInterrupt) else "failed", {})
        raise
    finally:  # image-decoding workers stop with the run, however it ends
        for batches in (train_batches, *eval_batches.values()):
            close_batches(batches)
    record_result(record, result, splits, distributed)
    if tracker is not None:
        tracker.finish("completed", final_metrics(record, "final/"))
    if trainer.tensorboard and distributed.is_main:
        override_keys = [override_key(override) for override in described_overrides(job_overrides())]
        write_hparams(tensorboard_dir(run_dir, settings.tensorboard_name), hyperparameters(record, override_keys),
                      final_metrics(record, "hparams/"), varied=override_keys)
    return record


def record_result(record: dict, result, splits, distributed) -> None:
    """What ``fit`` found, into the run's ``record``."""
    record.update(
        best_epoch=result.best_epoch,
        val=result.metrics.get("val", {}),
        test=result.metrics.get("test", {}),
        epoch_seconds=result.epoch_seconds,
        test_per_class={f"top{k}": v for k, v in result.per_class.get("test", {}).items()},
        test_class_samples=result.class_samples.get("test", []),
        class_counts=splits.class_counts,
        samples=result.samples,
        processes=distributed.world_size,
        also_selected={metric: {"best_epoch": selected["best_epoch"], "val": selected["metrics"].get("val", {}),
                                "test": selected["metrics"].get("test", {}),
                                "test_per_class": {f"top{k}": v for k, v in
                                                   selected["per_class"].get("test", {}).items()}}
                       for metric, selected in result.also_selected.items()},
    )
    if splits.class_groups:
        record["class_groups"] = splits.class_groups


def job_overrides() -> list[str]:
    """The job's command-line overrides (``["loss=smooth_svm", "loss.tau=0.5"]``); none outside Hydra."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def tracking_name(record: dict) -> str:
    """The run's name in TensorBoard, MLflow and W&B: its overrides (:func:`topk.trackers.run_name`),
    else its loss and seed."""
    return run_name(job_overrides(), fallback=f"{record['loss']},seed={record['seed']}")


def start_tracker(cfg: DictConfig, record: dict):
    """The run's experiment tracker (``logger=mlflow``, :mod:`topk.trackers`), started with the
    run's flat configuration; ``None`` without ``logger``."""
    if cfg.get("logger") is None:
        return None
    tracker = build(cfg.logger, "logger")
    tracker.start(tracking_name(record), record["params"])
    return tracker


def tracked(on_epoch_end, tracker):
    """``on_epoch_end`` that also hands each epoch's history row to ``tracker``."""
    if tracker is None:
        return on_epoch_end

    def each_epoch(epoch: int, row: dict) -> None:
        tracker.log(row)
        if on_epoch_end is not None:
            on_epoch_end(epoch, row)

    return each_epoch


def log_to_file_only(message: str, level: int = logging.INFO) -> None:
    """Append ``message`` to the run's log file (Hydra's ``train.log``) without echoing it on the
    console (where :func:`main` prints an error once, and a progress bar shows an epoch)."""
    entry = log.makeRecord(log.name, level, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(entry)


def end_record(run_dir: Path, record: dict, distributed, status: str, error: str | None) -> None:
    """Write the run's final ``status`` and end time (rank 0); a failed or interrupted run's
    ``error`` goes to ``train.log`` too."""
    record.update(status=status, error=error)
    record["provenance"]["ended_utc"] = utc_now()
    if distributed.is_main:
        write_results(run_dir, record)
        if error is not None:
            log_to_file_only(f"{status}: {error}", logging.ERROR)


def keep_first_start(run_dir: Path, record: dict) -> None:
    """A resumed run keeps the ``started_utc`` of its first session, read from the
    ``results.json`` it continues (when it continues a checkpoint and that record holds one), so
    that ``started_utc`` to ``ended_utc`` spans the whole run, pauses included. The other
    provenance keys are this session's."""
    if not (run_dir / "checkpoints" / "last.pt").exists():
        return  # trains from scratch: a new start
    try:
        started = json.loads((run_dir / "results.json").read_text())["provenance"]["started_utc"]
    except (OSError, ValueError, KeyError, TypeError):  # no earlier record, or one without provenance
        return
    if isinstance(started, str):
        record["provenance"]["started_utc"] = started


def train(cfg: DictConfig, on_epoch_end=None) -> dict:
    """Run one configuration inside Hydra's job context and write its ``results.json``.

    The run directory must hold no other run, or be resumed with the configuration its checkpoint
    remembers (:mod:`topk.run_dir`); a refused run writes nothing. While the run is on,
    ``run.lock`` in its directory says so (:class:`topk.locks.RunLock`), removed however it
    ends. Under torchrun every process runs this; the run directory is rank 0's (the others'
    Hydra output went to a scratch directory, see :func:`topk.distributed.worker_argv`), and only
    rank 0 writes in it and holds its lock.
    """
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    check_config(cfg)  # the schema (checked before Hydra wrote anything, unless another sweeper made cfg)
    target_problem = schema_store.job_target_problem(cfg, hydra_cfg)  # callables only conf/'s (docs/trust.md)
    if target_problem is not None:
        raise ConfigError(target_problem)
    distributed = dist_setup.from_environment()
    run_provenance = provenance(CODE_DIR, list(hydra_cfg.overrides.task), sys.argv, distributed.world_size)
    if resumes_by_itself(run_dir):
        log.info("%s holds this submitit job's interrupted run: the requeued job resumes it", run_dir)
        cfg.trainer.resume = True
    record = base_record(cfg, hydra_cfg.runtime.choices, run_provenance)
    resume = bool(cfg.trainer.resume)
    lock = None
    if distributed.is_main:
        check_output_dir(run_dir)
        check_run_dir(run_dir, record["params"], resume, in_sweep=hydra_cfg.mode == RunMode.MULTIRUN,
                      written_by_hydra=written_by_hydra(hydra_cfg))
        lock = acquire_lock(run_dir)
    try:
        return train_locked(cfg, run_dir, record, distributed, on_epoch_end)
    finally:
        if lock is not None:
            lock.release()


def resumes_by_itself(run_dir: Path) -> bool:
    """A submitit job whose directory holds an interrupted run is that run requeued (by submitit
    after the preemption signal, :meth:`topk.engine.StopRequests.requeue_if_preempted`, or by
    SLURM itself) and resumes it. Nothing else leaves one there: a sweep started again into its
    directory is refused before any job is submitted unless it says ``trainer.resume=true``."""
    return preemption_signal() is not None and record_status(run_dir) == "interrupted"


def save_job_config(run_dir: Path, cfg: DictConfig) -> None:
    """Write the job's ``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml``, the files
    Hydra writes when ``hydra.output_subdir`` is set: here once the run directory is checked and
    locked, so that a refused run leaves its directory as it was (``conf/train.yaml`` sets
    ``hydra.output_subdir: null``). Each file is written whole or not at all."""
    hydra_cfg = HydraConfig.get()
    files = {"config.yaml": cfg, "hydra.yaml": OmegaConf.create({"hydra": hydra_cfg}),
             "overrides.yaml": OmegaConf.create(list(hydra_cfg.overrides.task))}
    (run_dir / ".hydra").mkdir(exist_ok=True)
    for name, config in files.items():
        write_atomically(run_dir / ".hydra" / name, partial(OmegaConf.save, config))


def written_by_hydra(hydra_cfg) -> list[str]:
    """What Hydra wrote in the job's directory before :func:`train` runs: its output folder
    (``.hydra``) and the job's log (``train.log``)."""
    names = [f"{hydra_cfg.job.name}.log"]
    return [hydra_cfg.output_subdir, *names] if hydra_cfg.get("output_subdir") else names


def train_locked(cfg: DictConfig, run_dir: Path, record: dict, distributed, on_epoch_end) -> dict:
    """:func:`train` once the run directory is checked (and, on rank 0, locked)."""
    resume = bool(cfg.trainer.resume)
    finished = False  # a completed run resumed after its last.pt was pruned: nothing to train
    if distributed.is_main:
        finished = resume and finished_without_checkpoint(run_dir)
        if not resume:
            claim(run_dir, record)
        elif not finished:
            keep_first_start(run_dir, record)
            write_results(run_dir, record)
    try:
        if distributed.is_main:
            save_job_config(run_dir, cfg)
        distributed, device = dist_setup.setup(cfg.trainer.distributed_backend, resolve_device(cfg.trainer.device))
        record["provenance"].update(device_provenance(device, distributed.world_size))
        run_dir, finished = distributed.broadcast((str(run_dir), finished))
        run_dir = Path(run_dir)
        dist_setup.remove_worker_scratch()
        if finished:
            log.info("%s holds a completed run without checkpoints/last.pt: its record is kept as it is", run_dir)
            return read_results(run_dir / "results.json")
        run(cfg, run_dir, record, on_epoch_end, distributed, device)
    except KeyboardInterrupt as stop:  # fit's RunInterrupted, or a stop before training: nothing saved
        interruption = stop if isinstance(stop, RunInterrupted) else RunInterrupted(0)
        end_record(run_dir, record, distributed, "interrupted", str(interruption))
        raise interruption from None
    except Exception as error:
        end_record(run_dir, record, distributed, "failed", f"{type(error).__name__}: {error}")
        raise
    end_record(run_dir, record, distributed, "completed", None)
    if distributed.is_main:
        prune_checkpoints(run_dir, cfg.trainer.keep_checkpoints)
    top = {k: round(v, 2) for k, v in record["test"].items() if k in ("top1", "top2", "top3", "top5")}
    log.info("completed: test %s; record in %s", top, run_dir / "results.json")
    return record


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Train; return the selected model's selection metric (:func:`topk.cli.selected_value`), which
    Hydra's Optuna sweeper optimises (a sweep under it must select on a validation metric:
    :func:`topk.hydra_callbacks.tuning_problem`); ``None`` for a failed run, which that sweeper
    counts as a failed trial (``hydra.sweeper.max_failure_rate``, 0 by default, says how many it
    tolerates).

    One run prints its error as one sentence and exits 1 (130 when interrupted); in a sweep a
    failed run prints its sentence and the sweep goes on, while an interrupted one stops it: a
    ``RunInterrupted`` is a ``KeyboardInterrupt``, which Hydra's launchers let through to
    ``__main__`` below.

    Ctrl-C and SIGTERM are :class:`topk.engine.StopRequests`' (installed here for the job's
    process, which under joblib is a worker of its own, and at ``__main__`` for the launching
    one): a ``KeyboardInterrupt`` at once, except while ``fit`` trains, where it stops at the
    next batch boundary."""
    single_run = HydraConfig.get().mode == RunMode.RUN
    if single_run:
        warn_if_single_run_of_a_sweep(cfg)
    # engine.stop_requests, not a name imported into this module: submitit pickles this function
    # by value (train.py is __main__), and would give the job a copy of the process's one handler.
    with engine.stop_requests.installed():
        try:
            return selected_value(train(cfg))
        except RunInterrupted as interruption:
            engine.stop_requests.requeue_if_preempted()  # a preempted submitit job: requeued, exits here
            if not single_run:
                raise  # stops the whole sweep: one line and exit 130 at __main__
            print(f"Interrupted: {interruption}; the same command with trainer.resume=true "
                  "continues it.", file=sys.stderr)
            sys.exit(130)
        except TopkError as error:
            if isinstance(error, RunRefused) and not single_run:
                job = HydraConfig.get()
                note_refused_run(job.sweep.dir, job.job.num, Path(job.runtime.output_dir))
            report_error(str(error), single_run)
        except OSError as error:  # a full disk, wherever it struck; other system errors keep their traceback
            if error.errno != errno.ENOSPC:
                raise
            report_error(no_space_sentence(error), single_run)
        finally:
            close_log_file()
        return None


def cli() -> None:
    """``python train.py ...``: the command line checked against the schema, then :func:`main`;
    with ``+eval=<run dir>``, :mod:`topk.evaluate` instead (:func:`topk.cli.evaluation_argv`).

    Ctrl-C and SIGTERM stop the whole process, a launcher waiting for its workers (joblib) too.
    Once a run or sweep has stopped (exit 130), further ones are ignored while the process ends:
    a second SIGTERM close behind the first (SLURM, ``timeout``) would otherwise kill it with 143
    as its image-decoding workers shut down, although everything is already saved."""
    if (evaluation := evaluation_argv(sys.argv[1:])) is not None:
        from topk.evaluate import main as evaluate

        sys.exit(evaluate(evaluation))
    exit_with_help_if_asked(sys.argv[1:], CONF_DIR)
    exit_on_composition_problem(sys.argv[1:], CONF_DIR)
    # Under torchrun, the processes after the first leave Hydra's files to the first.
    sys.argv = dist_setup.worker_argv(sys.argv)
    try:
        with engine.stop_requests.installed():
            try:
                main()
            except KeyboardInterrupt:
                close_interrupted_sweep()
                print("Interrupted: the records say where each run stopped; the same command with "
                      "trainer.resume=true continues it.", file=sys.stderr)
                sys.exit(130)
    except SystemExit as end:
        if end.code == 130:
            for number in StopRequests.signals:
                signal.signal(number, signal.SIG_IGN)
        raise


if __name__ == "__main__":
    cli()
