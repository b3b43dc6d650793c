"""dataset=torchvision: torchvision's own classes read tiny data written in their real formats
(FashionMNIST's IDX files: ``train=``; DTD's image tree and split lists: ``split=``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import compose_config, run_in_process
from topk.data.fixtures import write_dtd, write_fashion_mnist, write_image_tree
from topk.data.images import ImageBatches
from topk.data.torchvision_sets import CLASSIFICATION, DatasetSplit, offered, torchvision_dataset
from topk.errors import ConfigError
from topk.records import read_results, validate_results
from topk.schema.check import config_problem

TINY = {"image_size": 8, "resize_size": 8}


@pytest.fixture(scope="module")
def fashion(tmp_path_factory):
    return write_fashion_mnist(tmp_path_factory.mktemp("fashion"), train_per_class=5, test_per_class=2)


@pytest.fixture(scope="module")
def dtd(tmp_path_factory):
    return write_dtd(tmp_path_factory.mktemp("dtd"), {"train": 3, "val": 1, "test": 2})


def test_fashion_mnist_official_splits_names_and_grey_made_rgb(fashion):
    data = torchvision_dataset(0, "FashionMNIST", fashion, image_size=28, resize_size=28)
    assert (len(data.train), data.val, len(data.test)) == (50, None, 20)
    assert data.class_names[0] == "T-shirt/top" and data.num_classes == 10 and data.class_counts == [5] * 10
    assert isinstance(data.train, DatasetSplit) and data.train.paths[3] == "FashionMNIST train #3"
    images, labels = next(iter(ImageBatches(data.test, 20, image_transform=data.image_transform(False))))
    assert images.shape == (20, 3, 28, 28) and images.dtype == torch.uint8  # grey, made 3-channel
    assert torch.equal(images[:, 0], images[:, 1]) and torch.equal(images[:, 1], images[:, 2])
    from torchvision.datasets import FashionMNIST

    raw = FashionMNIST(str(fashion), train=False)
    assert torch.equal(images[:, 0], raw.data) and torch.equal(labels, raw.targets)


def test_statistics_are_computed_from_the_training_split_or_given(fashion):
    from torchvision.datasets import FashionMNIST

    pixels = FashionMNIST(str(fashion), train=True).data.double() / 255
    data = torchvision_dataset(0, "FashionMNIST", fashion, image_size=28, resize_size=28)
    assert data.mean == pytest.approx((float(pixels.mean()),) * 3)
    assert data.std == pytest.approx((float(pixels.std(unbiased=False)),) * 3)
    given = torchvision_dataset(0, "FashionMNIST", fashion, mean=[0.3] * 3, std=[0.35] * 3, **TINY)
    assert (given.mean, given.std) == ((0.3,) * 3, (0.35,) * 3)


def test_held_out_validation_is_stratified_and_seeded(fashion):
    data = torchvision_dataset(0, "FashionMNIST", fashion, val_fraction=0.2, mean=[0.5] * 3, std=[0.5] * 3,
                               **TINY)
    assert torch.bincount(data.val.y).tolist() == [1] * 10 and data.class_counts == [4] * 10
    assert set(data.val.positions).isdisjoint(data.train.positions)
    again = torchvision_dataset(3, "FashionMNIST", fashion, val_fraction=0.2, mean=[0.5] * 3, std=[0.5] * 3,
                                **TINY)
    assert again.val.positions == data.val.positions
    other = torchvision_dataset(0, "FashionMNIST", fashion, val_fraction=0.2, split_seed=1, mean=[0.5] * 3,
                                std=[0.5] * 3, **TINY)
    assert other.val.positions != data.val.positions
    assert "held out" in data.sources["val"]


def test_split_convention_takes_train_val_and_test(dtd):
    data = torchvision_dataset(0, "DTD", dtd, **TINY)
    assert (len(data.train), len(data.val), len(data.test)) == (9, 3, 6)
    assert data.class_names == ["banded", "dotted", "striped"] and data.class_counts == [3, 3, 3]
    assert all(data.val.dataset[p][0].size == (16, 16) for p in data.val.positions)
    held = torchvision_dataset(0, "DTD", dtd, test_fraction=0.34, **TINY)  # DTD's test split set aside
    assert torch.bincount(held.test.y).tolist() == [1, 1, 1] and len(held.val) == 3


def test_unknown_name_lists_the_valid_ones(fashion):
    with pytest.raises(ConfigError, match=r"^dataset.name='FashionMnist' is not one of torchvision's image "
                                          r"classification data sets; choose one of Caltech101, .*FashionMNIST"):
        torchvision_dataset(0, "FashionMnist", fashion)
    assert set(offered()) <= set(CLASSIFICATION) and "FashionMNIST" in offered()
    problem = config_problem(compose_config(["dataset=torchvision", "dataset.name=CocoDetection"]))
    assert problem.startswith("dataset.name must be one of Caltech101, ") and "'CocoDetection'" in problem


def test_missing_data_without_download_says_where_it_looked(tmp_path):
    with pytest.raises(ConfigError, match=rf"^torchvision's FashionMNIST found no data under {tmp_path} \(it looks "
                                          r"there for its own layout of the files\); set dataset.root to the "
                                          r"folder holding them, or pass dataset.download=true"):
        torchvision_dataset(0, "FashionMNIST", tmp_path)


def test_a_broken_image_and_an_option_of_ours_are_refused(dtd, tmp_path):
    root = write_dtd(tmp_path, {"train": 2, "val": 1, "test": 1})
    (root / "dtd" / "dtd" / "images" / "dotted" / "dotted_test_0000.jpg").write_bytes(b"broken")
    with pytest.raises(ConfigError, match=r"^image DTD test #1 cannot be read \(UnidentifiedImageError: .*\); "
                                          r"replace or delete it, or set dataset.check_images=false"):
        torchvision_dataset(0, "DTD", root, **TINY)
    with pytest.raises(ConfigError, match=r"^dataset.options may not set root, split, which dataset=torchvision"):
        torchvision_dataset(0, "DTD", dtd, options={"split": "val", "root": "x"}, **TINY)


def test_options_from_the_command_line_reach_the_class(tmp_path):
    """``dataset.options={partition:2}``: DTD's second partition, whose lists alone are written."""
    from hydra.utils import instantiate

    root = write_dtd(tmp_path, {"train": 2, "val": 1, "test": 1}, partition=2)
    cfg = compose_config(["dataset=torchvision", "dataset.name=DTD", f"dataset.root={root}",
                          "dataset.options={partition:2}", "image_size=8", "dataset.resize_size=8"])
    assert config_problem(cfg) is None
    data = instantiate(cfg.dataset, seed=0)
    assert (len(data.train), len(data.val), len(data.test)) == (6, 3, 3)
    with pytest.raises(ConfigError, match=r"^torchvision's DTD could not read .*No such file"):
        torchvision_dataset(0, "DTD", root, **TINY)  # partition 1's lists are not there


