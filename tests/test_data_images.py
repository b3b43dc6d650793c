"""ImageNet, Pl@ntNet-300K and ImageNet-LT on tiny data sets in their real on-disk formats.

Each runs ``train.py`` for one epoch; with :class:`image_data.ColourOracle` as the model the test
knows every prediction, so the record's metrics are checked exactly.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from image_data import (
    ColourOracle,
    expected_metrics,
    write_jpeg,
    write_plantnet,
)
from PIL import Image
from torchvision.transforms import v2

from conftest import compose_config, run_in_process
from topk.data.imagenet import imagenet
from topk.data.imagenet_lt import imagenet_lt, shot_groups
from topk.data.images import ImageBatches
from topk.data.plantnet import plantnet
from topk.engine import multi_crop_scores
from topk.errors import ConfigError, DataError
from topk.functional import topk_marginals
from topk.records import read_results, validate_results

SMALL = ["dataset.image_size=8", "dataset.resize_size=10", "trainer.batch_size=8",
         "trainer.eval_batch_size=8", "trainer.num_workers=0", "trainer.epochs=1"]
# The oracle is a model of the tests' own (tests/conf/model/colour_oracle.yaml), added to the
# config search path as a user adds theirs: only callables the search path names may be built.
ORACLE = [f"hydra.searchpath=[file://{Path(__file__).parent / 'conf'}]", "model=colour_oracle", "optim=sgd",
          "optim.lr=0", "loss=ce"]


def oracle_config(ks):
    return [*SMALL, *ORACLE, f"trainer.ks=[{','.join(map(str, ks))}]", f"k={max(ks)}"]


def flat_predictions(predictions: dict, order: list) -> tuple[list[int], list[int]]:
    predicted, labels = [], []
    for label, key in enumerate(order):
        predicted += predictions[key]
        labels += [label] * len(predictions[key])
    return predicted, labels


def assert_metrics(actual: dict, expected: dict) -> None:
    for name, value in expected.items():
        assert actual[name] == pytest.approx(value, abs=1e-9), name


# --- ImageNet ---------------------------------------------------------------------------------

def test_imagenet_splits_follow_b18(tiny_imagenet):
    root, wnids, _ = tiny_imagenet
    splits = imagenet(seed=0, root=root, val_per_class=2, train_size=20)
    assert splits.num_classes == 4 and splits.class_counts == [5, 5, 5, 5]
    assert torch.bincount(splits.val.y).tolist() == [2, 2, 2, 2]
    assert not set(splits.val.paths) & set(splits.train.paths)
    assert len(splits.test) == 12 and splits.input_shape == (3, 224, 224)
    again = imagenet(seed=7, root=root, val_per_class=2, train_size=20)
    assert again.val.paths == splits.val.paths and again.train.paths == splits.train.paths
    rest = imagenet(seed=0, root=root, val_per_class=2)
    assert rest.class_counts == [10, 10, 10, 10] and rest.val.paths == splits.val.paths


@pytest.mark.parametrize("train_size,message", [
    (100, "larger than the 40 training images"),
    (22, "cannot be split into equal parts for the 4 classes"),
])
def test_imagenet_bad_train_size(tiny_imagenet, train_size, message):
    with pytest.raises(ConfigError, match=message):
        imagenet(seed=0, root=tiny_imagenet[0], val_per_class=2, train_size=train_size)


def test_imagenet_run_metrics_are_exact(tmp_path, tiny_imagenet):
    root, wnids, test = tiny_imagenet
    ks = [1, 2, 3]
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=imagenet", f"dataset.root={root}", "dataset.val_per_class=2",
        "trainer.selection_metric=val/top1", *oracle_config(ks),
    ])
    predicted, labels = flat_predictions(test, wnids)
    assert_metrics(record["test"], expected_metrics(predicted, labels, 4, ks))
    assert record["test"]["top1"] == pytest.approx(200 / 3)  # one of three images per class mispredicted
    assert_metrics(record["val"], {"top1": 100.0, "top3": 100.0})


def test_ten_crop_ranks_by_mean_topk_marginals(tmp_path, tiny_imagenet):
    root, wnids, test = tiny_imagenet
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=imagenet", f"dataset.root={root}", "dataset.val_per_class=2",
        "dataset.ten_crop=true", "dataset.marginal_k=2", "trainer.selection_metric=val/top1",
        *oracle_config([1, 2]),
    ])
    predicted, labels = flat_predictions(test, wnids)
    assert_metrics(record["test"], expected_metrics(predicted, labels, 4, [1, 2]))
    # the final test pass (12 images, batches of 8) saw each image as ten 8x8 crops, the
    # validation pass before it (8 images) one centre crop each, as B18's code selects its model
    assert ColourOracle.latest.input_shapes[-3:] == [(8, 3, 8, 8), (80, 3, 8, 8), (40, 3, 8, 8)]


def test_multi_crop_scores_average_marginals_over_crops():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 10, 6, generator=generator, dtype=torch.float64)
    inputs = logits.clone()

    def model(x):  # each crop's "image" [6, 1, 1] holds its own logits
        return x.flatten(1)

    scores, mean_logits = multi_crop_scores(model, inputs[..., None, None], marginal_k=2)
    expected = torch.stack([topk_marginals(logits[i], 2).mean(0) for i in range(3)])
    torch.testing.assert_close(scores.exp(), expected.float())
    torch.testing.assert_close(mean_logits, logits.mean(1).float())


def test_imagenet_ten_crop_batches_have_ten_crops(tiny_imagenet):
    splits = imagenet(seed=0, root=tiny_imagenet[0], val_per_class=2, image_size=8,
                      resize_size=10, ten_crop=True)
    batches = ImageBatches(splits.test, 4, image_transform=splits.image_transform(False))
    images, labels = next(iter(batches))
    assert images.shape == (4, 10, 3, 8, 8) and images.dtype == torch.uint8


def composed_train_transform(overrides):
    """The training images' per-image transform, built from the composed config as train.py
    builds it (data set, then ``augment.images``)."""
    from topk import build as builder

    cfg = compose_config(overrides)
    splits = builder.build(cfg.dataset, "dataset", seed=0)
    image_augment, _ = builder.build_augment(cfg.augment, splits)
    return splits.image_transform(True, image_augment.random_crop, image_augment.flip)


def steps(transform) -> list[tuple]:
    """Each step of a ``v2.Compose`` as (class name, its size or probability)."""
    return [(type(step).__name__, getattr(step, "size", getattr(step, "p", None)))
            for step in transform.transforms]


def window_of(crop: torch.Tensor, image: torch.Tensor) -> bool:
    """Whether ``crop`` is a window of ``image`` (both ``[C, H, W]``), as it is or mirrored."""
    side = crop.shape[-1]
    for candidate in (crop, crop.flip(-1)):
        rows, cols = torch.nonzero(image[0] == candidate[0, 0, 0], as_tuple=True)
        for i, j in zip(rows.tolist(), cols.tolist()):
            window = image[:, i:i + side, j:j + side]
            if window.shape == candidate.shape and torch.equal(window, candidate):
                return True
    return False


@pytest.mark.parametrize("experiment", ["b18_imagenet", "g22_imagenet"])
def test_imagenet_training_crop_is_b18s_resize_256_random_224_and_flip(tiny_imagenet, experiment):
    """B18 §5.2: "Images are resized so that their smaller dimension is 256 [...] At training
    time, we take random crops of 224 x 224 and randomly flip the images horizontally"."""
    transform = composed_train_transform([f"+experiment={experiment}", f"dataset.root={tiny_imagenet[0]}",
                                          "dataset.val_per_class=2", "dataset.check_images=false"])
    assert steps(transform) == [("PILToTensor", None), ("Resize", [256]), ("RandomCrop", (224, 224)),
                                ("RandomHorizontalFlip", 0.5)]
    generator = np.random.default_rng(0)
    image = Image.fromarray(generator.integers(0, 256, (300, 400, 3), dtype=np.uint8))
    resized = v2.Compose([v2.PILToTensor(), v2.Resize(256, antialias=True)])(image)
    assert resized.shape == (3, 256, 341)
    for seed in range(4):  # each crop is a 224 window of the image resized to 256, maybe mirrored
        torch.manual_seed(seed)
        crop = transform(image)
        assert crop.shape == (3, 224, 224) and window_of(crop, resized)


