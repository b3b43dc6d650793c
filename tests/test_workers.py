"""trainer.num_workers: auto sized to the process's cores and torchrun's processes on the node, an
integer as it is, bad values refused in one sentence, and the record saying how many ran."""

from __future__ import annotations

import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import topk.build
from conftest import compose_config, run_in_process
from topk.data.fixtures import write_image_tree
from topk.data.images import ImageBatches, ImageFileSplit
from topk.data.splits import TensorSplit
from topk.data.workers import data_workers, resolve_workers
from topk.errors import ConfigError
from topk.records import EMPTY_PROVENANCE, read_results, validate_results
from topk.schema.check import config_problem


@pytest.fixture
def machine(monkeypatch):
    """``machine(cores, local_world_size)``: fake the CPU affinity and torchrun's environment."""
    def fake(cores: int, local_world_size: int | None = None) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
        if local_world_size is None:
            monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world_size))
    return fake


@pytest.mark.parametrize(("cores", "local_world_size", "workers"), [
    (16, None, 15),  # one process: every core but the training loop's
    (16, 4, 3),      # torchrun --nproc_per_node=4: 4 cores each, one of them the loop's
    (8, 3, 1),       # 8 // 3 = 2 cores each
    (2, None, 1),
    (2, 2, 0),       # one core each: decode in the main process
    (1, None, 0),    # a one-core machine
])
def test_auto_shares_the_affinity_among_the_local_processes(machine, cores, local_world_size, workers):
    machine(cores, local_world_size)
    assert resolve_workers("auto") == workers


def test_an_integer_wins(machine):
    machine(16, 4)
    assert resolve_workers(5) == 5 and resolve_workers(0) == 0
    machine(1)
    assert resolve_workers(3) == 3


@pytest.mark.parametrize(("setting", "shown"), [(-1, "-1"), ("abc", "'abc'"), (1.5, "1.5"), (True, "true")])
def test_bad_values_are_refused_in_one_sentence(setting, shown):
    sentence = (r"^trainer.num_workers must be auto \(the cores this process may use, shared among the torchrun "
                r"processes on its node, less one\) or a whole number of at least 0 \(0: decode in the main "
                rf"process\), got {shown}\.$")
    with pytest.raises(ConfigError, match=sentence):
        resolve_workers(setting)
    cfg = compose_config([f"trainer.num_workers={str(setting).lower()}"])
    assert cfg.trainer.num_workers == setting
    assert re.match(sentence, config_problem(cfg))


def test_auto_is_the_default_and_the_schema_takes_both():
    assert compose_config([]).trainer.num_workers == "auto"
    assert config_problem(compose_config([])) is None
    assert config_problem(compose_config(["trainer.num_workers=3"])) is None


def test_a_bad_local_world_size_is_one_sentence(machine, monkeypatch):
    machine(4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "two")
    with pytest.raises(ConfigError, match=r"^LOCAL_WORLD_SIZE must be a whole number \(torchrun sets it\), "
                                          r"got 'two'; unset it or start the run with torchrun\.$"):
        resolve_workers("auto")


def test_in_memory_data_has_no_workers(machine):
    machine(16)
    in_memory = SimpleNamespace(train=TensorSplit(torch.zeros(2, 3), torch.zeros(2, dtype=torch.int64)))
    on_disk = SimpleNamespace(train=ImageFileSplit(["a.jpg", "b.jpg"], torch.zeros(2, dtype=torch.int64)))
    assert data_workers(in_memory, "auto") == 0 and data_workers(in_memory, 4) == 0
    assert data_workers(on_disk, "auto") == 15 and data_workers(on_disk, 4) == 4


def test_the_record_checks_num_workers_and_older_records_lack_it():
    record = {"status": "completed", "error": None, "experiment": None, "dataset": "d", "model": "m", "loss": "l",
              "seed": 0, "params": {}, "best_epoch": 1, "selection_metric": "last", "val": {}, "test": {},
              "epoch_seconds": 1.0, "versions": {}, "provenance": dict(EMPTY_PROVENANCE)}
    validate_results(record)  # a record from before the key
    validate_results({**record, "provenance": {**EMPTY_PROVENANCE, "num_workers": 3}})
    for bad in (-1, "auto", 1.0, None):
        with pytest.raises(ValueError, match=r"^results.json provenance num_workers is not a whole number"):
            validate_results({**record, "provenance": {**EMPTY_PROVENANCE, "num_workers": bad}})


def test_an_image_folder_run_records_the_workers_auto_gave(tmp_path, machine, monkeypatch):
    machine(2)  # one worker per loader on two cores
    used = []

    class Counted(ImageBatches):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            used.append(self.loader.num_workers)

    monkeypatch.setattr(topk.build, "ImageBatches", Counted)
    root = tmp_path / "images"
    write_image_tree(root, {"cat": 6, "dog": 6}, np.random.default_rng(0))
    record, _ = run_in_process(tmp_path / "run", [
        "dataset=image_folder", f"dataset.root={root}", "dataset.test_fraction=0.25", "dataset.val_fraction=0.25",
        "dataset.image_size=8", "dataset.resize_size=8", "trainer.epochs=1", "trainer.num_workers=auto",
        "trainer.batch_size=4", "model=linear", "trainer.ks=[1]", "k=1", "trainer.selection_metric=last"])
    saved = read_results(tmp_path / "run" / "results.json")
    validate_results(saved)
    assert record["status"] == "completed" and record["params"]["trainer.num_workers"] == "auto"
    assert saved["provenance"]["num_workers"] == 1 and used == [1, 1, 1]  # train, val and test loaders
