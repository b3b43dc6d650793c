"""Top-k grouping and top-k transition losses of Sawada et al. 2020 (S20), Section III-C.

Notation: ``q = softmax(s)``, ``t`` the target distribution (one-hot for a hard label), and
``[i]`` the classes sorted by decreasing score, so that ``q_[1] ≥ q_[2] ≥ …``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from topk.losses.base import TopKLoss
from topk.losses.targets import check_k, loss_inputs, shift_to_row_max


def topk_membership(scores: torch.Tensor, target: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask ``[B, n]`` of the k classes ranked first by score.

    Ties are broken by *ascending* target mass, then by class index: among classes tied at the
    k-th place, the one the target favours is left out of the top-k group. This is S20's rule for
    the discontinuity of the grouping loss ("define the gradient on the discontinuous point ... as
    the gradient from the second term", §III-C): where the true label ties with the k-th class,
    the loss and its gradient are those of ``-log q_y``.
    """
    by_target = torch.sort(target, dim=1, stable=True).indices
    by_score = torch.sort(scores.gather(1, by_target), dim=1, descending=True, stable=True).indices
    ranked = by_target.gather(1, by_score)
    mask = torch.zeros_like(scores, dtype=torch.bool)
    return mask.scatter_(1, ranked[:, :k], True)


def topk_grouping_terms(scores: torch.Tensor, target: torch.Tensor, k: int):
    """Per-sample grouping loss ``L_k`` (S20 eq. 5), cross-entropy (eq. 3) and ``Σ_{i≤k} q_[i]``.

    Computed in log-space: ``log Σ_{i≤k} q_[i] = logsumexp(s_top-k) - logsumexp(s)``. Integer
    labels take a shortcut with no sort (see :func:`_hard_label_terms`); a probability target
    takes the general form of eq. 5. Both follow the tie rule of :func:`topk_membership`.
    ``scores`` and ``target`` are those :func:`~topk.losses.targets.loss_inputs` returns.

    The terms are invariant to adding a constant to every score of a row (they depend on ``q``
    alone) and are computed on the scores less their row maximum
    (:func:`~topk.losses.targets.shift_to_row_max`): unshifted, ``logsumexp(s) - s_y`` of float32
    scores near ``1e8`` loses the log-sum-exp's ``log Σ e^{s_j - max}`` to the rounding of the
    maximum, and the loss became 2 where it is about 3.4.
    """
    check_k(k, scores.shape[1])
    scores = shift_to_row_max(scores)
    if target.dtype.is_floating_point:
        return _soft_target_terms(scores, target, k)
    return _hard_label_terms(scores, target, k)


def _soft_target_terms(scores: torch.Tensor, probabilities: torch.Tensor, k: int):
    log_q = F.log_softmax(scores, dim=1)
    in_topk = topk_membership(scores.detach(), probabilities, k)
    log_q_topk = torch.logsumexp(log_q.masked_fill(~in_topk, float("-inf")), dim=1)
    target_mass_topk = (probabilities * in_topk).sum(dim=1)
    weighted_log_q = probabilities * log_q
    outside_terms = weighted_log_q.masked_fill(in_topk, 0.0).sum(dim=1)
    grouping = -target_mass_topk * log_q_topk - outside_terms
    cross_entropy = -weighted_log_q.sum(dim=1)
    return grouping, cross_entropy, log_q_topk.exp()


def _hard_label_terms(scores: torch.Tensor, labels: torch.Tensor, k: int):
    """Eq. 5 for a one-hot target: ``-log Σ_{i≤k} q_[i]`` if ``y`` is in the top k, else ``-log q_y``.

    ``y`` is in the top k when fewer than k other classes score at least ``s_y`` (ties leave
    ``y`` out, as :func:`topk_membership`). The top-k mass only needs the k largest scores, so
    no full sort is made.
    """
    log_normaliser = torch.logsumexp(scores, dim=1)
    label_scores = scores.gather(1, labels[:, None]).squeeze(1)
    others_at_least = (scores.detach() >= label_scores.detach()[:, None]).sum(dim=1) - 1
    label_in_topk = others_at_least < k
    log_mass_topk = torch.logsumexp(torch.topk(scores, k, dim=1).values, dim=1)
    cross_entropy = log_normaliser - label_scores
    grouping = log_normaliser - torch.where(label_in_topk, log_mass_topk, label_scores)
    return grouping, cross_entropy, torch.exp(log_mass_topk - log_normaliser)


