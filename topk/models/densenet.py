"""The CIFAR DenseNet of Huang et al. (2017), "Densely Connected Convolutional Networks", §3-4.

Two variants of Huang et al.'s CIFAR networks (their Table 2):

- the basic DenseNet (``bottleneck=False, compression=1.0``): each layer is BN-ReLU-Conv3x3, the
  transitions keep the number of feature maps, the first convolution has 16 output channels.
  DenseNet-40 with growth rate 12 has 1.0M parameters in Huang et al.'s Table 2;
- DenseNet-BC (``bottleneck=True, compression=0.5``), §3 "Bottleneck layers" and "Compression":
  each layer is BN-ReLU-Conv1x1 to 4k maps, then BN-ReLU-Conv3x3 to k; a transition after a block
  of m maps outputs floor(θ·m); the first convolution has 2k output channels ("a convolution with
  16 (or twice the growth rate for DenseNet-BC) output channels", §4 Implementation Details).

B18 and G22 name a "DenseNet 40-40 from Huang et al. (2017)" (B18 §5.1, G22 §4.4) and a
"DenseNet 40-12" (B18 §3.3), which fits either variant; both published codes build
``DenseNet3(depth, num_classes, growth_rate)`` with its defaults ``reduction=0.5,
bottleneck=True`` (oval-group/smooth-topk and garcinc/noised-topk, experiments/models/densenet.py,
Andreas Veit's densenet-pytorch), a DenseNet-BC, so ``conf/model/densenet40_*.yaml`` build that.
The weight initialisation is that code's: He-normal convolutions over fan-out (std
sqrt(2 / (3·3·out_channels))), batch-norm scales 1 and shifts 0, the linear head's bias 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from topk.errors import ConfigError
from topk.models.heads import check_not_pretrained, make_head

INITIAL_CHANNELS = 16  # the basic DenseNet's first convolution; DenseNet-BC uses 2 * growth_rate
BOTTLENECK_WIDTH = 4  # "we let each 1x1 convolution produce 4k feature-maps" (Huang et al. §3)


class DenseLayer(nn.Module):
    """Huang et al.'s H_l (§3): BN-ReLU-Conv3x3 producing ``growth_rate`` feature maps,
    concatenated to its input; with ``bottleneck``, a BN-ReLU-Conv1x1 to 4 x ``growth_rate`` maps
    comes first (DenseNet-B). Dropout follows each convolution."""

    def __init__(self, in_channels: int, growth_rate: int, drop_rate: float, bottleneck: bool = False):
        super().__init__()
        width = in_channels
        self.bottleneck = None
        if bottleneck:
            width = BOTTLENECK_WIDTH * growth_rate
            self.bottleneck = nn.Sequential(
                nn.BatchNorm2d(in_channels),
                nn.ReLU(),
                nn.Conv2d(in_channels, width, kernel_size=1, bias=False),
                nn.Dropout(drop_rate),
            )
        self.norm = nn.BatchNorm2d(width)
        self.conv = nn.Conv2d(width, growth_rate, kernel_size=3, padding=1, bias=False)
        self.drop_rate = drop_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = x if self.bottleneck is None else self.bottleneck(x)
        new_features = self.conv(F.relu(self.norm(features)))
        new_features = F.dropout(new_features, p=self.drop_rate, training=self.training)
        return torch.cat([x, new_features], dim=1)


class Transition(nn.Sequential):
    """BN-ReLU-Conv1x1 from ``in_channels`` to ``out_channels`` (floor(θ·m) with compression θ,
    Huang et al. §3), then 2x2 average pooling."""

    def __init__(self, in_channels: int, out_channels: int, drop_rate: float):
        super().__init__(
            nn.BatchNorm2d(in_channels),
            nn.ReLU(),
            nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False),
            nn.Dropout(drop_rate),
            nn.AvgPool2d(2),
        )


def layers_per_block(depth: int, bottleneck: bool) -> int:
    """Layers in each of the three dense blocks: ``depth`` counts the first convolution, the two
    transitions and the classifier (4), and two convolutions per bottlenecked layer (Huang et al.
    Table 2's DenseNet-BC L = 100 has 16 layers per block)."""
    convolutions = 6 if bottleneck else 3
    if depth < 4 + convolutions or (depth - 4) % convolutions != 0:
        kind = "DenseNet-BC (model.bottleneck=true)" if bottleneck else "basic DenseNet (model.bottleneck=false)"
        raise ConfigError(
            f"model.depth={depth} is not a CIFAR DenseNet depth; for a {kind} depth - 4 must be a "
            f"positive multiple of {convolutions} (e.g. 40).")
    return (depth - 4) // convolutions


def check_settings(growth_rate: int, drop_rate: float, compression: float) -> None:
    """One sentence for each value the network cannot be built with."""
    if growth_rate < 1:
        raise ConfigError(f"model.growth_rate must be a positive number of feature maps, got {growth_rate}.")
    if not 0.0 <= drop_rate < 1.0:
        raise ConfigError(f"model.drop_rate must be in [0, 1), got {drop_rate}.")
    if not 0.0 < compression <= 1.0:
        raise ConfigError(f"model.compression is the fraction θ of feature maps a transition keeps, in (0, 1] "
                          f"(1.0: no compression, DenseNet-BC: 0.5), got {compression}.")


class CifarDenseNet(nn.Module):
    """DenseNet for small images (Huang et al. 2017): the basic network or DenseNet-BC.

    Parameters
    ----------
    num_classes, input_shape
        From the data; ``input_shape`` is ``(channels, height, width)``.
    depth
        Total number of weighted layers (40 in B18 and G22); each of the three dense blocks has
        ``(depth - 4) / 3`` layers, or ``(depth - 4) / 6`` bottlenecked ones.
    growth_rate
        Feature maps added by each layer, ``k`` in the paper (12 or 40).
    head
        ``linear`` or ``cosine`` last layer (see :mod:`topk.models.heads`).
    drop_rate
        Dropout after each convolution but the first; the paper uses 0.2 without data augmentation.
    bottleneck
        BN-ReLU-Conv1x1 to 4k maps before each layer's 3x3 convolution (DenseNet-B, §3).
    compression
        θ in (0, 1]: a transition outputs floor(θ·m) of a block's m maps (DenseNet-C at θ < 1, §3).
        With both (the defaults), this is DenseNet-BC, whose first convolution has 2k channels
        instead of 16: the network B18's and G22's published codes train. The basic network is
        ``bottleneck=False, compression=1.0``.
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
        bottleneck: bool = True,
        compression: float = 0.5,
        pretrained: bool = False,
    ):
        super().__init__()
        check_not_pretrained(pretrained, "the CIFAR DenseNet")
        check_settings(growth_rate, drop_rate, compression)
        layers = layers_per_block(depth, bottleneck)

        channels = 2 * growth_rate if bottleneck and compression < 1 else INITIAL_CHANNELS
        modules: list[nn.Module] = [nn.Conv2d(input_shape[0], channels, kernel_size=3, padding=1, bias=False)]
        for block in range(3):
            for _ in range(layers):
                modules.append(DenseLayer(channels, growth_rate, drop_rate, bottleneck))
                channels += growth_rate
            if block < 2:
                kept = math.floor(compression * channels)
                if kept < 1:
                    raise ConfigError(f"model.compression={compression} leaves no feature map after a transition.")
                modules.append(Transition(channels, kept, drop_rate))
                channels = kept
        modules += [nn.BatchNorm2d(channels), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*modules)
        self.fc = make_head(head, channels, num_classes)
        self.init_weights()

    def init_weights(self) -> None:
        """The published codes' initialisation (experiments/models/densenet.py of B18 and G22):
        convolutions He-normal over fan-out, batch norm 1 and 0, the linear head's bias 0 (its
        weight keeps nn.Linear's default, as there)."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))
