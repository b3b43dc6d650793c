"""Bad input through ``train.py``: one sentence, the right exit code, nothing lost.

One case at least for every fault of issue 25: values the schema refuses (before anything is
written) and those only the data can refuse (a failed record), switches, a sweep with one bad
job, a bad seed, data that cannot be trained or scored (empty splits, a class without training
samples, non-finite features), directories never overwritten, resumes refused, corrupt and
code-carrying checkpoints, SIGTERM to a sweep and to a run's whole process group. Directory
locks and resume bookkeeping are in ``test_run_safety.py``, library numerics in
``test_numerics.py``, a preempted submitit job in ``test_launchers.py``.

Each case runs ``train.py``'s Hydra entry point in this process (a fifth of a second instead of
five for a new interpreter) with the real callbacks, and asserts the sentence on stderr, the exit
code, no traceback, and that an earlier run's files are byte for byte what they were. Signals and
sweeps run as real processes. The loss library's edges are in ``test_loss_edges.py``, broken
CIFAR-100 files in ``test_data_cifar.py``, tables given another experiment's sweep in
``test_tables.py`` and ``test_figures.py``, the top-level ``k`` on every data set in
``test_defaults.py``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from conftest import CONF, ROOT, run_cli

QUICK = ["trainer.epochs=2", "trainer.progress=false", "trainer.num_threads=1"]


def run_main(args, quick: bool = True) -> tuple[int, str]:
    """``python train.py ARGS`` in this process (with :data:`QUICK` first unless ``quick`` is
    false): ``(exit code, stderr)``."""
    flags = [arg for arg in args if arg.startswith("-")]  # -m before the overrides
    overrides = [arg for arg in args if not arg.startswith("-")]
    return run_as_typed(["--config-path", str(CONF), *flags, *(QUICK if quick else []), *overrides])


def run_as_typed(args) -> tuple[int, str]:
    """``python train.py ARGS`` in this process, nothing added: ``(exit code, stderr)``."""
    import train

    saved_argv, saved_handlers = sys.argv, {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    sys.argv = [str(ROOT / "train.py"), *args]
    stderr, code = io.StringIO(), 0
    try:
        with contextlib.redirect_stderr(stderr):
            train.cli()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
        if isinstance(stop.code, str):  # sys.exit("Error: ...") prints its message
            stderr.write(stop.code + "\n")
    finally:
        sys.argv = saved_argv
        for number, handler in saved_handlers.items():
            signal.signal(number, handler)
        GlobalHydra.instance().clear()
    return code, stderr.getvalue()


def snapshot(directory: Path) -> dict[str, str]:
    """Every file below ``directory`` and the hash of its bytes."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*")) if path.is_file()
    }


def strict_record(run_dir: Path) -> dict:
    """``results.json``, read as strict JSON (a bare NaN or Infinity fails)."""
    def refuse(constant):
        raise ValueError(f"results.json holds {constant}")

    return json.loads((run_dir / "results.json").read_text(), parse_constant=refuse)


def assert_one_sentence(code: int, stderr: str, expected_code: int, pattern: str) -> str:
    """Check the exit code and that stderr holds one ``Error: ...`` line matching ``pattern``,
    and no traceback; returns the sentence."""
    assert code == expected_code, stderr
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith(("Error", "Interrupted"))]
    assert len(errors) == 1, stderr
    assert re.search(pattern, errors[0]), errors[0]
    return errors[0].partition(": ")[2]


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    """A completed run, and the snapshot of its files."""
    run_dir = tmp_path_factory.mktemp("faults") / "earlier"
    code, stderr = run_main([f"hydra.run.dir={run_dir}"])
    assert code == 0, stderr
    return run_dir, snapshot(run_dir)


