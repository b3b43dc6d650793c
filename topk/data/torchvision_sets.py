"""Any image classification data set of ``torchvision.datasets`` by name (``dataset=torchvision``).

``dataset.name`` is the class (``FashionMNIST``, ``CIFAR10``, ``Flowers102``, ``Food101`` ...,
:data:`CLASSIFICATION`, those of torchvision's "Image classification" list whose target is one
class index), built by torchvision itself on ``dataset.root`` in its own on-disk layout, with
its ``download=`` passed through (``dataset.download``, default false). Its official splits are
taken as torchvision offers them: ``train=True`` / ``train=False`` (the MNIST family, CIFAR,
USPS), or ``split=`` with the first word it accepts of :data:`SPLIT_WORDS` for each of training,
validation and test (``Flowers102``, ``DTD``, ``Food101``, ``SVHN`` ...); a data set with neither
(``EuroSAT``, ``Caltech101``) is one training split. ``dataset.val_fraction`` /
``dataset.test_fraction`` hold out a fraction of each class's training images instead, as for
``dataset=image_folder`` (:func:`topk.data.image_folder.held_out`).

Images reach the model as ``dataset=image_folder``'s do (:mod:`topk.data.images`: decoded in
worker processes, resized and cropped to ``image_size``), and always in RGB: grey images
(MNIST, FashionMNIST, USPS) are made 3-channel as torchvision's ``ImageFolder`` loader does, so
every model of ``conf/model/`` (3-channel stems, ImageNet weights) takes every data set.
Normalisation statistics are given (``dataset.mean``, ``dataset.std``) or, as null (the
default), computed from the training split (:func:`topk.data.image_folder.image_statistics`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from topk.data.image_folder import check_statistics, held_out, own_image_splits
from topk.data.images import ImageFileSplit, ImageFileSplits
from topk.errors import ConfigError

# torchvision's image classification data sets whose target is one class index
# (https://pytorch.org/vision/stable/datasets.html#image-classification); those of the installed
# torchvision are offered (:func:`offered`).
CLASSIFICATION = ("Caltech101", "Caltech256", "CIFAR10", "CIFAR100", "Country211", "DTD", "EMNIST",
                  "EuroSAT", "FashionMNIST", "FER2013", "FGVCAircraft", "Flowers102", "Food101", "GTSRB",
                  "ImageNet", "Imagenette", "KMNIST", "LFWPeople", "MNIST", "Omniglot", "OxfordIIITPet",
                  "PCAM", "Places365", "QMNIST", "RenderedSST2", "SEMEION", "StanfordCars", "STL10",
                  "SUN397", "SVHN", "USPS")
# the words of ``split=`` tried, in order, for each of our splits; the first the class accepts is taken
SPLIT_WORDS = {"train": ("train", "trainval", "train-standard"), "val": ("val", "valid"), "test": ("test",)}
OWN_ARGUMENTS = ("root", "train", "split", "download", "transform", "target_transform", "transforms", "loader")
LABEL_ATTRIBUTES = ("targets", "labels", "_labels", "y")  # where torchvision's classes keep their labels


@dataclass
class DatasetSplit(ImageFileSplit):
    """An :class:`ImageFileSplit` whose images are items of a torchvision data set: image ``i``
    is ``dataset[positions[i]]``'s, ``paths[i]`` names it in errors (``FashionMNIST train #12``)."""

    dataset: Any = None
    positions: list[int] = field(default_factory=list)

    def open(self, index: int):
        return self.dataset[self.positions[index]][0]

    def decode(self, index: int):
        """Image ``index`` as the data set gives it (a PIL image, read by its own loader), in RGB:
        its items are no files of ours, so ``dataset.decoder`` does not apply."""
        with self.open(index) as image:
            return image.convert("RGB")

    def subset(self, positions: torch.Tensor) -> DatasetSplit:
        chosen = positions.tolist()
        return DatasetSplit([self.paths[i] for i in chosen], self.y[positions].clone(), self.dataset,
                            [self.positions[i] for i in chosen])


def offered() -> list[str]:
    """The names of :data:`CLASSIFICATION` that the installed torchvision has."""
    import torchvision.datasets

    return [name for name in CLASSIFICATION if hasattr(torchvision.datasets, name)]


