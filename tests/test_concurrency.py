"""One writer per directory (issue 35, item 2), with the writers started for real: a sweep locks
its directory before Hydra writes there, a second sweep or a resume while it runs is refused in
one sentence naming the live one, two sweeps started together on the default directory each get
their own, two jobs of one sweep never share a folder, two resumes of one run never mix, a stale
lock (its pid gone, or reused since) is taken over, and a full disk in a sweep (one writer, run in
this process) ends in a summary with no temporary file left. Each refusal is checked byte for byte: nothing is lost or rewritten."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults import QUICK, assert_one_sentence, run_main, snapshot, strict_record

from conftest import ROOT

LONG = ["trainer.epochs=100000", "trainer.progress=false", "trainer.num_threads=1", "trainer.eval_every=1000"]


def start(args, cwd=ROOT) -> subprocess.Popen:
    """``python train.py ARGS`` started in the background."""
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def running_record(run_dir: Path) -> bool:
    path = run_dir / "results.json"
    return (run_dir / "run.lock").exists() and path.exists() and '"running"' in path.read_text()


def stop(process: subprocess.Popen) -> str:
    """Let a process stopped with SIGSTOP go on, SIGTERM it, and return its stderr."""
    os.kill(process.pid, signal.SIGCONT)
    process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=60)[1]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_running_sweep_holds_its_directory_against_a_second_sweep_and_a_resume(tmp_path):
    sweep_dir = tmp_path / "sweep"
    first = start(["-m", "seed=0,1", "loss=ce", f"hydra.sweep.dir={sweep_dir}", *LONG])
    try:
        wait_for(lambda: running_record(sweep_dir / "0"))
        lock = json.loads((sweep_dir / "sweep.lock").read_text())
        assert lock["pid"] == first.pid
        os.kill(first.pid, signal.SIGSTOP)  # alive, its files hold still for the snapshots
        before = snapshot(sweep_dir)
        for second in (["loss=hinge"], ["loss=ce", "trainer.resume=true"]):
            code, stderr = run_main(["-m", "seed=0,1", *second, f"hydra.sweep.dir={sweep_dir}"])
            assert_one_sentence(
                code, stderr, 1, rf"^Error: \S+/sweep holds a sweep that is still running \(pid {first.pid} on "
                                 rf"host \S+, started {lock['started_utc']}\); wait for it to end, or stop it "
                                 rf"\(kill {first.pid}\), before writing there \(nothing was changed")
            assert snapshot(sweep_dir) == before
    finally:
        stderr = stop(first)
    assert first.returncode == 130, stderr
    assert not (sweep_dir / "sweep.lock").exists()
    assert "loss: ce" in (sweep_dir / "multirun.yaml").read_text()  # the first sweep's, not overwritten
    assert strict_record(sweep_dir / "0")["status"] == "interrupted"


def test_two_sweeps_started_together_on_the_default_directory_each_get_their_own(tmp_path):
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    sweeps = [start(["--config-path", str(tmp_path / "conf"), "-m", "seed=0,1", f"loss={loss}", *QUICK],
                    cwd=tmp_path) for loss in ("ce", "hinge")]
    for process in sweeps:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0 and "Traceback" not in stderr, stderr
        assert ": 2 completed." in stderr
    sweep_dirs = sorted((tmp_path / "outputs" / "sweeps" / "multirun").iterdir())
    assert len(sweep_dirs) == 2
    losses = sorted(strict_record(sweep_dir / job)["loss"] for sweep_dir in sweep_dirs for job in "01")
    assert losses == ["ce", "ce", "hinge", "hinge"]
    assert not list(tmp_path.rglob("*.lock"))


@pytest.mark.parametrize("subdir", ["same", "${loss.weight}x"])
def test_jobs_that_would_share_a_folder_are_refused_before_any_runs(tmp_path, subdir):
    sweep_dir = tmp_path / "sweep"
    code, stderr = run_main(["-m", "seed=0,1", f"hydra.sweep.dir={sweep_dir}", f"hydra.sweep.subdir={subdir}"])
    assert_one_sentence(code, stderr, 1, r"^Error: jobs 0 \(.*seed=0\) and 1 \(.*seed=1\) of the sweep would both "
                                         rf"write in \S+/sweep/{subdir.replace('${loss.weight}', 'None')}; give "
                                         r"hydra.sweep.subdir a value that tells every job apart .* Nothing was run\.$")
    assert not sweep_dir.exists()


def test_two_resumes_of_one_run_at_once_never_mix(tmp_path):
    """The refused resume writes nothing: the run's ``.hydra/config.yaml`` is the one it trains."""
    run_dir = tmp_path / "run"
    assert run_main([f"hydra.run.dir={run_dir}"])[0] == 0
    first = start([f"hydra.run.dir={run_dir}", "trainer.resume=true", *LONG])
    try:
        config = run_dir / ".hydra" / "config.yaml"
        wait_for(lambda: running_record(run_dir) and "epochs: 100000" in config.read_text())
        os.kill(first.pid, signal.SIGSTOP)
        before = snapshot(run_dir)
        code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=5"])
        assert_one_sentence(code, stderr, 1, rf"holds a run that is still training \(pid {first.pid} ")
        assert snapshot(run_dir) == before
        assert "epochs: 100000" in config.read_text()  # the training resume's, not the refused one's
    finally:
        stop(first)


