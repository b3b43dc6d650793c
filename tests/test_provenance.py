"""Every run record says where, when, from which code and by which command it ran."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import torch

from conftest import ROOT, run_in_process
from topk.errors import ConfigError
from topk.records import (
    EMPTY_PROVENANCE,
    PROVENANCE_KEYS,
    git_state,
    read_results,
    validate_results,
    write_results,
)
from topk.run_dir import mark_stopped_runs

UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def provenance_of(run_dir):
    record = read_results(run_dir / "results.json")
    validate_results(record)
    return record["provenance"]


def test_a_run_records_its_provenance(run_dir):
    run_in_process(run_dir, ["trainer.epochs=2", "loss=topk_transition", "loss.k=2"])
    found = provenance_of(run_dir)
    assert set(found) == {*PROVENANCE_KEYS, "num_workers"}  # num_workers once the data is built
    assert found["num_workers"] == 0  # circles are in memory: no decoding workers, whatever the setting
    assert found["world_size"] == 1
    if torch.cuda.is_available():  # trainer.device=auto picks the GPU (the GPU checks run this)
        assert found["device"] == f"cuda:{torch.cuda.current_device()}" and found["gpu_name"]
    else:
        assert found["device"] == "cpu" and found["gpu_name"] is None
    assert isinstance(found["gpu_count"], int) and found["gpu_count"] >= 0
    assert isinstance(found["host"], str) and found["host"]
    assert UTC.match(found["started_utc"]) and UTC.match(found["ended_utc"])
    assert found["started_utc"] <= found["ended_utc"]  # ISO 8601 in UTC sorts as time does
    assert found["command"].startswith("python train.py ") and " loss.k=2" in found["command"]
    assert isinstance(found["argv"], list) and all(isinstance(arg, str) for arg in found["argv"])
    if found["git_commit"] is None:  # the repository copied without its .git
        assert found["git_dirty"] is None and found["git"] == "not a git checkout"
    else:
        assert re.fullmatch(r"[0-9a-f]{40}", found["git_commit"]) and isinstance(found["git_dirty"], bool)
        assert found["git"].startswith(found["git_commit"][:12])
        assert found["git"].endswith(" (dirty)") == found["git_dirty"]


def test_the_command_quotes_each_override(run_dir):
    run_in_process(run_dir, ["trainer.epochs=1", "trainer.ks=[1, 2]"])
    assert provenance_of(run_dir)["command"].endswith(" 'trainer.ks=[1, 2]'")


def test_a_failed_run_records_when_it_ended(run_dir):
    with pytest.raises(ConfigError, match="needs a validation split"):
        run_in_process(run_dir, ["dataset.val_per_class=0", "trainer.selection_metric=val/top1"])
    record = read_results(run_dir / "results.json")
    assert record["status"] == "failed"
    assert UTC.match(record["provenance"]["ended_utc"])
    assert record["provenance"]["device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")


def test_a_resumed_run_keeps_its_first_start(run_dir):
    run_in_process(run_dir, ["trainer.epochs=1"])
    path = run_dir / "results.json"
    record = json.loads(path.read_text())
    record["provenance"]["started_utc"] = "2000-01-01T00:00:00Z"
    path.write_text(json.dumps(record))
    run_in_process(run_dir, ["trainer.epochs=2", "trainer.resume=true"])
    found = provenance_of(run_dir)
    assert found["started_utc"] == "2000-01-01T00:00:00Z" and found["ended_utc"] > "2000"


def hand_made_record(status="completed"):
    return {"status": status, "error": None, "experiment": None, "dataset": "circles",
            "model": "linear", "loss": "ce", "seed": 0, "params": {}, "best_epoch": 1,
            "selection_metric": "last", "val": {}, "test": {}, "epoch_seconds": 1.0,
            "versions": {}, "provenance": dict(EMPTY_PROVENANCE)}


def test_a_record_without_every_provenance_key_is_refused():
    base = hand_made_record()
    validate_results(base)
    del base["provenance"]["command"]
    with pytest.raises(ValueError, match="provenance lacks the key 'command'"):
        validate_results(base)
    with pytest.raises(ValueError, match="lacks the key 'provenance'"):
        validate_results({key: value for key, value in base.items() if key != "provenance"})


def test_a_run_marked_interrupted_after_its_sweep_stopped_has_an_end(tmp_path):
    (tmp_path / "0").mkdir()
    write_results(tmp_path / "0", hand_made_record("running"))
    assert mark_stopped_runs(tmp_path) == 1
    assert UTC.match(read_results(tmp_path / "0" / "results.json")["provenance"]["ended_utc"])


def test_git_state_outside_a_checkout(tmp_path):
    assert git_state(tmp_path) == {"git_commit": None, "git_dirty": None, "git": "not a git checkout"}


def test_git_state_when_git_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on the path: not an error
    assert git_state(ROOT)["git"] == "not a git checkout"


@needs_git
def test_git_state_of_a_checkout_clean_then_dirty(tmp_path):
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "tracked.txt").write_text("one\n")
    git("add", "tracked.txt")
    git("-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "first")
    commit = git("rev-parse", "HEAD")
    (tmp_path / "untracked.txt").write_text("not counted\n")
    assert git_state(tmp_path) == {"git_commit": commit, "git_dirty": False, "git": commit[:12]}
    (tmp_path / "tracked.txt").write_text("two\n")
    assert git_state(tmp_path) == {"git_commit": commit, "git_dirty": True, "git": f"{commit[:12]} (dirty)"}
