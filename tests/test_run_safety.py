"""Safe run directories and resumes (issue 25, item 3): a directory of someone else's files, a run
still training (``run.lock``), fewer epochs than the checkpoint, the selected model's weights
gone, a resumed sweep whose directory does not exist. Each refusal is one sentence, exit 1, no
traceback, and the directory byte for byte what it was."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_faults import assert_one_sentence, run_main, snapshot, strict_record

from conftest import ROOT

VAL = ["trainer.selection_metric=val/top1", "dataset.val_per_class=20", "trainer.epochs=4"]


def finished_run(run_dir: Path, *args) -> Path:
    code, stderr = run_main([f"hydra.run.dir={run_dir}", *args])
    assert code == 0, stderr
    assert not (run_dir / "run.lock").exists()
    return run_dir


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def write_lock(run_dir: Path, pid: int, host: str) -> None:
    (run_dir / "run.lock").write_text(json.dumps({"pid": pid, "host": host, "started_utc": "2020-01-01T00:00:00Z"}))


# --- 1. a directory that holds no run of ours ---------------------------------------------------

SOMEONE_ELSES = {
    "a run's look-alike": {"history.csv": "epoch\n1\n", "checkpoints/best.pt": "weights", ".hydra/config.yaml": "a: 1\n"},
    "Hydra's files only": {".hydra/config.yaml": "a: 1\n", "train.log": "a log\n"},
    "one file": {"notes.txt": "mine"},
}


@pytest.mark.parametrize("files", SOMEONE_ELSES.values(), ids=SOMEONE_ELSES.keys())
def test_a_directory_of_someone_elses_files_is_refused(tmp_path, files):
    run_dir = tmp_path / "theirs"
    for name, text in files.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(text)
    before = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}"])
    shown = ", ".join(sorted(name.split("/")[0] + ("/" if "/" in name else "") for name in files))
    assert_one_sentence(code, stderr, 1, rf"^Error: \S+/theirs is not empty but holds no run \(no results.json\): "
                                         rf"it holds {shown}; choose another directory with hydra.run.dir=PATH "
                                         r"\(nothing was changed in it\)\.$")
    assert snapshot(run_dir) == before
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true"])
    assert_one_sentence(code, stderr, 1, r"trainer.resume=true but \S+/theirs holds no run to resume")
    assert snapshot(run_dir) == before and not (run_dir / "run.lock").exists()


def test_an_empty_directory_is_free(tmp_path):
    (tmp_path / "empty").mkdir()
    finished_run(tmp_path / "empty")
    assert strict_record(tmp_path / "empty")["status"] == "completed"


def test_a_sweep_job_in_a_directory_of_someone_elses_files_is_refused_and_left_as_it_was(tmp_path):
    sweep_dir = tmp_path / "sweep"
    theirs = sweep_dir / "0"
    (theirs / ".hydra").mkdir(parents=True)
    (theirs / ".hydra" / "config.yaml").write_text("mine: true\n")
    (theirs / "history.csv").write_text("epoch\n1\n")
    before = snapshot(theirs)
    code, stderr = run_main(["-m", "seed=0,1", f"hydra.sweep.dir={sweep_dir}"])
    assert code == 1 and "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 2, stderr
    # Hydra wrote nothing there before the job was checked: the .hydra/ found is someone else's
    assert errors[0].endswith("/sweep/0 is not empty but holds no run (no results.json): it holds "
                              ".hydra/, history.csv; choose another directory with hydra.sweep.dir=PATH (nothing "
                              "was changed in it).")
    assert errors[1] == "Error: 1 run was refused and left as it was (the errors above say why)."
    assert snapshot(theirs) == before  # no .hydra/ rewritten, no train.log made: nothing to undo
    assert strict_record(sweep_dir / "1")["status"] == "completed"


# --- 2. run.lock ---------------------------------------------------------------------------------

def test_a_run_still_training_holds_its_directory(tmp_path):
    run_dir = tmp_path / "running"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", "trainer.epochs=100000",
         "trainer.progress=false", "trainer.num_threads=1", "trainer.eval_every=1000"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (
            (run_dir / "run.lock").exists() and (run_dir / "results.json").exists()
            and (run_dir / "results.json").read_text().count('"running"')
        ):
            time.sleep(0.1)
        lock = json.loads((run_dir / "run.lock").read_text())
        assert lock["pid"] == process.pid and lock["host"] == socket.gethostname()
        os.kill(process.pid, signal.SIGSTOP)  # still alive, but its files hold still for the snapshot
        before = snapshot(run_dir)
        for resume in ([], ["trainer.resume=true"]):
            code, stderr = run_main([f"hydra.run.dir={run_dir}", *resume])
            sentence = assert_one_sentence(
                code, stderr, 1, rf"^Error: \S+/running holds a run that is still training \(pid {process.pid} "
                                 rf"on host {socket.gethostname()}, started {lock['started_utc']}\); wait for it "
                                 rf"to end, or stop it \(kill {process.pid}\), before writing there")
            assert "trainer.resume=true" not in sentence
            assert snapshot(run_dir) == before
        os.kill(process.pid, signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert not (run_dir / "run.lock").exists()
    assert strict_record(run_dir)["status"] == "interrupted"


def test_a_stale_lock_is_taken_over(tmp_path):
    """A run killed outright (SIGKILL, a lost node) leaves its record ``running`` and its lock: a
    new run is told to resume it, and the resume takes the lock over."""
    run_dir = finished_run(tmp_path / "killed")
    record = strict_record(run_dir)
    (run_dir / "results.json").write_text(json.dumps({**record, "status": "running"}))
    write_lock(run_dir, dead_pid(), socket.gethostname())
    before = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}"])
    sentence = assert_one_sentence(code, stderr, 1, r"already holds a run marked running whose process has "
                                                    r"stopped .*; continue it with trainer.resume=true")
    assert "still training" not in sentence and snapshot(run_dir) == before
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=3"])
    assert code == 0, stderr
    assert "which is no longer running: the lock is taken over" in (run_dir / "train.log").read_text()
    assert strict_record(run_dir)["status"] == "completed" and not (run_dir / "run.lock").exists()


def test_a_lock_from_another_host_is_refused_until_deleted(tmp_path):
    run_dir = finished_run(tmp_path / "remote")
    write_lock(run_dir, 1234, "elsewhere.example")
    before = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=3"])
    assert_one_sentence(code, stderr, 1, rf"^Error: \S+/remote is locked by pid 1234 on host elsewhere.example "
                                         rf"\(since 2020-01-01T00:00:00Z\), which cannot be checked from "
                                         rf"{socket.gethostname()}; wait for it to end, or if it is dead delete "
                                         r"\S+/remote/run.lock and run again")
    assert snapshot(run_dir) == before
    (run_dir / "run.lock").unlink()
    assert run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=3"])[0] == 0


def test_the_lock_goes_however_the_run_ends(tmp_path):
    code, stderr = run_main([f"hydra.run.dir={tmp_path / 'failed'}", "loss=topk_group", "loss.k=6"])
    assert code == 1 and strict_record(tmp_path / "failed")["status"] == "failed"
    assert not (tmp_path / "failed" / "run.lock").exists()
    refused = finished_run(tmp_path / "refused")
    assert run_main([f"hydra.run.dir={refused}", "trainer.resume=true", "optim.lr=0.5"])[0] == 1
    assert not (refused / "run.lock").exists()


# --- 3. fewer epochs than the checkpoint ---------------------------------------------------------

def test_resume_with_fewer_epochs_than_the_checkpoint_is_refused(tmp_path):
    run_dir = finished_run(tmp_path / "run", "trainer.epochs=4")
    before = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=2"])
    assert_one_sentence(code, stderr, 1, r"^Error: cannot resume \S+/run with trainer.epochs=2: its checkpoint is "
                                         r"already at epoch 4; resume with trainer.epochs=4 or more, or start a "
                                         r"new run in another directory\.$")
    assert snapshot(run_dir) == before


def test_resume_of_a_pruned_run_with_fewer_epochs_is_refused(tmp_path):
    run_dir = finished_run(tmp_path / "run", "trainer.epochs=4", "trainer.keep_checkpoints=none")
    before = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=2",
                             "trainer.keep_checkpoints=none"])
    assert_one_sentence(code, stderr, 1, r"holds a completed run of 4 epochs, which trainer.epochs=2 cannot "
                                         r"resume; resume with trainer.epochs=4")
    assert snapshot(run_dir) == before


# --- 4. the selected model's weights gone --------------------------------------------------------

@pytest.fixture
def earlier_best(tmp_path):
    """A completed run whose selected epoch (3) is earlier than its last (4)."""
    run_dir = finished_run(tmp_path / "run", *VAL, "optim.lr=3.0")
    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert checkpoint["best_epoch"] < checkpoint["epoch"] == 4
    return run_dir, checkpoint["best_epoch"]


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_resume_without_the_selected_weights_is_refused(earlier_best, damage):
    run_dir, best_epoch = earlier_best
    best = run_dir / "checkpoints" / "best.pt"
    if damage == "deleted":
        best.unlink()
        problem, deleting = "is missing", ""
    else:
        best.write_bytes(b"not a checkpoint")
        problem, deleting = r"cannot be read \(\w+\)", r" \(deleting it does not make the run resumable\)"
    before = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}", *VAL, "optim.lr=3.0", "trainer.resume=true",
                             "trainer.epochs=6"])
    assert_one_sentence(code, stderr, 1, rf"^Error: cannot resume \S+/run: \S+/checkpoints/best.pt, the weights of "
                                         rf"epoch {best_epoch} that the selection metric chose, {problem}, and no "
                                         r"other file holds them; put back a good copy of best.pt, or start a new "
                                         rf"run in another directory{deleting}\.$")
    assert snapshot(run_dir) == before


def test_selected_weights_of_the_last_epoch_come_from_last_pt(tmp_path):
    run_dir = finished_run(tmp_path / "run", *VAL)
    assert strict_record(run_dir)["best_epoch"] == 4
    (run_dir / "checkpoints" / "best.pt").unlink()
    code, stderr = run_main([f"hydra.run.dir={run_dir}", *VAL, "trainer.resume=true", "trainer.epochs=5"])
    assert code == 0, stderr
    assert "best.pt is missing: the selected epoch 4 is the checkpoint's own" in (run_dir / "train.log").read_text()
    assert (run_dir / "checkpoints" / "best.pt").exists() and strict_record(run_dir)["status"] == "completed"


# --- 5. a resumed sweep whose directory does not exist -------------------------------------------

def test_a_resumed_sweep_into_a_missing_directory_is_refused(tmp_path):
    before = snapshot(tmp_path)
    code, stderr = run_main(["-m", "seed=0,1", "trainer.resume=true", f"hydra.sweep.dir={tmp_path / 'typo'}"])
    assert_one_sentence(code, stderr, 1, r"^Error: trainer.resume=true but the sweep directory \S+/typo does not "
                                         r"exist; give the directory of the sweep to continue with "
                                         r"hydra.sweep.dir=PATH, or leave out trainer.resume\.$")
    assert not (tmp_path / "typo").exists() and snapshot(tmp_path) == before


@pytest.mark.parametrize("name,holds", [("tb", "TensorBoard events"), ("checkpoints", "checkpoints")])
def test_a_file_where_the_run_keeps_a_folder_is_one_sentence(tmp_path, name, holds):
    run_dir = finished_run(tmp_path / "run")
    target = run_dir / name
    if target.is_dir():
        for path in sorted(target.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        target.rmdir()
    target.write_text("not a folder")
    files = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=4"])
    assert_one_sentence(code, stderr, 1, rf"{name} is a file where the run keeps its {holds} folder; "
                        "move that file away")
    assert snapshot(run_dir) == files


def test_a_run_recorded_under_a_renamed_key_resumes(tmp_path):
    """``loss.class_weights`` became ``loss.weight``: a checkpoint that remembers the old name is
    the same training configuration."""
    from topk.run_dir import differing_keys

    assert differing_keys({"loss.class_weights": None, "seed": 0}, {"loss.weight": None, "seed": 0}) == []
    assert differing_keys({"loss.class_weights": "balanced"}, {"loss.weight": None}) == ["loss.weight"]


def test_a_run_recorded_before_an_added_key_resumes_with_its_default():
    """``trainer.also_select_on`` came later: a checkpoint without it trained with its default,
    ``[]``; asking that run for another best model is another training configuration."""
    from topk.run_dir import differing_keys

    assert differing_keys({"seed": 0}, {"seed": 0, "trainer.also_select_on": []}) == []
    assert differing_keys({"seed": 0}, {"seed": 0, "trainer.also_select_on": ["val/top5"]}) == [
        "trainer.also_select_on"]
