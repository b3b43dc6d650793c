"""topk: reproduce and extend research on top-k classification losses.

Every loss of the literature is one import away, a ``torch.nn.Module`` taking scores ``[B, n]``
and integer labels ``[B]`` (or probability targets ``[B, n]``)::

    >>> import torch
    >>> from topk import SmoothTopKSVM, topk_accuracies
    >>> scores, labels = torch.tensor([[2.0, 1.0, 0.5], [0.1, 0.3, 3.0]]), torch.tensor([1, 2])
    >>> SmoothTopKSVM(k=2, tau=1.0)(scores, labels)
    tensor(0.5899)
    >>> topk_accuracies(scores, labels, ks=[1, 2])
    {'top1': 50.0, 'top2': 100.0, 'macro_top1': 50.0, 'macro_top2': 100.0}

The library is importable without Hydra; ``train.py`` is the only place that turns
configuration into objects.
"""

from topk.losses import (
    CalibratedTopKHingeLoss,
    ConvexTopKHingeLoss,
    DiffSortTopKCrossEntropyLoss,
    FocalLoss,
    LDAMLoss,
    NoisedImbalancedTopKHingeLoss,
    NoisedTopKHingeLoss,
    SmoothTopKSVM,
    TopKEntropyLoss,
    TopKGroupingLoss,
    TopKHingeLoss,
    TopKTransitionLoss,
    TruncatedTopKEntropyLoss,
)
from topk.metrics import topk_accuracies

__version__ = "0.2.0"

__all__ = [
    "CalibratedTopKHingeLoss", "ConvexTopKHingeLoss", "DiffSortTopKCrossEntropyLoss", "FocalLoss",
    "LDAMLoss", "NoisedImbalancedTopKHingeLoss", "NoisedTopKHingeLoss", "SmoothTopKSVM",
    "TopKEntropyLoss", "TopKGroupingLoss", "TopKHingeLoss", "TopKTransitionLoss",
    "TruncatedTopKEntropyLoss", "topk_accuracies", "__version__",
]