# Values the schema refuses (topk/schema/): one sentence before anything is written.
SCHEMA_REFUSED = [
    (["trainer.batch_size=0"], r"trainer.batch_size must be a whole number of at least 1 or null \(the full batch\), got 0\.$"),
    (["trainer.batch_size=abc"], r"trainer.batch_size .* got 'abc'\.$"),
    (["trainer.batch_size=1.5"], r"trainer.batch_size .* got 1.5\.$"),
    (["optim.lr=nan"], r"optim.lr must be a finite number of at least 0, got nan\.$"),
    (["optim.lr=-0.1"], r"optim.lr must be a finite number of at least 0, got -0.1\.$"),
    (["optim.weight_decay=-1"], r"optim.weight_decay must be a finite number of at least 0, got -1.0\.$"),
    (["trainer.ks=[0]"], r"trainer.ks must be a list of whole numbers of at least 1"),
    (["trainer.limit_batches=0"], r"trainer.limit_batches .*\(no limit\), got 0\.$"),
    (["trainer.eval_every=0"], r"trainer.eval_every must be a whole number of at least 1"),
    (["trainer.num_workers=-1"], r"trainer.num_workers must be auto \(.*\) or a whole number of at least 0 .*, got -1\.$"),
    (["k=0"], r"^Error: k must be a whole number of at least 1, got 0\.$"),
    (["trainer.selection_metric=test/top1"], r"trainer.selection_metric must be last or a validation metric"),
    (["optim.lrr=0.1"], r"^Error: optim.lrr is not a setting of optim \(torch.optim.Adam\); did you mean optim.lr\?"),
    (["trainer.device=gpu"], r"trainer.device must be one of auto, cpu, cuda, cuda:N, got 'gpu'\.$"),
    # issue 25's cases
    (["trainer.compile=maybe"], r"trainer.compile must be true or false \(yes/no and on/off read as such\)"),
    (["trainer.epoch=3"], r"trainer.epoch is not a setting; did you mean trainer.epochs\?"),
    (["+trainer.epoch=3"], r"trainer.epoch is not a setting; did you mean trainer.epochs\?"),
    (["loss=hinge", "loss.k=true"], r"loss.k must be a whole number of at least 1, got true\.$"),
    (["loss=hinge", "loss.k=2.5"], r"loss.k must be a whole number of at least 1, got 2.5\.$"),
    (["schedule.gamma=-1"], r"schedule.gamma must be a finite number above 0, got -1.0\.$"),
    (["schedule.milestones=[abc]"], r"schedule.milestones must be a list of increasing whole numbers .* got 'abc' in the list\.$"),
    (["schedule.milestones=[1.5]"], r"schedule.milestones must be a list of increasing whole numbers .* got 1.5 in the list\.$"),
    (["loss=smooth_svm", "loss.tau=abc"], r"loss.tau must be a finite number of at least 0, got 'abc'\.$"),
    (["loss=smooth_svm", "loss.tau=inf"], r"loss.tau must be a finite number of at least 0, got inf\.$"),
    (["loss=smooth_svm", "loss.alpha=[1,2]"], r"loss.alpha must be a finite number of at least 0, got \[1, 2\]\.$"),
    (["dataset.sigma=nan"], r"dataset.sigma must be a finite number of at least 0, got nan\.$"),
    (["image_size=0"], r"image_size must be a whole number of at least 1, got 0\.$"),
    (["loss=hnge"], r"loss=hnge is not an option of loss; did you mean loss=hinge\? choose one of cal_hinge, ce"),
]

# Values that only the data can refuse: one sentence and a failed record.
DATA_REFUSED = [
    (["loss=smooth_svm", "loss.k=6"], r"loss.k=6 must be between 1 and the number of classes minus one"),
    (["k=1000"], r"k=1000 is more than the 6 classes of this data set, so there is no top-1000 accuracy"),
]


@pytest.mark.parametrize("args,pattern", SCHEMA_REFUSED, ids=[" ".join(args) for args, _ in SCHEMA_REFUSED])
def test_a_value_the_schema_refuses_is_one_sentence_and_writes_nothing(earlier_run, tmp_path, args, pattern):
    earlier, files = earlier_run
    run_dir = tmp_path / "run"
    code, stderr = run_main([*args, f"hydra.run.dir={run_dir}"])
    assert_one_sentence(code, stderr, 1, pattern)
    assert not run_dir.exists()
    assert snapshot(earlier) == files


@pytest.mark.parametrize("args,pattern", DATA_REFUSED, ids=[" ".join(args) for args, _ in DATA_REFUSED])
def test_a_value_the_data_refuses_is_one_sentence_and_a_failed_record(earlier_run, tmp_path, args, pattern):
    earlier, files = earlier_run
    run_dir = tmp_path / "run"
    code, stderr = run_main([*args, f"hydra.run.dir={run_dir}"])
    sentence = assert_one_sentence(code, stderr, 1, pattern)
    record = strict_record(run_dir)
    assert record["status"] == "failed" and record["error"].endswith(sentence)
    assert (run_dir / "train.log").read_text().strip().splitlines()[-1].endswith(record["error"])
    assert snapshot(earlier) == files


