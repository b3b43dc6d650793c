"""Tiny data sets written in the real on-disk formats, for smoke runs (``make smoke``) and tests.

Nothing here is downloaded: CIFAR-100 is written as the official python pickles (with fine and
coarse labels), ImageNet and Pl@ntNet-300K as folder trees of real JPEG files, ImageNet-LT as its
text lists over the ImageNet tree, torchvision's FashionMNIST as its IDX files and DTD as its
image tree and split lists. The pixels are random, so the numbers trained on them mean
nothing; the point is that every reader, split and protocol runs exactly as on the real data.

    python -m topk.data.fixtures outputs/smoke_data     # what `make smoke` trains on
"""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

CIFAR_CLASSES, CIFAR_SUPERCLASSES = 100, 20


def official_coarse_mapping() -> list[int]:
    """The official CIFAR-100 fine-to-coarse label mapping (``coarse_labels`` of each fine label
    in the release's python files), shipped as ``topk/data/cifar100_fine_to_coarse.json``."""
    text = (Path(__file__).with_name("cifar100_fine_to_coarse.json")).read_text()
    return json.loads(text)["fine_to_coarse"]


def write_cifar100(
    root: Path, train_per_class: int, test_per_class: int, seed: int = 0,
    fine_to_coarse: Sequence[int] | None = None,
) -> Path:
    """``root/cifar-100-python/{train,test,meta}`` as the official (cPickle) release writes them."""
    fine_to_coarse = list(fine_to_coarse or official_coarse_mapping())
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    for part, per_class in (("train", train_per_class), ("test", test_per_class)):
        fine = rng.permutation(np.repeat(np.arange(CIFAR_CLASSES), per_class))
        entry = {
            b"filenames": [f"{part}_{i}.png".encode() for i in range(len(fine))],
            b"batch_label": f"{part} batch".encode(),
            b"fine_labels": fine.tolist(),
            b"coarse_labels": [fine_to_coarse[label] for label in fine],
            b"data": rng.integers(0, 256, (len(fine), 3072), dtype=np.uint8),
        }
        with open(folder / part, "wb") as handle:
            pickle.dump(entry, handle, protocol=2)
    meta = {
        b"fine_label_names": [f"fine_{i}".encode() for i in range(CIFAR_CLASSES)],
        b"coarse_label_names": [f"coarse_{i}".encode() for i in range(CIFAR_SUPERCLASSES)],
    }
    with open(folder / "meta", "wb") as handle:
        pickle.dump(meta, handle, protocol=2)
    return Path(root)


