"""The schema of every config group: one dataclass per constructor a ``conf/`` option targets.

Each ``conf/<group>/<option>.yaml`` names its schema first in its defaults list
(``/schema/loss/topk_hinge@_here_``), so Hydra composes the option onto a typed node: OmegaConf
converts command-line text to the field's type (``trainer.compile=no`` is ``False``) and refuses
what it cannot convert, and a key the schema lacks (``trainer.epoch``) cannot be set. The rules
(:mod:`topk.schema.rules`) say what each value may be (the data sets' schemas are in
:mod:`topk.schema.data_groups`); :func:`topk.schema.check.check_config`
holds the composed config to them. Values live in the YAML files, never here.

The field names are the constructors' parameter names (``tests/test_schema.py`` compares them),
besides ``_target_``, ``_partial_`` (optimiser and schedule, called by ``train.py`` with the
parameters); ``loss.weight`` may also say ``balanced``, which ``train.py`` resolves from the
training split's class counts (:mod:`topk.losses.weights`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from topk.data.workers import ALLOWED as WORKERS_ALLOWED
from topk.data.workers import valid_setting as valid_workers
from topk.schema.data_groups import (
    Cifar100Schema,
    CirclesSchema,
    EmbeddingsSchema,
    ImageFolderSchema,
    ImageNetLTSchema,
    ImageNetSchema,
    MultimodalCirclesSchema,
    OwnImageFolderSchema,
    RandomImagesSchema,
    TorchvisionSchema,
)
from topk.schema.rules import (
    anything,
    checked,
    choice,
    flag,
    is_number,
    matching,
    number,
    number_list,
    target,
    text,
    whole,
    whole_list,
)

MAX_SEED = 2**63 - 1  # torch.manual_seed takes a signed 64-bit seed
HEADS = ("linear", "cosine")


def valid_class_weights(value: Any) -> bool:
    """``loss.weight``: null, balanced, or non-negative finite weights, not all 0 (their
    count is checked against the data's classes, :mod:`topk.losses.weights`)."""
    if value is None or value == "balanced":
        return True
    return (isinstance(value, Sequence) and not isinstance(value, str) and any(value)
            and all(is_number(w) and math.isfinite(w) and w >= 0 for w in value))


# ---- trainer (conf/train.yaml) and the top-level keys --------------------------------------------

@dataclass
class TrainerSchema:
    epochs: int = whole(1)
    batch_size: int | None = whole(1, null="the full batch")
    eval_batch_size: int | None = whole(1, null="a whole split at once")
    device: str = matching(r"auto|cpu|cuda(:\d+)?", "one of auto, cpu, cuda, cuda:N")
    ks: list[int] = whole_list(1)
    selection_metric: str = matching(
        r"last|val/\w+", "last or a validation metric val/<metric> (e.g. val/top5); never test/"
    )
    also_select_on: list[str] = anything(
        "a list of validation metrics val/<metric> (e.g. [val/top5]), possibly empty; never test/",
        lambda value: isinstance(value, Sequence) and not isinstance(value, str)
        and all(isinstance(item, str) and re.fullmatch(r"val/\w+", item) for item in value))
    resume: bool = flag()
    eval_every: int = whole(1)
    checkpoint_every: int = whole(1)
    keep_checkpoints: str = choice("all", "best", "none")
    progress: bool = flag()
    progress_every: int = whole(1)
    tensorboard: bool = flag()
    grad_nonzero: bool = flag()
    accumulate_grad_batches: int = whole(1)
    clip_grad_norm: float | None = number(above=0, null="no clipping")
    ema_decay: float | None = number(above=0, below=1, null="no moving average: the weights themselves")
    early_stopping_patience: int | None = whole(1, null="no early stopping")
    num_threads: int | None = whole(1, null="torch's default")
    amp: str = choice("off", "bf16", "fp16")
    channels_last: bool = flag()
    compile: bool = flag()
    limit_batches: int | None = whole(1, null="no limit")
    num_workers: Any = anything(WORKERS_ALLOWED, valid_workers)  # auto or a number: topk.data.workers
    distributed_backend: str = choice("auto", "nccl", "gloo")
    test_every_epoch: bool = flag()


@dataclass
class TrainSchema:
    """The top-level keys of ``conf/train.yaml``; the groups hold their own schemas. Hydra
    composes the top level untyped (``n_samples``, ``p22_steepness`` and ``b18_margin_settings``
    exist only where an experiment or a protocol file sets them);
    :func:`topk.schema.check.check_config` holds it to these rules."""

    experiment: str | None = text("an experiment name", null="not part of a paper experiment")
    protocol_card: str | None = text("the experiment's protocol card", null="no card")
    seed: int = whole(0, MAX_SEED)
    data_root: str = text("a folder")
    image_size: int = whole(1)
    k: int = whole(1)
    n_samples: int | None = whole(1, null="the loss's own")  # g22_time's swept B
    p22_steepness: dict[str, float] | None = anything(  # P22's sorter steepness, per sorter
        "a mapping from sorter to steepness", lambda value: value is None or isinstance(value, dict))
    p22_top_m: int | None = whole(2, null="no truncation")  # the m of P22's top-k methods (p22_*)
    p22_method: str | None = text("a P22 method, one of conf/p22_method/", null="not a P22 method")  # its name
    g22_method: str | None = text("a G22 method, one of conf/g22_method/", null="not a G22 method")  # its name
    g22_ks: list[int] | None = anything(  # the K rows of a G22 table (g22_method/ce, focal, ldam)
        "a list of whole numbers of at least 1, e.g. [1, 3, 5, 10]",
        lambda value: value is None or (not isinstance(value, str) and all(
            isinstance(item, int) and not isinstance(item, bool) and item >= 1 for item in value)))
    b18_margin_settings: dict[str, dict[str, float]] | None = anything(  # b18_margin's, per k
        "a mapping from k1 and k5 to tau, lr and weight_decay",
        lambda value: value is None or isinstance(value, dict))
    trainer: TrainerSchema = field(default_factory=TrainerSchema)
    dataset: Any = None
    model: Any = None
    loss: Any = None
    augment: Any = None
    optim: Any = None
    schedule: Any = None
    logger: Any = None


# top-level keys only some configs have
OPTIONAL_TOP_LEVEL = ("n_samples", "p22_steepness", "p22_top_m", "p22_method", "g22_method", "g22_ks",
                      "b18_margin_settings")


# ---- loss (topk/losses/) -------------------------------------------------------------------------

@dataclass
class LossSchema:
    _target_: str = target()
    weight: Any = anything(
        "null, balanced or a list of one finite weight of at least 0 per class, not all 0", valid_class_weights)


@dataclass
class CrossEntropySchema(LossSchema):
    label_smoothing: float = number(0, maximum=1)


@dataclass
class TopKLossSchema(LossSchema):
    k: int = whole(1)


@dataclass
class TopKHingeSchema(TopKLossSchema):
    alpha: float = number(above=0)


@dataclass
class SmoothTopKSVMSchema(TopKLossSchema):
    tau: float = number(0)
    alpha: float = number(0)  # 0: no margin (B18 Tables 7-8; (k, tau, alpha) = (1, 1, 0) is CE)


@dataclass
class NoisedTopKHingeSchema(TopKLossSchema):
    epsilon: float = number(0)
    n_samples: int = whole(1)
    compile: bool = flag()


@dataclass
class NoisedImbalancedTopKHingeSchema(NoisedTopKHingeSchema):
    max_margin: float = number(0)
    scale: float = number(above=0)


@dataclass
class LDAMSchema(LossSchema):
    max_margin: float = number(0)
    scale: float = number(above=0)


@dataclass
class FocalSchema(LossSchema):
    gamma: float = number(0)


@dataclass
class DiffSortTopKCESchema(LossSchema):
    p_k: list[float] = number_list(0, "p_K(k) for k = 1..K, summing to 1")
    sorter: str = choice("neuralsort", "softsort", "odd_even", "bitonic", "splitter_selection")
    steepness: float = number(above=0)
    distribution: str = choice("logistic", "logistic_phi", "cauchy")
    art_lambda: float = number(above=0)
    top1_mode: str = choice("sm", "smce", "sort")
    m: int | None = whole(2, null="sort every class")


# ---- model (topk/models/) ------------------------------------------------------------------------

@dataclass
class ModelSchema:
    _target_: str = target()
    head: str = choice(*HEADS)
    pretrained: bool = flag()


@dataclass
class LinearSchema(ModelSchema):
    bias: bool = flag()


@dataclass
class MLPSchema(ModelSchema):
    hidden: int = whole(1)
    bias: bool = flag()


@dataclass
class ResNetSchema(ModelSchema):
    name: str = choice("resnet18", "resnet34", "resnet50")
    keep_maxpool: bool = flag()


def library_name(module: str):
    """The check of a model name by its library (``topk.models.<module>.name_problem``), imported
    only when a config names that model (timm is an optional extra)."""

    def problem(key: str, value: Any) -> str | None:
        from importlib import import_module

        return import_module(f"topk.models.{module}").name_problem(key or "model.name", value)

    return problem


@dataclass
class TorchvisionModelSchema(ModelSchema):
    """``model=torchvision`` (topk/models/torchvision_models.py)."""

    name: str = checked("a torchvision classification model, e.g. convnext_tiny", library_name("torchvision_models"))
    weights: str | None = text("a weights name of the model, e.g. IMAGENET1K_V1 or DEFAULT",
                               null="random initialisation, or DEFAULT with model.pretrained=true")


@dataclass
class TimmModelSchema(ModelSchema):
    """``model=timm`` (topk/models/timm_models.py)."""

    name: str = checked("a timm model, e.g. resnet18 or resnet50.a1_in1k", library_name("timm_models"))
    weights_file: str | None = text("a file of the model's pretrained weights", null="timm's own download")


@dataclass
class CifarDenseNetSchema(ModelSchema):
    depth: int = whole(7)
    growth_rate: int = whole(1)
    drop_rate: float = number(0, below=1)
    bottleneck: bool = flag()
    compression: float = number(above=0, maximum=1)


# ---- augment (topk/data/augment.py) --------------------------------------------------------------

@dataclass
class ImageAugmentationSchema:
    _target_: str = target()
    crop_padding: int | None = whole(0, null="no random crop")
    flip: bool = flag()
    cutout_size: int | None = whole(1, null="no Cutout")
    randaugment_ops: int | None = whole(1, null="no RandAugment")
    randaugment_magnitude: int = whole(0, 30)  # torchvision's RandAugment, 31 magnitude bins
    random_erasing: float = number(0, maximum=1)


@dataclass
class MixSchema:
    """``augment.mix``: each option file composes its node onto one of the subclasses below
    (``/schema/augment/mixup@mix``), which the field accepts."""

    _target_: str = target()


@dataclass
class MixupSchema(MixSchema):  # Mixup and CutMix
    alpha: float = number(above=0)


@dataclass
class MixupOrCutMixSchema(MixSchema):
    mixup_alpha: float = number(above=0)
    cutmix_alpha: float = number(above=0)


@dataclass
class AugmentSchema:
    images: ImageAugmentationSchema = field(default_factory=ImageAugmentationSchema)
    mix: MixSchema | None = None


# ---- optim and schedule (torch.optim) ------------------------------------------------------------

@dataclass
class OptimizerSchema:
    _target_: str = target()
    _partial_: bool = flag()
    lr: float = number(0)
    weight_decay: float = number(0)


@dataclass
class SGDSchema(OptimizerSchema):
    momentum: float = number(0, below=1)
    nesterov: bool = flag()


@dataclass
class MultiStepSchema:
    _target_: str = target()
    _partial_: bool = flag()
    milestones: list[int] = whole_list(1, increasing=True, empty=True, what="epochs")
    gamma: float = number(above=0)


@dataclass
class WarmupCosineSchema:
    _target_: str = target()
    _partial_: bool = flag()
    epochs: int = whole(1)
    warmup_epochs: float = number(0)
    min_lr_ratio: float = number(0, maximum=1)
    accumulate_grad_batches: int = whole(1)


@dataclass
class PlateauSchema:
    _target_: str = target()
    _partial_: bool = flag()
    metric: str = matching(r"val/\w+", "a validation metric val/<metric> (e.g. val/top1 or val/loss; "
                                       "it is trainer.selection_metric unless set)")
    factor: float = number(above=0, below=1)
    patience: int = whole(0)
    threshold: float = number(0)
    cooldown: int = whole(0)
    min_lr: float = number(0)


# ---- logger (topk/trackers.py) --------------------------------------------------------------------

def tracking_uri_problem(key: str, value: Any) -> str | None:
    """MLflow's tracking URI as :func:`topk.trackers.tracking_uri_problem` checks it (a file store
    refused in one sentence before the run starts), imported when a config names MLflow."""
    from topk.trackers import tracking_uri_problem as problem

    return problem(key or "logger.tracking_uri", value)


@dataclass
class MLflowSchema:
    _target_: str = target()
    tracking_uri: str = checked("a tracking URI (sqlite:///path.db, http(s)://host)", tracking_uri_problem)
    experiment: str = text("an experiment name")


@dataclass
class WandbSchema:
    _target_: str = target()
    project: str = text("a W&B project name")
    mode: str = choice("offline", "online", "disabled")
    dir: str = text("a folder")
    entity: str | None = text("a W&B user or team", null="the account's default")


# Each schema's name in Hydra's ConfigStore: conf/<group>/<option>.yaml names it in its defaults
# list as /schema/<group>/<name>@_here_ (dataset files: @dataset).
SCHEMAS: dict[str, dict[str, type]] = {
    "trainer": {"trainer": TrainerSchema},
    "loss": {
        "loss": LossSchema,
        "cross_entropy": CrossEntropySchema,
        "topk_loss": TopKLossSchema,
        "topk_hinge": TopKHingeSchema,
        "smooth_svm": SmoothTopKSVMSchema,
        "noised": NoisedTopKHingeSchema,
        "noised_imbalanced": NoisedImbalancedTopKHingeSchema,
        "ldam": LDAMSchema,
        "focal": FocalSchema,
        "diffsort_topk_ce": DiffSortTopKCESchema,
    },
    "model": {
        "linear": LinearSchema,
        "mlp": MLPSchema,
        "resnet": ResNetSchema,
        "torchvision_densenet": ModelSchema,
        "cifar_densenet": CifarDenseNetSchema,
        "torchvision": TorchvisionModelSchema,
        "timm": TimmModelSchema,
    },
    "dataset": {
        "circles": CirclesSchema,
        "circles_multimodal": MultimodalCirclesSchema,
        "random_images": RandomImagesSchema,
        "cifar100": Cifar100Schema,
        "imagenet": ImageNetSchema,
        "imagenet_lt": ImageNetLTSchema,
        "plantnet": ImageFolderSchema,
        "embeddings": EmbeddingsSchema,
        "image_folder": OwnImageFolderSchema,
        "torchvision": TorchvisionSchema,
    },
    "augment": {"augment": AugmentSchema, "mixup": MixupSchema, "mixup_or_cutmix": MixupOrCutMixSchema},
    "optim": {"optimizer": OptimizerSchema, "sgd": SGDSchema},
    "schedule": {"multistep": MultiStepSchema, "cosine": WarmupCosineSchema, "plateau": PlateauSchema},
    "logger": {"mlflow": MLflowSchema, "wandb": WandbSchema},
}
