"""Image models: the CIFAR DenseNet, torchvision's ResNets and DenseNet-121, their configs."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
import torch
import torchvision
from hydra.utils import instantiate
from torch import nn

from conftest import compose_config
from topk.errors import ConfigError
from topk.models.densenet import CifarDenseNet
from topk.models.heads import CosineClassifier
from topk.models.resnet import torchvision_densenet121, torchvision_resnet, weights_path

IMAGE_MODELS = ("resnet18", "resnet34", "resnet50", "densenet121", "densenet40_12", "densenet40_40")


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _scores(model: nn.Module, input_shape) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(torch.randn(2, *input_shape))


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty torch.hub cache in ``tmp_path`` and no network: nothing can be downloaded or hang."""
    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path))

    def no_network(*args, **kwargs):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket, "create_connection", no_network)
    return tmp_path


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_each_config_instantiates_a_model_scoring_cifar_images(name):
    torch.manual_seed(0)
    model = instantiate(compose_config([f"model={name}"]).model, num_classes=10, input_shape=(3, 32, 32))
    assert _scores(model, (3, 32, 32)).shape == (2, 10)


def test_densenet40_parameter_counts_match_huang_et_al():
    # Huang et al. (2017), Table 2: DenseNet (L=40, k=12) has 1.0M parameters on C10.
    k12 = _count(CifarDenseNet(10, (3, 32, 32), depth=40, growth_rate=12))
    assert k12 == 1_019_722 and abs(k12 - 1.0e6) / 1.0e6 < 0.03
    assert _count(CifarDenseNet(10, (3, 32, 32), depth=40, growth_rate=40)) == 10_550_362


def test_densenet_block_structure_and_cosine_head():
    model = CifarDenseNet(7, (1, 16, 16), depth=10, growth_rate=4, head="cosine")
    assert isinstance(model.fc, CosineClassifier)
    # 16 initial channels + 3 blocks of 2 layers adding 4 maps each, no compression.
    assert model.fc.weight.shape == (7, 16 + 3 * 2 * 4)
    assert _scores(model, (1, 16, 16)).shape == (2, 7)


@pytest.mark.parametrize("depth", [39, 5, 4])
def test_densenet_rejects_depths_without_three_equal_blocks(depth):
    with pytest.raises(ConfigError, match=f"model.depth={depth} is not a CIFAR DenseNet depth"):
        CifarDenseNet(10, (3, 32, 32), depth=depth)


def test_resnet_cifar_stem_keeps_32x32_resolution_into_the_first_block():
    model = torchvision_resnet("resnet18", num_classes=10, input_shape=(3, 32, 32)).eval()
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1) and model.conv1.padding == (1, 1)
    assert isinstance(model.maxpool, nn.Identity)
    with torch.no_grad():
        stem = model.maxpool(model.relu(model.bn1(model.conv1(torch.randn(2, 3, 32, 32)))))
        assert model.layer1(stem).shape == (2, 64, 32, 32)
    assert _scores(torchvision_resnet("resnet18", num_classes=5, input_shape=(3, 64, 64)), (3, 64, 64)).shape == (2, 5)


def test_resnet_cifar_stem_with_the_max_pool_kept_as_p22():
    model = torchvision_resnet("resnet18", num_classes=100, input_shape=(3, 32, 32), keep_maxpool=True).eval()
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, nn.MaxPool2d)
    with torch.no_grad():
        stem = model.maxpool(model.relu(model.bn1(model.conv1(torch.randn(2, 3, 32, 32)))))
        assert model.layer1(stem).shape == (2, 64, 16, 16)
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 100)


def test_resnet_keeps_the_imagenet_stem_for_larger_images():
    model = torchvision_resnet("resnet18", num_classes=4, input_shape=(3, 96, 96))
    assert model.conv1.kernel_size == (7, 7) and model.conv1.stride == (2, 2)
    assert isinstance(model.maxpool, nn.MaxPool2d)
    assert _scores(model, (3, 96, 96)).shape == (2, 4)


def test_densenet121_cifar_stem_and_cosine_head():
    model = torchvision_densenet121(num_classes=10, input_shape=(3, 32, 32), head="cosine")
    assert model.features.conv0.kernel_size == (3, 3) and model.features.conv0.stride == (1, 1)
    assert isinstance(model.features.pool0, nn.Identity)
    assert isinstance(model.classifier, CosineClassifier) and model.classifier.weight.shape == (10, 1024)
    scores = _scores(model, (3, 32, 32))
    assert scores.shape == (2, 10) and scores.abs().max() <= 1 + 1e-6


def test_resnet_cosine_head_and_unknown_name():
    model = torchvision_resnet("resnet50", num_classes=3, input_shape=(3, 32, 32), head="cosine")
    assert isinstance(model.fc, CosineClassifier) and model.fc.weight.shape == (3, 2048)
    with pytest.raises(ConfigError, match="model.name='resnet101' is not a torchvision ResNet"):
        torchvision_resnet("resnet101", num_classes=3, input_shape=(3, 32, 32))


def test_pretrained_offline_says_where_to_put_the_weights(offline_hub):
    expected = os.path.join(str(offline_hub), "checkpoints", "resnet50-0676ba61.pth")
    assert weights_path(torchvision.models.ResNet50_Weights.IMAGENET1K_V1) == expected
    with pytest.raises(ConfigError, match=re.escape(expected)) as error:
        torchvision_resnet("resnet50", num_classes=10, input_shape=(3, 224, 224), pretrained=True)
    assert "copy the file there by hand" in str(error.value)
    with pytest.raises(ConfigError, match=re.escape(os.path.join(str(offline_hub), "checkpoints", "densenet121-"))):
        torchvision_densenet121(num_classes=10, input_shape=(3, 32, 32), pretrained=True)


def test_pretrained_loads_cached_weights_and_reinitialises_the_cifar_stem(offline_hub):
    torch.manual_seed(0)
    imagenet = torchvision.models.resnet18()
    path = Path(weights_path(torchvision.models.ResNet18_Weights.IMAGENET1K_V1))
    path.parent.mkdir(parents=True)
    torch.save(imagenet.state_dict(), path)

    model = torchvision_resnet("resnet18", num_classes=10, input_shape=(3, 32, 32), pretrained=True)
    torch.testing.assert_close(model.layer1[0].conv1.weight, imagenet.layer1[0].conv1.weight)
    torch.testing.assert_close(model.bn1.running_mean, imagenet.bn1.running_mean)
    assert model.conv1.weight.shape == (64, 3, 3, 3) and model.fc.weight.shape == (10, 512)