@pytest.mark.parametrize("dataset,flip", [("imagenet_lt", True), ("plantnet", False)])
def test_imagenet_lt_and_plantnet_train_on_a_resize_and_a_random_crop(data_roots, dataset, flip):
    """Neither G22 text names a crop: a resize, then a random crop (G22's Pl@ntNet-300K code,
    which has no flip; ImageNet-LT keeps B18's ImageNet flip)."""
    transform = composed_train_transform([f"dataset={dataset}", "augment=standard", *data_roots[dataset]])
    names = [name for name, _ in steps(transform)]
    assert names == ["PILToTensor", "Resize", "RandomCrop", *(["RandomHorizontalFlip"] if flip else [])]


def test_random_resized_crop_only_when_asked_for(data_roots):
    transform = composed_train_transform(["dataset=imagenet", "augment=standard", "dataset.train_crop=random_resized",
                                          *data_roots["imagenet"]])
    assert steps(transform) == [("PILToTensor", None), ("RandomResizedCrop", (8, 8)),
                                ("RandomHorizontalFlip", 0.5)]


def test_a_crop_larger_than_the_resize_or_an_unknown_crop_is_refused(tiny_imagenet):
    with pytest.raises(ConfigError, match=r"^dataset.resize_size=8 is smaller than image_size=10: crops "):
        imagenet(seed=0, root=tiny_imagenet[0], val_per_class=2, image_size=10, resize_size=8,
                 check_images=False)
    with pytest.raises(ConfigError, match=r"^dataset.train_crop must be one of resize_then_random, "
                                          r"random_resized, got 'inception'\.$"):
        imagenet(seed=0, root=tiny_imagenet[0], val_per_class=2, train_crop="inception", check_images=False)


