"""Objects from a composed config: the one place every entry point builds through.

``train.py``, evaluation (:mod:`topk.evaluate`), the benchmarks (:mod:`topk.bench`), the GPU
checks and a notebook build alike::

    from topk.build import build, build_loss, build_model, compose, seed_everything

    cfg = compose(["dataset=cifar100", "loss=noised_bal", "model=densenet40_40"])  # conf/train.yaml
    seed_everything(cfg.seed)
    splits = build(cfg.dataset, "dataset", seed=cfg.seed)          # the data, split
    loss = build_loss(cfg.loss, splits)                            # with its data-derived arguments
    model = build_model(cfg.model, splits)                         # sized to the data
    optimizer = build(cfg.optim, "optim", model.parameters())

What a constructor asks for by name and the config leaves null comes from the data
(:func:`data_arguments`: ``class_counts`` for LDAM's and the noised imbalanced loss's margins,
``num_classes`` for Mixup's targets; :func:`schedule_arguments`: ``steps_per_epoch``), so losses and
models know nothing of data sets (docs/design.md §2). A constructor's refusal of a value, or a
path it cannot read, is one sentence naming the config group (:func:`build`). The checks that
need built objects (a K above the class count, a validation metric without a validation split,
BatchNorm on batches of one) are here too, before anything trains.
"""

from __future__ import annotations

import errno
import inspect
import logging
import os
import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel

from topk import distributed as dist_setup
from topk.data import TensorBatches
from topk.data.augment import ImageAugmentation
from topk.data.batches import LimitedBatches
from topk.data.images import ImageBatches, ImageFileSplit, ImageFileSplits
from topk.data.splits import stratified_indices
from topk.data.transforms import Compose, Normalize
from topk.data.workers import data_workers, resolve_workers
from topk.engine import FitSettings, multi_crop_scores
from topk.errors import ConfigError, TopkError
from topk.losses.base import Loss
from topk.losses.targets import check_num_classes_for_k
from topk.losses.weights import ClassWeighted, class_weight_vector
from topk.precision import channels_last
from topk.progress import log_to_file_only
from topk.repository import CONF

log = logging.getLogger("train")
CONF_DIR = CONF  # the repository's conf/ (topk.repository)


