"""dataset=image_folder: a user's ImageFolder tree, in both layouts, on tiny trees of real JPEG
and PNG files written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import compose_config, run_in_process
from topk.data.fixtures import write_image_tree
from topk.data.image_folder import image_folder
from topk.data.images import IMAGE_EXTENSIONS, IMAGENET_MEAN, ImageFileSplits
from topk.errors import ConfigError
from topk.records import read_results, validate_results
from topk.schema.check import config_problem

COUNTS = {"cat": 10, "dog": 6, "owl": 5}
TINY = {"image_size": 8, "resize_size": 8}


def write_png(path: Path, level: int, mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, (9, 8), level if mode == "L" else (level, 40, 200)).save(path, format="PNG")


@pytest.fixture
def one_folder(tmp_path):
    """``<root>/<class>/*``: JPEGs, one PNG and one grey PNG in class ``owl``, a text file to skip."""
    root = tmp_path / "one"
    write_image_tree(root, COUNTS, np.random.default_rng(0))
    write_png(root / "owl" / "extra.png", 200)
    write_png(root / "owl" / "grey.PNG", 90, mode="L")
    (root / "owl" / "notes.txt").write_text("not an image")
    return root


@pytest.fixture
def split_folders(tmp_path):
    """``<root>/{train,val,test}/<class>/*.jpg``."""
    root = tmp_path / "split"
    rng = np.random.default_rng(1)
    write_image_tree(root / "train", {"b": 4, "a": 3}, rng)
    write_image_tree(root / "val", {"a": 1, "b": 2}, rng)
    write_image_tree(root / "test", {"a": 2, "b": 1}, rng)
    return root


def test_the_image_extensions_are_torchvisions():
    from torchvision.datasets.folder import IMG_EXTENSIONS

    assert set(IMAGE_EXTENSIONS) == set(IMG_EXTENSIONS)


def test_train_val_test_folders_are_the_splits(split_folders):
    data = image_folder(seed=0, root=split_folders, **TINY)
    assert isinstance(data, ImageFileSplits) and data.class_names == ["a", "b"]  # sorted, as ImageFolder
    assert (len(data.train), len(data.val), len(data.test)) == (7, 3, 3)
    assert data.class_counts == [3, 4] and data.val.y.tolist() == [0, 1, 1]
    assert all("/test/" in path for path in data.test.paths)
    assert data.mean == IMAGENET_MEAN


def test_without_val_folder_there_is_no_validation_split_unless_held_out(split_folders):
    for path in (split_folders / "val").rglob("*.jpg"):
        path.unlink()
    for folder in sorted((split_folders / "val").iterdir()):
        folder.rmdir()
    (split_folders / "val").rmdir()
    assert image_folder(seed=0, root=split_folders, **TINY).val is None
    held = image_folder(seed=0, root=split_folders, val_fraction=0.34, **TINY)
    assert torch.bincount(held.val.y).tolist() == [1, 1] and len(held.train) == 5


def test_one_folder_holds_out_stratified_seeded_parts(one_folder):
    data = image_folder(seed=0, root=one_folder, val_fraction=0.2, test_fraction=0.2, **TINY)
    # per class round(0.2 * n): cat 10 -> 2, dog 6 -> 1, owl 7 (5 JPEG + 2 PNG) -> 1
    assert torch.bincount(data.test.y).tolist() == [2, 1, 1] == torch.bincount(data.val.y).tolist()
    assert data.class_counts == [6, 4, 5]
    everything = sorted(data.train.paths + data.val.paths + data.test.paths)
    assert len(everything) == len(set(everything)) == 23  # no text file, no image twice
    assert any(path.endswith("grey.PNG") for path in everything)
    again = image_folder(seed=5, root=one_folder, val_fraction=0.2, test_fraction=0.2, **TINY)
    assert again.test.paths == data.test.paths and again.val.paths == data.val.paths  # run seed: no effect
    other = image_folder(seed=0, root=one_folder, val_fraction=0.2, test_fraction=0.2, split_seed=1, **TINY)
    assert other.test.paths != data.test.paths
    # the test part does not move with val_fraction
    assert image_folder(seed=0, root=one_folder, test_fraction=0.2, **TINY).test.paths == data.test.paths


def test_one_folder_needs_a_test_fraction(one_folder):
    with pytest.raises(ConfigError, match=r"^image folder .*one \(one folder of classes\) has no test split; set dataset.test_fraction "
                                          r"\(e\.g\. 0\.2\) to hold out"):
        image_folder(seed=0, root=one_folder, **TINY)


def test_fractions_that_hold_out_nothing_or_everything_are_refused(one_folder):
    with pytest.raises(ConfigError, match=r"^dataset.val_fraction=0.01 holds out no image of any class "
                                          r"\(the largest has 10\); choose a larger fraction\.$"):
        image_folder(seed=0, root=one_folder, test_fraction=0.2, val_fraction=0.01, **TINY)
    with pytest.raises(ConfigError, match=r"hold out every training image; choose fractions that sum to less"):
        image_folder(seed=0, root=one_folder, test_fraction=0.5, val_fraction=0.5, **TINY)


def test_a_class_left_without_training_images_is_refused(tmp_path):
    write_image_tree(tmp_path / "r", {"a": 4, "b": 1}, np.random.default_rng(0))
    with pytest.raises(ConfigError, match=r"has no training sample of 1 of its 2 classes \(b\)"):
        image_folder(seed=0, root=tmp_path / "r", test_fraction=0.5, **TINY)


def test_broken_and_empty_and_missing_folders_say_so(split_folders, tmp_path):
    broken = split_folders / "test" / "a" / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    with pytest.raises(ConfigError, match=r"^image .*broken\.jpg cannot be read \(UnidentifiedImageError: .*\); "
                                          r"replace or delete it, or set dataset.check_images=false"):
        image_folder(seed=0, root=split_folders, **TINY)
    (tmp_path / "empty" / "train" / "a").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"^image folder training folder .*train holds no images; set "
                                          r"dataset.root to a folder of class folders"):
        image_folder(seed=0, root=tmp_path / "empty", **TINY)
    with pytest.raises(ConfigError, match=r"^image folder .*nowhere does not exist; set dataset.root"):
        image_folder(seed=0, root=tmp_path / "nowhere", **TINY)
    (split_folders / "val" / "c").mkdir()
    write_png(split_folders / "val" / "c" / "x.png", 10)
    with pytest.raises(ConfigError, match=r"val has 1 class\(es\) that the training split lacks \(c\)"):
        image_folder(seed=0, root=split_folders, check_images=False, **TINY)


def test_statistics_given_or_computed_from_the_training_split(tmp_path):
    """Uniform images of known colours: the computed mean is theirs, the std their spread."""
    for index, level in enumerate((0, 51, 102, 153)):
        write_png(tmp_path / "r" / "train" / ("a" if index % 2 else "b") / f"{index}.png", level)
    write_png(tmp_path / "r" / "test" / "a" / "t.png", 0)
    write_png(tmp_path / "r" / "test" / "b" / "t.png", 0)
    data = image_folder(seed=0, root=tmp_path / "r", mean=None, std=None, **TINY)
    levels = torch.tensor([0, 51, 102, 153], dtype=torch.float64) / 255
    assert data.mean[0] == pytest.approx(float(levels.mean())) and data.mean[1] == pytest.approx(40 / 255)
    assert data.std[0] == pytest.approx(float(levels.std(unbiased=False)))
    given = image_folder(seed=0, root=tmp_path / "r", mean=[0.5, 0.5, 0.5], std=[0.2, 0.2, 0.2], **TINY)
    assert (given.mean, given.std) == ((0.5,) * 3, (0.2,) * 3)
    with pytest.raises(ConfigError, match=r"^dataset.std must be null \(computed from the training split\) or "
                                          r"three numbers above 0"):
        image_folder(seed=0, root=tmp_path / "r", std=[0.2, 0.0, 0.2], **TINY)


def test_the_schema_holds_the_values():
    assert config_problem(compose_config(["dataset=image_folder", "dataset.val_fraction=1.5"])) == (
        "dataset.val_fraction must be a finite number above 0 and below 1 or null (the val split as it is, "
        "or none), got 1.5.")
    assert "dataset.mean must be null (computed from the training split) or three numbers" in config_problem(
        compose_config(["dataset=image_folder", "dataset.mean=[0.5,0.5]"]))


def test_train_py_runs_one_epoch_on_an_image_folder(tmp_path, one_folder):
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=image_folder", f"dataset.root={one_folder}", "dataset.test_fraction=0.2",
        "dataset.val_fraction=0.2", "dataset.image_size=8", "dataset.resize_size=8", "trainer.epochs=1",
        "trainer.num_workers=0", "trainer.batch_size=8", "model=linear", "trainer.ks=[1,2]", "k=2",
        "trainer.selection_metric=val/macro_top2"])
    validate_results(read_results(tmp_path / "run" / "results.json"))
    assert record["status"] == "completed" and record["class_counts"] == [6, 4, 5]
    assert {"top1", "macro_top2"} <= set(record["test"])