def write_jpeg(path: Path, rng: np.random.Generator, size: int = 16) -> None:
    """A small JPEG of random colour blocks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    blocks = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    pixels = np.kron(blocks, np.ones((size // 4, size // 4, 1), dtype=np.uint8))
    Image.fromarray(pixels).save(path, format="JPEG", quality=90)


def write_image_tree(folder: Path, counts: dict[str, int], rng: np.random.Generator, suffix=".jpg"):
    """``folder/<class>/<class>_<i><suffix>`` with ``counts[class]`` images each."""
    for name, count in counts.items():
        for index in range(count):
            write_jpeg(folder / name / f"{name}_{index:04d}{suffix}", rng)


def write_imagenet(root: Path, train_counts: Sequence[int], val_per_class: int, seed: int = 0) -> list[str]:
    """An ILSVRC-2012 tree, ``train/<wnid>/*.JPEG`` and ``val/<wnid>/*.JPEG``; returns the wnids."""
    rng = np.random.default_rng(seed)
    wnids = [f"n{index:08d}" for index in range(len(train_counts))]
    write_image_tree(Path(root) / "train", dict(zip(wnids, train_counts)), rng, ".JPEG")
    write_image_tree(Path(root) / "val", {w: val_per_class for w in wnids}, rng, ".JPEG")
    return wnids


def write_imagenet_lt_lists(root: Path, wnids: Sequence[str], train_counts: Sequence[int]) -> None:
    """``ImageNet_LT_{train,val,test}.txt`` over an ImageNet tree written by :func:`write_imagenet`:
    ``train_counts[c]`` training images of class c; every ``val/`` image in the val and test lists."""
    root = Path(root)
    lines = {"train": [], "val": [], "test": []}
    for label, (wnid, count) in enumerate(zip(wnids, train_counts)):
        train_files = sorted((root / "train" / wnid).iterdir())[:count]
        lines["train"] += [f"train/{wnid}/{path.name} {label}" for path in train_files]
        for path in sorted((root / "val" / wnid).iterdir()):
            lines["val"].append(f"val/{wnid}/{path.name} {label}")
            lines["test"].append(f"val/{wnid}/{path.name} {label}")
    for name, entries in lines.items():
        (root / f"ImageNet_LT_{name}.txt").write_text("\n".join(entries) + "\n")


def write_plantnet(root: Path, train_counts: Sequence[int], val_per_class: int, test_per_class: int,
                   seed: int = 0) -> list[str]:
    """``images/{train,val,test}/<species_id>/*.jpg`` and the species-name JSON."""
    rng = np.random.default_rng(seed)
    species = [str(1355868 + 7 * index) for index in range(len(train_counts))]
    images = Path(root) / "images"
    write_image_tree(images / "train", dict(zip(species, train_counts)), rng)
    write_image_tree(images / "val", {s: val_per_class for s in species}, rng)
    write_image_tree(images / "test", {s: test_per_class for s in species}, rng)
    names = {s: f"Species {index}" for index, s in enumerate(species)}
    (Path(root) / "plantnet300K_species_id_2_name.json").write_text(json.dumps(names))
    return species


def write_idx(path: Path, array: np.ndarray) -> None:
    """``array`` (uint8) as an IDX file, the format of the MNIST family's ``*-ubyte`` files:
    two zero bytes, the type code (0x08: unsigned byte), the number of dimensions, each
    dimension as a big-endian int32, then the values in row-major order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">i4").tobytes()
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def write_fashion_mnist(root: Path, train_per_class: int, test_per_class: int, seed: int = 0) -> Path:
    """``root/FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``, uncompressed, as
    torchvision's ``FashionMNIST`` reads them: 28x28 grey images of random pixels, 10 classes."""
    rng = np.random.default_rng(seed)
    raw = Path(root) / "FashionMNIST" / "raw"
    for part, per_class in (("train", train_per_class), ("t10k", test_per_class)):
        labels = rng.permutation(np.repeat(np.arange(10, dtype=np.uint8), per_class))
        write_idx(raw / f"{part}-images-idx3-ubyte", rng.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8))
        write_idx(raw / f"{part}-labels-idx1-ubyte", labels)
    return Path(root)


def write_dtd(root: Path, per_split: dict[str, int], classes: Sequence[str] = ("banded", "dotted", "striped"),
              partition: int = 1, seed: int = 0) -> Path:
    """``root/dtd/dtd/images/<class>/*.jpg`` and ``labels/<split><partition>.txt`` (lines
    ``<class>/<file>``), the Describable Textures layout that torchvision's ``DTD`` reads:
    ``per_split[split]`` images of every class in each of train, val and test."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "dtd" / "dtd"
    for split, count in per_split.items():
        lines = []
        for name in classes:
            for index in range(count):
                file = f"{name}_{split}_{index:04d}.jpg"
                write_jpeg(folder / "images" / name / file, rng)
                lines.append(f"{name}/{file}")
        (folder / "labels").mkdir(parents=True, exist_ok=True)
        (folder / "labels" / f"{split}{partition}.txt").write_text("\n".join(lines) + "\n")
    return Path(root)


def write_embeddings(root: Path, sizes: dict[str, int], width: int = 8, classes: int = 6,
                     seed: int = 0, suffix: str = ".npz") -> Path:
    """``root/<split>.npz`` (or ``.pt``) for each ``split: rows`` of ``sizes``, as
    :mod:`topk.data.embeddings` reads them: Gaussian features around one centre per class,
    labels cycling through the classes."""
    import torch

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, rows in sizes.items():
        labels = np.arange(rows) % classes
        features = rng.normal(size=(rows, width)) + 3 * np.eye(classes, width)[labels]
        if suffix == ".npz":
            np.savez(root / f"{split}.npz", features=features, labels=labels)
        else:
            torch.save({"features": torch.tensor(features), "labels": torch.tensor(labels)},
                       root / f"{split}.pt")
    return root


def write_smoke_data(root: Path) -> Path:
    """Every file-based data set, just large enough for the papers' protocols (B18's 5,000-image
    CIFAR validation set, 50 held-out ImageNet images per class, K up to 10, ImageNet-LT's
    many/medium/few-shot groups, more than P22's m = 16 classes for its top-m truncation), under ``root`` as ``data_root`` expects them."""
    root = Path(root)
    write_cifar100(root, train_per_class=52, test_per_class=2)
    train_counts = [110, 110] + [52] * 10
    wnids = write_imagenet(root / "imagenet", train_counts, val_per_class=2)
    write_imagenet_lt_lists(root / "imagenet", wnids, [105, 101, 60, 30, 20, 20, 19, 10, 5, 3, 2, 1])
    write_plantnet(root / "plantnet_300K", [30, 20, 12, 8, 6, 5, 4, 3, 3, 2, 2, 2] + [2] * 8, 1, 2)
    write_embeddings(root / "embeddings", {"train": 240, "test": 48}, width=32, classes=24)
    return root


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "outputs/smoke_data")
    print(f"wrote the smoke data sets under {write_smoke_data(target)}")