def test_imagenet_missing_root_names_layout_and_source(tmp_path):
    with pytest.raises(ConfigError, match=r"train/<wnid>/\*\.JPEG.*image-net\.org"):
        imagenet(seed=0, root=tmp_path / "nowhere")


# --- Pl@ntNet-300K ----------------------------------------------------------------------------

def test_plantnet_splits_counts_and_names(tiny_plantnet):
    root, species, _, n = tiny_plantnet
    splits = plantnet(seed=0, root=root)
    assert splits.num_classes == n and splits.class_counts == [9, 5, 3, 2, 2]
    assert splits.class_names[1] == "Species number 1"
    assert len(splits.val) == 2 * n and len(splits.test) == 3 * n


def test_plantnet_run_metrics_are_exact(tmp_path, tiny_plantnet):
    root, species, test, n = tiny_plantnet
    ks = [1, 3]
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=plantnet", f"dataset.root={root}", "trainer.selection_metric=val/macro_top1",
        *oracle_config(ks),
    ])
    predicted, labels = flat_predictions(test, species)
    expected = expected_metrics(predicted, labels, n, ks)
    assert_metrics(record["test"], expected)
    # class 0 has 2 of 3 right, the others all: macro top-1 is the mean of per-class accuracies
    assert record["test"]["macro_top1"] == pytest.approx(100 * (2 / 3 + 4) / 5)
    assert record["class_counts"] == [9, 5, 3, 2, 2]


