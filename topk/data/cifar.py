"""CIFAR-100 from the official python-pickle release, with the papers' label-noise protocol.

Files: ``<root>/cifar-100-python/{train,test,meta}``, pickled dicts with bytes keys: ``b"data"``
[N, 3072] uint8 (row-major, the 1024 red values, then green, then blue), ``b"fine_labels"``,
``b"coarse_labels"``; ``meta`` holds ``b"fine_label_names"`` and ``b"coarse_label_names"``.

Protocol (B18 §5.1, G22 §4.4; docs/design.md §6): the 50,000 training images give 45,000 for
training and a held-out validation set of ``val_size`` (5,000) images, balanced per class, chosen
by a generator seeded with ``split_seed`` (not the run seed) so every run sees the same validation
set; the 10,000 test images are the test set.

Label noise ``p`` (B18 / G22): on the training part only, with probability ``p`` a label is
replaced by one drawn uniformly from the fine labels of its true coarse class (taken from the
files' ``coarse_labels``; it may be the label itself, so about ``p * 4/5`` labels change). The
published codes instead draw ``label - label % 5 + u``, which assumes the five fine labels of a
superclass are consecutive; they are not (fine labels are alphabetical), so that noise leaves the
superclass. ``noise_groups="published_code"`` reproduces it for comparison. The random draws are
made for all 50,000 training images in file order from a generator seeded with the run seed, so a
sample's noisy label depends only on ``(seed, p)`` and the noisy sets are nested in ``p``.

A missing folder or file is a :class:`~topk.errors.ConfigError` (``dataset.root`` is wrong); a
file that is there but broken (random or truncated bytes, other entries, arrays of the wrong
shape, labels out of range) is a :class:`~topk.errors.DataError` naming it and saying to fetch
the release again.

Images stay uint8 in memory; normalisation (``CIFAR100_MEAN`` / ``CIFAR100_STD``) and
augmentation happen later, on the device.
"""

from __future__ import annotations

import math
import numbers
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from topk.data.splits import DataSplits, TensorSplit, balanced_subset
from topk.errors import ConfigError, DataError

FOLDER = "cifar-100-python"
FILES = ("train", "test", "meta")
IMAGE_SHAPE = (3, 32, 32)
NUM_CLASSES = 100
NUM_SUPERCLASSES = 20

CIFAR100_MEAN = (125.3 / 255.0, 123.0 / 255.0, 113.9 / 255.0)
CIFAR100_STD = (63.0 / 255.0, 62.1 / 255.0, 66.7 / 255.0)
# The CIFAR-10 statistics that Petersen et al. 2022's CIFAR-100 code normalises with (its std is
# the widespread 0.2023/0.1994/0.2010, not CIFAR-10's per-pixel std).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)
NORMALISATIONS = {"cifar100": (CIFAR100_MEAN, CIFAR100_STD), "cifar10": (CIFAR10_MEAN, CIFAR10_STD)}

NOISE_GROUPS = ("coarse", "published_code")
PUBLISHED_GROUP_SIZE = 5

_WHERE = (
    "set dataset.root to the folder that contains cifar-100-python/, "
    "or dataset.download=true on a machine with internet"
)


@dataclass
class CifarSplits(DataSplits):
    """``DataSplits`` plus what a run record needs about the CIFAR training labels.

    ``train_labels_full``: int64 array of length 50,000 in the order of the original training
    file, the label actually trained on (after noise), ``-1`` for images held out for validation.
    ``noise_rate``: the realised fraction of training labels that the noise changed.
    ``val_indices``: positions (in the training file) of the validation images, ascending.
    """

    train_labels_full: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    noise_rate: float = 0.0
    val_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def record_run_facts(self, run_dir: Path, record: dict) -> None:
        """``train_labels.npy`` (the labels trained on, -1 where held out) and ``noise_rate``."""
        np.save(Path(run_dir) / "train_labels.npy", np.asarray(self.train_labels_full, dtype=np.int64))
        record["noise_rate"] = float(self.noise_rate)


@dataclass
class CifarPart:
    """One official file: uint8 images [N, 3, 32, 32], fine and coarse int64 labels [N]."""

    x: torch.Tensor
    fine: torch.Tensor
    coarse: torch.Tensor


def _redownload(path: Path) -> str:
    """What to do about a broken file of the release: fetch the release again."""
    folder = Path(path).parent
    return (f"download the official cifar-100-python archive again and unpack it into "
            f"{folder.parent}, or delete {folder} and set dataset.download=true")


