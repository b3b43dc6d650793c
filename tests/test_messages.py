"""Issue 35: tracebacks and unclear messages of ``python train.py`` that are now one sentence.

A config group set to null, batches of one sample for a model with BatchNorm, a folder name
longer than the file system allows, a sweep subdir naming a whole config group, a data folder
this user cannot read, ``trainer.epochs=null`` and a data set with a single class. Each case runs
``train.py``'s Hydra entry point in this process (:func:`test_faults.run_main`) and asserts the
exit code, one ``Error:`` sentence and no traceback; the unreadable folder runs in a new process
that cannot override file permissions (as root, without the capabilities that let it).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_faults import assert_one_sentence, run_main, strict_record

from conftest import ROOT

# A small image model with BatchNorm: ResNet-18 on 8-pixel random images, whose last block's
# output is one value per channel and sample (torch refuses a training batch of one there).
RESNET_ON_TINY_IMAGES = ["dataset=random_images", "dataset.num_classes=10", "dataset.image_size=8",
                         "dataset.test_size=4", "model=resnet18", "k=5", "trainer.epochs=1",
                         "trainer.tensorboard=false"]
LONG_NAME = "a" * 300  # a folder name of 300 bytes; Linux file systems allow 255


NULL_GROUPS = [
    (["loss=null"], r"loss=null chooses no option, and the config group loss needs one; choose one of cal_hinge, ce, "),
    (["dataset=null"], r"dataset=null .* choose one of cifar100, circles, .*, or leave dataset out for its default\.$"),
    (["-m", "loss=null"], r"loss=null chooses no option"),
    (["-m", "loss=ce,null"], r"loss=null chooses no option"),
]


@pytest.mark.parametrize("args,pattern", NULL_GROUPS, ids=["loss", "dataset", "sweep", "sweep value"])
def test_a_config_group_set_to_null_lists_its_options_and_writes_nothing(tmp_path, args, pattern):
    code, stderr = run_main([*args, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert_one_sentence(code, stderr, 1, "^Error: " + pattern)
    assert list(tmp_path.iterdir()) == []


def test_a_null_option_among_an_experiments_sweep_values_is_one_sentence(tmp_path):
    """The null comes from an experiment file's ``hydra.sweeper.params``, not the command line:
    caught when the sweep's jobs are composed, before any runs (Hydra only warns about an error
    in a callback and would go on to its own traceback)."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "with_null.yaml").write_text(
        "# @package _global_\nhydra:\n  sweeper:\n    params:\n      loss: ce,null\n")
    code, stderr = run_main(["-m", "+experiment=with_null", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                             f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert_one_sentence(code, stderr, 1, r"^Error: job 1 of the sweep \(loss=null .*\): loss=null chooses no option, "
                                         r"and the config group loss needs one; choose one of cal_hinge, ce, .* "
                                         r"Nothing was run\.$")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("args,pattern", [
    (["trainer.epochs=null"], r"^Error: trainer.epochs must be a whole number of at least 1, got null\.$"),
    (["trainer.ks=[null]"], r"^Error: trainer.ks must be a list of whole numbers of at least 1, e.g. \[1, 5\], "
                            r"got null in the list\.$"),
], ids=["epochs", "ks"])
def test_null_where_a_number_is_needed_says_what_is_allowed(tmp_path, args, pattern):
    code, stderr = run_main([*args, f"hydra.run.dir={tmp_path / 'run'}"])
    assert_one_sentence(code, stderr, 1, pattern)
    assert not (tmp_path / "run").exists()


def test_batch_size_one_with_batch_norm_is_one_sentence_and_a_failed_record(tmp_path):
    run_dir = tmp_path / "run"
    code, stderr = run_main([*RESNET_ON_TINY_IMAGES, "dataset.train_size=8", "trainer.batch_size=1",
                             f"hydra.run.dir={run_dir}"])
    sentence = assert_one_sentence(code, stderr, 1, r"^Error: trainer.batch_size=1 trains the model's BatchNorm layers "
                                   r"on one sample per batch, .* choose trainer.batch_size=2 or more, or a model "
                                   r"without BatchNorm\.$")
    record = strict_record(run_dir)
    assert record["status"] == "failed" and record["error"].endswith(sentence)
    assert not (run_dir / "history.csv").exists()


def test_a_last_training_batch_of_one_sample_is_left_out_with_batch_norm(tmp_path):
    """Nine training samples in batches of four: the ninth batch (one sample) is left out, so the
    run completes instead of failing in torch's BatchNorm, and the log says so once."""
    run_dir = tmp_path / "run"
    code, stderr = run_main([*RESNET_ON_TINY_IMAGES, "dataset.train_size=9", "trainer.batch_size=4",
                             "trainer.epochs=2", f"hydra.run.dir={run_dir}"])
    assert code == 0 and "Traceback" not in stderr, stderr
    assert strict_record(run_dir)["status"] == "completed"
    log = (run_dir / "train.log").read_text()
    assert log.count("the 9 training samples leave a last batch of one sample (trainer.batch_size=4), "
                     "which BatchNorm cannot normalise: each epoch leaves it out") == 1


def test_only_a_lone_last_batch_is_left_out():
    """:func:`builder.without_lone_last_batch` on in-memory batches: 9 samples in batches of 4 give
    2 batches of 4 (a different sample left out each epoch); 10 samples keep their last batch
    of 2, and a limit that stops before the last batch is kept as it is."""
    from topk import build as builder
    from topk.data import TensorBatches
    from topk.data.batches import LimitedBatches
    from topk.data.splits import TensorSplit
    from topk.distributed import SINGLE_PROCESS

    def batches(size, limit=None):
        split = TensorSplit(torch.arange(size, dtype=torch.float32)[:, None], torch.arange(size))
        made = TensorBatches(split, 4, shuffle=True, seed=0)
        made = LimitedBatches(made, limit) if limit else made
        return builder.without_lone_last_batch(made, size, 4, SINGLE_PROCESS)

    nine = batches(9)
    left_out = set()
    for epoch in range(4):
        nine.set_epoch(epoch)
        labels = torch.cat([y for _, y in nine]).tolist()
        assert len(nine) == 2 and len(labels) == 8 == len(set(labels))
        left_out |= set(range(9)) - set(labels)
    assert len(left_out) > 1
    assert [len(y) for _, y in batches(10)] == [4, 4, 2]
    assert [len(y) for _, y in batches(9, limit=1)] == [4]


def test_a_model_without_batch_norm_keeps_a_last_batch_of_one(tmp_path):
    run_dir = tmp_path / "run"
    code, stderr = run_main(["dataset.train_per_class=3", "dataset.val_per_class=0", "trainer.selection_metric=last",
                             "k=3", "trainer.batch_size=1", f"hydra.run.dir={run_dir}"])
    assert code == 0, stderr
    assert "BatchNorm" not in (run_dir / "train.log").read_text()


@pytest.mark.parametrize("args,key", [
    ([f"hydra.run.dir={{tmp}}/{LONG_NAME}/run"], "hydra.run.dir"),
    (["-m", "seed=0,1", f"hydra.sweep.dir={{tmp}}/{LONG_NAME}"], "hydra.sweep.dir"),
    (["-m", "seed=0,1", "hydra.sweep.dir={tmp}/sweep", f"hydra.sweep.subdir=${{hydra.job.num}}_{LONG_NAME}"],
     "hydra.sweep.subdir"),
], ids=["run", "sweep", "subdir"])
def test_a_folder_name_longer_than_the_file_system_allows_is_one_sentence(tmp_path, args, key):
    code, stderr = run_main([arg.replace("{tmp}", str(tmp_path)) for arg in args])
    assert_one_sentence(code, stderr, 1, rf"^Error: {key} holds a folder name of 30\d bytes \(\w+\.\.\.\), more than "
                                         rf"the 255 bytes a name may have on this file system; choose a shorter "
                                         rf"{key}=PATH\.$")
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_subdir_naming_a_config_group_is_one_sentence_before_any_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    code, stderr = run_main(["-m", "seed=0,1", f"hydra.sweep.dir={sweep_dir}", "hydra.sweep.subdir=${loss}_${seed}"])
    assert_one_sentence(code, stderr, 1, r"^Error: hydra.sweep.subdir=\$\{loss\}_\$\{seed\} puts the whole loss config "
                                         r"\(its settings, not a name\) in a folder name; name the folder after the "
                                         r"loss option with hydra.sweep.subdir=\$\{hydra.runtime.choices.loss\}_\$\{seed\}\.$")
    assert not sweep_dir.exists()


def test_a_data_set_with_a_single_class_is_one_sentence(tmp_path):
    from topk.data.fixtures import write_embeddings

    write_embeddings(tmp_path / "data" / "embeddings", {"train": 12, "test": 6}, classes=1)
    run_dir = tmp_path / "run"
    code, stderr = run_main(["dataset=embeddings", f"data_root={tmp_path / 'data'}", "loss=smooth_svm", "k=1",
                             "trainer.selection_metric=last", f"hydra.run.dir={run_dir}"])
    assert_one_sentence(code, stderr, 1, r"^Error: the data set read from \S+/train.npz has a single class, and top-k "
                                         r"classification needs at least 2 \(with one, every prediction is right\); "
                                         r"give it samples of at least 2 classes\.$")
    assert strict_record(run_dir)["status"] == "failed"


def test_a_loss_given_a_single_class_says_so():
    from topk.errors import ConfigError
    from topk.losses.targets import check_k

    with pytest.raises(ConfigError, match=r"^loss.k=1 needs at least 2 classes, and the data has 1: top-k of a single "
                                          r"class is always right; give the data at least 2 classes\.$"):
        check_k(1, 1, key="loss.k")


PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def without_read_override() -> None:
    """For a child process run as root: drop the capabilities that read any file whatever its
    permissions, so that the child is refused as any other user is (Linux)."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)


def closed_to_this_user(folder: Path) -> bool:
    """Whether a process started as :func:`without_read_override` starts them is refused ``folder``."""
    probe = subprocess.run([sys.executable, "-c", f"import os; os.listdir({str(folder)!r})"],
                           preexec_fn=without_read_override, capture_output=True)
    return probe.returncode != 0


def cifar_folder(root: Path) -> tuple[list[str], Path]:
    """A tiny CIFAR-100 whose ``cifar-100-python`` folder has no permissions."""
    from conftest import write_tiny_cifar100

    write_tiny_cifar100(root, train_per_class=2, test_per_class=1)
    return ["dataset=cifar100", "dataset.val_size=0", "model=linear"], root / "cifar-100-python"


def plantnet_class_folder(root: Path) -> tuple[list[str], Path]:
    """A tiny Pl@ntNet-300K one of whose training class folders has no permissions (``os.walk``
    passed over it: the class looked empty)."""
    from topk.data.fixtures import write_plantnet

    species = write_plantnet(root / "plantnet_300K", [4] * 4, 1, 1)
    return (["dataset=plantnet", "image_size=16", "model=mlp", "k=3", "trainer.num_workers=0"],
            root / "plantnet_300K" / "images" / "train" / species[1])


@pytest.mark.skipif(sys.platform != "linux", reason="capabilities and permissions as Linux has them")
@pytest.mark.parametrize("closed", [cifar_folder, plantnet_class_folder], ids=["cifar folder", "plantnet class folder"])
def test_an_unreadable_data_folder_is_named_with_what_to_do(tmp_path, closed):
    args, folder = closed(tmp_path / "data")
    folder.chmod(0)
    try:
        if not closed_to_this_user(folder):
            pytest.skip("this process reads every folder whatever its permissions")
        result = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), *args, f"data_root={tmp_path / 'data'}", "trainer.epochs=1",
             "trainer.progress=false", f"hydra.run.dir={tmp_path / 'run'}"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=without_read_override)
    finally:
        folder.chmod(0o755)
    assert_one_sentence(result.returncode, result.stderr, 1,
                        rf"^Error: {folder} cannot be read \(permission denied\), so dataset cannot be built; give "
                        rf"your user read access to it \(e.g. chmod -R a\+rX {folder}\) or set dataset.root to a "
                        r"copy it can read\.$")
    assert strict_record(tmp_path / "run")["status"] == "failed"