def dataset_class(name: str):
    """The torchvision class called ``name``, or one sentence listing the valid names."""
    import torchvision.datasets

    if name not in offered():
        raise ConfigError(f"dataset.name={name!r} is not one of torchvision's image classification data "
                          f"sets; choose one of {', '.join(offered())}.")
    return getattr(torchvision.datasets, name)


def split_convention(cls) -> str | None:
    """``train`` (``train=True/False``), ``split`` (``split="train"`` ...) or None (one set).
    The MNIST family takes ``train=`` even where its signature hides it (``EMNIST(root, split,
    **kwargs)``, whose ``split`` chooses the variant, given in ``dataset.options``)."""
    from torchvision.datasets import MNIST

    parameters = inspect.signature(cls).parameters
    if "train" in parameters or issubclass(cls, MNIST):
        return "train"
    return "split" if "split" in parameters else None


def construct(cls, name: str, root: Path, download: bool, options: Mapping, **split) -> Any:
    """``cls(root, download=..., **options, **split)``; the errors torchvision raises for missing
    data or arguments as one sentence each. A ``split=`` word the class refuses gives None."""
    arguments = {**options, **split}
    if download:
        if "download" not in inspect.signature(cls).parameters:
            raise ConfigError(f"torchvision's {name} cannot download its files (it has no download "
                              f"argument); put them under {root} as its documentation says and set "
                              "dataset.download=false.")
        arguments["download"] = True
    try:
        return cls(str(root), **arguments)
    except ValueError as error:
        if "split" in split and str(error).startswith("Unknown value"):  # torchvision's verify_str_arg
            return None
        raise ConfigError(f"torchvision's {name} refused {arguments} ({error}); see its documentation "
                          "and set its arguments in dataset.options.") from error
    except RuntimeError as error:
        if not download and "download=True" in str(error):
            raise ConfigError(f"torchvision's {name} found no data under {root} (it looks there for its "
                              "own layout of the files); set dataset.root to the folder holding them, "
                              "or pass dataset.download=true to download them there.") from None
        raise ConfigError(f"torchvision's {name} could not read {root} ({error}); set dataset.root "
                          "to the folder holding its files, or download them again.") from error
    except TypeError as error:
        raise ConfigError(f"torchvision's {name} could not be built with {arguments} ({error}); give "
                          "its other arguments in dataset.options.") from error
    except PermissionError:
        raise  # the files are there, their permissions are not: topk.build.build names the path
    except OSError as error:  # a file of its layout is missing or unreadable
        raise ConfigError(f"torchvision's {name} could not read {root} ({type(error).__name__}: {error}); "
                          "set dataset.root to the folder holding all its files, or pass "
                          "dataset.download=true to download them there.") from error


def official_splits(cls, name: str, root: Path, download: bool, options: Mapping) -> dict[str, Any]:
    """The torchvision data set of each official split (``train`` always; ``val`` and ``test``
    where the class has them, else None), built once each."""
    convention = split_convention(cls)
    found = {"train": None, "val": None, "test": None}
    if convention == "train":
        found["train"] = construct(cls, name, root, download, options, train=True)
        found["test"] = construct(cls, name, root, False, options, train=False)
    elif convention == "split":
        for role, words in SPLIT_WORDS.items():
            for word in words:
                found[role] = construct(cls, name, root, download and role == "train", options, split=word)
                if found[role] is not None:
                    break
        if found["train"] is None:
            raise ConfigError(f"torchvision's {name} has no training split named "
                              f"{', '.join(SPLIT_WORDS['train'])}, so dataset=torchvision cannot read it.")
    else:
        found["train"] = construct(cls, name, root, download, options)
    return found


def dataset_labels(dataset, name: str) -> torch.Tensor:
    """Every item's class index, int64: from the attribute the class keeps them in
    (:data:`LABEL_ATTRIBUTES`, or ``_samples`` of ``(image, label)`` pairs), else read item by item."""
    size = len(dataset)
    candidates = [getattr(dataset, attribute, None) for attribute in LABEL_ATTRIBUTES]
    samples = getattr(dataset, "_samples", None)
    if isinstance(samples, Sequence) and all(isinstance(s, tuple) and len(s) == 2 for s in samples[:1]):
        candidates.append([label for _, label in samples])
    for values in candidates:
        try:
            labels = torch.as_tensor(values if not isinstance(values, torch.Tensor) else values.clone())
        except (TypeError, ValueError, RuntimeError):
            continue
        if labels.shape == (size,) and not labels.is_floating_point() and labels.dtype != torch.bool:
            return labels.to(torch.int64)
    labels = [dataset[index][1] for index in range(size)]
    if not all(isinstance(label, int) or (isinstance(label, torch.Tensor) and label.numel() == 1) for label in labels):
        raise ConfigError(f"torchvision's {name} gives targets that are not one class index each (e.g. "
                          f"{labels[0]!r}); dataset=torchvision takes classification data sets, so "
                          "choose its class target in dataset.options (e.g. target_type) or another data set.")
    return torch.tensor([int(label) for label in labels], dtype=torch.int64)


