"""Classifier heads: the last layer from features to class scores.

``linear`` is an ordinary fully connected layer. ``cosine`` L2-normalises both the features and
each class's weight vector, so a score is the cosine of their angle, in [-1, 1] (G22 §4.5, used
with LDAM and the noised imbalanced loss on Pl@ntNet-300K). The losses that pair with it carry
the score scale themselves (``loss.scale``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from topk.errors import ConfigError

HEADS = ("linear", "cosine")


class CosineClassifier(nn.Module):
    """Scores ``s_c = <x/|x|, w_c/|w_c|>`` for each class ``c`` (no bias)."""

    def __init__(self, in_features: int, num_classes: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_classes, in_features))
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)  # nn.Linear's initialisation

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(F.normalize(features, dim=1), F.normalize(self.weight, dim=1))

    def extra_repr(self) -> str:
        return f"in_features={self.weight.shape[1]}, num_classes={self.weight.shape[0]}"


def make_head(kind: str, in_features: int, num_classes: int, bias: bool = True) -> nn.Module:
    """The last layer: ``linear`` (with or without bias) or ``cosine``."""
    if kind == "linear":
        return nn.Linear(in_features, num_classes, bias=bias)
    if kind == "cosine":
        return CosineClassifier(in_features, num_classes)
    raise ConfigError(f"model.head={kind!r} is not a classifier head; choose one of {', '.join(HEADS)}.")


def check_not_pretrained(pretrained: bool, model: str) -> None:
    """Models without published ImageNet weights take ``pretrained`` only to say so clearly
    (every model config has the key, so one override fits any model)."""
    if pretrained:
        raise ConfigError(
            f"model.pretrained=true, but there are no ImageNet weights for {model}; use "
            "model=resnet18|resnet34|resnet50|densenet121 or model.pretrained=false."
        )
