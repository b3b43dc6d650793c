"""One place for every default: the Python constructors' defaults equal the YAML defaults, the
specialised files under conf/protocol/ set only values that differ, and the top-level ``k``
reaches every top-k loss and every K-dependent selection metric on every data set.

Only topk's own constructors are compared with the YAML: for torch's (``torch.optim.SGD``,
``torch.nn.CrossEntropyLoss``, ``MultiStepLR``) the YAML is the framework's only place, and torch's
own defaults are torch's business. Composition only: nothing is trained, no data set is read.
"""

from __future__ import annotations

import inspect
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_object
from omegaconf import OmegaConf

from conftest import CONF, compose_config

GROUPS = ["loss", "dataset", "model", "optim", "schedule", "augment"]
MISSING = object()


def options(group):
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


def top_level():
    """conf/train.yaml's own values (k, data_root, image_size, ...), which interpolations name."""
    train = OmegaConf.load(CONF / "train.yaml")
    return OmegaConf.masked_copy(train, [key for key in train if key not in ("defaults", "hydra")])


def option_node(group, option):
    """The node of conf/<group>/<option>.yaml, its interpolations resolved against train.yaml's
    top-level values (``${k}`` is 5)."""
    raw = OmegaConf.load(CONF / group / f"{option}.yaml")
    node = raw[group] if group in raw else raw  # file-based data sets are in the global package
    node = OmegaConf.masked_copy(node, [key for key in node if key != "defaults"])
    merged = OmegaConf.merge(top_level(), {"_option": node})
    return OmegaConf.to_container(merged._option, resolve=True)


def target_nodes(node):
    """The nodes of an option that hold ``_target_``: the option itself, or its parts (augment's
    ``images`` and ``mix``)."""
    if "_target_" in node:
        return [node]
    return [value for value in node.values() if isinstance(value, dict) and "_target_" in value]


def topk_targets():
    """``{_target_: {option file: its values}}`` for every option (or part of one) built by a topk
    constructor."""
    targets = defaultdict(dict)
    for group in GROUPS:
        for option in options(group):
            for node in target_nodes(option_node(group, option)):
                if node["_target_"].startswith("topk."):
                    values = {key: value for key, value in node.items() if not key.startswith("_")}
                    targets[node["_target_"]][f"{group}/{option}.yaml"] = values
    return dict(targets)


TARGETS = topk_targets()


def test_every_topk_group_option_is_compared():
    compared = {name for files in TARGETS.values() for name in files}
    assert {f"loss/{option}.yaml" for option in options("loss") if option != "ce"} <= compared
    assert {f"dataset/{option}.yaml" for option in options("dataset")} <= compared
    assert {f"model/{option}.yaml" for option in options("model")} <= compared
    assert {f"augment/{option}.yaml" for option in options("augment")} <= compared


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_python_defaults_equal_yaml_defaults(target):
    """Every key a YAML file sets is a parameter of its target. Where the options that share a
    target (the ``images`` part of augment/none, standard, cutout, mixup) agree on a key, the
    constructor's default is that value; where they differ (the key is what makes each option), it is one of them."""
    parameters = inspect.signature(get_object(target)).parameters
    files = TARGETS[target]
    for name, values in files.items():
        unknown = sorted(set(values) - set(parameters))
        assert not unknown, f"{name} sets {unknown}, which {target} does not take"
    for key in sorted({key for values in files.values() for key in values}):
        default = parameters[key].default
        if default is inspect.Parameter.empty:
            continue  # no Python default (a data set's root, a ResNet's name): the YAML's is the only one
        set_by = {name: values[key] for name, values in files.items() if key in values}
        distinct = {repr(value) for value in set_by.values()}
        if len(distinct) == 1:
            assert default == next(iter(set_by.values())), (
                f"{target}({key}={default!r}) but {sorted(set_by)} set {key}: {next(iter(set_by.values()))!r}")
        else:
            assert default in set_by.values(), f"{target}({key}={default!r}) is none of {set_by}"


def test_noised_balanced_epsilon_is_the_same_everywhere():
    # the reported bug: 1.0 in Python, 0.2 in YAML and in the docstring
    from topk.losses import NoisedTopKHingeLoss

    assert NoisedTopKHingeLoss().epsilon == OmegaConf.load(CONF / "loss" / "noised_bal.yaml").epsilon == 0.2


# --- the top-level k reaches every loss and every K-dependent selection metric ----------------------