def write_lock(directory: Path, name: str, pid: int) -> None:
    (directory / name).write_text(json.dumps({"pid": pid, "host": os.uname().nodename,
                                              "started_utc": "2020-01-01T00:00:00Z"}))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process start times are read from Linux's /proc")
def test_a_lock_whose_pid_was_reused_is_taken_over(tmp_path, capsys):
    """The lock names a live process, but one started long after the lock was written."""
    run_dir = tmp_path / "run"
    assert run_main([f"hydra.run.dir={run_dir}"])[0] == 0
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(run_dir, "run.lock", other.pid)
        code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=3"])
    finally:
        other.kill()
        other.wait()
    assert code == 0, stderr
    logged = capsys.readouterr().out
    assert f"names pid {other.pid}" in logged and "no longer running: the lock is taken over" in logged
    assert len((run_dir / "history.csv").read_text().splitlines()) == 4 and not (run_dir / "run.lock").exists()


def test_a_stale_sweep_lock_is_taken_over_by_the_resume(tmp_path):
    """A sweep killed outright leaves ``sweep.lock``; resuming the sweep takes it over."""
    sweep_dir = tmp_path / "sweep"
    assert run_main(["-m", "seed=0", f"hydra.sweep.dir={sweep_dir}"])[0] == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_lock(sweep_dir, "sweep.lock", dead.pid)
    code, stderr = run_main(["-m", "seed=0", "trainer.resume=true", f"hydra.sweep.dir={sweep_dir}"])
    assert code == 0 and "1 completed" in stderr, stderr
    assert not (sweep_dir / "sweep.lock").exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 400 KiB file system (tmpfs, mounted as root), unmounted afterwards; skips where it
    cannot be mounted."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount_point)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("a small file system cannot be mounted here (not root)")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` but ``leave`` bytes."""
    free = shutil.disk_usage(disk).free
    (disk / "filler").write_bytes(b"\0" * max(free - leave, 0))


def test_a_full_disk_in_a_sweep_ends_in_a_summary_with_no_temporary_file(small_disk):
    fill(small_disk, 48 * 1024)
    sweep_dir = small_disk / "sweep"
    # one writer: the sweep runs train.py's entry point in this process (with QUICK)
    code, stderr = run_main(["-m", "seed=0,1,2", f"hydra.sweep.dir={sweep_dir}"])
    assert code == 1 and "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error")]
    assert errors and all("no space is left on the device" in line for line in errors[:-1]), stderr
    assert f"Sweep {sweep_dir}: " in stderr
    assert not [path for path in sweep_dir.rglob("*") if path.name.endswith(".tmp")]
    assert not (sweep_dir / "sweep.lock").exists()
