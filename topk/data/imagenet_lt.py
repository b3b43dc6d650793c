"""ImageNet-LT (Liu et al. 2019), the long-tailed ImageNet subset of G22's preprint §4.5.2.

Files: ``ImageNet_LT_train.txt``, ``ImageNet_LT_val.txt`` and ``ImageNet_LT_test.txt`` (from the
OLTR release of Liu et al. 2019), each line ``<path relative to the ImageNet root> <label>``;
about 115.8k training, 20,000 validation and 50,000 test images of 1,000 classes. The images are
those of an ImageNet root (``train/`` and ``val/`` folders).

Besides the overall accuracies the record reports ``many_top{k}``, ``medium_top{k}`` and
``few_top{k}``: top-k accuracy over the evaluated images whose class has more than 100, 20 to
100, or fewer than 20 training images (Liu et al.'s split).
"""

from __future__ import annotations

from pathlib import Path

import torch

from topk.data.images import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageFileSplit,
    ImageFileSplits,
    check_image_files,
    where_expected,
)
from topk.data.splits import refuse_untrained_classes
from topk.errors import ConfigError

LIST_FILES = {name: f"ImageNet_LT_{name}.txt" for name in ("train", "val", "test")}
MANY_SHOT, FEW_SHOT = 100, 20  # many: > 100 training images; few: < 20; medium: the rest
_WHERE = where_expected(
    "the ImageNet images and the lists " + ", ".join(LIST_FILES.values()) + " (dataset.lists_root)",
    "the lists from Liu et al. 2019's OLTR repository, the images from https://image-net.org",
)


def read_list(path: Path, image_root: Path) -> ImageFileSplit:
    """One ImageNet-LT list: ``relative/path label`` per line."""
    paths, labels = [], []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ConfigError(
                f"{path} line {number} is {line!r}, not '<relative path> <label>'; {_WHERE}."
            )
        paths.append(str(image_root / parts[0]))
        labels.append(int(parts[1]))
    return ImageFileSplit(paths, torch.tensor(labels, dtype=torch.int64))


def shot_groups(class_counts: torch.Tensor) -> dict[str, list[int]]:
    """Many-, medium- and few-shot classes from training counts (> 100, 20–100, < 20)."""
    classes = torch.arange(len(class_counts))
    return {
        "many": classes[class_counts > MANY_SHOT].tolist(),
        "medium": classes[(class_counts >= FEW_SHOT) & (class_counts <= MANY_SHOT)].tolist(),
        "few": classes[class_counts < FEW_SHOT].tolist(),
    }


def refuse_untrained_evaluation(splits: dict, counts: torch.Tensor, lists_root: Path) -> None:
    """One sentence if the val or test list holds a class the training list lacks (``counts``:
    training images per class)."""
    for name in ("val", "test"):
        labels = splits[name].y
        lacking = sorted({int(c) for c in labels.tolist() if c < 0 or c >= len(counts) or counts[c] == 0})
        if lacking:
            shown = ", ".join(map(str, lacking[:5])) + (", ..." if len(lacking) > 5 else "")
            raise ConfigError(
                f"{lists_root / LIST_FILES[name]} has {len(lacking)} class(es) that the training "
                f"list lacks ({shown}); every evaluated class needs training images, so check the lists."
            )


def imagenet_lt(
    seed: int,
    root: str | Path,
    lists_root: str | Path | None = None,
    image_size: int = 224,
    resize_size: int = 256,
    train_crop: str = "resize_then_random",
    check_images: bool = True,
    decoder: str = "auto",
) -> ImageFileSplits:
    """ImageNet-LT's train / validation / test lists over an ImageNet root.

    Parameters
    ----------
    seed : int
        The run seed (unused: the lists fix the splits).
    root : path
        The ImageNet root the lists' paths are relative to.
    lists_root : path or None
        Folder holding the three ``ImageNet_LT_*.txt`` lists (None: ``root``).
    image_size, resize_size : int
        Crop side and the shorter side before the centre crop (224 and 256).
    train_crop : str
        The random training crop: ``resize_then_random`` (resize to ``resize_size``, then a random
        ``image_size`` crop; B18 §5.2) or ``random_resized`` (``RandomResizedCrop``).
    check_images : bool
        Open every image's header before training so that a broken file stops the run early.
    decoder : str
        ``auto`` (JPEGs by torchvision's ``decode_jpeg``, other files and what it refuses by PIL)
        or ``pil`` (every file by PIL): :mod:`topk.data.decoding`.
    """
    root = Path(root).expanduser()
    lists_root = Path(lists_root).expanduser() if lists_root else root
    if not root.is_dir():
        raise ConfigError(f"ImageNet-LT image root {root} does not exist; {_WHERE}.")
    missing = [name for name in LIST_FILES.values() if not (lists_root / name).is_file()]
    if missing:
        raise ConfigError(f"{lists_root} lacks the list(s) {', '.join(missing)}; {_WHERE}.")
    splits = {name: read_list(lists_root / file, root) for name, file in LIST_FILES.items()}
    train_labels = splits["train"].y
    if not len(train_labels) or int(train_labels.min()) < 0:
        raise ConfigError(f"{lists_root / LIST_FILES['train']} lists no image or a negative label; {_WHERE}.")
    num_classes = int(train_labels.max()) + 1
    refuse_untrained_classes(train_labels, num_classes, str(lists_root / LIST_FILES["train"]))
    counts = torch.bincount(train_labels, minlength=num_classes)
    refuse_untrained_evaluation(splits, counts, lists_root)
    if check_images:
        check_image_files(list(splits.values()))
    return ImageFileSplits(
        train=splits["train"], val=splits["val"], test=splits["test"], num_classes=num_classes,
        mean=IMAGENET_MEAN, std=IMAGENET_STD, image_size=image_size, resize_size=resize_size,
        train_crop=train_crop, class_groups=shot_groups(counts), decoder=decoder,
        sources={name: str(lists_root / file) for name, file in LIST_FILES.items()},
    )