# The selection metric of each data set's protocol, K the top-level k (B18 and G22 select on
# validation top-K, K = 5 in B18 and G22's CIFAR-100 and ImageNet runs; G22 on Pl@ntNet-300K on
# macro top-K for K in {1, 3, 5, 10}). The synthetic data sets keep the final epoch's model.
SELECTION = {
    "cifar100": "val/top{k}", "imagenet": "val/top{k}", "imagenet_lt": "val/top{k}",
    "plantnet": "val/macro_top{k}", "circles": "val/top1", "circles_multimodal": "last", "random_images": "last",
    "embeddings": "last",  # P22 holds a validation split out only in its experiments
    "image_folder": "last", "torchvision": "last",  # no paper protocol: train.yaml's default
}


def test_every_data_set_has_its_selection_metric_listed():
    assert set(SELECTION) == set(options("dataset"))


def takes_k(loss):
    target = OmegaConf.load(CONF / "loss" / f"{loss}.yaml")._target_
    return "k" in inspect.signature(get_object(target)).parameters


@pytest.mark.parametrize("dataset", options("dataset"))
def test_top_level_k_reaches_every_loss_and_the_selection_metric(dataset):
    """k=3 (not the default 5) on every data set and loss: one composition each."""
    for loss in options("loss"):
        cfg = compose_config([f"dataset={dataset}", f"loss={loss}", "k=3"])
        assert ("k" in cfg.loss) == takes_k(loss), f"{loss}: loss.k present iff its class takes k"
        if takes_k(loss):
            assert cfg.loss.k == 3, f"dataset={dataset} loss={loss} k=3 gives loss.k={cfg.loss.k}"
        assert cfg.trainer.selection_metric == SELECTION[dataset].format(k=3)
        if dataset == "imagenet":  # ten-crop testing ranks by top-K marginals (B18 Appendix C)
            assert cfg.dataset.marginal_k == 3


@pytest.mark.parametrize("dataset", ["cifar100", "plantnet"])
def test_loss_k_wins_for_the_loss_only(dataset):
    for loss in filter(takes_k, options("loss")):
        cfg = compose_config([f"dataset={dataset}", f"loss={loss}", "k=3", "loss.k=2"])
        assert cfg.loss.k == 2 and cfg.trainer.selection_metric == SELECTION[dataset].format(k=3)


def test_default_k_is_five_for_every_top_k_loss_and_metric():
    for loss in options("loss"):
        cfg = compose_config(["dataset=imagenet", f"loss={loss}"])
        assert cfg.trainer.selection_metric == "val/top5" and cfg.dataset.marginal_k == 5
        if takes_k(loss):
            assert cfg.loss.k == 5


# --- the specialised files set only what differs ---------------------------------------------------

SPECIALISED = sorted(path.relative_to(CONF / "protocol") for path in (CONF / "protocol").rglob("*.yaml"))


def leaves(node, prefix=""):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def lookup(cfg, dotted):
    node = OmegaConf.to_container(cfg, resolve=False)
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def compose_in(conf: Path, overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize("relative", SPECIALISED, ids=str)
def test_specialised_file_sets_only_values_that_differ(relative, tmp_path):
    """conf/protocol/<group>/<dataset>_<option>.yaml exists only for values that differ from the
    option's file and the data set's file: without it, each value it sets would be different."""
    group = relative.parts[0]
    dataset = next(name for name in options("dataset") if relative.stem.startswith(f"{name}_")
                   and relative.stem[len(name) + 1:] in options(group))
    option = relative.stem[len(dataset) + 1:]
    overrides = [f"dataset={dataset}", f"{group}={option}"]
    with_file = compose_config(overrides)
    without = tmp_path / "conf"
    shutil.copytree(CONF, without)
    (without / "protocol" / relative).unlink()
    without_file = compose_in(without, overrides)
    sets = OmegaConf.to_container(OmegaConf.load(CONF / "protocol" / relative), resolve=False)
    for key in leaves(sets):  # unresolved: an interpolation (g22_time's B) is a value of its own
        value = lookup(with_file, key)
        before = lookup(without_file, key)
        assert before is MISSING or before != value, f"protocol/{relative} restates {key}={value!r}"


def test_protocol_holds_only_specialised_files():
    # a data set's own protocol lives in conf/dataset/<dataset>.yaml, not in conf/protocol/
    assert all(len(relative.parts) == 2 and relative.parts[0] in ("model", "loss", "augment")
               for relative in SPECIALISED)


def test_data_set_files_set_no_loss_or_model_values():
    # so that a loss's (a model's) value is found in its own file or in protocol/loss/ (model/)
    for option in options("dataset"):
        raw = OmegaConf.load(CONF / "dataset" / f"{option}.yaml")
        assert "loss" not in raw and "model" not in raw and "augment" not in raw, option
