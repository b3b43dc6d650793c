"""``model=timm``: any timm model by name, the head sized to the data, pretrained weights from a local
file or the cache without a download, and one sentence without timm (topk/models/timm_models.py)."""

from __future__ import annotations

import sys

import pytest
import timm
import torch
from test_faults import assert_one_sentence, run_main

from conftest import compose_config, run_in_process
from topk.errors import ConfigError
from topk.models import timm_models
from topk.models.heads import CosineClassifier
from topk.models.timm_models import INSTALL, timm_model
from topk.schema import config_problem

CIFAR = (3, 32, 32)


def _scores(model, input_shape=CIFAR) -> torch.Tensor:
    model.train()
    return model(torch.zeros(2, *input_shape))


@pytest.fixture
def offline(monkeypatch):
    """The Hub cannot be reached: nothing is downloaded (timm would retry for a minute)."""
    monkeypatch.setattr(timm_models, "_host_reachable", lambda url, timeout=3.0: False)


@pytest.mark.parametrize("name", ["test_resnet", "test_efficientnet"])
def test_a_name_gives_timms_model_with_the_datas_class_count_and_channels(name):
    model = timm_model(7, CIFAR, name=name)
    assert model.get_classifier().out_features == 7 and _scores(model).shape == (2, 7)
    gray = timm_model(4, (1, 32, 32), name=name)
    assert _scores(gray, (1, 32, 32)).shape == (2, 4)


def test_a_fixed_size_model_is_built_for_the_datas_image_size():
    assert timm.get_pretrained_cfg("test_vit").fixed_input_size
    model = timm_model(3, CIFAR, name="test_vit")
    assert tuple(model.patch_embed.img_size) == (32, 32) and _scores(model).shape == (2, 3)


def test_the_cosine_head_takes_the_place_of_timms_classifier():
    cfg = compose_config(["model=timm", "model.name=test_resnet", "model.head=cosine"])
    assert config_problem(cfg) is None
    model = timm_model(5, CIFAR, **{k: v for k, v in cfg.model.items() if k != "_target_"})
    assert isinstance(model.get_classifier(), CosineClassifier) and model.get_classifier().weight.shape[0] == 5
    scores = _scores(model)
    assert scores.shape == (2, 5) and bool((scores.abs() <= 1 + 1e-6).all())


def test_an_unknown_name_or_tag_is_refused_before_anything_is_written(tmp_path):
    problem = config_problem(compose_config(["model=timm", "model.name=resnt18"]))
    assert problem.startswith("model.name='resnt18' is not a timm model; did you mean resnet18")
    assert f"the {len(timm.list_models())} models of timm" in problem and "timm.list_models()" in problem
    problem = config_problem(compose_config(["model=timm", "model.name=test_vit.nope"]))
    assert problem == ("model.name='test_vit.nope' names no pretrained weights of test_vit; choose one of "
                       "test_vit.r160_in1k, or model.name=test_vit.")
    code, stderr = run_main(["model=timm", "model.name=resnt18", f"hydra.run.dir={tmp_path / 'run'}"])
    assert_one_sentence(code, stderr, 1, r"^Error: model.name='resnt18' is not a timm model")
    assert list(tmp_path.iterdir()) == []


def test_without_timm_the_sentence_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    assert "pip install 'topk[timm]'" in INSTALL
    assert config_problem(compose_config(["model=timm"])) == INSTALL
    with pytest.raises(ConfigError, match=r"^model=timm needs the timm package, which is not installed"):
        timm_model(3, CIFAR, name="test_resnet")


def _fake_weights(path, name: str = "test_resnet") -> dict:
    """timm's ``name`` of 1000 classes, freshly initialised, saved as a weights file at ``path``."""
    torch.manual_seed(1)
    state = timm.create_model(name).state_dict()
    torch.save(state, path)
    return state


def _assert_loaded(model, state) -> None:
    for key in ("conv1.0.weight", "layer1.0.conv1.weight", "layer1.0.bn1.running_mean"):
        torch.testing.assert_close(model.state_dict()[key], state[key])
    assert model.get_classifier().weight.shape[0] == 6  # the 1000 classes replaced


def test_pretrained_weights_load_from_a_local_file_without_a_download(tmp_path, offline):
    state = _fake_weights(tmp_path / "weights.pth")
    _assert_loaded(timm_model(6, CIFAR, name="test_resnet", weights_file=str(tmp_path / "weights.pth")), state)
    with pytest.raises(ConfigError, match=r"model.weights_file=.*missing.pth is not a file"):
        timm_model(6, CIFAR, name="test_resnet", weights_file=str(tmp_path / "missing.pth"))


def test_offline_pretrained_weights_come_from_the_hub_cache_or_one_sentence(tmp_path, offline, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, file: None)
    with pytest.raises(ConfigError, match=r"^model.pretrained=true needs timm's weights of test_resnet from "
                                          r"timm/test_resnet.r160_in1k, which cannot be reached .* model.weights_file=PATH"):
        timm_model(6, CIFAR, name="test_resnet", pretrained=True)
    state = _fake_weights(tmp_path / "model.safetensors.pth")
    cached = {"model.safetensors": str(tmp_path / "model.safetensors.pth")}
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, file: cached.get(file))
    _assert_loaded(timm_model(6, CIFAR, name="test_resnet", pretrained=True), state)


def test_train_py_trains_a_timm_model_by_name(run_dir):
    record, _ = run_in_process(run_dir, [
        "dataset=random_images", "dataset.num_classes=5", "dataset.train_size=16", "dataset.test_size=8",
        "model=timm", "model.name=test_resnet", "k=2", "trainer.epochs=1", "trainer.batch_size=8",
        "trainer.tensorboard=false"])
    assert record["status"] == "completed" and record["model"] == "timm"
    assert record["params"]["model.name"] == "test_resnet" and "top2" in record["test"]
