"""ImageNet (ILSVRC-2012) with B18's protocol (§5.2).

Layout: ``<root>/train/<wnid>/*.JPEG`` and ``<root>/val/<wnid>/*.JPEG`` (ImageFolder trees). A
root holding only the official archives (``ILSVRC2012_devkit_t12.tar.gz``,
``ILSVRC2012_img_train.tar``, ``ILSVRC2012_img_val.tar``) is unpacked into that layout once by
torchvision's ``ImageNet``, which parses the devkit to sort the validation images by class.

Protocol: a balanced validation set of ``val_per_class`` images per class (50, i.e. 50,000) is
held out of the training set; training uses a balanced subset of ``train_size`` images (64k,
128k, 320k, 640k in B18 Table 2) or, with ``train_size=null``, all the rest; the official
validation set is the test set. Both draws depend only on ``split_seed``.
"""

from __future__ import annotations

import numbers
from pathlib import Path

import torch

from topk.data.images import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageFileSplit,
    ImageFileSplits,
    check_image_files,
    labelled_split,
    list_image_folder,
    where_expected,
)
from topk.data.splits import balanced_subset, refuse_untrained_classes
from topk.errors import ConfigError

ARCHIVES = ("ILSVRC2012_devkit_t12.tar.gz", "ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar")
_WHERE = where_expected(
    "train/<wnid>/*.JPEG and val/<wnid>/*.JPEG, or the archives " + ", ".join(ARCHIVES),
    "https://image-net.org/download.php after registration",
)


def _locate(root: Path) -> tuple[Path, Path]:
    train_dir, val_dir = root / "train", root / "val"
    if train_dir.is_dir() and val_dir.is_dir():
        return train_dir, val_dir
    if all((root / name).is_file() for name in ARCHIVES):
        from torchvision.datasets import ImageNet

        try:
            for split in ("train", "val"):
                ImageNet(str(root), split=split)  # unpacks and sorts the archives once
        except Exception as error:  # corrupt archive, full disk, unwritable root
            raise ConfigError(f"could not unpack the ImageNet archives in {root} ({error}); {_WHERE}.") from error
        return train_dir, val_dir
    raise ConfigError(f"ImageNet folder {root} has neither train/ and val/ nor the archives; {_WHERE}.")


def _class_names(root: Path, wnids: list[str]) -> list[str]:
    """Readable names from the devkit's ``meta.bin`` (written by torchvision) when present."""
    if not (root / "meta.bin").is_file():
        return []
    from torchvision.datasets.imagenet import load_meta_file

    wnid_to_names, _ = load_meta_file(str(root))
    return [", ".join(wnid_to_names.get(wnid, (wnid,))) for wnid in wnids]


def training_subset(rest: ImageFileSplit, train_size, num_classes: int, generator) -> ImageFileSplit:
    """``train_size`` images of ``rest``, as many of each class (B18 §5.2's balanced subsets)."""
    if (
        isinstance(train_size, bool) or not isinstance(train_size, numbers.Integral)
        or train_size < num_classes or train_size % num_classes
    ):
        raise ConfigError(
            f"dataset.train_size={train_size} cannot be split into equal parts for the "
            f"{num_classes} classes; choose a multiple of {num_classes} (or null for all)."
        )
    if train_size > len(rest):
        raise ConfigError(
            f"dataset.train_size={train_size} is larger than the {len(rest)} training images "
            "left after the validation split; choose a smaller value or null for all."
        )
    per_class = train_size // num_classes
    return rest.subset(balanced_subset(rest.y, per_class, generator, "dataset.train_size"))


