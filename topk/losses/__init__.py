"""Top-k losses. Each is an ``nn.Module``: ``loss(scores [B, n], target) -> scalar`` where
``target`` is int64 labels ``[B]`` or a probability matrix ``[B, n]`` (DESIGN §4).

``ce`` is torch's own :class:`torch.nn.CrossEntropyLoss`, which accepts both target forms.
"""

from torch.nn import CrossEntropyLoss

from topk.losses.transition import TopKGroupingLoss, TopKTransitionLoss, topk_membership

__all__ = ["CrossEntropyLoss", "TopKGroupingLoss", "TopKTransitionLoss", "topk_membership"]
