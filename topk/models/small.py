"""The small models of S20's synthetic experiments (§IV)."""

from __future__ import annotations

import math

import torch
from torch import nn

from topk.errors import ConfigError
from topk.models.heads import check_not_pretrained, make_head


def _flat_size(input_shape) -> int:
    return int(math.prod(input_shape))


class LinearClassifier(nn.Module):
    """A fully connected layer from the input to the class scores, without bias (S20 Exp. 1/2).

    ``head="cosine"`` makes the layer a cosine classifier (see :mod:`topk.models.heads`).
    """

    def __init__(self, num_classes: int, input_shape, bias: bool = False, head: str = "linear",
                 pretrained: bool = False):
        super().__init__()
        check_not_pretrained(pretrained, "the linear model")
        self.fc = make_head(head, _flat_size(input_shape), num_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


class MLPClassifier(nn.Module):
    """One hidden layer of ``hidden`` ReLU units, then a linear (or cosine) layer to the scores
    (S20 Exp. 3: Exp. 1's bias-free output layer with a hidden ReLU layer "inserted after the input
    layer", §IV-C). ``bias`` is the output layer's; the hidden layer always has one."""

    def __init__(self, num_classes: int, input_shape, hidden: int = 8, bias: bool = False,
                 head: str = "linear", pretrained: bool = False):
        super().__init__()
        check_not_pretrained(pretrained, "the MLP")
        if hidden < 1:
            raise ConfigError(f"model.hidden must be a positive width, got {hidden}.")
        self.hidden = nn.Linear(_flat_size(input_shape), hidden)
        self.fc = make_head(head, hidden, num_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.hidden(x.flatten(1))))
