"""Data is checked where it is read, by one rule for every data set (issue 25, item 2): no empty
split is evaluated, no class without training samples is created, no NaN or infinite feature is
trained on; each refusal is one sentence naming the split or class and where it was read."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import torch
from image_data import write_imagenet, write_imagenet_lt, write_plantnet

from topk.data.embeddings import embeddings
from topk.data.fixtures import write_embeddings
from topk.data.imagenet import imagenet
from topk.data.imagenet_lt import imagenet_lt
from topk.data.plantnet import plantnet
from topk.data.splits import DataSplits, TensorSplit, all_finite
from topk.errors import ConfigError


def refused(pattern: str, build):
    with pytest.raises(ConfigError) as caught:
        build()
    sentence = str(caught.value)
    assert re.search(pattern, sentence) and "\n" not in sentence and sentence.endswith("."), sentence
    return sentence


def test_an_empty_plantnet_test_split_is_refused_not_scored_zero(tmp_path):
    root, species, _, _ = write_plantnet(tmp_path / "p")
    for folder in (root / "images" / "test").iterdir():
        shutil.rmtree(folder)
        folder.mkdir()  # the class folders stay, empty
    refused(rf"the test split read from {re.escape(str(root / 'images' / 'test'))} holds no samples",
            lambda: plantnet(0, root, check_images=False))


@pytest.mark.parametrize("sizes", [{"image_size": 0}, {"resize_size": -3}, {"image_size": 2.5}])
def test_image_sizes_must_be_whole_positive_pixels(tmp_path, sizes):
    root = write_plantnet(tmp_path / "p")[0]
    refused(r"(image_size|dataset.resize_size) must be a whole number of pixels of at least 1, got",
            lambda: plantnet(0, root, check_images=False, **sizes))


def test_an_empty_training_class_folder_is_refused_naming_the_class(tmp_path):
    root, species, _, _ = write_plantnet(tmp_path / "p")
    shutil.rmtree(root / "images" / "train" / species[2])
    (root / "images" / "train" / species[2]).mkdir()
    for split in ("val", "test"):  # the class is not evaluated either: only training lacks it
        shutil.rmtree(root / "images" / split / species[2])
    sentence = refused(r"the training folder .* has no training sample of 1 of its 5 classes "
                       rf"\({species[2]}\); a class without training data cannot be learnt",
                       lambda: plantnet(0, root, check_images=False))
    assert str(root / "images" / "train") in sentence


def test_imagenet_class_folder_without_training_images_is_refused(tmp_path):
    root, wnids, _ = write_imagenet(tmp_path / "i", num_classes=3, train_per_class=4, val_per_class=2)
    for image in (root / "train" / wnids[1]).iterdir():
        image.unlink()
    shutil.rmtree(root / "val" / wnids[1])
    refused(rf"has no training sample of 1 of its 3 classes \({wnids[1]}\)",
            lambda: imagenet(0, root, val_per_class=0, check_images=False))


def test_an_imagenet_lt_label_beyond_the_classes_creates_no_phantom_classes(tmp_path):
    root = write_imagenet_lt(tmp_path / "lt")[0]
    train = root / "ImageNet_LT_train.txt"
    lines = train.read_text().splitlines()
    path = lines[-1].split()[0]
    train.write_text("\n".join(lines[:-1] + [f"{path} 50"]) + "\n")  # classes 0-4 … and 50
    refused(r"ImageNet_LT_train.txt has no training sample of 45 of its 51 classes \(5, 6, 7, 8, 9, \.\.\.\)",
            lambda: imagenet_lt(0, root, check_images=False))


def test_an_empty_imagenet_lt_val_list_is_refused(tmp_path):
    root = write_imagenet_lt(tmp_path / "lt")[0]
    (root / "ImageNet_LT_val.txt").write_text("")
    refused(r"the val split read from .*ImageNet_LT_val.txt holds no samples",
            lambda: imagenet_lt(0, root, check_images=False))


def test_an_embeddings_test_label_absent_from_training_is_refused(tmp_path):
    write_embeddings(tmp_path, {"train": 12, "test": 6}, classes=6)
    data = np.load(tmp_path / "test.npz")
    np.savez(tmp_path / "test.npz", features=data["features"], labels=np.append(data["labels"][:-1], 6))
    refused(rf"{re.escape(str(tmp_path / 'train.npz'))} has no training sample of 1 of its 7 classes \(6\)",
            lambda: embeddings(0, str(tmp_path)))


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_embeddings_are_refused_naming_the_file(tmp_path, value):
    write_embeddings(tmp_path, {"train": 12, "test": 6})
    data = np.load(tmp_path / "test.npz")
    features = data["features"].copy()
    features[3, 1] = value
    np.savez(tmp_path / "test.npz", features=features, labels=data["labels"])
    refused(rf"the test split read from {re.escape(str(tmp_path / 'test.npz'))} holds NaN or "
            "infinite features", lambda: embeddings(0, str(tmp_path)))


def test_generated_data_with_nan_parameters_is_refused():
    from topk.data.circles import circles

    refused(r"the train split holds NaN or infinite features; fix the data \(or the data set's "
            r"parameters\)", lambda: circles(0, sigma=float("nan")))


def test_finite_check_reads_large_matrices_in_chunks():
    x = torch.zeros(10, 3)
    assert all_finite(x, chunk_rows=3) and all_finite(torch.zeros(5, dtype=torch.uint8))
    x[9, 2] = float("inf")  # in the last, partial chunk
    assert not all_finite(x, chunk_rows=3)
    with pytest.raises(ConfigError, match="the val split holds no samples"):
        DataSplits(TensorSplit(torch.zeros(2, 1), torch.zeros(2, dtype=torch.long)),
                   TensorSplit(torch.zeros(0, 1), torch.zeros(0, dtype=torch.long)),
                   TensorSplit(torch.zeros(2, 1), torch.zeros(2, dtype=torch.long)), 1)