def test_switches_say_off_with_no_and_off(earlier_run, tmp_path):
    """``trainer.tensorboard=off`` writes no tb/; ``trainer.resume=no`` does not resume (the
    earlier run's directory is refused as a new run's)."""
    earlier, files = earlier_run
    code, stderr = run_main([f"hydra.run.dir={tmp_path / 'run'}", "trainer.tensorboard=off", "trainer.compile=no"])
    assert code == 0, stderr
    assert not (tmp_path / "run" / "tb").exists()
    assert strict_record(tmp_path / "run")["params"]["trainer.compile"] is False
    code, stderr = run_main([f"hydra.run.dir={earlier}", "trainer.resume=no"])
    assert_one_sentence(code, stderr, 1, r"already holds a completed run; continue it with trainer.resume=true")
    assert snapshot(earlier) == files


def test_a_bad_value_in_one_job_stops_the_sweep_before_any_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    code, stderr = run_main(["-m", "loss=hinge", "loss.k=1,abc", f"hydra.sweep.dir={sweep_dir}"])
    assert_one_sentence(code, stderr, 1, r"^Error: job 1 of the sweep \(.*loss=hinge loss.k=abc\): loss.k must be a whole "
                                         r"number of at least 1, got 'abc'\. Nothing was run\.$")
    code, stderr = run_main(["-m", "loss=ce,hinge", "+loss.k=3", f"hydra.sweep.dir={sweep_dir}"])
    assert_one_sentence(code, stderr, 1, r"^Error: job 0 of the sweep \(.*loss=ce \+loss.k=3\): loss.k is not a "
                                         r"setting of loss \(torch.nn.CrossEntropyLoss\)")
    assert not sweep_dir.exists()


@pytest.mark.parametrize("seed", ["99999999999999999999999", "-1", "abc", "1.5"])
def test_a_bad_seed_is_one_sentence_before_anything_is_written(tmp_path, seed):
    run_dir = tmp_path / "run"
    code, stderr = run_main([f"seed={seed}", f"hydra.run.dir={run_dir}"])
    assert_one_sentence(code, stderr, 1, r"seed must be a whole number from 0 to 2\*\*63 - 1, got .*\.$")
    assert not run_dir.exists()


def test_zero_parallel_jobs_is_one_sentence(tmp_path):
    sweep_dir = tmp_path / "sweep"
    code, stderr = run_main(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0", "seed=0,1",
                             f"hydra.sweep.dir={sweep_dir}"])
    assert_one_sentence(code, stderr, 1, r"hydra.launcher.n_jobs must be a whole number of runs at once "
                        r"other than 0 \(-1: one per CPU core\), got 0")
    assert not sweep_dir.exists()


def test_unwritable_output_directory_as_root(tmp_path):
    code, stderr = run_main(["hydra.run.dir=/proc/topk_run"])
    assert_one_sentence(code, stderr, 1, r"/proc/topk_run cannot be written .* hydra.run.dir=PATH")


def test_a_full_disk_is_one_sentence_and_a_failed_record(tmp_path, monkeypatch):
    import topk.checkpoints

    def no_space(state, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(topk.checkpoints, "_atomic_save", no_space)
    run_dir = tmp_path / "run"
    code, stderr = run_main([f"hydra.run.dir={run_dir}"])
    assert_one_sentence(code, stderr, 1, r"no space is left on the device holding \S+/run/checkpoints/"
                        r"\w+\.pt; free some .* trainer.keep_checkpoints=best or none .* trainer.resume=true\.$")
    record = strict_record(run_dir)
    assert record["status"] == "failed" and "No space left on device" in record["error"]


def test_a_sweep_whose_record_cannot_be_written_exits_1(tmp_path, monkeypatch):
    from topk import run_session

    def no_space(run_dir, record, distributed, status, error):
        raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "results.json"))

    monkeypatch.setattr(run_session, "end_record", no_space)
    code, stderr = run_main(["-m", "seed=0", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert code == 1 and "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error")]
    assert "no space is left on the device holding" in errors[0] and "/sweep/0/results.json" in errors[0]
    assert errors[1] == ("Error: 1 run of the sweep ended without writing a final status (a killed "
                         "process or a full disk); train.log says how far it got.")
    assert strict_record(tmp_path / "sweep" / "0")["status"] == "running"


