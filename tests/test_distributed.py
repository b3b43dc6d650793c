"""Data-parallel training: shares of the batches, and torchrun runs (2 processes, gloo, CPU)
whose records equal a single process's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from image_data import write_folder_split
from test_faults import run_main

from conftest import ROOT, compose_config
from topk.data.batches import TensorBatches, epoch_seed
from topk.data.images import EpochSampler
from topk.data.splits import TensorSplit
from topk.distributed import (
    SCRATCH_ENV,
    SCRATCH_PREFIX,
    Distributed,
    check_global_batch,
    epoch_order,
    process_seed,
    remove_worker_scratch,
    worker_argv,
)
from topk.errors import ConfigError


def processes(world_size):
    return [Distributed(rank=rank, world_size=world_size) for rank in range(world_size)]


@pytest.mark.parametrize("size,world_size", [(10, 2), (11, 2), (7, 3), (2, 4)])
def test_evaluation_shares_count_every_sample_once(size, world_size):
    shares = [epoch_order(size, False, 0, 0, context, pad=False) for context in processes(world_size)]
    assert sorted(torch.cat(shares).tolist()) == list(range(size))


@pytest.mark.parametrize("shuffle", [True, False])
def test_one_process_order_is_the_samplers_and_the_permutation_of_the_epoch_seed(shuffle):
    """The single-process order, drawn without the sampler, is the one torch's DistributedSampler
    gives one process; it is randperm seeded with ``epoch_seed(seed, epoch)`` as before."""
    for epoch in (1, 2, 7):
        sampler = torch.utils.data.DistributedSampler(range(50), 1, 0, shuffle=shuffle, seed=epoch_seed(3, 0))
        sampler.set_epoch(epoch)
        if shuffle:
            assert list(sampler) == torch.randperm(50, generator=torch.Generator().manual_seed(epoch_seed(3, epoch))).tolist()
        for pad in (False, True):
            assert epoch_order(50, shuffle, epoch_seed(3, 0), epoch, Distributed(), pad).tolist() == list(sampler)


@pytest.mark.parametrize("size,world_size", [(10, 2), (11, 2), (7, 3), (2, 4), (1, 3)])
def test_training_shares_are_padded_to_equal_length_with_the_first_samples(size, world_size):
    order = epoch_order(size, True, 5, 2, Distributed(), pad=True)
    shares = [epoch_order(size, True, 5, 2, context, pad=True) for context in processes(world_size)]
    assert len({len(share) for share in shares}) == 1
    taken = torch.stack(shares, dim=1).flatten()  # back in global order
    padded = -size % world_size
    assert taken.tolist() == (order.tolist() * world_size)[: size + padded]
    sampler = torch.utils.data.DistributedSampler(range(size), world_size, 1, shuffle=True, seed=5)
    sampler.set_epoch(2)
    assert shares[1].tolist() == list(sampler)


def test_each_process_trains_on_its_share_of_the_single_process_global_batch():
    split = TensorSplit(torch.arange(40.0)[:, None], torch.arange(40) % 4)
    single = TensorBatches(split, batch_size=8, shuffle=True, seed=3)
    shared = [TensorBatches(split, batch_size=8, shuffle=True, seed=3, distributed=context, pad=True)
              for context in processes(2)]
    for epoch in (1, 2):
        for batches in [single, *shared]:
            batches.set_epoch(epoch)
        global_batches = [set(inputs[:, 0].tolist()) for inputs, _ in single]
        local = [[inputs[:, 0].tolist() for inputs, _ in batches] for batches in shared]
        assert len(local[0]) == len(local[1]) == len(global_batches) == len(shared[0])
        for index, expected in enumerate(global_batches):
            assert len(local[0][index]) == len(local[1][index]) == 4
            assert set(local[0][index]) | set(local[1][index]) == expected


def test_image_sampler_shares_keep_each_sample_seed():
    single = list(EpochSampler(9, shuffle=True, seed=1))
    shared = [list(EpochSampler(9, shuffle=True, seed=1, distributed=context, pad=True))
              for context in processes(2)]
    assert len(shared[0]) == len(shared[1]) == 5
    assert set(shared[0]) | set(shared[1]) == set(single)  # same (index, seed) pairs, one repeat


def test_every_process_draws_its_own_noise():
    draws = []
    for context in processes(4):
        torch.manual_seed(process_seed(0, context))
        draws.append(torch.randn(8))
    assert len({tuple(draw.tolist()) for draw in draws}) == 4
    assert process_seed(0, Distributed(1, 4)) == process_seed(0, Distributed(1, 4))


def test_global_batch_must_divide_over_the_processes():
    check_global_batch(None, Distributed(0, 2))
    check_global_batch(64, Distributed(0, 2))
    with pytest.raises(ConfigError, match="batch_size=63 is the global batch.*multiple of 2"):
        check_global_batch(63, Distributed(1, 2))


@pytest.mark.parametrize("mine,theirs", [([0.5, 0.25, 0.125, 0.0, 1.0], [7.0, 8.0]), ([3.0], [7.0, 8.0, 9.0]), ([], [1.0])])
def test_gather_concat_pads_to_the_longest_and_cuts_back(monkeypatch, mine, theirs):
    """Rank 0 of two, all_gather faked with what rank 1 sends (its length, then its values padded
    to the longest): every process's values in rank order, from equal-length all-gathers."""
    sent = []

    def all_gather(outputs, tensor):
        sent.append(tensor.clone())
        if len(sent) == 1:
            other = torch.tensor([len(theirs)])
        else:
            other = torch.tensor(theirs + [0.0] * (len(tensor) - len(theirs)))
        assert [output.shape for output in outputs] == [tensor.shape] * 2
        outputs[0].copy_(tensor)
        outputs[1].copy_(other)

    monkeypatch.setattr(torch.distributed, "all_gather", all_gather)
    gathered = Distributed(0, 2).gather_concat(torch.tensor(mine))
    assert gathered.tolist() == mine + theirs
    assert [t.tolist() for t in sent] == [[len(mine)], mine + [0.0] * max(0, len(theirs) - len(mine))]
    assert Distributed().gather_concat(torch.tensor(mine)).tolist() == mine  # one process: itself


