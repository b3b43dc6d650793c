"""Tiny image data sets in their real on-disk formats, and a model whose predictions tests control.

Every image is a uniform colour whose red level encodes the class the model should predict, so a
test knows, without running the model, each image's ranking and hence every metric the record
must hold. Files are real JPEGs written with PIL.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from topk.data.images import IMAGENET_MEAN, IMAGENET_STD


def red_level(predicted: int, num_classes: int) -> int:
    return round(255 * (predicted + 0.5) / num_classes)


def write_jpeg(path: Path, predicted: int, num_classes: int, size: int = 12) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    colour = (red_level(predicted, num_classes), 90, 160)
    Image.new("RGB", (size + 4, size), colour).save(path, format="JPEG", quality=95)


class ColourOracle(nn.Module):
    """Reads the predicted class ``p`` from the mean red level of the (normalised) image and
    scores class ``j`` as ``-|p - j| - 0.01 j`` (no ties). ``input_shapes`` records what it
    was called on; ``ColourOracle.latest`` is the last one built (for the test that built it)."""

    latest: ColourOracle | None = None

    def __init__(self, num_classes: int, input_shape, **unused):
        super().__init__()
        self.num_classes = num_classes
        self.zero = nn.Parameter(torch.zeros(()))  # something for the optimiser; always 0 (lr 0)
        self.input_shapes: list[tuple[int, ...]] = []
        ColourOracle.latest = self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.input_shapes.append(tuple(x.shape))
        red = x[:, 0].mean(dim=(1, 2)) * IMAGENET_STD[0] + IMAGENET_MEAN[0]
        predicted = torch.round(red * self.num_classes - 0.5).clamp(0, self.num_classes - 1)
        classes = torch.arange(self.num_classes, dtype=x.dtype, device=x.device)
        return -(predicted[:, None] - classes).abs() - 0.01 * classes + self.zero


def oracle_ranks(predicted: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Zero-based rank of each label under :class:`ColourOracle`, computed by brute force."""
    ranks = []
    for p, y in zip(predicted, labels):
        scores = [-abs(p - j) - 0.01 * j for j in range(num_classes)]
        ranks.append(sum(1 for j in range(num_classes) if j != y and scores[j] >= scores[y]))
    return np.array(ranks)


def expected_metrics(predicted, labels, num_classes, ks, groups=None) -> dict[str, float]:
    """top{k}, macro_top{k} and {group}_top{k} in percent, by explicit loops."""
    predicted, labels = np.asarray(predicted), np.asarray(labels)
    ranks = oracle_ranks(predicted, labels, num_classes)
    metrics = {}
    for k in ks:
        hit = ranks < k
        metrics[f"top{k}"] = 100.0 * hit.mean()
        per_class = [hit[labels == c].mean() for c in range(num_classes) if (labels == c).any()]
        metrics[f"macro_top{k}"] = 100.0 * float(np.mean(per_class))
        for name, classes in (groups or {}).items():
            members = np.isin(labels, classes)
            if members.any():
                metrics[f"{name}_top{k}"] = 100.0 * hit[members].mean()
    return metrics


def write_folder_split(folder: Path, predictions: dict[str, list[int]], names: list[str]) -> None:
    """``folder/<class name>/<i>.jpg`` for each class; ``predictions[name]`` lists the class each
    of that folder's images should be predicted as."""
    for name, predicted in predictions.items():
        for i, p in enumerate(predicted):
            write_jpeg(folder / name / f"{name}_{i:04d}.jpg", p, len(names))


def write_imagenet(root: Path, num_classes: int = 4, train_per_class: int = 12, val_per_class: int = 3):
    """An ILSVRC-2012 ImageFolder layout: ``train/<wnid>/`` and ``val/<wnid>/`` of JPEGs.
    Test (official val) images of class c: the first predicted as c + 1 (mod n), the rest as c."""
    wnids = [f"n{index:08d}" for index in range(num_classes)]
    write_folder_split(root / "train", {w: [c] * train_per_class for c, w in enumerate(wnids)}, wnids)
    test = {w: [(c + 1) % num_classes] + [c] * (val_per_class - 1) for c, w in enumerate(wnids)}
    write_folder_split(root / "val", test, wnids)
    return root, wnids, test


def write_plantnet(root: Path, counts=(9, 5, 3, 2, 2)):
    """``images/{train,val,test}/<species_id>/`` with a long tail, plus the species-name JSON.
    Test images: class 0's last image predicted as class 3, the rest correct."""
    species = [str(1355868 + 13 * index) for index in range(len(counts))]
    n = len(species)
    images = root / "images"
    write_folder_split(images / "train", {s: [c] * counts[c] for c, s in enumerate(species)}, species)
    write_folder_split(images / "val", {s: [c, c] for c, s in enumerate(species)}, species)
    test = {s: [c] * 3 for c, s in enumerate(species)}
    test[species[0]] = [0, 0, 3]
    write_folder_split(images / "test", test, species)
    (root / "plantnet300K_species_id_2_name.json").write_text(
        json.dumps({s: f"Species number {i}" for i, s in enumerate(species)})
    )
    return root, species, test, n


def write_imagenet_lt(root: Path, train_counts=(102, 30, 20, 19, 3)):
    """ImageNet-LT lists over an ImageNet-like root: class c has ``train_counts[c]`` training
    images (many, medium, medium, few, few shot). Test images: two per class, the second of
    classes 1 and 3 predicted as class 0, the rest correct."""
    n = len(train_counts)
    lines = {"train": [], "val": [], "test": []}
    for c, count in enumerate(train_counts):
        for i in range(count):
            relative = f"train/n{c:08d}/n{c:08d}_{i}.JPEG"
            write_jpeg(root / relative, c, n)
            lines["train"].append(f"{relative} {c}")
    test_predictions = {}
    for c in range(n):
        test_predictions[c] = [c, 0 if c in (1, 3) else c]
        for i, p in enumerate(test_predictions[c]):
            relative = f"val/n{c:08d}/ILSVRC2012_val_{c:04d}{i}.JPEG"
            write_jpeg(root / relative, p, n)
            lines["test"].append(f"{relative} {c}")
            lines["val"].append(f"{relative} {c}")
    for name, entries in lines.items():
        (root / f"ImageNet_LT_{name}.txt").write_text("\n".join(entries) + "\n")
    return root, test_predictions, n