def test_a_run_directory_is_never_overwritten(earlier_run):
    earlier, files = earlier_run
    code, stderr = run_main([f"hydra.run.dir={earlier}", "seed=3"])
    assert_one_sentence(code, stderr, 1, r"already holds a completed run; continue it with "
                                         r"trainer.resume=true, or choose another directory")
    assert snapshot(earlier) == files


def test_a_sweep_directory_is_never_reused(earlier_run):
    earlier, files = earlier_run
    code, stderr = run_main(["-m", "seed=0,1", f"hydra.sweep.dir={earlier.parent}"])
    assert_one_sentence(code, stderr, 1, r"already holds 1 run; continue them with trainer.resume=true")
    assert snapshot(earlier) == files


@pytest.mark.parametrize("change,keys", [
    (["loss=smooth_svm", "k=2"], ["k", "loss._target_", "loss.k"]),
    (["model=mlp"], ["model._target_", "model.hidden"]),
    (["optim.lr=0.5", "seed=1"], ["optim.lr", "seed"]),
])
def test_resume_with_another_configuration_is_refused(earlier_run, change, keys):
    earlier, files = earlier_run
    code, stderr = run_main([f"hydra.run.dir={earlier}", "trainer.resume=true", *change])
    assert_one_sentence(code, stderr, 1, r"cannot resume .* with another training configuration")
    for key in keys:
        assert f"{key} (" in stderr
    assert snapshot(earlier) == files


def test_resume_accepts_harmless_changes_and_extends_the_run(tmp_path):
    run_dir = tmp_path / "run"
    assert run_main([f"hydra.run.dir={run_dir}"])[0] == 0
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true", "trainer.epochs=4",
                             "trainer.tensorboard=false", "trainer.eval_every=2"])
    assert code == 0, stderr
    record = strict_record(run_dir)
    assert record["status"] == "completed" and record["params"]["trainer.epochs"] == 4
    assert len((run_dir / "history.csv").read_text().splitlines()) == 1 + 4


def test_resume_without_a_run_is_refused(tmp_path):
    code, stderr = run_main([f"hydra.run.dir={tmp_path / 'nothing'}", "trainer.resume=true"])
    assert_one_sentence(code, stderr, 1, r"trainer.resume=true but .* holds no run to resume")
    assert not (tmp_path / "nothing" / "results.json").exists()


def test_corrupt_checkpoint_is_one_sentence_and_the_record_stays(tmp_path):
    run_dir = tmp_path / "run"
    assert run_main([f"hydra.run.dir={run_dir}"])[0] == 0
    (run_dir / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    files = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true"])
    assert_one_sentence(code, stderr, 1, r"checkpoint .* cannot be read .* delete it")
    assert snapshot(run_dir) == files


class _RunsCode:
    """Unpickling it would create a file: what a hostile checkpoint could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_checkpoint_holding_code_is_refused_and_never_run(tmp_path):
    """Checkpoints load with weights_only=True: resuming someone else's run cannot execute code."""
    run_dir, marker = tmp_path / "run", tmp_path / "code_ran"
    assert run_main([f"hydra.run.dir={run_dir}"])[0] == 0
    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    torch.save({**checkpoint, "history": _RunsCode(marker)}, run_dir / "checkpoints" / "last.pt")
    files = snapshot(run_dir)
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.resume=true"])
    assert_one_sentence(code, stderr, 1, r"checkpoint .* holds Python objects other than tensors "
                        r"and plain data, which are not loaded because unpickling them could run code")
    assert not marker.exists() and snapshot(run_dir) == files


def test_non_finite_weights_fail_the_run_with_strict_json(tmp_path):
    run_dir = tmp_path / "run"
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "optim=sgd", "optim.lr=1e30"])
    assert_one_sentence(code, stderr, 1, r"(weights became NaN or infinite|loss became nan)")
    record = strict_record(run_dir)
    assert record["status"] == "failed" and "lower optim.lr" in record["error"]


def test_single_run_of_an_experiment_says_it_is_one_configuration(tmp_path, caplog):
    code, stderr = run_main(["+experiment=s20_exp1", "trainer.epochs=1", "trainer.eval_every=1",
                             f"hydra.run.dir={tmp_path / 'run'}"])
    assert code == 0, stderr
    log = (tmp_path / "run" / "train.log").read_text()
    assert "+experiment=s20_exp1 is a sweep over dataset.sigma, loss, seed; without -m" in log