def _describe(error: Exception) -> str:
    """``UnpicklingError: invalid load key, 'x'.``, or the bare type where it says nothing."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class _ReleaseUnpickler(pickle.Unpickler):
    """Unpickles what the CIFAR-100 python release holds (dicts, lists, bytes, numpy arrays) and
    nothing else: a file that names any other callable is refused before it is called, so a
    crafted ``train`` file (a run directory's ``dataset.root`` may point anywhere) runs no code
    (docs/trust.md)."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which the release never holds and is not called")
        return super().find_class(module, name)


def _unpickle(path: Path) -> dict:
    """The dict pickled in one file of the release (:class:`_ReleaseUnpickler`).

    Raises
    ------
    DataError
        The file is not a pickle (random bytes), is cut short, or holds something else than a
        dict; the message names the file and says to fetch the release again.
    PermissionError
        The file cannot be opened by this user (``topk.build.build`` names the path and the fix).
    """
    try:
        with open(path, "rb") as handle:
            entry = _ReleaseUnpickler(handle, encoding="bytes").load()
    except PermissionError:
        raise  # the file is fine, its permissions are not: topk.build.build says so
    except Exception as error:  # broken bytes raise many types: EOFError, UnpicklingError, ...
        raise DataError(f"{path} is not a readable CIFAR-100 python pickle ({_describe(error)}); "
                        f"{_redownload(path)}.") from error
    if not isinstance(entry, dict):
        raise DataError(f"{path} holds a pickled {type(entry).__name__}, not the dict of the "
                        f"CIFAR-100 python release; {_redownload(path)}.")
    return entry


def _get(entry: dict, key: str, path: Path):
    for candidate in (key.encode(), key):
        if candidate in entry:
            return entry[candidate]
    raise DataError(f"{path} has no '{key}' entry, so it is not a file of the official CIFAR-100 "
                    f"python release; {_redownload(path)}.")


def _array(entry: dict, key: str, path: Path, dtype) -> np.ndarray:
    """``entry[key]`` as a numpy array of ``dtype``; an entry that is not one raises DataError."""
    try:
        return np.asarray(_get(entry, key, path), dtype=dtype)
    except (TypeError, ValueError, OverflowError) as error:
        kind = np.dtype(dtype).name
        raise DataError(f"{path} has a '{key}' entry that is not an array of {kind} "
                        f"({_describe(error)}); {_redownload(path)}.") from error


def read_cifar100_part(path: str | Path) -> CifarPart:
    """Read the official ``train`` or ``test`` pickle into uint8 images and fine/coarse labels.

    Raises
    ------
    DataError
        The file cannot be unpickled, lacks an entry, or holds arrays of the wrong shape.
    """
    path = Path(path)
    entry = _unpickle(path)
    data = _array(entry, "data", path, np.uint8)
    fine = _array(entry, "fine_labels", path, np.int64)
    coarse = _array(entry, "coarse_labels", path, np.int64)
    images = data.ndim == 2 and data.shape[1] == math.prod(IMAGE_SHAPE)
    if not images or fine.shape != (len(data),) or coarse.shape != (len(data),):
        raise DataError(
            f"{path} holds data of shape {data.shape}, fine labels of shape {fine.shape} and "
            f"coarse labels of shape {coarse.shape} instead of [N, 3072] images and N labels of "
            f"each kind; {_redownload(path)}."
        )
    x = torch.from_numpy(data.reshape(-1, *IMAGE_SHAPE).copy())
    return CifarPart(x=x, fine=torch.from_numpy(fine), coarse=torch.from_numpy(coarse))


def read_cifar100_meta(path: str | Path) -> tuple[list[str], list[str]]:
    """Fine and coarse label names from the official ``meta`` pickle.

    Raises
    ------
    DataError
        The file cannot be unpickled, or lacks a list of names.
    """
    path = Path(path)
    entry = _unpickle(path)
    names = []
    for key in ("fine_label_names", "coarse_label_names"):
        values = _get(entry, key, path)
        if not isinstance(values, (list, tuple)):
            raise DataError(f"{path} has a '{key}' entry of type {type(values).__name__} instead "
                            f"of a list of names; {_redownload(path)}.")
        names.append([v.decode() if isinstance(v, bytes) else str(v) for v in values])
    return names[0], names[1]


def _locate(root: str | Path, download: bool) -> Path:
    root = Path(root).expanduser()
    folder = root / FOLDER
    if download:
        from torchvision.datasets import CIFAR100

        try:
            for train in (True, False):
                CIFAR100(str(root), train=train, download=True)  # fetches and checks md5
        except Exception as error:  # no network, bad checksum, unwritable root
            raise ConfigError(
                f"Could not download CIFAR-100 into {root} ({error}); {_WHERE}."
            ) from error
    if not folder.is_dir():
        raise ConfigError(f"CIFAR-100 folder {folder} does not exist; {_WHERE}.")
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise ConfigError(
            f"CIFAR-100 folder {folder} lacks the file(s) {', '.join(missing)}; {_WHERE}."
        )
    return folder


