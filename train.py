"""The one training entrypoint.

    python train.py                                  # circles, linear model, cross-entropy
    python train.py loss=topk_transition loss.k=2    # any config group option, any value
    python train.py -m +experiment=s20_exp2          # a paper sweep (multirun)
    torchrun --nproc_per_node=2 train.py ...         # data-parallel over 2 processes (DDP)

Hydra composes ``conf/train.yaml``; this file is the only place that turns configuration into
objects (DESIGN §2). Every run leaves its record in its Hydra run directory.
"""

from __future__ import annotations

import inspect
import logging
import random
import signal
import sys
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel

from topk import distributed as dist_setup
from topk.data import TensorBatches
from topk.data.batches import LimitedBatches
from topk.data.images import ImageBatches, ImageFileSplit
from topk.data.transforms import Compose, Normalize
from topk.engine import FitSettings, RunInterrupted, fit, resolve_device
from topk.errors import ConfigError, TopkError
from topk.losses.targets import check_num_classes_for_k
from topk.metrics import clip_ks
from topk.precision import channels_last
from topk.records import flatten, versions, write_results

log = logging.getLogger("train")

# ``${if_null:${experiment},multirun}`` in conf/train.yaml: a sweep without +experiment goes to
# outputs/sweeps/multirun/ (``oc.select`` falls back only for a missing key, and ``experiment`` is
# a null one: its sweeps went to outputs/sweeps/None/).
OmegaConf.register_new_resolver("if_null", lambda value, default: default if value is None else value, replace=True)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def base_record(cfg: DictConfig, choices) -> dict:
    return {
        "status": "running",
        "error": None,
        "experiment": cfg.get("experiment"),
        "dataset": choices.get("dataset") or "custom",
        "model": choices.get("model") or "custom",
        "loss": choices.get("loss") or "custom",
        "augment": choices.get("augment") or "custom",
        "seed": int(cfg.seed),
        "params": flatten(OmegaConf.to_container(cfg, resolve=True)),
        "best_epoch": None,
        "selection_metric": cfg.trainer.selection_metric,
        "val": {},
        "test": {},
        "epoch_seconds": None,
        "versions": versions(),
    }


