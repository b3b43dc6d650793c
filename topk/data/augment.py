"""Batch-level augmentations: the seam between data and loss.

An augmentation is a callable ``(inputs, labels) -> (inputs, target)`` applied to each training
batch; ``target`` is what the loss receives (int64 labels, or a probability matrix for Mixup, as in
the loss contract of DESIGN §4). Per-image transforms (crops, flips) belong to the data pipeline.
"""

from __future__ import annotations

import torch

from topk.errors import ConfigError


class NoAugment:
    """Hand the batch to the loss unchanged (``augment=none``)."""

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor):
        return inputs, labels

    def __repr__(self) -> str:
        return "NoAugment()"


class Mixup:
    """Mixup (Zhang et al. 2018): train on convex combinations of pairs of examples.

    Each batch draws ``λ ~ Beta(alpha, alpha)`` and a permutation ``π`` of the batch, and returns
    inputs ``λ·x + (1-λ)·x_π`` with the probability target ``λ·e_y + (1-λ)·e_{y_π}`` ([B, n]).
    Cross-entropy and S20's losses use that target natively; losses defined on hard labels only
    evaluate ``Σ_i t_i L(s, i) = λ·L(s, y) + (1-λ)·L(s, y_π)``
    (:func:`topk.losses.targets.expected_over_targets`). Random draws use torch's global
    generator, whose state the checkpoints keep, so a resumed run mixes the same pairs.
    """

    def __init__(self, num_classes: int, alpha: float = 1.0):
        if alpha <= 0:
            raise ConfigError(f"augment.alpha must be > 0, got {alpha}.")
        self.num_classes = num_classes
        self.alpha = alpha

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor):
        lam = float(torch.distributions.Beta(self.alpha, self.alpha).sample())
        permutation = torch.randperm(len(labels)).to(labels.device)
        mixed = lam * inputs + (1 - lam) * inputs[permutation]
        one_hot = torch.nn.functional.one_hot(labels, self.num_classes).to(mixed.dtype)
        target = lam * one_hot + (1 - lam) * one_hot[permutation]
        return mixed, target

    def __repr__(self) -> str:
        return f"Mixup(alpha={self.alpha})"
