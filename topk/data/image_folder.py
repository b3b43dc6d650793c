"""A user's own images in ImageFolder trees (``dataset=image_folder``), and what the data sets
without a paper protocol share with ``dataset=torchvision`` (:mod:`topk.data.torchvision_sets`).

Two layouts of torchvision's ``ImageFolder`` (``<class>/<image>``, classes numbered in the sorted
order of their folder names, the image extensions of ``torchvision.datasets.folder.IMG_EXTENSIONS``):

* ``<root>/train/<class>/*.jpg`` with, optionally, ``<root>/val/...`` and ``<root>/test/...``:
  the splits as they are (a root with a ``train`` folder is read this way);
* ``<root>/<class>/*.jpg``: one folder, from which the test (and validation) images are held out.

``dataset.val_fraction`` / ``dataset.test_fraction``: null takes the split's folder (no
validation split when there is none; a test split is needed), a number holds that fraction of
every class's training images out instead (rounded per class, drawn with ``split_seed`` alone:
the same seed, the same split; :func:`topk.data.splits.stratified_parts`). Images are decoded
and cropped by the pipeline of :mod:`topk.data.images` with the options of the other image data
sets; normalisation statistics are given (ImageNet's by default, which torchvision's pre-trained
weights expect) or, as null, computed from the training split (:func:`image_statistics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from topk.data.images import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageFileDataset,
    ImageFileSplit,
    ImageFileSplits,
    check_splits,
    read_class_folders,
)
from topk.data.splits import stratified_parts
from topk.errors import ConfigError

SPLITS = ("train", "val", "test")
STATISTICS_IMAGES = 1000  # training images drawn to compute the normalisation statistics
_WHERE = ("set dataset.root to a folder of class folders (<root>/<class>/*.jpg) or of train/, and "
          "optionally val/ and test/, folders of them (<root>/train/<class>/*.jpg)")


def held_out(train: ImageFileSplit, val: ImageFileSplit | None, test: ImageFileSplit | None,
             val_fraction: float | None, test_fraction: float | None, split_seed: int, what: str):
    """``(train, val, test)``: the official ``val`` and ``test`` where their fraction is null,
    else that fraction of each class of ``train`` held out of it (:func:`stratified_parts`; the
    test part first, so that a test split does not change with ``val_fraction``). ``what`` names
    the data set in the sentence that asks for a test split it lacks."""
    fractions = {"test_fraction": test_fraction, "val_fraction": val_fraction}
    for key, fraction in fractions.items():
        if fraction is not None and not (isinstance(fraction, (int, float)) and 0 < fraction < 1):
            raise ConfigError(f"dataset.{key} must be a fraction above 0 and below 1 or null, got {fraction!r}.")
    if sum(fraction or 0 for fraction in fractions.values()) >= 1:
        raise ConfigError(f"dataset.test_fraction={test_fraction} and dataset.val_fraction={val_fraction} "
                          "hold out every training image; choose fractions that sum to less than 1.")
    if test is None and test_fraction is None:
        raise ConfigError(f"{what} has no test split; set dataset.test_fraction (e.g. 0.2) to hold out "
                          "that fraction of each class's training images for testing.")
    test_part, val_part, rest = stratified_parts(train.y, [test_fraction or 0, val_fraction or 0], split_seed)
    for key, part in (("test_fraction", test_part), ("val_fraction", val_part)):
        if fractions[key] is not None and len(part) == 0:
            largest = int(torch.bincount(train.y).max())
            raise ConfigError(f"dataset.{key}={fractions[key]} holds out no image of any class (the "
                              f"largest has {largest}); choose a larger fraction.")
    test = test if test_fraction is None else train.subset(test_part)
    val = val if val_fraction is None else train.subset(val_part)
    return train.subset(rest), val, test


def image_statistics(split: ImageFileSplit, transform, seed: int,
                     count: int = STATISTICS_IMAGES) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation (fractions of 255) of the pixels of ``count``
    images of ``split`` drawn with ``seed`` (all of them when it has fewer), each as the model
    sees it in evaluation (``transform``: resized and centre-cropped), RGB as every image is
    decoded; torchvision's reference recipes normalise with such statistics of the training set."""
    positions = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed))[:count]
    images = ImageFileDataset(split, transform)
    total = torch.zeros(3, dtype=torch.float64)
    squares = torch.zeros(3, dtype=torch.float64)
    pixels = 0
    for position in positions.tolist():
        image = images[(position, 0)][0].to(torch.float64).flatten(1) / 255.0
        total += image.sum(1)
        squares += (image * image).sum(1)
        pixels += image.shape[1]
    mean = total / pixels
    std = (squares / pixels - mean * mean).clamp_min(0).sqrt().clamp_min(1e-3)  # a constant channel: no 0
    return tuple(mean.tolist()), tuple(std.tolist())


