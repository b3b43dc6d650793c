"""Top-k losses. Each is an ``nn.Module``: ``loss(scores [B, n], target) -> scalar`` where
``target`` is integer labels ``[B]`` or a probability matrix ``[B, n]`` (docs/design.md §5).

Every loss here keeps the same contract at its edges, checked in one place
(:func:`topk.losses.targets.loss_inputs`, whose module docstring states it in full): labels of
any integer dtype; ``ValueError`` for scores that are not a ``[batch, classes]`` matrix, for an
empty batch and for NaN or infinite scores (values are checked in eager mode on the CPU only:
elsewhere no loss reads its data on the host, :mod:`topk.sync`); float16 and bfloat16 scores
computed in float32, the loss returned in float32. Every loss here is invariant to adding a
constant to all the scores of a row and is computed on the scores less their row maximum
(:func:`topk.losses.targets.shift_to_row_max`), so that float32 scores of any magnitude (near
``1e8``, a diverged model's) give the float64 loss of the same scores (``tests/test_numerics.py``).
Every loss takes ``weight=`` (one weight per class) and ``reduction=`` (``mean``, ``sum``,
``none``) as :class:`torch.nn.CrossEntropyLoss` does (:class:`topk.losses.base.Loss`).
Constructors refuse a bad argument with a ``ValueError`` sentence naming it (``k must be a whole
number of at least 1, got 2.5``).

``ce`` is torch's own :class:`torch.nn.CrossEntropyLoss`, which accepts both target forms and
follows torch's rules rather than this contract (e.g. int64 or uint8 labels only, NaN for an
empty batch). The config name of each loss (``conf/loss/<name>.yaml``) is given beside it.
"""

from torch.nn import CrossEntropyLoss  # ce

from topk.losses.base import TopKLoss
from topk.losses.diffsort import DiffSortTopKCrossEntropyLoss  # diffsort_topk_ce
from topk.losses.entropy import (  # trunc_topk_entropy, topk_entropy
    TopKEntropyLoss,
    TruncatedTopKEntropyLoss,
)
from topk.losses.hinge import (  # hinge, cvx_hinge, cal_hinge
    CalibratedTopKHingeLoss,
    ConvexTopKHingeLoss,
    TopKHingeLoss,
)
from topk.losses.margin import FocalLoss, LDAMLoss  # focal, ldam
from topk.losses.noised import (  # noised_bal, noised_imbal
    NoisedImbalancedTopKHingeLoss,
    NoisedTopKHingeLoss,
)
from topk.losses.smooth_svm import SmoothTopKSVM  # smooth_svm
from topk.losses.transition import (  # topk_group, topk_transition
    TopKGroupingLoss,
    TopKTransitionLoss,
    topk_membership,
)

__all__ = [
    "CalibratedTopKHingeLoss", "ConvexTopKHingeLoss", "CrossEntropyLoss", "DiffSortTopKCrossEntropyLoss",
    "FocalLoss", "LDAMLoss",
    "NoisedImbalancedTopKHingeLoss", "NoisedTopKHingeLoss", "SmoothTopKSVM", "TopKGroupingLoss",
    "TopKEntropyLoss", "TopKHingeLoss", "TopKLoss", "TopKTransitionLoss",
    "TruncatedTopKEntropyLoss", "topk_membership",
]