class TopKGroupingLoss(TopKLoss):
    r"""Top-k grouping loss ``L_k`` of Sawada et al. 2020, eq. 5.

    .. math::
        L_k = -\Big(\sum_{i\le k} t_{[i]}\Big) \log\Big(\sum_{i\le k} q_{[i]}\Big)
              - \sum_{i>k} t_{[i]} \log q_{[i]}

    Cross-entropy computed with the k highest-scoring classes merged into one class. For a hard
    label ``y`` it is ``-log Σ_{i≤k} q_[i]`` when ``y`` is among the top k and ``-log q_y``
    otherwise. At the discontinuity (``y`` tied with the k-th class) the gradient is the second
    term's, as S20 suggests; see :func:`topk_membership`.

    Parameters
    ----------
    k : int
        Size of the top-k group, ``1 ≤ k < n``.
    weight : sequence of float, Tensor or None
        One weight per class, as :class:`torch.nn.CrossEntropyLoss`'s ``weight``: sample ``i``
        weighs ``w_i = weight[y_i]`` (a probability target ``t_i``: ``Σ_c t_ic weight[c]``, the
        expected weight); ``None`` weighs every sample 1 (:class:`~topk.losses.base.Loss`).
    reduction : {"mean", "sum", "none"}
        How the per-sample losses ``ℓ_i`` are reduced: ``"mean"`` (the default) returns
        ``Σ_i w_i ℓ_i / Σ_i w_i``, the plain batch mean without weights (0 when every weight of
        the batch is 0); ``"sum"`` returns ``Σ_i w_i ℓ_i``; ``"none"`` returns the ``[B]``
        values ``w_i ℓ_i``.

    Notes
    -----
    Accepts integer labels ``[B]`` or a probability matrix ``[B, n]`` (Mixup); the per-sample
    losses are weighted and reduced as ``weight`` and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import TopKGroupingLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> TopKGroupingLoss(k=2)(scores, labels)
    tensor(1.1140)
    >>> TopKGroupingLoss(k=2, reduction="none")(scores, labels)
    tensor([0.1819, 2.0460])
    """

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, target = loss_inputs(scores, target)
        grouping, _, _ = topk_grouping_terms(scores, target, self.k)
        return self.reduce(grouping, target, scores.shape[1])


class TopKTransitionLoss(TopKLoss):
    r"""Top-k transition loss ``L_{CE,k}`` of Sawada et al. 2020, eq. 6.

    .. math::
        L_{CE,k} = \Big(1 - \sum_{i\le k} q_{[i]}\Big) L_{CE}
                   + \Big(\sum_{i\le k} q_{[i]}\Big) L_k

    Moves adaptively from cross-entropy (uncertain predictions, small top-k mass) to the grouping
    loss ``L_k`` (confident predictions). The weight ``Σ_{i≤k} q_[i]`` is part of the loss as the
    equation is written, so the gradient flows through it too.

    Parameters
    ----------
    k : int
        Size of the top-k group, ``1 ≤ k < n``.
    weight : sequence of float, Tensor or None
        One weight per class, as :class:`torch.nn.CrossEntropyLoss`'s ``weight``: sample ``i``
        weighs ``w_i = weight[y_i]`` (a probability target ``t_i``: ``Σ_c t_ic weight[c]``, the
        expected weight); ``None`` weighs every sample 1 (:class:`~topk.losses.base.Loss`).
    reduction : {"mean", "sum", "none"}
        How the per-sample losses ``ℓ_i`` are reduced: ``"mean"`` (the default) returns
        ``Σ_i w_i ℓ_i / Σ_i w_i``, the plain batch mean without weights (0 when every weight of
        the batch is 0); ``"sum"`` returns ``Σ_i w_i ℓ_i``; ``"none"`` returns the ``[B]``
        values ``w_i ℓ_i``.

    Examples
    --------
    >>> import torch
    >>> from topk import TopKTransitionLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> TopKTransitionLoss(k=2)(scores, labels)
    tensor(1.2232)
    >>> TopKTransitionLoss(k=2, reduction="none")(scores, labels)
    tensor([0.4004, 2.0460])
    """

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, target = loss_inputs(scores, target)
        grouping, cross_entropy, mass_topk = topk_grouping_terms(scores, target, self.k)
        return self.reduce((1 - mass_topk) * cross_entropy + mass_topk * grouping, target, scores.shape[1])