def test_processes_after_the_first_leave_hydra_output_to_rank_0(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv(SCRATCH_ENV, raising=False)
    argv = ["train.py", "hydra.run.dir=outputs/x", "loss=ce"]
    assert worker_argv(argv) == argv and SCRATCH_ENV not in os.environ
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv(SCRATCH_ENV, "")  # restored (unset) after the test
    rewritten = worker_argv(argv)
    assert "hydra.run.dir=outputs/x" not in rewritten and "loss=ce" in rewritten
    scratch = Path(next(a for a in rewritten if a.startswith("hydra.run.dir=")).split("=", 1)[1])
    assert scratch.is_dir() and "hydra/job_logging=stdout" in rewritten
    assert os.environ[SCRATCH_ENV] == str(scratch)
    (scratch / "0").mkdir()  # a sweep's job directory
    remove_worker_scratch()
    assert not scratch.exists()


def test_readme_torchrun_commands_compose_with_a_global_batch_for_two_processes():
    lines = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("torchrun ")]
    single_runs = [line for line in lines if " -m " not in line]  # the sweep is run by a test below
    assert len(lines) == 3 and len(single_runs) == 2
    for line in single_runs:
        words = line.split("#")[0].split()
        cfg = compose_config(words[words.index("train.py") + 1 :])
        check_global_batch(cfg.trainer.batch_size, Distributed(0, 2))
        assert cfg.trainer.distributed_backend == "auto"


# ---- torchrun runs ----------------------------------------------------------------------------

CIRCLES = ["trainer.epochs=6", "trainer.batch_size=60", "optim=sgd", "optim.lr=0.1", "trainer.progress=false"]


def torchrun(args, processes=2, timeout=300, temporary_dir=None):
    """``torchrun --standalone --nproc_per_node=N train.py ARGS`` started in its own session
    (with ``TMPDIR=temporary_dir`` if given)."""
    env = dict(os.environ)
    env.pop("HYDRA_FULL_ERROR", None)
    if temporary_dir is not None:
        env["TMPDIR"] = str(temporary_dir)
    # on the CPU (gloo) whatever the machine: a GPU machine with fewer GPUs than processes refuses
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={processes}", str(ROOT / "train.py"), *args, "trainer.device=cpu"]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def finished(process, timeout=300):
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def assert_same_test_metrics(got: dict, expected: dict):
    assert set(got) == set(expected)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name


def single_process(run_dir, overrides):
    """The reference: ``train.py`` without torchrun, in this process."""
    code, stderr = run_main([*overrides, "trainer.num_threads=1", f"hydra.run.dir={run_dir}"], quick=False)
    assert code == 0, stderr[-2000:]
    return record(run_dir)


