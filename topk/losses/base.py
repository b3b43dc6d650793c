"""The base class of every loss with a top-k parameter."""

from __future__ import annotations

from torch import nn

from topk.errors import ConfigError


class TopKLoss(nn.Module):
    """Holds and checks ``k``; the class count is checked against it at every call."""

    def __init__(self, k: int = 5):
        super().__init__()
        if k < 1:
            raise ConfigError(f"loss.k must be at least 1, got {k}.")
        self.k = k

    def extra_repr(self) -> str:
        return f"k={self.k}"