def compose(overrides=(), config_dir: Path | None = None) -> DictConfig:
    """``conf/train.yaml`` (of the repository, or of ``config_dir``) with ``overrides``
    (``["loss=ce", "trainer.epochs=3"]``), composed as ``train.py`` composes it (the schemas
    registered, :func:`topk.schema.store.register`), for a notebook or a script; not inside a
    running Hydra job, whose global state it resets."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from topk.schema.store import register

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir or CONF_DIR), version_base="1.3"):
        return hydra_compose("train", overrides=list(overrides))


@dataclass(frozen=True)
class DataFacts:
    """What a loss or ``augment.mix`` may ask of the data (:func:`data_arguments`), to build one
    without a data set (benchmarks, a notebook): ``build_loss(node, DataFacts(100))``."""

    num_classes: int
    class_counts: list[int] | None = None
    input_shape: tuple[int, ...] | None = None  # one sample's shape: (3, 32, 32) for images, (2,) for vectors


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build(node: DictConfig, group: str, *args, **kwargs):
    """``hydra.utils.instantiate`` (then the partial it returns called with ``args``, for the
    optimiser and the schedule), letting the framework's own one-sentence errors through and
    turning a constructor's refusal of a value into one sentence naming the config group, and a
    file or folder it cannot read into one naming that path (:func:`unreadable_sentence`)."""
    try:
        built = instantiate(node, **kwargs)
        return built(*args) if args else built
    except TopkError:
        raise
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, TopkError) or (isinstance(cause, OSError) and cause.errno == errno.ENOSPC):
            raise cause from None  # a full disk: main's sentence
        if isinstance(cause, OSError) and cause.filename:
            raise ConfigError(unreadable_sentence(cause, group)) from None
        if not isinstance(cause, (ValueError, TypeError)):
            raise
        refusal = cause
    except (ValueError, TypeError) as error:
        refusal = error
    raise ConfigError(f"{group} cannot be built ({refusal}); check the {group}.* values.") from None


def unreadable_sentence(error: OSError, group: str) -> str:
    """What to do about ``error``, a path that ``group``'s constructor could not read (a data
    folder without read permission, for one): the path, why, and the fix. Permission denied
    names the first folder on the way that this user cannot open, where the fix is needed."""
    path = error.filename
    if error.errno in (errno.EACCES, errno.EPERM):
        path = first_closed_folder(Path(path)) or path
        elsewhere = " or set dataset.root to a copy it can read" if group == "dataset" else ""
        return (f"{path} cannot be read (permission denied), so {group} cannot be built; give your user "
                f"read access to it (e.g. chmod -R a+rX {path}){elsewhere}.")
    return (f"{path} cannot be read ({error.strerror or type(error).__name__}), so {group} cannot be built; "
            f"check that path and the {group}.* values.")


def first_closed_folder(path: Path) -> Path | None:
    """The outermost folder on the way to ``path`` (``path`` included) that this user cannot
    list or enter; ``None`` if there is none."""
    for folder in [*reversed(path.absolute().parents), path.absolute()]:
        if folder.is_dir() and not os.access(folder, os.R_OK | os.X_OK):
            return folder
    return None


def check_study_k(k: int, num_classes: int) -> None:
    """The top-level ``k`` (the K of the study, always reported) must not exceed the class count:
    beyond it there is no top-K accuracy to report or select on."""
    if k > num_classes:
        raise ConfigError(f"k={k} is more than the {num_classes} classes of this data set, so there is "
                          f"no top-{k} accuracy; choose k of at most {num_classes}.")


def check_validation_split(trainer: DictConfig, splits) -> None:
    """Selecting on a validation metric (``trainer.selection_metric``, ``trainer.also_select_on``)
    needs a validation split."""
    if trainer.selection_metric.startswith("val/") and splits.val is None:
        raise ConfigError(
            f"trainer.selection_metric={trainer.selection_metric} needs a validation split, "
            "and this data set configuration has none; use trainer.selection_metric=last or "
            "give the data set a validation split."
        )
    if trainer.also_select_on and splits.val is None:
        raise ConfigError(
            f"trainer.also_select_on={list(trainer.also_select_on)} needs a validation split, and "
            "this data set configuration has none; use trainer.also_select_on=[] or give the data "
            "set a validation split."
        )


def build_loss(node: DictConfig, splits) -> torch.nn.Module:
    """The loss of ``loss.*`` with its class weights (``loss.weight``: null, balanced or a list,
    :func:`topk.losses.weights.class_weight_vector`), given as ``weight=`` to the losses of topk,
    which weigh their samples themselves. torch's cross-entropy is wrapped in
    :class:`~topk.losses.weights.ClassWeighted` instead, so that a Mixup target weighs as in
    every other loss (torch's own ``weight=`` divides such a mean by the batch size)."""
    spec = OmegaConf.to_container(node, resolve=True).get("weight")
    weight = class_weight_vector(spec, splits.class_counts, splits.num_classes)
    ours = issubclass(get_class(node._target_), Loss)
    given = {"weight": weight.tolist() if ours and weight is not None else None} if "weight" in node else {}
    loss = build(node, "loss", **given, **data_arguments(node, splits))
    check_num_classes_for_k(loss, splits.num_classes)
    return loss if ours or weight is None else ClassWeighted(loss, weight)


def data_arguments(node: DictConfig, splits) -> dict:
    """What a loss or ``augment.mix`` asks for by name in its constructor, from the data:
    ``class_counts`` of the training split (LDAM and noised imbalanced margins),
    ``num_classes`` (Mixup's one-hot targets) and ``input_shape`` (CutMix, which refuses
    non-image inputs). Losses know nothing of data sets (docs/design.md §2)."""
    parameters = inspect.signature(get_class(node._target_)).parameters
    available = {"class_counts": splits.class_counts, "num_classes": splits.num_classes,
                 "input_shape": splits.input_shape}
    return {
        name: value for name, value in available.items()
        if name in parameters and node.get(name) is None
    }


def schedule_arguments(node: DictConfig, train_batches) -> dict:
    """The batches per epoch (``steps_per_epoch``, this process's share) for a schedule stepped
    per batch (:mod:`topk.schedules`), which asks for it by name; nothing for the others."""
    if "steps_per_epoch" in inspect.signature(get_class(node._target_)).parameters:
        return {"steps_per_epoch": len(train_batches)}
    return {}


def build_augment(node: DictConfig, splits):
    """The two parts of ``augment``: the per-image transforms of image data (``augment.images``,
    for the training batches; null: none) and the batch -> target step (``augment.mix``, for
    :func:`topk.engine.fit`; ``None`` when null, i.e. no mixing)."""
    images, mix = node.get("images"), node.get("mix")
    images = ImageAugmentation() if images is None else build(images, "augment.images")
    mix = None if mix is None else build(mix, "augment.mix", **data_arguments(mix, splits))
    return images, mix


BATCH_NORM_LAYERS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm)


def has_batch_norm(model: torch.nn.Module) -> bool:
    """Whether ``model`` has a BatchNorm layer: in training it normalises each batch by the
    batch's own mean and variance, which a batch of one sample does not have."""
    return any(isinstance(module, BATCH_NORM_LAYERS) for module in model.modules())


