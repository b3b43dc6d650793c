"""torchvision's ResNet-18/34/50 and DenseNet-121, with a CIFAR stem for small images.

For inputs of at most 64 pixels a side the ImageNet stem (7x7 stride-2 convolution and max-pool)
would shrink a 32x32 image to 8x8 before the first block, so it is replaced by a 3x3 stride-1
convolution without pooling, the usual CIFAR adaptation (He et al. 2016, §4.2). ImageNet weights
(Pl@ntNet-300K fine-tunes a pretrained ResNet-50) come from torchvision's weights API.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import torch
import torchvision
from torch import nn

from topk.errors import ConfigError
from topk.models.heads import make_head

RESNETS = {
    "resnet18": (torchvision.models.resnet18, torchvision.models.ResNet18_Weights.IMAGENET1K_V1),
    "resnet34": (torchvision.models.resnet34, torchvision.models.ResNet34_Weights.IMAGENET1K_V1),
    "resnet50": (torchvision.models.resnet50, torchvision.models.ResNet50_Weights.IMAGENET1K_V1),
}
SMALL_IMAGE_SIDE = 64  # inputs up to this size get the CIFAR stem


def weights_path(weights: torchvision.models.WeightsEnum) -> str:
    """Where ``torch.hub`` caches (and looks for) the file of ``weights``."""
    return os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(urlparse(weights.url).path))


def _host_reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a connection to the host of ``url`` opens quickly, so an offline machine fails at
    once instead of waiting for a download to time out."""
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname, parsed.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _build(builder, weights: torchvision.models.WeightsEnum | None) -> nn.Module:
    """``builder(weights=weights)``, turning a missing or unloadable weights file into a ConfigError."""
    if weights is None:
        return builder(weights=None)
    path = weights_path(weights)
    if not os.path.exists(path) and not _host_reachable(weights.url):
        raise ConfigError(
            f"model.pretrained=true needs the ImageNet weights at {path}, which is absent and cannot be "
            f"downloaded from {weights.url} (no network); copy the file there by hand."
        )
    try:
        return builder(weights=weights, progress=False)
    except Exception as error:  # download or unpickling failures of many kinds
        raise ConfigError(
            f"model.pretrained=true could not load the ImageNet weights expected at {path} ({error}); "
            f"copy the file from {weights.url} there by hand."
        ) from error


def _check_input_shape(input_shape) -> None:
    if len(input_shape) != 3:
        raise ConfigError(f"image models need input_shape (channels, height, width), got {tuple(input_shape)}.")


def _is_small(input_shape) -> bool:
    return input_shape[-1] <= SMALL_IMAGE_SIDE


def _stem_conv(in_channels: int, small: bool) -> nn.Conv2d:
    """The first convolution to 64 channels: 3x3 stride 1 for small images, else ImageNet's 7x7
    stride 2; He-initialised like torchvision's own convolutions."""
    if small:
        conv = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    else:
        conv = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv


def torchvision_resnet(
    name: str, num_classes: int, input_shape, pretrained: bool = False, head: str = "linear",
    keep_maxpool: bool = False,
) -> nn.Module:
    """A torchvision ResNet (``resnet18``, ``resnet34`` or ``resnet50``) with ``num_classes`` outputs.

    Parameters
    ----------
    name
        Which ResNet.
    num_classes, input_shape
        From the data; ``input_shape`` is ``(channels, height, width)``. For images of at most 64
        pixels a side ``conv1`` becomes a 3x3 stride-1 convolution and the max-pool is removed.
    pretrained
        Load torchvision's ImageNet weights (``IMAGENET1K_V1``). They are loaded before the stem
        is replaced, so with a CIFAR stem (or other than 3 input channels) ``conv1`` is
        re-initialised and only the rest of the network is pretrained. The classifier is always
        new.
    head
        ``linear`` or ``cosine`` last layer (see :mod:`topk.models.heads`).
    keep_maxpool
        Keep the 3x3 stride-2 max-pool after a CIFAR stem, as the ResNet-18 of Petersen et al.
        2022's CIFAR-100 code does (its 3x3 ``conv1`` is followed by torchvision's max-pool).
    """
    if name not in RESNETS:
        raise ConfigError(f"model.name={name!r} is not a torchvision ResNet; choose one of {', '.join(RESNETS)}.")
    _check_input_shape(input_shape)
    builder, weights = RESNETS[name]
    model = _build(builder, weights if pretrained else None)
    if _is_small(input_shape):
        model.conv1 = _stem_conv(input_shape[0], small=True)
        if not keep_maxpool:
            model.maxpool = nn.Identity()
    elif input_shape[0] != 3:
        model.conv1 = _stem_conv(input_shape[0], small=False)
    model.fc = make_head(head, model.fc.in_features, num_classes)
    return model


def torchvision_densenet121(num_classes: int, input_shape, pretrained: bool = False, head: str = "linear") -> nn.Module:
    """torchvision's DenseNet-121 with ``num_classes`` outputs.

    For images of at most 64 pixels a side ``features.conv0`` becomes a 3x3 stride-1 convolution
    and ``features.pool0`` is removed. ``pretrained`` loads torchvision's ImageNet weights
    (``IMAGENET1K_V1``) before the stem is replaced, so a CIFAR stem (or other than 3 input
    channels) is re-initialised; the classifier is always new. ``head`` is ``linear`` or
    ``cosine``.
    """
    _check_input_shape(input_shape)
    weights = torchvision.models.DenseNet121_Weights.IMAGENET1K_V1 if pretrained else None
    model = _build(torchvision.models.densenet121, weights)
    if _is_small(input_shape):
        model.features.conv0 = _stem_conv(input_shape[0], small=True)
        model.features.pool0 = nn.Identity()
    elif input_shape[0] != 3:
        model.features.conv0 = _stem_conv(input_shape[0], small=False)
    model.classifier = make_head(head, model.classifier.in_features, num_classes)
    return model
