"""``model=torchvision``: any torchvision classification model by name, its weights by enum name,
the head sized to the data, the image sizes it takes (topk/models/torchvision_models.py)."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
import torch
import torchvision
from test_faults import assert_one_sentence, run_main

from conftest import compose_config, run_in_process
from topk.errors import ConfigError
from topk.models.heads import CosineClassifier
from topk.models.resnet import weights_path
from topk.models.torchvision_models import model_names, torchvision_model
from topk.schema import config_problem

CIFAR = (3, 32, 32)


def _scores(model, input_shape=CIFAR, batch: int = 2) -> torch.Tensor:
    model.train()  # training mode: what the engine calls it in (GoogLeNet would give a tuple there)
    return model(torch.zeros(batch, *input_shape))


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty torch.hub cache in ``tmp_path`` and no network: nothing can be downloaded or hang."""
    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path))

    def no_network(*args, **kwargs):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket, "create_connection", no_network)
    return tmp_path


@pytest.mark.parametrize("name,head_path", [
    ("mobilenet_v3_small", "classifier.3"),  # classifier[-1], after a hidden Linear of 1024
    ("resnet18", "fc"),
    ("googlenet", "fc"),                     # without its auxiliary classifiers: one tensor in training
    ("squeezenet1_1", "classifier.1"),       # a 1x1 convolution, not a Linear
])
def test_a_name_gives_torchvisions_model_with_the_datas_class_count(name, head_path):
    torch.manual_seed(0)
    model = torchvision_model(7, CIFAR, name=name)
    assert _scores(model).shape == (2, 7)
    head = model.get_submodule(head_path)
    assert (head.out_features if isinstance(head, torch.nn.Linear) else head.out_channels) == 7


def test_the_config_builds_any_name_and_the_cosine_head():
    cfg = compose_config(["model=torchvision", "model.name=mobilenet_v3_small", "model.head=cosine"])
    assert config_problem(cfg) is None
    model = torchvision_model(5, CIFAR, **{k: v for k, v in cfg.model.items() if k != "_target_"})
    head = model.classifier[3]
    assert isinstance(head, CosineClassifier) and head.weight.shape == (5, 1024)
    scores = _scores(model)
    assert scores.shape == (2, 5) and bool((scores.abs() <= 1 + 1e-6).all())


def test_a_vision_transformer_without_weights_is_built_for_the_datas_image_size():
    model = torchvision_model(3, (3, 32, 32), name="vit_b_32")
    assert model.image_size == 32 and model.heads.head.out_features == 3
    assert _scores(model).shape == (2, 3)
    with pytest.raises(ConfigError, match=r"model.name=vit_b_32 cannot be built for 40-pixel images .*patch size"):
        torchvision_model(3, (3, 40, 40), name="vit_b_32")


def test_an_architecture_too_large_for_small_images_says_the_size_it_needs_before_training():
    with pytest.raises(ConfigError, match=r"^model.name=alexnet cannot score this data set's 32x32 images \(.*\); "
                                          r"it needs images of at least 63x63 pixels"):
        torchvision_model(10, CIFAR, name="alexnet")
    assert _scores(torchvision_model(10, (3, 64, 64), name="alexnet"), (3, 64, 64)).shape == (2, 10)
    with pytest.raises(ConfigError, match=r"^model.name=maxvit_t cannot score this data set's 32x32 images \(.*\); "
                                          r"it needs 224x224 images"):
        torchvision_model(10, CIFAR, name="maxvit_t")  # its windows of 7 fix the size


def test_other_channel_counts_get_a_first_convolution_of_their_own():
    model = torchvision_model(4, (1, 32, 32), name="resnet18")
    assert model.conv1.in_channels == 1 and model.conv1.out_channels == 64
    assert _scores(model, (1, 32, 32)).shape == (2, 4)
    with pytest.raises(ConfigError, match=r"takes images \(channels, height, width\), and this data set's inputs"):
        torchvision_model(4, (2,), name="resnet18")


def test_an_unknown_name_is_refused_before_anything_is_written_listing_every_model(tmp_path):
    problem = config_problem(compose_config(["model=torchvision", "model.name=resnet5"]))
    names = model_names()
    assert problem.startswith("model.name='resnet5' is not a torchvision classification model; did you mean "
                              "resnet50, ")
    assert f"the {len(names)} models of torchvision" in problem and ", ".join(names) in problem
    code, stderr = run_main(["model=torchvision", "model.name=convnext_tny", f"hydra.run.dir={tmp_path / 'run'}"])
    assert_one_sentence(code, stderr, 1, r"^Error: model.name='convnext_tny' is not a torchvision classification "
                                         r"model; did you mean convnext_tiny")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="is not a torchvision classification model"):
        torchvision_model(3, CIFAR, name="resnet5")


def test_an_unknown_weights_name_lists_the_models_weights():
    with pytest.raises(ConfigError, match=re.escape(
            "model.weights='IMAGENET1K_V3' is not a weights name of resnet50; did you mean IMAGENET1K_V2, "
            "IMAGENET1K_V1? choose one of IMAGENET1K_V1, IMAGENET1K_V2, DEFAULT, or model.weights=null")):
        torchvision_model(3, CIFAR, name="resnet50", weights="IMAGENET1K_V3")


def _fake_cached_weights(name: str, weights) -> dict:
    """torchvision's model ``name`` freshly initialised, saved where torch.hub looks for ``weights``."""
    torch.manual_seed(1)
    state = torchvision.models.get_model(name, weights=None).state_dict()
    path = Path(weights_path(weights))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return state


@pytest.mark.parametrize("settings", [{"weights": "IMAGENET1K_V1"}, {"weights": "DEFAULT"}, {"pretrained": True}])
def test_weights_by_enum_name_load_from_torch_hubs_cache_without_a_download(offline_hub, settings):
    state = _fake_cached_weights("mobilenet_v3_small", torchvision.models.MobileNet_V3_Small_Weights.IMAGENET1K_V1)
    model = torchvision_model(6, CIFAR, name="mobilenet_v3_small", **settings)
    for key in ("features.0.0.weight", "features.3.block.0.0.weight", "classifier.0.weight"):
        torch.testing.assert_close(model.state_dict()[key], state[key])
    assert model.classifier[3].weight.shape == (6, 1024)  # the 1000 ImageNet classes replaced


def test_weights_absent_offline_say_where_the_file_goes(offline_hub):
    weights = torchvision.models.EfficientNet_B0_Weights.IMAGENET1K_V1
    expected = os.path.join(str(offline_hub), "checkpoints", os.path.basename(weights.url))
    with pytest.raises(ConfigError, match=re.escape(
            f"model.weights=IMAGENET1K_V1 of efficientnet_b0 needs the file {expected}, which is absent and "
            "cannot be downloaded")):
        torchvision_model(3, CIFAR, name="efficientnet_b0", pretrained=True)


def test_train_py_trains_a_torchvision_model_by_name(run_dir):
    record, _ = run_in_process(run_dir, [
        "dataset=random_images", "dataset.num_classes=5", "dataset.train_size=16", "dataset.test_size=8",
        "model=torchvision", "model.name=mobilenet_v3_small", "model.head=cosine", "k=2",
        "trainer.epochs=1", "trainer.batch_size=8", "trainer.tensorboard=false"])
    assert record["status"] == "completed" and record["model"] == "torchvision"
    assert record["params"]["model.name"] == "mobilenet_v3_small" and "top2" in record["test"]