def test_sweep_goes_on_past_failed_runs_and_exits_1(tmp_path):
    sweep_dir = tmp_path / "sweep"
    code, stderr = run_main(["-m", "loss=topk_group", "loss.k=6,7,2", f"hydra.sweep.dir={sweep_dir}"])
    assert code == 1 and "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 3, stderr  # one per failed run, one for the sweep
    assert "loss.k=6 must be" in errors[0] and "loss.k=7 must be" in errors[1] and "/sweep/0:" in errors[0]
    assert errors[2] == "Error: 2 runs of the sweep failed; their results.json and train.log say why."
    statuses = [strict_record(sweep_dir / str(job))["status"] for job in range(3)]
    assert statuses == ["failed", "failed", "completed"]
    assert "1 completed, 2 failed" in stderr


def test_a_resumed_sweep_counts_its_refused_runs_and_exits_1(tmp_path):
    sweep_dir = tmp_path / "sweep"
    assert run_main(["-m", "seed=0,1", f"hydra.sweep.dir={sweep_dir}"])[0] == 0
    runs = snapshot(sweep_dir / "0"), snapshot(sweep_dir / "1")
    code, stderr = run_main(["-m", "seed=0,1", "optim.lr=0.5", "trainer.resume=true", f"hydra.sweep.dir={sweep_dir}"])
    assert code == 1 and "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 3 and all("another training configuration: optim.lr" in line for line in errors[:2])
    assert errors[2] == "Error: 2 runs were refused and left as they were (the errors above say why)."
    assert "Sweep " in stderr and ": 2 refused." in stderr  # this sweep's jobs: both refused
    assert [snapshot(sweep_dir / job) for job in "01"] == list(runs)  # their logs untouched too
    assert not (sweep_dir / ".refused").exists()
    assert run_main(["-m", "seed=0,1", "trainer.resume=true", f"hydra.sweep.dir={sweep_dir}"])[0] == 0


def sigterm_sweep(sweep_dir: Path, launcher_args) -> subprocess.CompletedProcess:
    """Start a sweep of long runs, SIGTERM the launching process once a checkpoint exists."""
    args = [sys.executable, str(ROOT / "train.py"), "-m", "seed=0,1,2", "trainer.epochs=100000",
            "trainer.progress=false", "trainer.eval_every=1000", "trainer.num_threads=1",
            f"hydra.sweep.dir={sweep_dir}", *launcher_args]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list(sweep_dir.rglob("last.pt")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]],
                         ids=["basic", "joblib"])
def test_sigterm_stops_a_sweep_with_one_line_and_interrupted_records(tmp_path, launcher):
    sweep_dir = tmp_path / "sweep"
    result = sigterm_sweep(sweep_dir, launcher)
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(("Interrupted", "Error"))]
    assert lines == [f"Interrupted: the records in {sweep_dir} say where each run stopped; continue the "
                     "sweep with:"]
    command = result.stderr.splitlines()[result.stderr.splitlines().index(lines[0]) + 1]
    assert shlex.split(command)[-1] == f"trainer.resume={sweep_dir}" and "-m" in shlex.split(command)
    records = [strict_record(path.parent) for path in sorted(sweep_dir.rglob("results.json"))]
    assert records and all(record["status"] == "interrupted" for record in records)
    assert all("resume continues after epoch" in record["error"] for record in records)


