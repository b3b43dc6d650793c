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
from topk.models.densenet import CifarDenseNet, DenseLayer, Transition
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


BASIC = {"bottleneck": False, "compression": 1.0}  # Huang et al.'s basic DenseNet (the default is BC)


def test_densenet40_parameter_counts_match_huang_et_al():
    # Huang et al. (2017), Table 2: DenseNet (L=40, k=12) has 1.0M parameters on C10.
    k12 = _count(CifarDenseNet(10, (3, 32, 32), depth=40, growth_rate=12, **BASIC))
    assert k12 == 1_019_722 and abs(k12 - 1.0e6) / 1.0e6 < 0.03
    assert _count(CifarDenseNet(10, (3, 32, 32), depth=40, growth_rate=40, **BASIC)) == 10_550_362


def test_densenet_block_structure_and_cosine_head():
    model = CifarDenseNet(7, (1, 16, 16), depth=10, growth_rate=4, head="cosine", **BASIC)
    assert isinstance(model.fc, CosineClassifier)
    # 16 initial channels + 3 blocks of 2 layers adding 4 maps each, no compression.
    assert model.fc.weight.shape == (7, 16 + 3 * 2 * 4)
    assert _scores(model, (1, 16, 16)).shape == (2, 7)


@pytest.mark.parametrize("depth", [39, 5, 4])
def test_densenet_rejects_depths_without_three_equal_blocks(depth):
    with pytest.raises(ConfigError, match=f"model.depth={depth} is not a CIFAR DenseNet depth"):
        CifarDenseNet(10, (3, 32, 32), depth=depth, **BASIC)


def test_densenet40_bc_parameter_counts_match_the_published_codes_densenet3():
    # B18's and G22's DenseNet3(40, 100, growth_rate) with its defaults bottleneck=True,
    # reduction=0.5 (experiments/models/densenet.py of both), instantiated once outside the suite.
    for growth_rate, published in ((40, 1_941_620), (12, 188_092)):
        model = CifarDenseNet(100, (3, 32, 32), depth=40, growth_rate=growth_rate, )
        assert _count(model) == published


def _blocks(model: CifarDenseNet) -> list[list[nn.Module]]:
    """The dense layers of each block and the transition after it (or the final norm)."""
    blocks, layers = [], []
    for module in list(model.features)[1:]:
        if isinstance(module, DenseLayer):
            layers.append(module)
        elif layers:
            blocks.append([*layers, module])
            layers = []
    return blocks


def test_densenet40_12_bc_blocks_transitions_and_first_convolution():
    model = CifarDenseNet(100, (3, 32, 32), depth=40, growth_rate=12, )
    assert model.features[0].out_channels == 24  # 2k for DenseNet-BC
    blocks = _blocks(model)
    assert [len(block) - 1 for block in blocks] == [6, 6, 6]  # (40 - 4) / 6 bottlenecked layers
    # 24 + 6·12 = 96 -> 48; 48 + 72 = 120 -> 60; 60 + 72 = 132 into the classifier.
    assert [(t[2].in_channels, t[2].out_channels) for t in (blocks[0][-1], blocks[1][-1])] == [(96, 48), (120, 60)]
    assert isinstance(blocks[0][-1], Transition) and model.fc.in_features == 132
    layer = blocks[1][0]
    assert layer.bottleneck[2].out_channels == 48 and layer.conv.in_channels == 48 and layer.conv.out_channels == 12
    assert _scores(model, (3, 32, 32)).shape == (2, 100)


def test_densenet40_40_bc_channels_after_each_transition():
    model = CifarDenseNet(100, (3, 32, 32), depth=40, growth_rate=40, )
    transitions = [m for m in model.features if isinstance(m, Transition)]
    assert [(t[2].in_channels, t[2].out_channels) for t in transitions] == [(320, 160), (400, 200)]
    assert model.features[0].out_channels == 80 and model.fc.in_features == 440


def test_densenet_basic_keeps_16_first_channels_and_every_map():
    model = CifarDenseNet(100, (3, 32, 32), depth=40, growth_rate=12, **BASIC)
    blocks = _blocks(model)
    assert model.features[0].out_channels == 16 and [len(block) - 1 for block in blocks] == [12, 12, 12]
    assert all(layer.bottleneck is None for block in blocks for layer in block[:-1])
    assert [(t[2].in_channels, t[2].out_channels) for t in (blocks[0][-1], blocks[1][-1])] == [(160, 160), (304, 304)]
    assert _count(model) == 1_060_132


def test_densenet_configs_build_densenet_bc_and_one_override_gives_the_basic_network():
    bc = compose_config(["model=densenet40_40"]).model
    assert (bc.bottleneck, bc.compression) == (True, 0.5)
    basic = compose_config(["model=densenet40_12", "model.bottleneck=false", "model.compression=1.0"]).model
    assert _count(instantiate(basic, num_classes=100, input_shape=(3, 32, 32))) == 1_060_132


def test_densenet_initialisation_is_the_published_codes():
    torch.manual_seed(0)
    model = CifarDenseNet(100, (3, 32, 32), depth=40, growth_rate=40, )
    conv = model.features[3].bottleneck[2]  # 1x1 to 160 maps: std sqrt(2 / (1 · 1 · 160))
    assert abs(conv.weight.std().item() - (2 / 160) ** 0.5) < 0.005
    assert torch.equal(model.fc.bias, torch.zeros(100))


@pytest.mark.parametrize("depth", [39, 7, 10 + 3])
def test_densenet_bc_rejects_depths_without_whole_bottleneck_layers(depth):
    with pytest.raises(ConfigError, match=f"model.depth={depth} is not a CIFAR DenseNet depth; for a DenseNet-BC"):
        CifarDenseNet(10, (3, 32, 32), depth=depth, )


@pytest.mark.parametrize("compression", [0.0, 1.5, -0.5])
def test_densenet_rejects_a_compression_outside_0_1(compression):
    with pytest.raises(ConfigError, match=r"model.compression is the fraction .* in \(0, 1\]"):
        CifarDenseNet(10, (3, 32, 32), depth=10, compression=compression)


def test_densenet_rejects_a_compression_that_keeps_no_feature_map():
    with pytest.raises(ConfigError, match="model.compression=0.01 leaves no feature map after a transition"):
        CifarDenseNet(10, (3, 32, 32), depth=10, compression=0.01)  # floor(0.01 · 40) = 0


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