def test_an_empty_official_split_is_refused(dtd):
    import shutil

    root = dtd.parent / "dtd_empty_val"
    shutil.copytree(dtd, root)
    (root / "dtd" / "dtd" / "labels" / "val1.txt").write_text("")
    with pytest.raises(ConfigError, match=r"^the val split read from torchvision's DTD under .* \(val\) holds no "
                                          r"samples; give it samples"):
        torchvision_dataset(0, "DTD", root, **TINY)


def test_a_data_set_without_official_splits_holds_out_its_test_split(tmp_path):
    """EuroSAT (``<root>/eurosat/2750/<class>/*.jpg``) is one set: the test split is held out."""
    write_image_tree(tmp_path / "eurosat" / "2750", {"Forest": 5, "River": 4}, np.random.default_rng(0))
    with pytest.raises(ConfigError, match=r"^torchvision's EuroSAT has no test split; set dataset.test_fraction "
                                          r"\(e\.g\. 0\.2\) to hold out"):
        torchvision_dataset(0, "EuroSAT", tmp_path, **TINY)
    data = torchvision_dataset(0, "EuroSAT", tmp_path, test_fraction=0.25, **TINY)
    assert data.class_names == ["Forest", "River"] and torch.bincount(data.test.y).tolist() == [1, 1]
    assert data.val is None and data.class_counts == [4, 3]


def test_train_py_runs_one_epoch_on_fashion_mnist(tmp_path, fashion):
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=torchvision", "dataset.name=FashionMNIST", f"dataset.root={fashion}", "dataset.val_fraction=0.2",
        "image_size=8", "dataset.resize_size=8", "trainer.epochs=1", "trainer.num_workers=0", "model=mlp",
        "trainer.batch_size=16", "trainer.selection_metric=val/macro_top5"])
    validate_results(read_results(tmp_path / "run" / "results.json"))
    assert record["status"] == "completed" and record["class_counts"] == [4] * 10
    assert {"top5", "macro_top5"} <= set(record["test"])
