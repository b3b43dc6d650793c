"""Precomputed embeddings (``dataset=embeddings``): the features a frozen backbone gives each
image, and their labels, per split, trained with a linear head. The protocol Petersen et al. 2022
use on ImageNet (P22), and the cheap way to compare losses on a large label set.

Layout: ``<root>/train``, ``<root>/test`` and optionally ``<root>/val``, each either

- ``<split>.npz`` (NumPy, ``numpy.savez``) with the arrays ``features`` ``[N, D]`` (any float
  dtype) and ``labels`` ``[N]`` (integers ``0 … C-1``), or
- ``<split>.pt`` (``torch.save``) of a dict with the same two keys, tensors or arrays.

Without a ``val`` file, ``val_size > 0`` holds that many training embeddings out at random (with
the run's seed) as the validation split (P22 holds out 50,000 of ImageNet-1K's); ``0`` trains on
all of them and has no validation split. Features are kept in float32 in memory.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from topk.data.splits import DataSplits, TensorSplit, refuse_untrained_classes
from topk.errors import ConfigError

SPLITS = ("train", "val", "test")
FORMATS = (".npz", ".pt")
_LAYOUT = ("the files train, test (and optionally val) as .npz with arrays features [N, D] and "
           "labels [N], or as .pt dicts with the same keys (topk/data/embeddings.py)")


def split_file(root: Path, split: str) -> Path | None:
    """``<root>/<split>.npz`` or ``.pt``; ``None`` if neither exists; refuses both."""
    found = [path for path in (root / f"{split}{suffix}" for suffix in FORMATS) if path.is_file()]
    if len(found) > 1:
        raise ConfigError(f"{root} has both {found[0].name} and {found[1].name}; keep one of them.")
    return found[0] if found else None


def read_arrays(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``features`` and ``labels`` of one file, checked: 2-D float features, one integer label
    per row; any unreadable file is one sentence naming it."""
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as arrays:
                content = {name: arrays[name] for name in arrays.files}
        else:
            content = torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError:
        raise  # the file is fine, its permissions are not: topk.build.build says so
    except (OSError, ValueError, RuntimeError, EOFError, zipfile.BadZipFile) as error:
        raise ConfigError(f"{path} cannot be read ({error}); write it again as {_LAYOUT}.") from None
    if not isinstance(content, dict) or not {"features", "labels"} <= set(content):
        raise ConfigError(f"{path} has no 'features' and 'labels' entries; write it as {_LAYOUT}.")
    features, labels = (torch.as_tensor(content[key]) for key in ("features", "labels"))
    if features.dim() != 2 or not features.dtype.is_floating_point:
        raise ConfigError(f"{path}: features must be a float matrix [N, D], got {features.dtype} "
                          f"of shape {tuple(features.shape)}.")
    if labels.dim() != 1 or labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ConfigError(f"{path}: labels must be an integer vector [N], got {labels.dtype} of "
                          f"shape {tuple(labels.shape)}.")
    if len(labels) != len(features):
        raise ConfigError(f"{path}: {len(features)} feature rows but {len(labels)} labels.")
    if len(labels) == 0:
        raise ConfigError(f"{path} holds no embeddings; a split needs at least one.")
    return features.float(), labels.long()


def hold_out(train: TensorSplit, size: int, seed: int) -> tuple[TensorSplit, TensorSplit]:
    """``size`` training rows drawn at random (with ``seed``) as a validation split."""
    if not 0 < size < len(train):
        raise ConfigError(f"dataset.val_size={size} must be between 1 and the {len(train)} training "
                          "embeddings minus one (0: no validation split).")
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))
    val, kept = order[:size].sort().values, order[size:].sort().values
    return TensorSplit(train.x[kept], train.y[kept]), TensorSplit(train.x[val], train.y[val])


def embeddings(seed: int, root: str = "data/embeddings", val_size: int = 0,
               num_classes: int | None = None) -> DataSplits:
    """The embedding splits under ``root`` (see the module docstring); ``num_classes`` defaults
    to the largest label plus one."""
    root = Path(root)
    files = {split: split_file(root, split) for split in SPLITS} if root.is_dir() else {}
    missing = [split for split in ("train", "test") if files.get(split) is None]
    if missing:
        raise ConfigError(f"no {' or '.join(missing)} embeddings in {root}; set dataset.root to a "
                          f"folder with {_LAYOUT}.")
    splits = {split: TensorSplit(*read_arrays(path)) for split, path in files.items() if path}
    widths = {split: part.x.shape[1] for split, part in splits.items()}
    if len(set(widths.values())) > 1:
        raise ConfigError(f"the splits' embeddings differ in width ({widths}); they must come from "
                          "one backbone.")
    if "val" in splits and val_size:
        raise ConfigError(f"{root} has a val file and dataset.val_size={val_size} asks to hold out "
                          "another; set dataset.val_size=0 or remove the file.")
    if val_size:
        splits["train"], splits["val"] = hold_out(splits["train"], val_size, seed)
    labels = torch.cat([part.y for part in splits.values()])
    classes = int(labels.max()) + 1 if num_classes is None else num_classes
    if int(labels.min()) < 0 or int(labels.max()) >= classes:
        raise ConfigError(f"labels must lie in 0 … {classes - 1}; these embeddings have labels from "
                          f"{int(labels.min())} to {int(labels.max())} (set dataset.num_classes).")
    trained_from = f"{files['train']}" + (" (less the held-out validation rows)" if val_size else "")
    refuse_untrained_classes(splits["train"].y, classes, trained_from)
    sources = {split: str(path) for split, path in files.items() if path}
    if val_size:
        sources["val"] = f"{files['train']} (held out)"
    return DataSplits(splits["train"], splits.get("val"), splits["test"], classes, sources=sources)
