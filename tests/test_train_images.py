"""End-to-end image runs of train.py on a tiny CIFAR-100 written in the official format."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import run_in_process
from topk.errors import ConfigError
from topk.records import read_results, validate_results

CIFAR = ["dataset=cifar100", "dataset.val_size=100", "trainer.batch_size=100",
         "trainer.selection_metric=val/top5", "optim=sgd", "optim.lr=0.05"]


@pytest.mark.parametrize("model,augment", [("densenet40_12", "cutout"), ("resnet18", "standard")])
def test_cifar100_run_writes_record_and_trained_labels(tmp_path, tiny_cifar100, model, augment):
    run_dir = tmp_path / "run"
    overrides = [*CIFAR, f"dataset.root={tiny_cifar100}", f"model={model}", f"augment={augment}",
                 "trainer.epochs=1", "loss=smooth_svm", "dataset.noise=0.5"]
    if model == "densenet40_12":
        overrides.append("model.depth=10")  # one bottleneck layer per block (DenseNet-BC): keeps the test fast
    else:
        overrides += ["trainer.limit_batches=2", "trainer.batch_size=20", "trainer.eval_batch_size=20"]  # ResNet-18: 20 s a pass
    record, _ = run_in_process(run_dir, overrides)
    on_disk = read_results(run_dir / "results.json")
    validate_results(on_disk)
    assert on_disk["status"] == "completed" and on_disk["dataset"] == "cifar100"
    assert set(on_disk["test"]) >= {"top1", "top5", "macro_top5"}
    labels = np.load(run_dir / "train_labels.npy")
    assert labels.shape == (600,) and labels.dtype == np.int64
    assert (labels == -1).sum() == 100
    assert 0 < on_disk["noise_rate"] < 0.6
    assert len(pd.read_csv(run_dir / "history.csv")) == 1


def test_missing_cifar_root_is_one_sentence(tmp_path):
    with pytest.raises(ConfigError, match="dataset.root"):
        run_in_process(tmp_path / "run", [*CIFAR, f"dataset.root={tmp_path / 'nowhere'}"])


def test_mixup_with_crop_on_images(tmp_path, tiny_cifar100):
    record, _ = run_in_process(tmp_path / "run", [
        *CIFAR, f"dataset.root={tiny_cifar100}", "model=densenet40_12", "model.depth=10",
        "augment=mixup", "augment.images.crop_padding=4", "augment.images.flip=true", "loss=topk_transition",
        "loss.k=5", "trainer.epochs=1",
    ])
    assert record["status"] == "completed"