def as_split(dataset, name: str, role: str) -> DatasetSplit:
    """One torchvision data set as a split of all its items."""
    return DatasetSplit([f"{name} {role} #{index}" for index in range(len(dataset))],
                        dataset_labels(dataset, name), dataset, list(range(len(dataset))))


def class_names(found: dict[str, Any], splits: list[DatasetSplit | None], name: str) -> list[str]:
    """The training set's ``classes`` (one per class index), or the indices as text; one sentence
    where another split names its classes otherwise (its labels would mean other classes)."""
    classes = getattr(found["train"], "classes", None)
    labels = torch.cat([split.y for split in splits if split is not None])
    count = max(int(labels.max()) + 1, len(classes or []))
    if not classes or len(classes) != count:
        return [str(index) for index in range(count)]
    for role in ("val", "test"):
        other = getattr(found[role], "classes", None)
        if other is not None and len(found[role]) and list(other) != list(classes):
            raise ConfigError(f"torchvision's {name} names the classes of its {role} split otherwise than "
                              "those of its training split, so their labels cannot be compared; "
                              f"set dataset.{role}_fraction to hold a {role} split out of training.")
    return [str(name_) for name_ in classes]


def torchvision_dataset(
    seed: int,
    name: str,
    root: str | Path,
    download: bool = False,
    val_fraction: float | None = None,
    test_fraction: float | None = None,
    split_seed: int = 0,
    image_size: int = 224,
    resize_size: int = 256,
    train_crop: str = "resize_then_random",
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    check_images: bool = True,
    options: Mapping[str, Any] | None = None,
) -> ImageFileSplits:
    """The torchvision classification data set ``name``, its official splits or held-out ones.

    Parameters
    ----------
    seed : int
        The run seed (unused: the splits are torchvision's, or drawn with ``split_seed``).
    name : str
        The class of ``torchvision.datasets`` (:data:`CLASSIFICATION`).
    root : path
        The ``root`` torchvision reads (and downloads into).
    download : bool
        torchvision's ``download=``: fetch (and check) the files first where they are missing.
    val_fraction, test_fraction : float or None
        None: the official split (no validation where there is none; a test split is needed); a
        fraction: held out of each class's training images instead, drawn with ``split_seed``.
    image_size, resize_size, train_crop :
        The crops, as for the other image data sets (:class:`topk.data.images.ImageFileSplits`).
    mean, std : three floats or None
        Normalisation statistics (fractions of 255); None: computed from the training split.
    check_images : bool
        Open every image before training (through the data set) so that a broken one stops the run.
    options : mapping or None
        Further keyword arguments of the class (``split`` of ``EMNIST``, ``partition`` of ``DTD``).
    """
    cls = dataset_class(name)
    root = Path(root).expanduser()
    options = dict(options or {})
    taken = sorted(set(options) & set(OWN_ARGUMENTS) - ({"split"} if split_convention(cls) == "train" else set()))
    if taken:
        raise ConfigError(f"dataset.options may not set {', '.join(taken)}, which dataset=torchvision sets "
                          "itself (dataset.root, dataset.download, the splits); remove them.")
    check_statistics(mean, std)
    found = official_splits(cls, name, root, download, options)
    official = {role: None if found[role] is None else as_split(found[role], name, role) for role in found}
    classes = class_names(found, list(official.values()), name)
    splits = held_out(official["train"], official["val"], official["test"], val_fraction, test_fraction,
                      split_seed, f"torchvision's {name}")
    sources = {"train": f"torchvision's {name} under {root} (train)"}
    for role, fraction in (("val", val_fraction), ("test", test_fraction)):
        sources[role] = f"torchvision's {name} under {root} ({role if fraction is None else 'train, held out'})"
    settings = {"image_size": image_size, "resize_size": resize_size, "train_crop": train_crop}
    return own_image_splits(splits, classes, sources, settings, mean, std, split_seed, check_images)