def test_plantnet_noised_imbal_with_a_real_model(tmp_path, tiny_plantnet):
    """G22's Pl@ntNet recipe in miniature: ResNet-18, cosine head, noised imbalanced loss whose
    margins come from the training split's class counts; two decoding workers."""
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=plantnet", f"dataset.root={tiny_plantnet[0]}", *SMALL, "trainer.num_workers=2",
        "model=resnet18", "model.head=cosine", "loss=noised_imbal", "loss.k=2", "augment=standard",
        "optim=sgd", "optim.lr=0.01", "trainer.selection_metric=val/macro_top2", "trainer.ks=[1,2]",
    ])
    validate_results(read_results(tmp_path / "run" / "results.json"))
    assert record["status"] == "completed" and set(record["test"]) >= {"top2", "macro_top2"}
    assert len(pd.read_csv(tmp_path / "run" / "history.csv")) == 1


def test_plantnet_class_missing_from_training(tmp_path):
    root, species, _, n = write_plantnet(tmp_path / "p")
    write_jpeg(root / "images" / "test" / "9999999" / "x.jpg", 0, n)
    with pytest.raises(ConfigError, match=r"images/test has 1 class\(es\) that the training split lacks \(9999999\)"):
        plantnet(seed=0, root=root)


def test_plantnet_missing_folder_names_layout_and_source(tmp_path):
    (tmp_path / "images" / "train").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"images/val.*zenodo\.org/record/5645731"):
        plantnet(seed=0, root=tmp_path)


def test_unreadable_image_is_named_before_training(tmp_path):
    root, species, _, _ = write_plantnet(tmp_path / "p")
    broken = root / "images" / "train" / species[2] / "broken.jpg"
    broken.write_bytes(b"not a jpeg at all")
    with pytest.raises(ConfigError, match=f"image {broken} cannot be read"):
        plantnet(seed=0, root=root)


@pytest.mark.parametrize("workers", [0, 2])
def test_unreadable_image_without_the_check_fails_the_run_naming_it(tmp_path, workers):
    root, species, _, _ = write_plantnet(tmp_path / "p")
    broken = root / "images" / "train" / species[2] / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff truncated")
    with pytest.raises(DataError) as failure:
        run_in_process(tmp_path / "run", [
            "dataset=plantnet", f"dataset.root={root}", "dataset.check_images=false",
            "trainer.selection_metric=last", *oracle_config([1]), f"trainer.num_workers={workers}",
        ])
    message = str(failure.value)
    assert message.startswith(f"image {broken} cannot be decoded") and "\n" not in message
    assert read_results(tmp_path / "run" / "results.json")["status"] == "failed"


# --- ImageNet-LT ------------------------------------------------------------------------------

def test_shot_groups_follow_liu_et_al():
    groups = shot_groups(torch.tensor([101, 100, 20, 19, 0]))
    assert groups == {"many": [0], "medium": [1, 2], "few": [3, 4]}


def test_imagenet_lt_run_reports_many_medium_few(tmp_path, tiny_imagenet_lt):
    root, test, n = tiny_imagenet_lt
    ks = [1, 2]
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=imagenet_lt", f"dataset.root={root}", "trainer.selection_metric=val/few_top1",
        "trainer.test_every_epoch=true", *oracle_config(ks),
    ])
    predicted, labels = flat_predictions(test, list(range(n)))
    groups = {"many": [0], "medium": [1, 2], "few": [3, 4]}
    expected = expected_metrics(predicted, labels, n, ks, groups)
    assert_metrics(record["test"], expected)
    assert record["test"]["many_top1"] == 100.0 and record["test"]["medium_top1"] == 75.0
    assert record["test"]["few_top1"] == 75.0
    history = pd.read_csv(tmp_path / "run" / "history.csv")
    assert history["test/few_top1"].iloc[0] == pytest.approx(75.0)


