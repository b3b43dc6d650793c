"""Truncated top-k entropy loss of Lapin, Hein and Schiele ("Loss functions for top-k error:
analysis and insights", CVPR 2016): the softmax loss with the ``k - 1`` strongest rival scores
left out of its sum, so that a label ranked among the top ``k`` is barely penalised.
"""

from __future__ import annotations

import math

import torch

from topk.losses.base import TopKLoss
from topk.losses.targets import check_k, expected_over_targets, loss_inputs


def truncated_topk_entropy(scores: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    r"""Per-sample truncated top-k entropy loss, a ``[B]`` tensor:

    .. math::
        L_k(s, y) = \log\Big(1 + \sum_{j \in J_y} e^{s_j - s_y}\Big),

    where ``J_y`` holds the labels other than ``y`` except the ``k - 1`` with the largest scores
    (Lapin et al. 2016). ``k = 1`` is cross-entropy. Computed as the log-sum-exp of
    the scores with those ``k - 1`` set to ``-inf``, minus ``s_y``; ties among the rivals leave
    out any ``k - 1`` of the tied ones (the value is the same).
    """
    label_scores = scores.gather(1, labels[:, None])
    rivals = scores.detach().scatter(1, labels[:, None], -math.inf)
    strongest = rivals.topk(k - 1, dim=1).indices
    kept = scores.scatter(1, strongest, -math.inf)
    return torch.logsumexp(kept, dim=1) - label_scores.squeeze(1)


class TruncatedTopKEntropyLoss(TopKLoss):
    r"""Truncated top-k entropy loss (Lapin et al. 2016; ``trunc_topk_entropy``).

    .. math::
        L_k(s, y) = \log\Big(1 + \sum_{j \in J_y} e^{s_j - s_y}\Big),
        \qquad J_y = \{1, …, n\} \setminus (\{y\} ∪ \text{the } k - 1 \text{ largest } s_j,\ j ≠ y)

    Dropping the ``k - 1`` strongest rivals makes the loss small as soon as ``y`` is among the top
    ``k`` scores: a top-k version of the softmax loss. For ``k > 1`` it is not convex (raising a
    rival's score past the ``(k-1)``-th largest removes it from the sum). ``k = 1`` is
    cross-entropy.

    Parameters
    ----------
    k : int
        Size of the predicted set, ``1 ≤ k < n``.

    Accepts integer labels ``[B]`` or a probability matrix ``[B, n]`` (Mixup), for which the loss
    is ``Σ_i t_i L_k(s, i)``; returns the batch mean.
    """

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, target = loss_inputs(scores, target)
        check_k(self.k, scores.shape[1])
        per_sample = expected_over_targets(
            lambda s, y: truncated_topk_entropy(s, y, self.k), scores, target
        )
        return self.reduce(per_sample)