def build(node: DictConfig, **kwargs):
    """``hydra.utils.instantiate``, letting the framework's own one-sentence errors through."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as error:
        if isinstance(error.__cause__, TopkError):
            raise error.__cause__ from None
        raise


def data_arguments(node: DictConfig, splits) -> dict:
    """What a loss or augmentation asks for by name in its constructor, from the data:
    ``class_counts`` of the training split (LDAM and noised imbalanced margins) and
    ``num_classes`` (Mixup's one-hot targets). Losses know nothing of data sets (DESIGN §2)."""
    parameters = inspect.signature(get_class(node._target_)).parameters
    available = {"class_counts": splits.class_counts, "num_classes": splits.num_classes}
    return {
        name: value for name, value in available.items()
        if name in parameters and node.get(name) is None
    }


def check_output_dir(run_dir: Path) -> None:
    probe = run_dir / ".write_test"
    try:
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise ConfigError(
            f"the output directory {run_dir} cannot be written ({error.strerror}); "
            "choose another with hydra.run.dir=... (or hydra.sweep.dir=... for -m)."
        ) from None


def make_batches(splits, name: str, trainer: DictConfig, seed: int, device, augment, normalize,
                 distributed=dist_setup.SINGLE_PROCESS):
    """The batches of split ``name``: in-memory tensors, or image files decoded by workers,
    cut to ``trainer.limit_batches`` per pass when that is set.

    Training batches are shuffled per epoch and augmented; evaluation batches are only
    normalised (and, for image files, resized and centre- or ten-cropped). With several
    processes, each iterates over its share (``trainer.batch_size`` is the global batch).
    """
    batches = _split_batches(splits, name, trainer, seed, device, augment, normalize, distributed)
    limit = trainer.get("limit_batches")
    return LimitedBatches(batches, int(limit)) if limit else batches


def _split_batches(splits, name, trainer, seed, device, augment, normalize, distributed):
    split = getattr(splits, name)
    training = name == "train"
    batch_size = trainer.batch_size if training else trainer.eval_batch_size
    layout = channels_last if trainer.channels_last else None
    shares = {"distributed": distributed, "pad": training}
    if isinstance(split, ImageFileSplit):
        on_device = augment.device_transform(normalize) if training else normalize
        return ImageBatches(
            split, batch_size, shuffle=training, seed=seed, device=device,
            image_transform=splits.image_transform(training, augment.random_crop, augment.flip),
            device_transform=Compose(on_device, layout) if layout else on_device,
            num_workers=int(trainer.num_workers),
            marginal_k=splits.marginal_k if splits.ten_crop and not training else None, **shares,
        )
    transform = augment.train_transform(splits.input_shape, normalize) if training else normalize
    return TensorBatches(
        split, batch_size, shuffle=training and batch_size is not None, seed=seed, device=device,
        transform=Compose(transform, layout) if layout else transform, **shares,
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

    splits = build(cfg.dataset, seed=seed)
    train_labels = getattr(splits, "train_labels_full", None)
    if train_labels is not None and distributed.is_main:  # the labels trained on (noisy), -1 where held out
        np.save(run_dir / "train_labels.npy", np.asarray(train_labels, dtype=np.int64))
    if getattr(splits, "noise_rate", None) is not None:
        record["noise_rate"] = float(splits.noise_rate)
    loss_fn = build(cfg.loss, **data_arguments(cfg.loss, splits))
    check_num_classes_for_k(loss_fn, splits.num_classes)
    ks = clip_ks(trainer.ks, splits.num_classes)
    if trainer.selection_metric.startswith("val/") and splits.val is None:
        raise ConfigError(
            f"trainer.selection_metric={trainer.selection_metric} needs a validation split, "
            "and this data set configuration has none; use trainer.selection_metric=last or "
            "give the data set a validation split."
        )

    model = build(cfg.model, num_classes=splits.num_classes, input_shape=splits.input_shape)
    model.to(device)
    if trainer.channels_last:
        model.to(memory_format=torch.channels_last)
    if trainer.compile:
        model = torch.compile(model)
    if distributed.enabled:  # every process starts from rank 0's weights; gradients are averaged
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        # independent noise (noised losses), Mixup and augmentation draws in each process
        seed_everything(dist_setup.process_seed(seed, distributed))
    loss_fn.to(device)
    optimizer = build(cfg.optim)(model.parameters())
    scheduler = build(cfg.schedule)(optimizer)
    augment = build(cfg.augment, **data_arguments(cfg.augment, splits))
    normalize = Normalize(splits.mean, splits.std) if splits.mean is not None else None

    train_batches = make_batches(splits, "train", trainer, seed, device, augment, normalize, distributed)
    eval_batches = {
        name: make_batches(splits, name, trainer, seed, device, augment, normalize, distributed)
        for name in ("val", "test")
        if getattr(splits, name) is not None
    }

    settings = FitSettings(
        epochs=int(trainer.epochs),
        ks=ks,
        selection_metric=trainer.selection_metric,
        eval_every=int(trainer.eval_every),
        checkpoint_every=int(trainer.checkpoint_every),
        resume=bool(trainer.resume),
        progress=bool(trainer.progress),
        tensorboard=bool(trainer.tensorboard),
        description=f"{record['loss']} seed {record['seed']}",
        class_groups=splits.class_groups,
        amp=str(trainer.amp),
    )
    result = fit(
        model, loss_fn, optimizer, scheduler, train_batches, eval_batches,
        splits.num_classes, run_dir, settings, augment=augment, on_epoch_end=on_epoch_end,
        distributed=distributed,
    )
    record.update(
        status="completed",
        best_epoch=result.best_epoch,
        val=result.metrics.get("val", {}),
        test=result.metrics.get("test", {}),
        epoch_seconds=result.epoch_seconds,
        test_per_class={f"top{k}": v for k, v in result.per_class.get("test", {}).items()},
        class_counts=splits.class_counts,
        samples=result.samples,
        processes=distributed.world_size,
    )
    if splits.class_groups:
        record["class_groups"] = splits.class_groups
    return record


def train(cfg: DictConfig, on_epoch_end=None) -> dict:
    """Run one configuration inside Hydra's job context and write its ``results.json``.

    Under torchrun every process runs this; the run directory is rank 0's (the others' Hydra
    output went to a scratch directory, see :func:`topk.distributed.worker_argv`), and only
    rank 0 writes in it.
    """
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    choices = hydra_cfg.runtime.choices
    record = base_record(cfg, choices)
    distributed = dist_setup.from_environment()
    if distributed.is_main:
        check_output_dir(run_dir)
        write_results(run_dir, record)
    try:
        try:
            distributed, device = dist_setup.setup(
                cfg.trainer.distributed_backend, resolve_device(cfg.trainer.device)
            )
            run_dir = Path(distributed.broadcast(str(run_dir)))
            dist_setup.remove_worker_scratch()
            run(cfg, run_dir, record, on_epoch_end, distributed, device)
        except KeyboardInterrupt:  # before training started (fit turns later ones into RunInterrupted)
            raise RunInterrupted(0) from None
    except RunInterrupted as interruption:
        record.update(status="interrupted", error=str(interruption))
        if distributed.is_main:
            write_results(run_dir, record)
        raise
    except Exception as error:
        record.update(status="failed", error=f"{type(error).__name__}: {error}")
        if distributed.is_main:
            write_results(run_dir, record)
        raise
    if distributed.is_main:
        write_results(run_dir, record)
    top = {k: round(v, 2) for k, v in record["test"].items() if k in ("top1", "top2", "top5")}
    log.info("completed: test %s; record in %s", top, run_dir / "results.json")
    return record


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    single_run = HydraConfig.get().mode == RunMode.RUN
    try:  # SIGTERM acts as Ctrl-C; fit() takes both over between batches while it trains
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    except ValueError:  # not the main thread (some launchers): Ctrl-C handling still applies
        pass
    try:
        train(cfg)
    except (TopkError, RunInterrupted) as error:
        if not single_run and isinstance(error, RunInterrupted):
            raise KeyboardInterrupt from None  # Ctrl-C stops the whole sweep, not just this run
        if not single_run:
            raise
        # One sentence, no traceback: the message says what is wrong and what to do.
        print(f"Error: {error}", file=sys.stderr)
        sys.exit(130 if isinstance(error, RunInterrupted) else 1)


if __name__ == "__main__":
    # Under torchrun, the processes after the first leave Hydra's files to the first.
    sys.argv = dist_setup.worker_argv(sys.argv)
    main()
