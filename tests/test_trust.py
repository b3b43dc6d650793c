"""A run's config is data, never code (issue 35, docs/trust.md).

A run directory's ``.hydra/config.yaml`` may come from someone else: ``+eval`` composes it against
the schema, and each ``_target_`` in it, at any depth, may only name a callable that a config file
of the search path names (``conf/``, a folder added with ``hydra.searchpath``). Each hostile file
below would run its payload if instantiated (a control shows it does); through ``+eval`` the
payload never runs (its marker file is not created, the files it would write or delete are as
they were), and the refusal is one sentence, exit 1, no traceback. The same holds for callables
named on the command line, which are told how to add an option file instead. A user's own option
files keep working. Then the messages ``+eval`` gave as tracebacks or bare ``[Errno ...]``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import pathlib
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from hydra.utils import instantiate
from omegaconf import OmegaConf
from test_faults import assert_one_sentence, run_as_typed, run_main, snapshot

from conftest import CONF, run_cli
from topk.schema.store import offered, search_path
from topk.schema.targets import Offered, first_outside, offers_of


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A completed run with both checkpoints and a validation split."""
    run_dir = tmp_path_factory.mktemp("trust") / "run"
    code, stderr = run_main([f"hydra.run.dir={run_dir}", "trainer.selection_metric=val/top1"])
    assert code == 0, stderr
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "checkpoints" / "best.pt").is_file()
    return run_dir


@pytest.fixture
def run(finished, tmp_path):
    """A copy of the finished run, to alter."""
    return Path(shutil.copytree(finished, tmp_path / "run"))