def test_cli_exit_code_and_sentence_in_a_new_process(tmp_path):
    result = run_cli(["trainer.batch_size=0", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: trainer.batch_size must be")


def test_sigterm_to_the_process_group_with_data_workers_is_interrupted_and_resumes_exactly(tmp_path):
    """What SLURM (at a time limit or a preemption) and ``timeout`` do: SIGTERM to every process
    of the group, the image-decoding workers too, twice in quick succession. The run stops at a
    batch boundary as *interrupted* (exit 130, no traceback), and resuming it gives the history of
    the same run never stopped."""
    from topk.data.fixtures import write_plantnet

    write_plantnet(tmp_path / "plantnet_300K", [12] * 6, 2, 2)
    args = [f"data_root={tmp_path}", "dataset=plantnet", "image_size=16", "model=mlp", "k=3",
            "trainer.num_workers=2", "trainer.batch_size=4", "trainer.epochs=12", "trainer.progress=false",
            "trainer.num_threads=1"]
    stopped = tmp_path / "stopped"
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args, f"hydra.run.dir={stopped}"],
                               cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while not (stopped / "checkpoints" / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)
    time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)
    stderr = process.communicate(timeout=60)[1]
    assert_one_sentence(process.returncode, stderr, 130, rf"^Interrupted; its checkpoint and record are in {stopped}; continue it with:$")
    record = strict_record(stopped)
    assert record["status"] == "interrupted" and record["provenance"]["ended_utc"]
    assert not (stopped / "run.lock").exists()
    # the printed command, pasted, resumes (train.py in this process), and the run never stopped
    command = shlex.split(stderr.splitlines()[-1])
    assert command[:2] == ["python", "train.py"] and command[-1] == f"trainer.resume={stopped}", command
    assert run_main(command[2:], quick=False)[0] == 0
    assert run_main([*args, f"hydra.run.dir={tmp_path / 'whole'}"], quick=False)[0] == 0
    columns = ["epoch", "lr", "train/loss", "train/top1", "val/top1"]
    resumed = pd.read_csv(stopped / "history.csv")[columns]
    whole = pd.read_csv(tmp_path / "whole" / "history.csv")[columns]
    pd.testing.assert_frame_equal(resumed, whole)
    assert strict_record(stopped)["test"] == strict_record(tmp_path / "whole")["test"]


def empty_test_class_folders(root: Path) -> list[str]:
    """Pl@ntNet whose test class folders are all empty (was scored 0 %)."""
    from topk.data.fixtures import write_plantnet

    write_plantnet(root / "plantnet_300K", [6] * 6, 1, 1)
    for folder in (root / "plantnet_300K" / "images" / "test").iterdir():
        for image in folder.iterdir():
            image.unlink()
    return ["dataset=plantnet"]


def empty_training_class_folder(root: Path) -> list[str]:
    """Pl@ntNet with one species' training folder empty (was a class never trained on)."""
    from topk.data.fixtures import write_plantnet

    species = write_plantnet(root / "plantnet_300K", [6] * 6, 1, 1)
    for split in ("train", "val", "test"):
        for image in (root / "plantnet_300K" / "images" / split / species[2]).iterdir():
            image.unlink()
    return ["dataset=plantnet"]


def non_finite_embeddings(split: str, value: float):
    def damage(root: Path) -> list[str]:
        """Embeddings with one NaN or infinite feature in ``split`` (was trained on, or lost the
        test metrics after training)."""
        from topk.data.fixtures import write_embeddings

        write_embeddings(root / "embeddings", {"train": 24, "test": 12})
        path = root / "embeddings" / f"{split}.npz"
        data = dict(np.load(path))
        data["features"][3, 1] = value
        np.savez(path, **data)
        return ["dataset=embeddings", "trainer.selection_metric=last"]
    return damage


DATA_FAULTS = [
    (empty_test_class_folders, r"the test split read from \S+/images/test holds no samples"),
    (empty_training_class_folder, r"the training folder \S+/images/train has no training sample of 1 of its "
                                  r"6 classes \(\d+\); a class without training data cannot be learnt"),
    (non_finite_embeddings("train", float("nan")), r"the train split read from \S+/train.npz holds NaN or infinite features"),
    (non_finite_embeddings("test", float("inf")), r"the test split read from \S+/test.npz holds NaN or infinite features"),
]


@pytest.mark.parametrize("damage,pattern", DATA_FAULTS, ids=[d.__doc__.split("(")[0].strip() for d, _ in DATA_FAULTS])
def test_data_that_cannot_be_trained_or_scored_is_one_sentence_before_training(earlier_run, tmp_path, damage, pattern):
    earlier, files = earlier_run
    args = damage(tmp_path / "data")
    data_files = snapshot(tmp_path / "data")
    run_dir = tmp_path / "run"
    code, stderr = run_main([*args, f"data_root={tmp_path / 'data'}", "image_size=16", "model=mlp", "k=3",
                             "trainer.num_workers=0", "trainer.batch_size=8", f"hydra.run.dir={run_dir}"])
    sentence = assert_one_sentence(code, stderr, 1, pattern)
    record = strict_record(run_dir)
    assert record["status"] == "failed" and record["error"].endswith(sentence)
    assert not (run_dir / "history.csv").exists()
    assert snapshot(tmp_path / "data") == data_files and snapshot(earlier) == files
