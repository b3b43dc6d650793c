"""Batch-level augmentations: the seam between data and loss.

An augmentation is a callable ``(inputs, labels) -> (inputs, target)`` applied to each training
batch; ``target`` is what the loss receives (int64 labels, or a probability matrix for Mixup, as in
the loss contract of DESIGN §4). Per-image transforms (crops, flips) belong to the data pipeline.
"""

from __future__ import annotations

import torch


class NoAugment:
    """Hand the batch to the loss unchanged (``augment=none``)."""

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor):
        return inputs, labels

    def __repr__(self) -> str:
        return "NoAugment()"
