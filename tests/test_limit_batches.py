"""``trainer.limit_batches``: training takes its first (shuffled) batches, evaluation a
class-stratified subset of its split, the same at every epoch."""

from __future__ import annotations

import pytest
import torch
from image_data import write_plantnet

from conftest import compose_config, run_in_process
from topk import build as builder
from topk.data.augment import ImageAugmentation
from topk.data.circles import circles
from topk.data.splits import stratified_indices
from topk.distributed import Distributed


def test_stratified_indices_take_every_class_evenly():
    labels = torch.arange(6).repeat_interleave(10)  # sorted by class, as the circles' test split
    chosen = stratified_indices(labels, 14, seed=0)
    counts = torch.bincount(labels[chosen], minlength=6)
    assert counts.min() == 2 and counts.max() == 3 and counts.sum() == 14
    assert len(set(chosen.tolist())) == 14 and torch.equal(chosen, chosen.sort().values)
    assert torch.equal(chosen, stratified_indices(labels, 14, seed=0))
    assert not torch.equal(chosen, stratified_indices(labels, 14, seed=1))


def test_stratified_indices_fill_in_for_a_small_class():
    labels = torch.tensor([0] * 2 + [1] * 10 + [2] * 10)
    chosen = stratified_indices(labels, 12, seed=3)
    assert torch.bincount(labels[chosen]).tolist() == [2, 5, 5] and len(set(chosen.tolist())) == 12


def test_stratified_indices_are_everything_when_the_count_is_the_size_or_more():
    labels = torch.tensor([2, 0, 1, 1, 0])
    assert stratified_indices(labels, 5, seed=0).tolist() == [0, 1, 2, 3, 4]
    assert stratified_indices(labels, 50, seed=7).tolist() == [0, 1, 2, 3, 4]


def evaluation_batches(overrides, distributed=Distributed()):
    cfg = compose_config(overrides)
    splits = circles(seed=0, test_per_class=20)
    return builder.make_batches(splits, "test", cfg.trainer, 0, "cpu", ImageAugmentation(), None, distributed)


def test_a_limit_evaluates_the_same_stratified_subset_every_epoch():
    batches = evaluation_batches(["trainer.limit_batches=2", "trainer.eval_batch_size=9"])
    batches.set_epoch(1)
    first = torch.cat([y for _, y in batches])
    batches.set_epoch(2)
    assert torch.equal(torch.cat([y for _, y in batches]), first) and len(batches) == 2
    assert torch.bincount(first, minlength=6).tolist() == [3] * 6


def test_without_an_evaluation_batch_size_a_limit_changes_nothing():
    batches = evaluation_batches(["trainer.limit_batches=1", "trainer.eval_batch_size=null"])
    assert len(torch.cat([y for _, y in batches])) == 120


def test_processes_share_the_subset():
    overrides = ["trainer.limit_batches=1", "trainer.eval_batch_size=12"]
    whole = torch.cat([x for x, _ in evaluation_batches(overrides)])
    shares = [torch.cat([x for x, _ in evaluation_batches(overrides, Distributed(rank, 2))]) for rank in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 6
    together = torch.cat(shares)
    assert sorted(map(tuple, together.tolist())) == sorted(map(tuple, whole.tolist()))


def test_a_limited_circles_run_evaluates_every_class(run_dir):
    record, _ = run_in_process(run_dir, ["trainer.limit_batches=1", "trainer.eval_batch_size=12",
                                         "trainer.epochs=10", "optim.lr=0.1"])
    assert record["samples"] == {"val": 12, "test": 12}
    assert all(value is not None for value in record["test_per_class"]["top1"])  # all 6 classes
    assert record["test"]["top1"] > 0


@pytest.mark.parametrize("workers", [0, 2])
def test_a_limited_image_file_split_evaluates_several_classes(tmp_path, workers):
    root, _, _, n = write_plantnet(tmp_path / "plantnet")  # test: 3 images per class, by class
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=plantnet", f"dataset.root={root}", "dataset.image_size=8", "dataset.resize_size=10",
        "model=mlp", "trainer.batch_size=4", "trainer.eval_batch_size=5", "trainer.limit_batches=1",
        f"trainer.num_workers={workers}", "trainer.epochs=1", "trainer.selection_metric=last",
    ])
    assert record["samples"] == {"val": 5, "test": 5}
    evaluated = [value for value in record["test_per_class"]["top1"] if value is not None]
    assert len(evaluated) == n  # one image of each of the 5 classes, not the first 5 of class 0
