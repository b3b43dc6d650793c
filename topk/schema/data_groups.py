"""The schemas of the data sets (``conf/dataset/``): one dataclass per loader a data set's file
targets, in the style of :mod:`topk.schema.groups`, which lists them in
:data:`~topk.schema.groups.SCHEMAS`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topk.data.decoding import DECODERS
from topk.data.torchvision_sets import CLASSIFICATION as TORCHVISION_CLASSIFICATION
from topk.schema.rules import anything, choice, flag, is_number, number, target, text, whole


@dataclass
class DatasetSchema:
    _target_: str = target()


@dataclass
class CirclesSchema(DatasetSchema):
    sigma: float = number(0)
    train_per_class: int = whole(1)
    test_per_class: int = whole(1)
    val_per_class: int = whole(0)


@dataclass
class MultimodalCirclesSchema(CirclesSchema):
    d: float = number()


@dataclass
class RandomImagesSchema(DatasetSchema):
    num_classes: int = whole(2)
    train_size: int = whole(1)
    test_size: int = whole(1)
    image_size: int = whole(1)


@dataclass
class Cifar100Schema(DatasetSchema):
    root: str = text("a folder")
    download: bool = flag()
    val_size: int = whole(0)
    noise: float = number(0, maximum=1)
    noise_groups: str = choice("coarse", "published_code")
    split_seed: int = whole(0)
    normalisation: str = choice("cifar100", "cifar10")


@dataclass
class ImageFolderSchema(DatasetSchema):
    root: str = text("a folder")
    image_size: int = whole(1)
    resize_size: int = whole(1)
    train_crop: str = choice("resize_then_random", "random_resized")
    check_images: bool = flag()
    decoder: str = choice(*DECODERS)


@dataclass
class ImageNetSchema(ImageFolderSchema):
    val_per_class: int = whole(0)
    train_size: int | None = whole(1, null="all the rest")
    split_seed: int = whole(0)
    ten_crop: bool = flag()
    marginal_k: int = whole(1)


@dataclass
class ImageNetLTSchema(ImageFolderSchema):
    lists_root: str | None = text("a folder", null="the root")


def rgb_statistics(value: Any) -> bool:
    """``dataset.mean`` / ``dataset.std`` of the data sets without a paper protocol: null, or
    three finite numbers (red, green, blue, fractions of 255); a std's above 0 is checked where
    the data set is read (:func:`topk.data.image_folder.check_statistics`)."""
    return value is None or (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 3
                             and all(is_number(v) and math.isfinite(v) for v in value))


@dataclass
class OwnImagesSchema(DatasetSchema):
    """What ``dataset=image_folder`` and ``dataset=torchvision`` share (topk/data/image_folder.py)."""

    root: str = text("a folder")
    val_fraction: float | None = number(above=0, below=1, null="the val split as it is, or none")
    test_fraction: float | None = number(above=0, below=1, null="the test split as it is")
    split_seed: int = whole(0)
    image_size: int = whole(1)
    resize_size: int = whole(1)
    train_crop: str = choice("resize_then_random", "random_resized")
    mean: list[float] | None = anything(
        "null (computed from the training split) or three numbers, e.g. [0.485, 0.456, 0.406]", rgb_statistics)
    std: list[float] | None = anything(
        "null (computed from the training split) or three numbers, e.g. [0.229, 0.224, 0.225]", rgb_statistics)
    check_images: bool = flag()


@dataclass
class OwnImageFolderSchema(OwnImagesSchema):
    """``dataset=image_folder`` (topk/data/image_folder.py); ``dataset=torchvision`` has no
    ``decoder``: its images come from the data set's own loader."""

    decoder: str = choice(*DECODERS)


@dataclass
class TorchvisionSchema(OwnImagesSchema):
    """``dataset=torchvision`` (topk/data/torchvision_sets.py)."""

    name: str = choice(*TORCHVISION_CLASSIFICATION)
    download: bool = flag()
    options: Any = anything(  # Any: OmegaConf cannot merge a mapping into a null Dict node
        "null or a mapping of further arguments of the data set's class, e.g. {split: balanced} for EMNIST",
        lambda value: value is None or isinstance(value, Mapping))


@dataclass
class EmbeddingsSchema(DatasetSchema):
    root: str = text("a folder")
    val_size: int = whole(0)
    num_classes: int | None = whole(1, null="the largest label plus one")