def validation_indices(labels: torch.Tensor, val_size: int, split_seed: int) -> torch.Tensor:
    """Ascending positions of ``val_size`` held-out images, balanced per class when possible.

    When ``val_size`` is a multiple of the number of classes present and every class has enough
    images, each class gives ``val_size / classes`` images; otherwise a uniform random subset.
    Only ``split_seed`` (not the run seed) drives the choice.
    """
    if val_size == 0:
        return torch.zeros(0, dtype=torch.int64)
    generator = torch.Generator().manual_seed(split_seed)
    _, counts = torch.unique(labels, return_counts=True)
    per_class, remainder = divmod(val_size, len(counts))
    if remainder == 0 and int(counts.min()) > per_class:
        return balanced_subset(labels, per_class, generator, "dataset.val_size")
    chosen = torch.randperm(len(labels), generator=generator)[:val_size]
    return torch.sort(chosen).values


def noisy_labels(
    fine: torch.Tensor,
    coarse: torch.Tensor,
    p: float,
    seed: int,
    noise_groups: str = "coarse",
) -> torch.Tensor:
    """Replace each label with probability ``p`` by a uniform draw from its group.

    ``noise_groups="coarse"``: the group is the set of fine labels sharing the label's true
    coarse class (from ``coarse``). ``"published_code"``: ``label - label % 5 + u``. The draws are
    made for every position from a generator seeded with ``seed``, so the result at a position
    depends only on ``(seed, p)`` and labels noisy at ``p`` stay noisy at any larger ``p``.
    """
    generator = torch.Generator().manual_seed(seed)
    flip = torch.rand(len(fine), generator=generator, dtype=torch.float64) < p
    pick = torch.rand(len(fine), generator=generator, dtype=torch.float64)
    if noise_groups == "published_code":
        u = (pick * PUBLISHED_GROUP_SIZE).long()
        replacement = fine - fine % PUBLISHED_GROUP_SIZE + u
    else:
        num_coarse = int(coarse.max()) + 1 if len(coarse) else 0
        groups = [torch.unique(fine[coarse == c]) for c in range(num_coarse)]
        sizes = torch.tensor([len(g) for g in groups], dtype=torch.int64)
        width = int(sizes.max()) if len(groups) else 0
        table = torch.full((num_coarse, max(width, 1)), -1, dtype=torch.int64)
        for c, members in enumerate(groups):
            table[c, : len(members)] = members
        size = sizes[coarse]
        u = torch.minimum((pick * size).long(), size - 1)
        replacement = table[coarse, u]
    return torch.where(flip, replacement, fine)


def _check_label_range(labels: torch.Tensor, count: int, kind: str, path: Path) -> None:
    """Raise DataError unless every ``kind`` label of ``path`` lies in ``0..count - 1``."""
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= count):
        raise DataError(f"{path} has {kind} labels outside 0..{count - 1}, so it is not a file of "
                        f"the official CIFAR-100 python release; {_redownload(path)}.")


def _check_coarse_consistent(fine: torch.Tensor, coarse: torch.Tensor, path: Path) -> None:
    """Raise DataError if a fine label of ``path`` comes with two coarse labels."""
    mapping = torch.full((int(fine.max()) + 1,), -1, dtype=torch.int64)
    mapping[fine] = coarse
    if not torch.equal(mapping[fine], coarse):
        raise DataError(
            f"{path} gives one fine label more than one coarse label, so it is not a file of the "
            f"official CIFAR-100 python release; {_redownload(path)}."
        )


def check_noise_settings(noise, noise_groups: str) -> None:
    """One sentence for a label-noise rate outside [0, 1] or an unknown noise grouping."""
    if not (isinstance(noise, numbers.Real) and 0.0 <= float(noise) <= 1.0):
        raise ConfigError(
            f"dataset.noise is a probability and must lie in [0, 1], got {noise}; "
            "set it to e.g. 0.2."
        )
    if noise_groups not in NOISE_GROUPS:
        raise ConfigError(
            f"dataset.noise_groups must be one of {', '.join(NOISE_GROUPS)}, got {noise_groups!r}."
        )


