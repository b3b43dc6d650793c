"""``dataset=embeddings``: precomputed features per split from NumPy or torch files, checked,
with a held-out validation split, and a training run on a tiny fixture."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_train import read_record, run_in_process

from topk.data.embeddings import embeddings
from topk.data.fixtures import write_embeddings
from topk.errors import ConfigError


def write(root, split, n=30, width=4, classes=3, suffix=".npz", seed=0):
    """One split file; returns its features and labels as written."""
    write_embeddings(root, {split: n}, width, classes, seed, suffix)
    if suffix == ".npz":
        with np.load(root / f"{split}.npz") as arrays:
            return arrays["features"], arrays["labels"]
    content = torch.load(root / f"{split}.pt")
    return content["features"].numpy(), content["labels"].numpy()


def test_npz_and_pt_splits_load_as_float32_and_int64(tmp_path):
    features, labels = write(tmp_path, "train", n=30)
    write(tmp_path, "test", n=12, suffix=".pt")
    write(tmp_path, "val", n=9)
    splits = embeddings(seed=0, root=str(tmp_path))
    assert (len(splits.train), len(splits.val), len(splits.test), splits.num_classes) == (30, 9, 12, 3)
    assert splits.train.x.dtype == torch.float32 and splits.test.y.dtype == torch.int64
    torch.testing.assert_close(splits.train.x, torch.tensor(features, dtype=torch.float32))
    assert splits.input_shape == (4,) and splits.class_counts == [10, 10, 10]


def test_val_size_holds_training_embeddings_out_by_seed(tmp_path):
    write(tmp_path, "train", n=30)
    write(tmp_path, "test", n=6)
    first, again, other = (embeddings(seed=s, root=str(tmp_path), val_size=8) for s in (1, 1, 2))
    assert (len(first.train), len(first.val)) == (22, 8)
    torch.testing.assert_close(first.val.x, again.val.x)
    assert not torch.equal(first.val.x, other.val.x)
    rows = {tuple(row.tolist()) for row in torch.cat([first.train.x, first.val.x])}
    assert len(rows) == 30  # a partition of the training rows
    assert embeddings(seed=0, root=str(tmp_path)).val is None


@pytest.mark.parametrize("make, message", [
    (lambda root: None, "no train or test embeddings in"),
    (lambda root: (write(root, "train"), write(root, "train", suffix=".pt"), write(root, "test")), "has both train.npz and train.pt"),
    (lambda root: (write(root, "train"), (root / "test.npz").write_bytes(b"not a zip")), "test.npz cannot be read"),
    (lambda root: (write(root, "train"), np.savez(root / "test.npz", x=np.zeros(3))), "has no 'features' and 'labels'"),
    (lambda root: (write(root, "train"), np.savez(root / "test.npz", features=np.zeros(3), labels=np.zeros(3, int))), "features must be a float matrix"),
    (lambda root: (write(root, "train"), np.savez(root / "test.npz", features=np.zeros((3, 4)), labels=np.zeros(2, int))), "3 feature rows but 2 labels"),
    (lambda root: (write(root, "train"), write(root, "test", width=5)), "differ in width"),
    (lambda root: (write(root, "train"), write(root, "test", n=0)), "holds no embeddings"),
    (lambda root: (write(root, "train"), write(root, "test"), write(root, "val")), "has a val file and dataset.val_size=5"),
])
def test_bad_embeddings_stop_with_one_sentence(tmp_path, make, message):
    make(tmp_path)
    with pytest.raises(ConfigError, match=message):
        embeddings(seed=0, root=str(tmp_path), val_size=5 if "val_size" in message else 0)


def test_labels_beyond_num_classes_are_refused(tmp_path):
    write(tmp_path, "train", classes=3)
    write(tmp_path, "test", classes=3)
    with pytest.raises(ConfigError, match=r"labels must lie in 0 … 1"):
        embeddings(seed=0, root=str(tmp_path), num_classes=2)


def test_a_linear_head_trains_on_embeddings(tmp_path):
    write(tmp_path / "emb", "train", n=60, width=6, classes=6)
    write(tmp_path / "emb", "test", n=30, width=6, classes=6, seed=1)
    run_dir = tmp_path / "run"
    run_in_process(run_dir, ["dataset=embeddings", f"dataset.root={tmp_path / 'emb'}", "dataset.val_size=12",
                             "trainer.epochs=3", "trainer.batch_size=16", "trainer.selection_metric=val/top1",
                             "loss=trunc_topk_entropy", "k=2"])
    record = read_record(run_dir)
    assert record["status"] == "completed" and record["dataset"] == "embeddings"
    assert record["params"]["model.bias"] is True and record["params"]["trainer.batch_size"] == 16


def test_every_loss_default_trains_on_ten_class_embeddings(tmp_path):
    """A loss's defaults work on every data set: P22's top-m truncation m = 16 comes with its
    experiment, not with the embeddings data set, so ten classes train with diffsort's own m."""
    write(tmp_path / "emb", "train", n=40, width=6, classes=10)
    write(tmp_path / "emb", "test", n=20, width=6, classes=10, seed=1)
    run_dir = tmp_path / "run"
    run_in_process(run_dir, ["dataset=embeddings", f"dataset.root={tmp_path / 'emb'}",
                             "trainer.epochs=1", "trainer.batch_size=20", "loss=diffsort_topk_ce",
                             "loss.sorter=neuralsort"])
    record = read_record(run_dir)
    assert record["status"] == "completed" and record["params"]["loss.m"] is None