def check_statistics(mean: Sequence[float] | None, std: Sequence[float] | None) -> None:
    """``dataset.mean`` / ``dataset.std``: null, or three numbers (red, green, blue), fractions of
    255; a standard deviation above 0."""
    for key, values, low in (("mean", mean, None), ("std", std, 0.0)):
        if values is None:
            continue
        numbers = list(values) if isinstance(values, Sequence) and not isinstance(values, str) else []
        good = len(numbers) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                         and (low is None or v > low) for v in numbers)
        if not good:
            above = " above 0" if low is not None else ""
            raise ConfigError(f"dataset.{key} must be null (computed from the training split) or three "
                              f"numbers{above}, one per RGB channel as fractions of 255, got {values!r}.")


def own_image_splits(splits: Sequence[ImageFileSplit | None], classes: list[str], sources: dict[str, str],
                     settings: dict, mean, std, split_seed: int, check_images: bool) -> ImageFileSplits:
    """The checked :class:`ImageFileSplits` of a data set without a paper protocol: ``splits``
    (train, val or None, test) held to :func:`topk.data.images.check_splits`, the transforms'
    ``settings`` (image_size, resize_size, train_crop, decoder), and ``mean`` / ``std`` as given or, where
    null, computed from the training split (:func:`image_statistics`, drawn with ``split_seed``)."""
    train, val, test = splits
    check_splits([train, val, test], classes, f"the training split read from {sources['train']}", check_images)
    data = ImageFileSplits(train=train, val=val, test=test, num_classes=len(classes),
                           mean=IMAGENET_MEAN, std=IMAGENET_STD, class_names=list(classes),
                           sources=sources, **settings)
    if mean is None or std is None:
        computed = image_statistics(train, data.image_transform(training=False), split_seed)
        mean = computed[0] if mean is None else mean
        std = computed[1] if std is None else std
    data.mean, data.std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
    return data


def image_folder(
    seed: int,
    root: str | Path,
    val_fraction: float | None = None,
    test_fraction: float | None = None,
    split_seed: int = 0,
    image_size: int = 224,
    resize_size: int = 256,
    train_crop: str = "resize_then_random",
    mean: Sequence[float] | None = list(IMAGENET_MEAN),  # a list, as the YAML gives it; never changed
    std: Sequence[float] | None = list(IMAGENET_STD),
    check_images: bool = True,
    decoder: str = "auto",
) -> ImageFileSplits:
    """A user's ImageFolder tree: ``<root>/{train,val,test}/<class>/*`` or ``<root>/<class>/*``.

    Parameters
    ----------
    seed : int
        The run seed (unused: the splits depend on the folders and ``split_seed`` only).
    root : path
        Folder holding ``train/`` (and optionally ``val/``, ``test/``), or the class folders.
    val_fraction, test_fraction : float or None
        None: the ``val`` / ``test`` folder (none / required when absent); a fraction: held out
        of each class's training images instead, drawn with ``split_seed``.
    image_size, resize_size, train_crop :
        The crops, as for the other image data sets (:class:`topk.data.images.ImageFileSplits`).
    mean, std : three floats or None
        Normalisation statistics (fractions of 255); None: computed from the training split.
    check_images : bool
        Open every image's header before training so that a broken file stops the run early.
    decoder : str
        ``auto`` (JPEGs by torchvision's ``decode_jpeg``, other files and what it refuses by PIL)
        or ``pil`` (every file by PIL): :mod:`topk.data.decoding`.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ConfigError(f"image folder {root} does not exist; {_WHERE}.")
    check_statistics(mean, std)
    if (root / "train").is_dir():
        folders = {name: root / name for name in SPLITS if (root / name).is_dir()}
        what = f"image folder {root} (no test/ beside train/)"
    else:
        folders, what = {"train": root}, f"image folder {root} (one folder of classes)"
    classes, found = read_class_folders(folders, "image folder", _WHERE)
    splits = held_out(found["train"], found.get("val"), found.get("test"), val_fraction, test_fraction,
                      split_seed, what)
    sources = {"train": str(folders["train"])}
    for name, fraction in (("val", val_fraction), ("test", test_fraction)):
        sources[name] = f"{folders['train']} (held out)" if fraction is not None else str(folders.get(name))
    settings = {"image_size": image_size, "resize_size": resize_size, "train_crop": train_crop,
                "decoder": decoder}
    return own_image_splits(splits, classes, sources, settings, mean, std, split_seed, check_images)
