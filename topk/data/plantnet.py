"""Pl@ntNet-300K (Garcin et al. 2021), the long-tailed plant data set of G22 §4.5.

Layout of the release (Zenodo record 5645731): ``<root>/images/{train,val,test}/<species_id>/*.jpg``
and, optionally, ``<root>/plantnet300K_species_id_2_name.json`` mapping species ids to names.
Classes are the training split's species folders in sorted order (as torchvision's
``ImageFolder`` numbers them, and as the release's own code does); the official splits are used
as they are; the training split's class counts feed the margins of ``ldam`` and ``noised_imbal``.
"""

from __future__ import annotations

import json
from pathlib import Path

from topk.data.images import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageFileSplits,
    check_splits,
    read_class_folders,
    where_expected,
)
from topk.errors import ConfigError

SPLITS = ("train", "val", "test")
NAMES_FILE = "plantnet300K_species_id_2_name.json"
_WHERE = where_expected(
    "images/train/<species_id>/*.jpg, images/val/... and images/test/...",
    "https://zenodo.org/record/5645731",
)


def plantnet(
    seed: int,
    root: str | Path,
    image_size: int = 224,
    resize_size: int = 256,
    train_crop: str = "resize_then_random",
    check_images: bool = True,
    decoder: str = "auto",
) -> ImageFileSplits:
    """Pl@ntNet-300K's official train / validation / test splits (1,081 species).

    Parameters
    ----------
    seed : int
        The run seed (unused: the splits are the release's).
    root : path
        Folder containing ``images/`` (and optionally the species-name JSON).
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
    folders = {name: root / "images" / name for name in SPLITS}
    missing = [str(folder) for folder in folders.values() if not folder.is_dir()]
    if missing:
        raise ConfigError(f"Pl@ntNet-300K folder(s) {', '.join(missing)} do not exist; {_WHERE}.")
    species, splits = read_class_folders(folders, "Pl@ntNet-300K", _WHERE)
    check_splits([splits["train"], splits["val"], splits["test"]], species,
                 f"the training folder {folders['train']}", check_images)
    names = []
    if (root / NAMES_FILE).is_file():
        id_to_name = json.loads((root / NAMES_FILE).read_text())
        names = [id_to_name.get(species_id, species_id) for species_id in species]
    return ImageFileSplits(
        train=splits["train"], val=splits["val"], test=splits["test"], num_classes=len(species),
        mean=IMAGENET_MEAN, std=IMAGENET_STD, image_size=image_size, resize_size=resize_size,
        train_crop=train_crop, class_names=names, decoder=decoder,
        sources={name: str(folder) for name, folder in folders.items()},
    )
