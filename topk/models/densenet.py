"""The CIFAR DenseNet of Huang et al. (2017), "Densely Connected Convolutional Networks", §3-4.

The basic variant, without bottleneck layers and without compression: DenseNet-40 with growth
rate 12 (1.0M parameters in the paper's Table 2) and with growth rate 40 (used by B18).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from topk.errors import ConfigError
from topk.models.heads import check_not_pretrained, make_head

INITIAL_CHANNELS = 16  # the basic DenseNet's first convolution; DenseNet-BC uses 2 * growth_rate


class DenseLayer(nn.Module):
    """BN-ReLU-Conv3x3 producing ``growth_rate`` feature maps, concatenated to its input."""

    def __init__(self, in_channels: int, growth_rate: int, drop_rate: float):
        super().__init__()
        self.norm = nn.BatchNorm2d(in_channels)
        self.conv = nn.Conv2d(in_channels, growth_rate, kernel_size=3, padding=1, bias=False)
        self.drop_rate = drop_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        new_features = self.conv(F.relu(self.norm(x)))
        new_features = F.dropout(new_features, p=self.drop_rate, training=self.training)
        return torch.cat([x, new_features], dim=1)


class Transition(nn.Sequential):
    """BN-ReLU-Conv1x1 keeping the number of channels (no compression), then 2x2 average pooling."""

    def __init__(self, channels: int, drop_rate: float):
        super().__init__(
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels, kernel_size=1, bias=False),
            nn.Dropout(drop_rate),
            nn.AvgPool2d(2),
        )


class CifarDenseNet(nn.Module):
    """DenseNet for small images (Huang et al. 2017), without bottleneck or compression.

    Parameters
    ----------
    num_classes, input_shape
        From the data; ``input_shape`` is ``(channels, height, width)``.
    depth
        Total number of weighted layers; each of the three dense blocks has ``(depth - 4) / 3``
        layers, so ``depth - 4`` must be a multiple of 3 (40 in the paper and in B18).
    growth_rate
        Feature maps added by each layer, ``k`` in the paper (12 or 40).
    head
        ``linear`` or ``cosine`` last layer (see :mod:`topk.models.heads`).
    drop_rate
        Dropout after each convolution; the paper uses 0.2 without data augmentation.
    pretrained
        Must be false: there are no published ImageNet weights for this network.
    """

    def __init__(
        self,
        num_classes: int,
        input_shape,
        depth: int = 40,
        growth_rate: int = 12,
        head: str = "linear",
        drop_rate: float = 0.0,
        pretrained: bool = False,
    ):
        super().__init__()
        check_not_pretrained(pretrained, "the CIFAR DenseNet")
        if depth < 7 or (depth - 4) % 3 != 0:
            raise ConfigError(f"model.depth={depth} is not a CIFAR DenseNet depth; depth - 4 must be a positive multiple of 3 (e.g. 40).")
        if growth_rate < 1:
            raise ConfigError(f"model.growth_rate must be a positive number of feature maps, got {growth_rate}.")
        if not 0.0 <= drop_rate < 1.0:
            raise ConfigError(f"model.drop_rate must be in [0, 1), got {drop_rate}.")
        layers_per_block = (depth - 4) // 3

        channels = INITIAL_CHANNELS
        modules: list[nn.Module] = [nn.Conv2d(input_shape[0], channels, kernel_size=3, padding=1, bias=False)]
        for block in range(3):
            for _ in range(layers_per_block):
                modules.append(DenseLayer(channels, growth_rate, drop_rate))
                channels += growth_rate
            if block < 2:
                modules.append(Transition(channels, drop_rate))
        modules += [nn.BatchNorm2d(channels), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*modules)
        self.fc = make_head(head, channels, num_classes)

        for module in self.modules():  # He initialisation, as in the authors' code
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))