def edit_config(run_dir: Path, change) -> None:
    """Rewrite the run's saved config with ``change(config)`` applied to it as plain data."""
    path = run_dir / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    change(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


class RunsCode:
    """Unpickling it creates a file: what a hostile pickle could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def torch_load_payload(tmp_path: Path) -> tuple[dict, Path]:
    """A ``torch.load`` of a pickle that creates a marker file, and that marker."""
    marker, payload = tmp_path / "code_ran", tmp_path / "payload.pt"
    torch.save(RunsCode(marker), payload)
    return {"_target_": "torch.load", "f": str(payload), "weights_only": False}, marker


# ---- a hostile run directory ----------------------------------------------------------------------

def test_the_payloads_run_when_instantiated(tmp_path, finished):
    """The control: the nodes the tests below hide in a run's config do run when Hydra instantiates them."""
    node, marker = torch_load_payload(tmp_path)
    instantiate(OmegaConf.create({"images": {"_target_": "topk.data.augment.ImageAugmentation", "cutout_size": node}}))
    assert marker.exists()
    victim = tmp_path / "written.json"
    instantiate(OmegaConf.create({"x": [{"_target_": "topk.records.write_json_atomic", "path": str(victim), "data": {}}]}))
    assert victim.exists()


def hostile_configs(tmp_path: Path, run_dir: Path):
    """``(where, change, proof)``: a callable hidden in the config, and what shows it never ran."""
    node, marker = torch_load_payload(tmp_path)
    victim = tmp_path / "victim.json"
    prune = {"_target_": "topk.run_dir.prune_checkpoints", "run_dir": str(run_dir), "keep": "none"}
    write = {"_target_": "topk.records.write_json_atomic", "path": str(victim), "data": {"pwned": True}}
    return {
        "torch.load in augment.images.cutout_size": (
            lambda c: c["augment"]["images"].update(cutout_size=node), lambda: not marker.exists()),
        "write_json_atomic in a list, trainer.ks[1]": (
            lambda c: c["trainer"]["ks"].insert(1, write), lambda: not victim.exists()),
        "prune_checkpoints in model.head": (
            lambda c: c["model"].update(head=prune), lambda: (run_dir / "checkpoints" / "best.pt").exists()),
        "torch.load as a whole group": (
            lambda c: c.update(loss=node), lambda: not marker.exists()),
    }


HOSTILE = ["torch.load in augment.images.cutout_size", "write_json_atomic in a list, trainer.ks[1]",
           "prune_checkpoints in model.head", "torch.load as a whole group"]


@pytest.mark.parametrize("entry", ["scripts/evaluate.py", "train.py +eval"])
@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_run_config_runs_nothing_and_is_one_sentence(run, tmp_path, case, entry):
    change, never_ran = hostile_configs(tmp_path, run)[case]
    edit_config(run, change)
    before = snapshot(run)
    if entry == "train.py +eval":
        code, stderr = run_as_typed([f"+eval={run}"])
    else:
        code, stderr = evaluate_main([str(run)])
    sentence = assert_one_sentence(code, stderr, 1, r"config.yaml names \S+ in \S+, a callable no config file of "
                                   r"conf/ or of a folder added with hydra.searchpath names, so nothing of it was run")
    assert "hydra.searchpath=[file://DIR]" in sentence
    assert never_ran() and snapshot(run) == before


def test_a_hostile_run_config_through_a_new_train_py_process(run, tmp_path):
    """The whole command as a user types it: a new interpreter, the payload never runs."""
    node, marker = torch_load_payload(tmp_path)
    edit_config(run, lambda c: c["augment"]["images"].update(cutout_size=node))
    before = snapshot(run)
    result = run_cli([f"+eval={run}"], cwd=tmp_path)
    assert_one_sentence(result.returncode, result.stderr, 1, r"names torch.load in augment.images.cutout_size._target_")
    assert not marker.exists() and snapshot(run) == before


def test_an_interpolation_that_makes_a_target_is_caught_once_resolved(run):
    """``${oc.decode:...}`` turns text into a mapping: the callables are checked again on the resolved config."""
    edit_config(run, lambda c: c.update(p22_steepness="${oc.decode:'{x: {_target_: os.getcwd}}'}"))
    code, stderr = evaluate_main([str(run)])
    assert_one_sentence(code, stderr, 1, r"names os.getcwd in p22_steepness.x._target_")
    edit_config(run, lambda c: c["augment"]["images"].update(cutout_size="${oc.decode:'{_target_: os.getcwd}'}"))
    code, stderr = evaluate_main([str(run)])
    assert_one_sentence(code, stderr, 1, r"augment.images.cutout_size must be a whole number .* got \{'_target_': 'os.getcwd'\}")


def test_a_yaml_tag_that_builds_an_object_is_refused(run, tmp_path):
    marker = tmp_path / "code_ran"
    path = run / ".hydra" / "config.yaml"
    path.write_text(path.read_text() + f"extra: !!python/object/apply:pathlib.Path.touch [{marker}]\n")
    code, stderr = evaluate_main([str(run)])
    assert_one_sentence(code, stderr, 1, r"config.yaml is not a readable run configuration \(could not determine a constructor")
    assert not marker.exists()


# ---- the command line -------------------------------------------------------------------------------

@pytest.mark.parametrize("args,key", [
    (["loss._target_=os.getcwd"], "loss._target_=os.getcwd"),
    (["-m", "loss._target_=torch.nn.CrossEntropyLoss,os.getcwd"], "loss._target_=os.getcwd"),
    (["+hydra.callbacks.spy._target_=os.getcwd"], "hydra.callbacks.spy._target_=os.getcwd"),
    (["+hydra.job_logging.handlers.spy.class=subprocess.call"], "hydra.job_logging.handlers.spy.class=subprocess.call"),
    (["-m", "+tune=smooth_svm", "hydra.sweeper.custom_search_space=shutil.rmtree"],
     "hydra.sweeper.custom_search_space=shutil.rmtree"),
])
def test_a_callable_on_the_command_line_says_how_to_add_an_option_file(tmp_path, args, key):
    code, stderr = run_main([*args, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    sentence = assert_one_sentence(code, stderr, 1, "^Error: " + key.replace(".", r"\.")
                                   + " names a callable that no config file of conf/ or of a folder added with "
                                   "hydra.searchpath names; to use it, ")
    if key.startswith("loss."):
        assert "write an option file DIR/loss/mine.yaml holding _target_: os.getcwd" in sentence
        assert "hydra.searchpath=[file://DIR] loss=mine" in sentence
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()


def test_a_callable_in_an_eval_override_is_one_sentence(run):
    before = snapshot(run)
    code, stderr = run_as_typed([f"+eval={run}", "loss._target_=os.getcwd"])
    assert_one_sentence(code, stderr, 1, r"^Error: loss._target_=os.getcwd names a callable .* DIR/loss/mine.yaml")
    assert snapshot(run) == before


def test_a_users_own_option_file_in_an_added_folder_still_works(tmp_path):
    """An option file of one's own (with the schema of ``conf/loss/ce.yaml``) trains with
    ``hydra.searchpath``, and its run evaluates when the same folder is given to ``+eval``."""
    folder = tmp_path / "my_conf"
    (folder / "loss").mkdir(parents=True)
    (folder / "loss" / "multi_margin.yaml").write_text(
        "defaults:\n  - /schema/loss/loss@_here_\n  - _self_\n\n_target_: torch.nn.MultiMarginLoss\nweight: null\n")
    searchpath, run_dir = f"hydra.searchpath=[file://{folder}]", tmp_path / "run"
    code, stderr = run_main([searchpath, "loss=multi_margin", f"hydra.run.dir={run_dir}"])
    assert code == 0, stderr
    code, stderr = run_as_typed([f"+eval={run_dir}"])  # without the folder: refused, and told to give it
    assert_one_sentence(code, stderr, 1, r"names torch.nn.MultiMarginLoss in loss._target_, .* "
                        r"give their folder with hydra.searchpath=\[file://DIR\]\.$")
    code, stderr = run_as_typed([f"+eval={run_dir}", searchpath])
    assert code == 0, stderr
    assert json.loads((run_dir / "eval.json").read_text())["test"]["top1"] >= 0


# ---- the allow-list -----------------------------------------------------------------------------------

def test_the_allow_list_is_every_callable_of_the_search_path_and_nothing_else():
    found = offered(search_path(CONF))
    in_conf = {line.split("_target_:")[1].split("#")[0].strip()
               for path in CONF.rglob("*.yaml") for line in path.read_text().splitlines() if "_target_:" in line}
    assert in_conf <= found.targets
    assert "hydra._internal.core_plugins.basic_launcher.BasicLauncher" in found.targets  # Hydra's own configs
    assert not {"torch.load", "os.system", "topk.records.write_json_atomic", "topk.run_dir.prune_checkpoints"} & found.targets
    assert found.schemas["topk.losses.hinge.TopKHingeLoss"].__name__ == "TopKHingeSchema"


def test_every_callable_is_found_at_any_depth_and_interpolations_offer_none():
    allowed = Offered(frozenset({"a.B"}))
    assert first_outside({"x": [{"y": [{"_target_": "a.B"}, {"_target_": "os.system"}]}]}, allowed) == (
        "x[0].y[1]._target_", "os.system")
    assert first_outside({"_target_": 3}, allowed) == ("_target_", 3)
    assert first_outside({"hydra": {"job_logging": {"handlers": {"h": {"()": "os.system"}}}}}, allowed) == (
        "hydra.job_logging.handlers.h.()", "os.system")
    assert first_outside({"model": {"class": "os.system"}}, allowed) is None  # only logging's class is called
    assert offers_of({"_target_": "${oc.env:X}", "y": {"_target_": "???"}}).targets == frozenset()


# ---- what +eval said with a traceback or a bare [Errno ...] ---------------------------------------------

def evaluate_main(argv) -> tuple[int, str]:
    """``scripts/evaluate.py ARGV`` (:func:`topk.evaluate.main`) in this process: ``(exit code, stderr)``."""
    from topk.evaluate import main

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, stderr.getvalue()


def cut_short(run_dir: Path) -> None:
    path = run_dir / ".hydra" / "config.yaml"
    text = path.read_text()
    path.write_text(text[:text.index("\nloss:")])


def invalid_yaml(run_dir: Path) -> None:
    (run_dir / ".hydra" / "config.yaml").write_text("trainer: {epochs: [1,\n")


@pytest.mark.parametrize("damage,pattern", [
    (cut_short, r"config.yaml has no (\w+, )*loss\b.*so it is not a whole run configuration \(cut short"),
    (invalid_yaml, r"config.yaml is not a readable run configuration \(.*\); the file is damaged or cut short"),
    (lambda r: edit_config(r, lambda c: c["trainer"].update(epochs="abc")),
     r"config.yaml does not fit this version's schema: trainer.epochs must be a whole number of at least 1, got 'abc'\.$"),
    (lambda r: edit_config(r, lambda c: c["trainer"].update(removed_since=1)),
     r"config.yaml does not fit this version's schema: trainer.removed_since is not a setting"),
    (lambda r: edit_config(r, lambda c: c["trainer"].pop("amp")),
     r"config.yaml does not fit this version's schema: trainer.amp has no value; give it one with trainer.amp=\.\.\."),
    (lambda r: edit_config(r, lambda c: c["augment"]["images"].update(_target_="mypkg.NotThere")),
     r"names mypkg.NotThere in augment.images._target_"),
])
def test_a_damaged_or_foreign_config_is_one_sentence(run, damage, pattern):
    damage(run)
    before = snapshot(run)
    code, stderr = run_as_typed([f"+eval={run}"])
    assert_one_sentence(code, stderr, 1, pattern)
    assert snapshot(run) == before


def test_an_older_versions_config_is_brought_up_to_date(run):
    """Keys renamed or added since (``topk.run_dir.RENAMED_KEYS``, ``ADDED_KEYS``) are read as now."""
    edit_config(run, lambda c: (c["loss"].update(class_weights=c["loss"].pop("weight")), c["trainer"].pop("also_select_on"),
                                [c["augment"]["images"].pop(key) for key in
                                 ("randaugment_ops", "randaugment_magnitude", "random_erasing")]))
    code, stderr = run_as_typed([f"+eval={run}", f"+eval_out={run / 'old.json'}"])
    assert code == 0, stderr
    assert json.loads((run / "old.json").read_text())["test"] == json.loads((run / "results.json").read_text())["test"]


def test_a_key_the_schema_lacks_is_refused_on_the_eval_command_line(run):
    code, stderr = run_as_typed([f"+eval={run}", "trainer.epoch=3"])
    assert_one_sentence(code, stderr, 1, r"^Error: trainer.epoch is not a setting; did you mean trainer.epochs\?")
    assert not (run / "eval.json").exists()


def test_an_unusable_best_pt_points_to_last_pt_not_to_training_from_scratch(run):
    (run / "checkpoints" / "best.pt").write_bytes(b"not a checkpoint")
    code, stderr = run_as_typed([f"+eval={run}"])
    sentence = assert_one_sentence(code, stderr, 1, r"best.pt cannot be read \(UnpicklingError\), so it cannot be "
                                   r"evaluated; evaluate last.pt with --checkpoint last \(\+eval_checkpoint=last with train.py\)\.$")
    assert "scratch" not in sentence
    (run / "checkpoints" / "last.pt").unlink()
    code, stderr = run_as_typed([f"+eval={run}"])
    assert_one_sentence(code, stderr, 1, r"the run has no last.pt either, so train it again to evaluate it\.$")


def test_a_run_without_checkpoints_says_neither_exists(run):
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").mkdir()
    for which in ("best", "last"):
        code, stderr = run_as_typed([f"+eval={run}", f"+eval_checkpoint={which}"])
        sentence = assert_one_sentence(code, stderr, 1, r"checkpoints holds neither best.pt nor last.pt .* no saved model to evaluate")
        assert "--checkpoint" not in sentence


def test_a_missing_output_folder_is_one_sentence_before_evaluating(run, tmp_path):
    code, stderr = run_as_typed([f"+eval={run}", f"+eval_out={tmp_path / 'no' / 'eval.json'}"])
    assert_one_sentence(code, stderr, 1, r"^Error: the folder \S+/no does not exist; create it, or write elsewhere "
                        r"with --out PATH \(\+eval_out=PATH with train.py\)\.$")
    assert not (tmp_path / "no").exists()


def test_a_folder_that_cannot_be_written_is_one_sentence_before_evaluating(run):
    from topk.run_dir import unwritable_reason

    if unwritable_reason(Path("/sys")) is None:
        pytest.skip("/sys can be written here")
    code, stderr = run_as_typed([f"+eval={run}", "+eval_out=/sys/eval.json"])
    sentence = assert_one_sentence(code, stderr, 1, r"^Error: /sys/eval.json cannot be written in /sys \(.+\); write elsewhere")
    assert "Errno" not in sentence


def test_a_full_disk_leaves_no_eval_json_and_the_retry_works(run, monkeypatch):
    """The disk fills while eval.json is written: nothing is left that blocks the next try."""
    real_write = pathlib.Path.write_text

    def fills_up(self, text, *args, **kwargs):
        if self.name.endswith(".tmp"):
            real_write(self, text[:10])
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_write(self, text, *args, **kwargs)

    before = snapshot(run)
    monkeypatch.setattr(pathlib.Path, "write_text", fills_up)
    code, stderr = run_as_typed([f"+eval={run}"])
    monkeypatch.undo()
    sentence = assert_one_sentence(code, stderr, 1, r"^Error: no space is left on the device holding \S+; free some and "
                                   r"evaluate again \(nothing was written\)\.$")
    assert "Errno" not in sentence and snapshot(run) == before  # no eval.json, no temporary file
    assert run_as_typed([f"+eval={run}"])[0] == 0 and (run / "eval.json").exists()


def test_a_cifar100_file_that_carries_code_is_refused_before_it_runs(tmp_path):
    """A run's ``dataset.root`` may point anywhere, even into the run directory: the release is
    unpickled with only the globals it holds (numpy arrays), so a crafted file runs nothing."""
    from conftest import compose_config, write_tiny_cifar100
    from topk import build as builder
    from topk.errors import DataError

    root, marker = write_tiny_cifar100(tmp_path / "data"), tmp_path / "code_ran"
    train_file = root / "cifar-100-python" / "train"
    with open(train_file, "rb") as handle:
        entry = pickle.load(handle, encoding="bytes")
    with open(train_file, "wb") as handle:
        pickle.dump({**entry, b"batch_label": RunsCode(marker)}, handle, protocol=2)
    cfg = compose_config(["dataset=cifar100", f"dataset.root={root}", "dataset.val_size=100"])
    with pytest.raises(DataError, match=r"train is not a readable CIFAR-100 python pickle \(UnpicklingError: it "
                       r"names \S+, which the release never holds and is not called\)"):
        builder.build(cfg.dataset, "dataset", seed=0)
    assert not marker.exists()
    pickle.loads(pickle.dumps(RunsCode(marker)))  # the control: unpickled freely, it runs
    assert marker.exists()