def read_cifar100_release(folder: Path):
    """The ``train`` and ``test`` parts of the release in ``folder`` and its class count, each
    file checked (labels in range, coarse labels consistent, a non-empty training part)."""
    train_part = read_cifar100_part(folder / "train")
    test_part = read_cifar100_part(folder / "test")
    fine_names, coarse_names = read_cifar100_meta(folder / "meta")
    num_classes = len(fine_names) or NUM_CLASSES
    num_coarse = len(coarse_names) or NUM_SUPERCLASSES
    for part, name in ((train_part, "train"), (test_part, "test")):
        _check_label_range(part.fine, num_classes, "fine", folder / name)
        _check_label_range(part.coarse, num_coarse, "coarse", folder / name)
    if len(train_part.fine) == 0:
        raise DataError(f"{folder / 'train'} holds no image; {_redownload(folder / 'train')}.")
    _check_coarse_consistent(train_part.fine, train_part.coarse, folder / "train")
    return train_part, test_part, num_classes


def normalisation_statistics(normalisation: str) -> tuple:
    """The (mean, std) of ``dataset.normalisation``, or one sentence naming the valid ones."""
    if normalisation not in NORMALISATIONS:
        raise ConfigError(f"dataset.normalisation={normalisation!r} is unknown; choose one of "
                          f"{', '.join(NORMALISATIONS)}.")
    return NORMALISATIONS[normalisation]


def check_val_size(val_size, n_full: int) -> None:
    """``dataset.val_size`` must hold out between none and all but one of ``n_full`` images."""
    if isinstance(val_size, bool) or not isinstance(val_size, numbers.Integral) or not 0 <= val_size < n_full:
        raise ConfigError(
            f"dataset.val_size must be a whole number from 0 to {n_full - 1} (training images "
            f"to hold out), got {val_size}."
        )


def split_training_part(part: CifarPart, val_idx: torch.Tensor, noise: float, seed: int,
                        noise_groups: str) -> tuple[TensorSplit, TensorSplit | None, float, torch.Tensor]:
    """The official training part split into training and validation (the images at
    ``val_idx``, ``None`` if there are none): the training labels redrawn with probability
    ``noise`` within their group (:func:`noisy_labels`), the share of them that changed, and the
    labels of the whole part for the run record, the held-out images marked ``-1``."""
    is_train = torch.ones(len(part.fine), dtype=torch.bool)
    is_train[val_idx] = False
    labels_full = part.fine
    if noise > 0:
        labels_full = noisy_labels(part.fine, part.coarse, float(noise), seed, noise_groups)
    train_y = labels_full[is_train]
    changed = int((train_y != part.fine[is_train]).sum())
    noise_rate = changed / len(train_y) if len(train_y) else 0.0
    record_labels = labels_full.clone()
    record_labels[~is_train] = -1
    val = TensorSplit(part.x[val_idx], part.fine[val_idx].clone()) if len(val_idx) else None
    return TensorSplit(part.x[is_train], train_y.clone()), val, noise_rate, record_labels


def cifar100(
    seed: int,
    root: str | Path,
    download: bool = False,
    val_size: int = 5000,
    noise: float = 0.0,
    noise_groups: str = "coarse",
    split_seed: int = 0,
    normalisation: str = "cifar100",
) -> CifarSplits:
    """CIFAR-100: train (minus ``val_size`` held out), validation, test; optional label noise.

    Parameters
    ----------
    seed : int
        The run seed; drives only the label noise.
    root : path
        Folder containing ``cifar-100-python/``.
    download : bool
        Fetch (and md5-check) the release with torchvision first.
    val_size : int
        Training images held out for validation (0: none), balanced per class when divisible.
    noise : float
        Probability ``p`` that a training label is redrawn within its group.
    noise_groups : str
        ``"coarse"`` (true superclasses) or ``"published_code"`` (``label - label % 5 + u``).
    split_seed : int
        Seed of the train/validation split, fixed across runs.
    normalisation : str
        Mean and std the images are normalised with: ``cifar100`` (CIFAR-100's own) or ``cifar10``
        (the CIFAR-10 statistics of P22's code).

    Raises
    ------
    ConfigError
        A setting is invalid, the folder or one of its files is missing, or the download failed.
    DataError
        A file of the release is broken (not a pickle, cut short) or holds something else than
        the release's entries; the message names the file and says to fetch the release again.
    """
    check_noise_settings(noise, noise_groups)
    mean, std = normalisation_statistics(normalisation)
    train_part, test_part, num_classes = read_cifar100_release(_locate(root, download))
    check_val_size(val_size, len(train_part.fine))
    val_idx = validation_indices(train_part.fine, int(val_size), split_seed)
    train, val, noise_rate, record_labels = split_training_part(
        train_part, val_idx, noise, seed, noise_groups)
    return CifarSplits(
        train=train,
        val=val,
        test=TensorSplit(test_part.x, test_part.fine.clone()),
        num_classes=num_classes,
        mean=mean,
        std=std,
        train_labels_full=record_labels.numpy().astype(np.int64),
        noise_rate=noise_rate,
        val_indices=val_idx.numpy().astype(np.int64),
    )
