"""Issue 37's first day, end to end: a user's own ImageFolder tree and a torchvision data set,
each trained with a library's model (timm's, torchvision's) and every knob a researcher expects
at once (AdamW, label smoothing, clipping, EMA, accumulation, early stopping, the plateau
schedule, CutMix or Mixup/CutMix, RandAugment, RandomErasing). Each knob alone is tested in
tests/test_training_knobs.py and tests/test_augment.py; here they meet real data formats."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_in_process
from topk.data.fixtures import write_fashion_mnist, write_image_tree
from topk.records import read_results, validate_results

pytest.importorskip("timm")

KNOBS = ["optim=adamw", "trainer.clip_grad_norm=1.0", "trainer.ema_decay=0.9", "trainer.accumulate_grad_batches=2",
         "trainer.early_stopping_patience=3", "schedule=plateau", "augment.images.randaugment_ops=2",
         "augment.images.random_erasing=0.5", "trainer.epochs=2", "trainer.batch_size=4", "trainer.num_workers=0",
         "trainer.tensorboard=false", "k=2", "trainer.ks=[1,2]", "trainer.selection_metric=val/top2"]


def test_an_image_folder_tree_trains_a_timm_model_with_every_knob(tmp_path):
    root = tmp_path / "flowers"
    write_image_tree(root, {"daisy": 8, "rose": 8, "tulip": 8}, np.random.default_rng(0))
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=image_folder", f"dataset.root={root}", "dataset.val_fraction=0.25", "dataset.test_fraction=0.25",
        "image_size=32", "dataset.resize_size=32", "model=timm", "model.name=test_resnet",
        "loss=ce", "loss.label_smoothing=0.1", "augment=cutmix", *KNOBS])
    validate_results(read_results(tmp_path / "run" / "results.json"))
    assert record["status"] == "completed" and record["model"] == "timm" and record["augment"] == "cutmix"
    assert record["params"]["optim._target_"] == "torch.optim.AdamW" and {"top1", "top2"} <= set(record["test"])
    assert {key: record["params"][key] for key in ("trainer.ema_decay", "trainer.accumulate_grad_batches",
                                                   "augment.images.randaugment_ops", "loss.label_smoothing")} == {
        "trainer.ema_decay": 0.9, "trainer.accumulate_grad_batches": 2, "augment.images.randaugment_ops": 2,
        "loss.label_smoothing": 0.1}


def test_a_torchvision_data_set_trains_a_torchvision_model_with_every_knob(tmp_path):
    root = write_fashion_mnist(tmp_path / "fashion", train_per_class=4, test_per_class=1)
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=torchvision", "dataset.name=FashionMNIST", f"dataset.root={root}", "dataset.val_fraction=0.25",
        "image_size=32", "dataset.resize_size=32", "model=torchvision", "model.name=mobilenet_v3_small",
        "loss=smooth_svm", "augment=mixup_cutmix", *KNOBS])
    validate_results(read_results(tmp_path / "run" / "results.json"))
    assert record["status"] == "completed" and record["model"] == "torchvision"
    assert record["params"]["model.name"] == "mobilenet_v3_small" and {"top1", "top2"} <= set(record["test"])