def test_torchrun_on_circles_equals_one_process_and_resumes_after_a_kill(tmp_path):
    expected = single_process(tmp_path / "one", CIRCLES)

    returncode, output = finished(torchrun([*CIRCLES, f"hydra.run.dir={tmp_path / 'two'}"]))
    assert returncode == 0, output[-3000:]
    two = record(tmp_path / "two")
    assert two["status"] == "completed" and two["processes"] == 2
    assert two["samples"] == {"val": 300, "test": 1800}  # every sample once, over both processes
    assert two["provenance"]["world_size"] == 2 and two["provenance"]["device"] == "cpu"
    assert_same_test_metrics(two["test"], expected["test"])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["one", "two"]  # nothing from rank 1

    # SIGTERM to torchrun once the first epoch is saved; torchrun passes it on to both processes,
    # which stop together at the next batch. Resuming finishes with the same numbers.
    long = [*CIRCLES, "trainer.epochs=40"]
    killed = tmp_path / "killed"
    process = torchrun([*long, f"hydra.run.dir={killed}"])
    deadline = time.monotonic() + 120
    while not (killed / "checkpoints" / "last.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGTERM)
    returncode, output = finished(process)
    assert returncode != 0
    interrupted = record(killed)
    assert interrupted["status"] == "interrupted", output[-3000:]
    returncode, output = finished(torchrun([*long, "trainer.resume=true", f"hydra.run.dir={killed}"]))
    assert returncode == 0, output[-3000:]
    resumed = record(killed)
    assert resumed["status"] == "completed"
    assert "resumed from" in output
    uninterrupted = single_process(tmp_path / "long", long)
    assert_same_test_metrics(resumed["test"], uninterrupted["test"])


def write_plantnet_with_even_training_split(root: Path) -> Path:
    """Pl@ntNet's layout with 22 training images (11 global batches of 2 split evenly over two
    processes, so that both runs see the same batches), 11 validation images (shares of 6 and 5:
    the processes gather unequal numbers of probabilities for the average-k threshold) and 15
    test images."""
    species = [str(1355868 + 13 * index) for index in range(5)]
    images = root / "images"
    write_folder_split(images / "train", {s: [c] * n for c, (s, n) in enumerate(zip(species, (9, 5, 3, 3, 2)))},
                       species)
    write_folder_split(images / "val", {s: [c] * (3 if c == 0 else 2) for c, s in enumerate(species)}, species)
    write_folder_split(images / "test", {s: [c] * 3 for c, s in enumerate(species)}, species)
    (root / "plantnet300K_species_id_2_name.json").write_text(json.dumps({s: s for s in species}))
    return root


def test_torchrun_on_image_files_equals_one_process(tmp_path):
    root = write_plantnet_with_even_training_split(tmp_path / "plantnet")
    overrides = ["dataset=plantnet", f"dataset.root={root}", "dataset.image_size=8", "dataset.resize_size=10",
                 "model=mlp", "model.pretrained=false", "loss=noised_bal", "loss.epsilon=0", "k=2",
                 "trainer.epochs=2", "trainer.batch_size=2", "trainer.eval_batch_size=4", "trainer.num_workers=0",
                 "optim.lr=0.01", "trainer.progress=false"]
    expected = single_process(tmp_path / "one", overrides)
    returncode, output = finished(torchrun([*overrides, f"hydra.run.dir={tmp_path / 'two'}"]))
    assert returncode == 0, output[-3000:]
    two = record(tmp_path / "two")
    assert two["samples"] == expected["samples"] == {"val": 11, "test": 15}
    assert_same_test_metrics(two["test"], expected["test"])
    assert {"avg2", "macro_avg5"} <= set(two["test"]) & set(two["val"])
    assert two["val"] == pytest.approx(expected["val"], rel=1e-5, abs=1e-6)


def test_readme_torchrun_sweep_runs_each_job_on_every_process_and_leaves_no_scratch(tmp_path):
    """The README's ``torchrun ... train.py -m`` line: Hydra's jobs run one after the other, each
    on both processes; rank 1's scratch output (under TMPDIR) is gone afterwards. Without one
    process group per process for the whole sweep, the second job failed to connect in 3 of 6
    tries."""
    line = next(line for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("torchrun ") and " -m " in line)
    words = line.split("#")[0].split()
    arguments = words[words.index("train.py") + 1 :]
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    sweep = tmp_path / "sweep"
    returncode, output = finished(torchrun([*arguments, "trainer.progress=false", f"hydra.sweep.dir={sweep}"],
                                           temporary_dir=temporary))
    assert returncode == 0, output[-3000:]
    records = [record(sweep / job) for job in ("0", "1")]
    assert [r["seed"] for r in records] == [0, 1]
    assert all(r["status"] == "completed" and r["processes"] == 2 and r["samples"] == {"val": 300, "test": 1800}
               for r in records)
    assert list(temporary.glob(f"{SCRATCH_PREFIX}*")) == []  # (torch's own torchelastic_* may stay)


def test_more_processes_than_gpus_on_a_node_is_one_sentence(monkeypatch):
    """torchrun --nproc_per_node=2 on a one-GPU machine: the second process names the fix rather
    than failing in CUDA's words ("invalid device ordinal")."""
    from topk import distributed
    from topk.errors import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"^torchrun started 2 or more processes on this node but 1 GPU\(s\) are "
                                          r"visible: start at most 1 \(--nproc_per_node=1\), one per GPU, or train "
                                          r"on the CPU with trainer.device=cpu.$"):
        distributed.setup("auto", torch.device("cuda"))