def check_batch_norm_batch(batch_norm: bool, batch_size: int | None, train_size: int, distributed) -> None:
    """A model with BatchNorm (``batch_norm``) cannot train on batches of one sample per process:
    one sentence before training, rather than torch's error in the first batch (where a layer's
    output is one value per channel) or, on larger feature maps, every batch normalised by one
    sample's statistics. A last batch of one is left out instead (:func:`without_lone_last_batch`)."""
    per_process = (dist_setup.local_batch_size(batch_size, distributed)
                   or dist_setup.shard_size(train_size, distributed, pad=True))
    if not batch_norm or per_process >= 2:
        return
    batch = "the full batch" if batch_size is None else f"trainer.batch_size={batch_size}"
    processes = f" over {distributed.world_size} processes" if distributed.enabled else ""
    raise ConfigError(
        f"{batch}{processes} trains the model's BatchNorm layers on one sample per batch, and "
        "BatchNorm normalises by a batch's statistics, which need at least 2 samples; choose "
        f"trainer.batch_size={2 * distributed.world_size} or more, or a model without BatchNorm."
    )


def make_batches(splits, name: str, trainer: DictConfig, seed: int, device, image_augment, normalize,
                 distributed=dist_setup.SINGLE_PROCESS):
    """The batches of split ``name``: in-memory tensors, or image files decoded by workers.

    Training batches are shuffled per epoch and augmented; evaluation batches are only
    normalised (and, for image files, resized and centre- or ten-cropped). With several
    processes, each iterates over its share (``trainer.batch_size`` is the global batch).

    ``trainer.limit_batches`` cuts training to its first batches of every epoch, already a random
    sample since they are shuffled. Evaluation splits are often sorted by class, so their first
    batches could hold one class only: a limit evaluates instead the class-stratified subset
    :func:`evaluated_subset`, batched as usual (and shared among the processes as a whole split is).
    """
    limit = trainer.get("limit_batches")
    split = getattr(splits, name)
    if limit and name != "train":
        split = evaluated_subset(split, int(limit), trainer.eval_batch_size, seed)
    batches = batches_of_split(splits, split, name, trainer, seed, device, image_augment, normalize, distributed)
    return LimitedBatches(batches, int(limit)) if limit and name == "train" else batches


def build_batches(splits, trainer: DictConfig, seed: int, device, image_augment, normalize, batch_norm: bool,
                  distributed=dist_setup.SINGLE_PROCESS):
    """The training batches (without a last batch of one sample for a model with BatchNorm,
    :func:`without_lone_last_batch`) and the evaluation batches of each split the data has
    (``{"val": ..., "test": ...}``), as :func:`make_batches` makes them."""
    train_batches = make_batches(splits, "train", trainer, seed, device, image_augment, normalize, distributed)
    if batch_norm:
        train_batches = without_lone_last_batch(train_batches, len(splits.train), trainer.batch_size, distributed)
    eval_batches = {name: make_batches(splits, name, trainer, seed, device, image_augment, normalize, distributed)
                    for name in ("val", "test") if getattr(splits, name) is not None}
    return train_batches, eval_batches


def evaluated_subset(split, limit: int, eval_batch_size: int | None, seed: int):
    """The part of an evaluation ``split`` that ``limit`` batches hold: ``limit * eval_batch_size``
    samples, every class as evenly as that allows, drawn with the run's ``seed`` (the same subset
    every epoch and every resume; :func:`topk.data.splits.stratified_indices`). The whole split
    when it is no larger, or when ``eval_batch_size`` is null (one batch of the whole split)."""
    if eval_batch_size is None or limit * eval_batch_size >= len(split):
        return split
    return split.subset(stratified_indices(split.y, limit * eval_batch_size, seed))


def batches_of_split(splits, split, name, trainer, seed, device, image_augment, normalize, distributed):
    training = name == "train"
    batch_size = trainer.batch_size if training else trainer.eval_batch_size
    layout = channels_last if trainer.channels_last else None
    shares = {"distributed": distributed, "pad": training}
    if isinstance(split, ImageFileSplit):
        on_device = image_augment.device_transform(normalize) if training else normalize
        per_image = splits.image_transform(training, image_augment.random_crop, image_augment.flip,
                                           ten_crop=name in ten_crop_splits(splits))
        return ImageBatches(
            split, batch_size, shuffle=training, seed=seed, device=device,
            image_transform=image_augment.worker_transform(per_image) if training else per_image,
            device_transform=Compose(on_device, layout) if layout else on_device,
            num_workers=resolve_workers(trainer.num_workers), **shares,
        )
    transform = image_augment.train_transform(splits.input_shape, normalize) if training else normalize
    return TensorBatches(
        split, batch_size, shuffle=training and batch_size is not None, seed=seed, device=device,
        transform=Compose(transform, layout) if layout else transform, **shares,
    )


