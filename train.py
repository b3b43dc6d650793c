"""The one training entrypoint.

    python train.py                                  # circles, linear model, cross-entropy
    python train.py loss=topk_transition loss.k=2    # any config group option, any value
    python train.py -m +experiment=s20_exp2          # a paper sweep (multirun)
    torchrun --nproc_per_node=2 train.py ...         # data-parallel over 2 processes (DDP)

Read top to bottom: :func:`run` builds a run from its composed config (:mod:`topk.build`), trains
it (:func:`topk.engine.fit`) and fills its record; :func:`train` runs a job in its directory
(:func:`topk.run_session.run_session`: locked, claimed or resumed, its status written however it
ends); :func:`main` is Hydra's job; :func:`cli` the command line (:mod:`topk.cli`). Every run
leaves its record in its Hydra run directory (docs/design.md §2).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from topk import cli as command_line
from topk import distributed as dist_setup
from topk import stopping
from topk.build import (
    build,
    build_augment,
    build_batches,
    build_loss,
    build_model,
    check_study_k,
    check_validation_split,
    fit_settings,
    has_batch_norm,
    normalisation,
    schedule_arguments,
    seed_everything,
)
from topk.data.batches import close_batches
from topk.engine import fit
from topk.metrics import clip_ks
from topk.records import add_fit_result
from topk.run_session import run_session
from topk.schema import store as schema_store
from topk.schema.validate import check_job
from topk.trackers import tracking, write_run_hparams

log = logging.getLogger("train")
CODE_DIR = Path(__file__).resolve().parent  # whose git commit the records name
schema_store.register()  # the typed schema of every config group, before Hydra composes conf/


def run(cfg: DictConfig, run_dir: Path, record: dict, on_epoch_end=None,
        distributed=dist_setup.SINGLE_PROCESS, device=None) -> dict:
    """Build everything from ``cfg`` (:mod:`topk.build`), train (:func:`topk.engine.fit`), and
    fill ``record``; returns the record. ``distributed`` and ``device`` come from
    :func:`topk.distributed.setup` under torchrun."""
    trainer = cfg.trainer
    if trainer.num_threads:
        torch.set_num_threads(int(trainer.num_threads))
    device = device or dist_setup.resolve_device(trainer.device)
    dist_setup.check_global_batch(trainer.batch_size, distributed)
    seed = int(cfg.seed)
    seed_everything(seed)

    splits = build(cfg.dataset, "dataset", seed=seed)
    if distributed.is_main:
        splits.record_run_facts(run_dir, record)
        log.info("%s: %s", run_dir, command_line.run_summary(cfg, splits, device, distributed,
                                                             record["provenance"].get("job_slot")))
    check_study_k(int(cfg.k), splits.num_classes)
    loss_fn = build_loss(cfg.loss, splits).to(device)
    ks = clip_ks([*trainer.ks, cfg.k], splits.num_classes)  # the study's K is always reported
    check_validation_split(trainer, splits)
    model = build_model(cfg.model, splits, trainer, device, distributed)
    if distributed.enabled:  # independent noise (noised losses), Mixup and augmentation draws in each process
        seed_everything(dist_setup.process_seed(seed, distributed))
    optimizer = build(cfg.optim, "optim", model.parameters())
    image_augment, mix = build_augment(cfg.augment, splits)  # per-image transforms; batch -> target step
    train_batches, eval_batches = build_batches(splits, trainer, seed, device, image_augment, normalisation(splits),
                                                has_batch_norm(model), distributed)
    scheduler = build(cfg.schedule, "schedule", optimizer, **schedule_arguments(cfg.schedule, train_batches))

    name = command_line.tracking_name(record)
    settings = fit_settings(trainer, ks, splits, record, name)
    tracker = build(cfg.logger, "logger") if cfg.get("logger") is not None and distributed.is_main else None
    with tracking(tracker, name, record, on_epoch_end) as each_epoch:
        try:
            result = fit(model, loss_fn, optimizer, scheduler, train_batches, eval_batches, splits.num_classes,
                         run_dir, settings, mix=mix, on_epoch_end=each_epoch, distributed=distributed)
        finally:  # image-decoding workers stop with the run, however it ends
            for batches in (train_batches, *eval_batches.values()):
                close_batches(batches)
        add_fit_result(record, result, splits.class_counts, splits.class_groups, distributed.world_size)
    if trainer.tensorboard and distributed.is_main:
        write_run_hparams(run_dir, name, record, command_line.job_overrides())
    return record


def train(cfg: DictConfig, on_epoch_end=None) -> dict:
    """Run one configuration inside Hydra's job context and write its ``results.json``: the
    config checked if no callback checked it before launch (:func:`topk.schema.validate.check_job`),
    then the run in its directory (:func:`topk.run_session.run_session`) built and trained by
    :func:`run`."""
    hydra_cfg = HydraConfig.get()
    check_job(cfg, hydra_cfg)
    with run_session(cfg, hydra_cfg, CODE_DIR, sys.argv) as session:
        if not session.finished:
            run(cfg, session.run_dir, session.record, on_epoch_end, session.distributed, session.device)
    return session.record


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Train; return the selected model's selection metric (:func:`topk.cli.selected_value`), which
    Hydra's Optuna sweeper optimises (a sweep under it must select on a validation metric:
    :func:`topk.hydra_callbacks.tuning_problem`); ``None`` for a failed run, which that sweeper
    counts as a failed trial (``hydra.sweeper.max_failure_rate``, 0 by default). How a run's end is
    said: :func:`topk.cli.run_ending`.

    Ctrl-C and SIGTERM are :class:`topk.stopping.StopRequests`' (installed here for the job's
    process, which under joblib is a worker of its own, and in :func:`cli` for the launching
    one): a ``KeyboardInterrupt`` at once, except while ``fit`` trains, where it stops at the
    next batch boundary."""
    single_run = HydraConfig.get().mode == RunMode.RUN
    if single_run:
        command_line.warn_if_single_run_of_a_sweep(cfg)
    # stopping.stop_requests, not a name imported into this module: submitit pickles this function
    # by value (train.py is __main__), and would give the job a copy of the process's one handler.
    with stopping.stop_requests.installed(), command_line.run_ending(single_run):
        return command_line.selected_value(train(cfg))
    return None  # a failed run of a sweep, said in one sentence


def cli() -> None:
    """``python train.py ...``: ``--help``; ``+eval=<run dir>`` handed to :mod:`topk.evaluate`;
    the command line checked before Hydra starts; then :func:`main`, ended by Ctrl-C or SIGTERM
    as :func:`topk.cli.stops_end_the_command` says."""
    sys.argv[1:] = argv = command_line.resume_argv(sys.argv[1:])  # trainer.resume=<folder>
    if (evaluation := command_line.evaluation_argv(argv)) is not None:
        from topk.evaluate import main as evaluate

        sys.exit(evaluate(evaluation))
    command_line.exit_with_help_if_asked(argv, CODE_DIR / "conf")
    command_line.exit_on_composition_problem(argv, CODE_DIR / "conf")
    sys.argv = dist_setup.worker_argv(sys.argv)  # under torchrun, the first process writes Hydra's files
    with command_line.stops_end_the_command():
        main()


if __name__ == "__main__":
    cli()