def test_imagenet_lt_bad_lists(tmp_path, tiny_imagenet_lt):
    root = tiny_imagenet_lt[0]
    with pytest.raises(ConfigError, match=r"lacks the list\(s\) ImageNet_LT_train\.txt"):
        imagenet_lt(seed=0, root=root, lists_root=tmp_path)
    lists = tmp_path / "lists"
    lists.mkdir()
    for name in ("train", "val", "test"):
        (lists / f"ImageNet_LT_{name}.txt").write_text((root / f"ImageNet_LT_{name}.txt").read_text())
    (lists / "ImageNet_LT_val.txt").write_text("val/x.JPEG 7\n")
    with pytest.raises(ConfigError, match=r"class\(es\) that the training list lacks \(7\)"):
        imagenet_lt(seed=0, root=root, lists_root=lists)
    (lists / "ImageNet_LT_val.txt").write_text("just-a-path\n")
    with pytest.raises(ConfigError, match="line 1 is 'just-a-path'"):
        imagenet_lt(seed=0, root=root, lists_root=lists)


# --- the loader -------------------------------------------------------------------------------

def test_image_batches_are_the_same_with_any_number_of_workers_and_after_resume(tiny_imagenet):
    """Random crops are seeded per (seed, epoch, sample): workers and resuming change nothing."""
    splits = imagenet(seed=0, root=tiny_imagenet[0], val_per_class=2, image_size=6, resize_size=8)
    transform = splits.image_transform(True, random_crop=True, flip=True)

    def epoch_batches(workers, epoch):
        batches = ImageBatches(splits.train, 5, shuffle=True, seed=3, image_transform=transform,
                               num_workers=workers)
        batches.set_epoch(epoch)
        return [(x.clone(), y.clone()) for x, y in batches]

    first, again = epoch_batches(0, 2), epoch_batches(2, 2)
    for (x0, y0), (x1, y1) in zip(first, again, strict=True):
        assert torch.equal(x0, x1) and torch.equal(y0, y1)
    other_epoch = epoch_batches(0, 3)
    assert not all(torch.equal(a[1], b[1]) for a, b in zip(first, other_epoch))
    assert np.array_equal(np.sort(torch.cat([y for _, y in first]).numpy()),
                          np.sort(splits.train.y.numpy()))


def test_decoding_workers_ignore_stop_signals_and_close_stops_them(tiny_imagenet):
    """A SIGTERM or Ctrl-C sent to the whole process group leaves the workers decoding (the main
    process decides when to stop); ``close`` stops them, though they ignore SIGTERM."""
    splits = imagenet(seed=0, root=tiny_imagenet[0], val_per_class=2, image_size=6, resize_size=8)
    batches = ImageBatches(splits.train, 5, image_transform=splits.image_transform(False), num_workers=2)
    expected = [y.clone() for _, y in batches]
    workers = list(batches.loader._iterator._workers)
    for worker in workers:
        os.kill(worker.pid, signal.SIGTERM)
        os.kill(worker.pid, signal.SIGINT)
    time.sleep(0.5)
    assert all(worker.is_alive() for worker in workers)
    assert all(torch.equal(a, b) for a, b in zip(expected, [y for _, y in batches], strict=True))
    batches.close()
    assert not any(worker.is_alive() for worker in workers)
    assert [y.clone() for _, y in batches][0].shape == expected[0].shape  # a later pass starts anew
    batches.close()


def test_a_stop_signal_during_close_still_leaves_no_worker_running(tiny_imagenet, monkeypatch):
    """A second SIGTERM (a scheduler sends two) raising KeyboardInterrupt inside the workers'
    shutdown: the interruption goes on, but every worker is gone, so the interpreter's exit does
    not wait forever for workers that ignore SIGTERM."""
    splits = imagenet(seed=0, root=tiny_imagenet[0], val_per_class=2, image_size=6, resize_size=8)
    batches = ImageBatches(splits.train, 5, image_transform=splits.image_transform(False), num_workers=2)
    next(iter(batches))
    iterator = batches.loader._iterator
    workers = list(iterator._workers)

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(iterator, "_shutdown_workers", interrupted)
    with pytest.raises(KeyboardInterrupt):
        batches.close()
    assert not any(worker.is_alive() for worker in workers) and batches.loader._iterator is None
