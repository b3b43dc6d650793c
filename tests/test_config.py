"""The real config tree composes, and every option of every group instantiates."""

from __future__ import annotations

import pytest
import torch
from hydra.errors import MissingConfigException
from hydra.utils import instantiate

from conftest import CONF, compose_config
from topk import build as builder
from topk.data.augment import NoMix
from topk.data.transforms import Normalize

GROUPS = ["dataset", "model", "loss", "augment", "optim", "schedule"]


def options(group):
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


def all_group_options():
    return [(group, option) for group in GROUPS for option in options(group)]


VECTOR_MODELS = {"linear", "mlp"}  # the others are image models, checked on 32x32 images


def image_model_options():
    return [option for option in options("model") if option not in VECTOR_MODELS]


@pytest.mark.parametrize("group,option", [(g, o) for g, o in all_group_options()
                                          if not (g == "model" and o not in VECTOR_MODELS)])
def test_every_option_composes_and_instantiates(group, option, data_roots):
    overrides = [f"{group}={option}", "trainer.batch_size=8", "trainer.num_workers=0"]
    if group == "dataset":  # the data set's paper model may be large or want pre-trained weights
        overrides += [*data_roots.get(option, []), "model=mlp"]
    cfg = compose_config(overrides)
    splits = instantiate(cfg.dataset, seed=0)
    input_shape = splits.input_shape
    if group == "augment" and len(input_shape) != 3:  # image augmentations need image data
        splits = instantiate(compose_config(["dataset=cifar100", *data_roots["cifar100"]]).dataset, seed=0)
    model = instantiate(cfg.model, num_classes=splits.num_classes, input_shape=splits.input_shape)
    if len(splits.input_shape) == 3:  # vector models see the flattened images
        model = instantiate(compose_config(["model=mlp"]).model, num_classes=splits.num_classes,
                            input_shape=splits.input_shape)
    loss_node = cfg.loss
    loss = instantiate(loss_node, **builder.data_arguments(loss_node, splits))
    optimizer = instantiate(cfg.optim)(model.parameters())
    images, mix = builder.build_augment(cfg.augment, splits)
    normalize = Normalize(splits.mean, splits.std) if splits.mean is not None else None
    batches = builder.make_batches(splits, "train", cfg.trainer, 0, "cpu", images, normalize)
    scheduler = instantiate(cfg.schedule, **builder.schedule_arguments(cfg.schedule, batches))(optimizer)
    batches.set_epoch(1)
    inputs, labels = next(iter(batches))
    inputs, target = (mix or NoMix())(inputs[:8], labels[:8])
    value = loss(model(inputs), target)
    assert torch.isfinite(value)
    assert scheduler.optimizer is optimizer


@pytest.mark.parametrize("option", image_model_options())
def test_every_image_model_composes_and_instantiates(option):
    cfg = compose_config([f"model={option}"])
    model = instantiate(cfg.model, num_classes=10, input_shape=(3, 32, 32)).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_default_run_is_circles_linear_ce():
    cfg = compose_config()
    choices = compose_config(return_hydra_config=True).hydra.runtime.choices
    assert (choices.dataset, choices.model, choices.loss) == ("circles", "linear", "ce")
    assert cfg.trainer.ks == [1, 2, 3, 5, 10] and cfg.trainer.batch_size is None
    # a validation split held out, the model selected on it, the test split evaluated on that model
    assert cfg.trainer.device == "auto" and cfg.trainer.selection_metric == "val/top1"
    assert cfg.dataset.val_per_class == 50


EXPERIMENTS = {
    "s20_exp1": ("dataset.sigma", "10,15,20,25,30", "circles", "linear"),
    "s20_exp2": ("dataset.d", "30,45,60,75,90", "circles_multimodal", "linear"),
    "s20_exp3": ("model.hidden", "2,4,8,16,32", "circles_multimodal", "mlp"),
}


@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_s20_experiments_carry_the_paper_settings(experiment):
    parameter, values, dataset, model = EXPERIMENTS[experiment]
    cfg = compose_config([f"+experiment={experiment}"], return_hydra_config=True)
    assert cfg.experiment == experiment
    assert cfg.hydra.runtime.choices.dataset == dataset
    assert cfg.hydra.runtime.choices.model == model
    assert cfg.trainer.epochs == 1000 and cfg.trainer.batch_size is None
    params = cfg.hydra.sweeper.params
    assert str(params[parameter]).replace(" ", "") == values
    assert str(params.loss).replace(" ", "") == "ce,topk_group,topk_transition"
    assert str(params.seed).replace(" ", "") == "range(10)"
    if experiment == "s20_exp3":
        assert cfg.dataset.d == 90
    for value in values.split(","):
        for loss in ("ce", "topk_group", "topk_transition"):
            swept = compose_config([f"+experiment={experiment}", f"{parameter}={value}", f"loss={loss}"])
            if loss != "ce":
                assert swept.loss.k == 2
            splits = instantiate(swept.dataset, seed=0)
            instantiate(swept.model, num_classes=6, input_shape=splits.input_shape)


def test_sweep_directory_is_named_after_the_experiment_or_multirun():
    # the if_null resolver is registered by train.py, imported above
    plain = compose_config(["seed=0"], return_hydra_config=True).hydra.sweep.dir
    experiment = compose_config(["+experiment=s20_exp1"], return_hydra_config=True).hydra.sweep.dir
    assert plain.startswith("outputs/sweeps/multirun/") and experiment.startswith("outputs/sweeps/s20_exp1/")


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(MissingConfigException) as raised:
        compose_config(["loss=nope"])
    message = str(raised.value)
    for option in options("loss"):
        assert option in message


def test_cli_unknown_option_lists_the_valid_ones():
    from test_faults import run_as_typed

    code, stderr = run_as_typed(["dataset=imagenet_typo"])  # `python train.py dataset=imagenet_typo`, in this process
    assert code == 1
    assert stderr.startswith("Error: dataset=imagenet_typo is not an option of dataset; "
                             "did you mean dataset=imagenet_lt? choose one of "), stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    for option in options("dataset"):
        assert option in stderr