def train_and_validation(full: ImageFileSplit, val_per_class: int, train_size, num_classes: int,
                         split_seed: int) -> tuple[ImageFileSplit, ImageFileSplit | None]:
    """B18 §5.2's draws from the training folder ``full``, both by ``split_seed``: the balanced
    validation set of ``val_per_class`` images per class (``None`` for 0), then the balanced
    training subset of ``train_size`` of the rest (:func:`training_subset`; ``None``: all of it)."""
    generator = torch.Generator().manual_seed(split_seed)
    held_out = torch.zeros(len(full), dtype=torch.bool)
    val = None
    if val_per_class:
        val_positions = balanced_subset(full.y, int(val_per_class), generator, "dataset.val_per_class")
        held_out[val_positions] = True
        val = full.subset(val_positions)
    rest = full.subset(torch.nonzero(~held_out).flatten())
    train = rest if train_size is None else training_subset(rest, train_size, num_classes, generator)
    return train, val


def _read_splits(train_dir: Path, test_dir: Path, val_per_class: int, train_size: int | None, split_seed: int):
    """The class folders (wnids) and the training, validation and test splits of ImageNet's
    folders; one sentence for an empty training folder or a class left without training images."""
    wnids, train_samples = list_image_folder(train_dir)
    if not train_samples:
        raise ConfigError(f"ImageNet training folder {train_dir} holds no images; {_WHERE}.")
    class_index = {wnid: index for index, wnid in enumerate(wnids)}
    full = labelled_split(train_samples, class_index, str(train_dir))
    test = labelled_split(list_image_folder(test_dir)[1], class_index, str(test_dir))
    train, val = train_and_validation(full, val_per_class, train_size, len(wnids), split_seed)
    refuse_untrained_classes(train.y, len(wnids), f"the training folder {train_dir}", wnids)
    return wnids, train, val, test


def imagenet(
    seed: int,
    root: str | Path,
    val_per_class: int = 50,
    train_size: int | None = None,
    split_seed: int = 0,
    image_size: int = 224,
    resize_size: int = 256,
    train_crop: str = "resize_then_random",
    ten_crop: bool = False,
    marginal_k: int = 5,
    check_images: bool = True,
    decoder: str = "auto",
) -> ImageFileSplits:
    """ImageNet splits: balanced held-out validation, balanced training subset, official val as test.

    Parameters
    ----------
    seed : int
        The run seed (unused: the splits depend on ``split_seed`` only).
    root : path
        Folder with ``train/`` and ``val/`` (or the official archives).
    val_per_class : int
        Training images per class held out for validation (B18: 50); 0 for none.
    train_size : int or None
        Training images, balanced per class (must divide by the class count); None: all the rest.
    split_seed : int
        Seed of the validation and training-subset draws, fixed across runs.
    image_size, resize_size : int
        Crop side and the shorter side before centre or ten-crop (224 and 256).
    train_crop : str
        The random training crop: ``resize_then_random`` (resize to ``resize_size``, then a random
        ``image_size`` crop; B18 §5.2) or ``random_resized`` (``RandomResizedCrop``).
    ten_crop : bool
        Score the test split on ten crops, ranking by the crops' mean top-``marginal_k`` marginals
        (B18 App. C); validation stays on one centre crop, as B18's code selects its model.
    check_images : bool
        Open every image's header before training so that a broken file stops the run early.
    decoder : str
        ``auto`` (JPEGs by torchvision's ``decode_jpeg``, other files and what it refuses by PIL)
        or ``pil`` (every file by PIL): :mod:`topk.data.decoding`.
    """
    root = Path(root).expanduser()
    train_dir, test_dir = _locate(root)
    wnids, train, val, test = _read_splits(train_dir, test_dir, val_per_class, train_size, split_seed)
    num_classes = len(wnids)
    if check_images:
        check_image_files([train, val, test])
    return ImageFileSplits(
        train=train, val=val, test=test, num_classes=num_classes,
        mean=IMAGENET_MEAN, std=IMAGENET_STD, image_size=image_size, resize_size=resize_size,
        train_crop=train_crop, ten_crop=ten_crop, marginal_k=marginal_k, decoder=decoder,
        class_names=_class_names(root, wnids),
        sources={"train": str(train_dir), "val": f"{train_dir} (held out)", "test": str(test_dir)},
    )