def without_lone_last_batch(batches, train_size: int, batch_size: int | None, distributed):
    """The training ``batches`` of a model with BatchNorm without their last batch when it would
    hold a single sample (the training set's size is one more than a multiple of the batch):
    BatchNorm cannot normalise it. Each epoch then trains on all samples but one, a different
    one every epoch since the batches are shuffled; the log says so once. The batches as they
    are otherwise (no such batch, or ``trainer.limit_batches`` stops before it)."""
    per_process = dist_setup.local_batch_size(batch_size, distributed)
    shard = dist_setup.shard_size(train_size, distributed, pad=True)
    full = -(-shard // per_process) if per_process else 1
    if not per_process or shard % per_process != 1 or full < 2 or len(batches) < full:
        return batches
    if distributed.is_main:
        log.info("the %d training samples leave a last batch of one sample%s (trainer.batch_size=%d), which "
                 "BatchNorm cannot normalise: each epoch leaves it out, a different sample every epoch "
                 "as the batches are shuffled", train_size, " per process" if distributed.enabled else "",
                 batch_size)
    return LimitedBatches(batches, full - 1)


def ten_crop_splits(splits) -> tuple[str, ...]:
    """The splits scored on ten crops: the test split where ``dataset.ten_crop`` (B18 §5.2 tests
    on ten crops; its code selects the model on one centre crop of each validation image)."""
    return ("test",) if isinstance(splits, ImageFileSplits) and splits.ten_crop else ()


def eval_scores(splits) -> dict:
    """How evaluation scores a batch, per split: ten crops per image combined through B18's
    top-k marginals on :func:`ten_crop_splits`, the model's output elsewhere."""
    multi_crop = partial(multi_crop_scores, marginal_k=getattr(splits, "marginal_k", 5))
    return {split: multi_crop for split in ten_crop_splits(splits)}


def fit_settings(trainer: DictConfig, ks: list[int], splits, record: dict, name: str) -> FitSettings:
    """``trainer.*`` as :func:`topk.engine.fit` takes it, for the run of ``record`` (checkpoints
    remember its flat config) named ``name`` in TensorBoard. The record's provenance gets the
    decoding workers each of the run's image loaders has (``num_workers``, 0 for in-memory data:
    :func:`topk.data.workers.data_workers`), ``trainer.num_workers: auto`` resolved."""
    record["provenance"]["num_workers"] = data_workers(splits, trainer.num_workers)
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
        tensorboard_name=name,
        description=f"{record['loss']} seed {record['seed']}",
        class_groups=splits.class_groups,
        amp=str(trainer.amp),
        config=record["params"],
        eval_scores=eval_scores(splits),
        grad_nonzero=bool(trainer.grad_nonzero),
        test_every_epoch=bool(trainer.test_every_epoch),
        accumulate_grad_batches=int(trainer.accumulate_grad_batches),
        clip_grad_norm=None if trainer.clip_grad_norm is None else float(trainer.clip_grad_norm),
        ema_decay=None if trainer.ema_decay is None else float(trainer.ema_decay),
        early_stopping_patience=(None if trainer.early_stopping_patience is None
                                 else int(trainer.early_stopping_patience)),
    )


def build_model(node: DictConfig, splits, trainer: DictConfig | None = None, device=None,
                distributed=dist_setup.SINGLE_PROCESS) -> torch.nn.Module:
    """The model of ``model.*`` sized to ``splits`` (its class count and input shape), on
    ``device``, in channels-last layout and compiled where ``trainer`` asks, and wrapped in
    DistributedDataParallel under torchrun (every process starts from rank 0's weights and
    gradients are averaged). Refused before anything trains if it has BatchNorm and would train on
    batches of one sample (:func:`check_batch_norm_batch`; needs ``trainer``)."""
    model = build(node, "model", num_classes=splits.num_classes, input_shape=splits.input_shape)
    if trainer is None:
        return model if device is None else model.to(device)
    check_batch_norm_batch(has_batch_norm(model), trainer.batch_size, len(splits.train), distributed)
    model.to(device)
    if trainer.channels_last:
        model.to(memory_format=torch.channels_last)
    if trainer.compile:
        model = torch.compile(model)
    if distributed.enabled:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return model


def normalisation(splits) -> Normalize | None:
    """The data set's per-channel normalisation, applied to every batch (``None``: none)."""
    return Normalize(splits.mean, splits.std) if splits.mean is not None else None
