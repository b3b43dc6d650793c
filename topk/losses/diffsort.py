r"""Top-k cross-entropy over a differentiable sorter of Petersen, Kuehne, Borgelt and Deussen
("Differentiable Top-k Classification Learning", ICML 2022, P22): the negative log-probability
that the label is in the top ``k``, ``k`` drawn from a distribution ``p_K``, the top ``k`` being
relaxed by a differentiable sorter (:mod:`topk.functional.sorting`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from topk.errors import ConfigError
from topk.functional.sorting import check_sorter, weighted_topk
from topk.losses.base import Loss
from topk.losses.targets import expected_over_targets, loss_inputs, shift_to_row_max

TOP1_MODES = ("sm", "smce", "sort")
# P22's code takes log(p (1 - 2e-7) + 1e-7) for log p: a probability of 0 costs -log 1e-7 ≈ 16.1.
LOG_FLOOR = 1e-7
# How far the entries of p_K may sum from 1 (P22's code asserts 0.9999 < Σ p_K < 1.0001).
P_K_TOLERANCE = 1e-4


def check_p_k(p_k) -> list[float]:
    """``p_k`` as a list of floats; raise ``ValueError`` unless it is a non-empty list of
    non-negative numbers summing to 1."""
    if isinstance(p_k, (str, bytes)) or not isinstance(p_k, Sequence) or len(p_k) == 0:
        raise ValueError(f"p_k must be a non-empty list of probabilities of k = 1, 2, …, got {p_k!r}")
    values = [float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else math.nan for p in p_k]
    if not all(0 <= p < math.inf for p in values) or abs(sum(values) - 1) > P_K_TOLERANCE:
        raise ValueError(f"p_k must hold non-negative probabilities summing to 1, got {list(p_k)}")
    return values


def top_m(scores: torch.Tensor, labels: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """P22's top-m truncation: each row keeps its label's score, first, then the ``m - 1``
    largest other scores in descending order (``[B, m]``), and the labels become 0."""
    rivals = scores.detach().scatter(1, labels[:, None], -math.inf)
    strongest = rivals.topk(m - 1, dim=1).indices
    kept = torch.cat([scores.gather(1, labels[:, None]), scores.gather(1, strongest)], dim=1)
    return kept, torch.zeros_like(labels)


def floored_nll(probability: torch.Tensor) -> torch.Tensor:
    """``-log(p (1 - 2·10⁻⁷) + 10⁻⁷)``, P22's code's ``-log p``."""
    return -torch.log(probability * (1 - 2 * LOG_FLOOR) + LOG_FLOOR)


def diffsort_topk_ce(scores: torch.Tensor, labels: torch.Tensor, p_k: Sequence[float], sorter: str,
                     steepness: float, distribution: str, art_lambda: float, top1_mode: str,
                     m: int | None = None) -> torch.Tensor:
    r"""Per-sample top-k cross-entropy of P22 for integer labels, a ``[B]`` tensor.

    With ``P`` the sorter's relaxed top-K matrix (``P[r, c] ≈ Pr(c holds rank r)``, ``K = len(p_k)``)
    and ``Pr(c ∈ top-k) = Σ_{r ≤ k} P[r, c]``, ``w_r = Σ_{k ≥ r} p_K(k)``:

    - ``sort``: ``-log Σ_k p_K(k) Pr(y ∈ top-k) = -log Σ_r w_r P[r, y]`` (P22's loss);
    - ``sm``: the ``k = 1`` term uses ``softmax(s)_y`` in place of ``P[1, y]``:
      ``-log(p_K(1) softmax(s)_y + Σ_{k ≥ 2} p_K(k) Pr(y ∈ top-k))``;
    - ``smce``: ``p_K(1) CE(s, y) + (Σ_{k≥2} p_K(k)) · (-log Σ_{k ≥ 2} p_K(k) Pr(y ∈ top-k))``,

    each ``-log`` floored as P22's code does (:func:`floored_nll`). With ``m``, the scores are
    first cut to the label's and the ``m - 1`` largest others (:func:`top_m`).
    """
    if m is not None:
        scores, labels = top_m(scores, labels, m)
    # Rank r's weight in Σ_k p_K(k) Pr(y ∈ top-k), without p_K(1)'s share of rank 1 outside "sort".
    first = 0 if top1_mode == "sort" else 1
    rank_weights = [sum(p_k[max(rank, first):]) for rank in range(len(p_k))]
    if any(rank_weights):
        mass = weighted_topk(scores, rank_weights, sorter, steepness, distribution, art_lambda)
        label_mass = mass.gather(1, labels[:, None]).squeeze(1)
    else:  # p_K = [1, 0, …] outside "sort": the sorter has weight 0
        label_mass = scores.new_zeros(labels.shape)
    if top1_mode == "sort":
        return floored_nll(label_mass)
    if top1_mode == "sm":
        softmax = torch.softmax(scores, dim=1).gather(1, labels[:, None]).squeeze(1)
        return floored_nll(p_k[0] * softmax + label_mass)
    cross_entropy = F.cross_entropy(scores, labels, reduction="none")
    return p_k[0] * cross_entropy + sum(p_k[1:]) * floored_nll(label_mass)


class DiffSortTopKCrossEntropyLoss(Loss):
    r"""Top-k cross-entropy over a differentiable sorter, P22's ``TopKCrossEntropyLoss``
    (``diffsort_topk_ce``):

    .. math:: L(s, y) = -\log \sum_{k=1}^{K} p_K(k)\, \Pr(y ∈ \text{top-}k(s)),

    the top-k membership relaxed by a differentiable sorter (see :func:`diffsort_topk_ce` for the
    three ``top1_mode`` forms). ``p_K = [1, 0, …]`` is cross-entropy (exactly with ``smce``, to the
    log floor with ``sm``).

    Parameters
    ----------
    p_k : list of float
        The distribution ``p_K`` of ``k = 1 … K``, non-negative, summing to 1; ``K = len(p_k)``
        must be below the class count. P22's grid: ``[1,0,0,0,0]``, ``[0,0,0,0,1]``,
        ``[.5,0,0,0,.5]``, ``[.25,0,0,0,.75]``, ``[.1,0,0,0,.9]``, ``[.2,.2,.2,.2,.2]``.
    sorter : str
        ``neuralsort``, ``softsort``, ``odd_even``, ``bitonic`` or ``splitter_selection``
        (:mod:`topk.functional.sorting`).
    steepness : float
        Inverse temperature ``β > 0`` of the sorter (P22: NeuralSort and SoftSort 0.0625 on
        CIFAR-100, 0.5 on ImageNet; bitonic and splitter_selection 0.5 and 1).
    distribution : str
        The sorting networks' swap distribution: ``logistic``, ``logistic_phi`` (ART, P22's
        choice) or ``cauchy`` (ignored by NeuralSort and SoftSort).
    art_lambda : float
        ``λ ≥ 0`` of ``logistic_phi`` (P22: 0.5).
    top1_mode : str
        ``sm`` (softmax for the k = 1 term, P22's library default), ``smce`` (a separate
        cross-entropy for it, P22's CIFAR-100 runs) or ``sort`` (the sorter alone).
    m : int or None
        Top-m truncation, ``K < m < n``: only the label's score and the ``m - 1`` largest others
        are sorted (P22's ImageNet runs: 16); ``None`` sorts all ``n``.
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
    Accepts integer labels ``[B]`` or a probability matrix ``[B, n]`` (Mixup), for which the
    loss is ``Σ_i t_i L(s, i)``; the per-sample losses are weighted and reduced as ``weight``
    and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import DiffSortTopKCrossEntropyLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> loss = DiffSortTopKCrossEntropyLoss(p_k=[0.5, 0.0, 0.5], sorter="bitonic", steepness=0.5,
    ...                                     distribution="logistic_phi", art_lambda=0.5)
    >>> loss(scores, labels)
    tensor(0.7699)
    >>> DiffSortTopKCrossEntropyLoss(p_k=[1.0], top1_mode="smce")(scores, labels)  # cross-entropy
    tensor(1.7706)
    """

    # p_k's default is a list, as in the YAML (it is copied, never changed).
    def __init__(self, p_k: Sequence[float] = [0.2, 0.2, 0.2, 0.2, 0.2], sorter: str = "bitonic",  # noqa: B006
                 steepness: float = 1.0, distribution: str = "cauchy", art_lambda: float = 0.25,
                 top1_mode: str = "sm", m: int | None = None, weight=None, reduction: str = "mean"):
        super().__init__(weight, reduction)
        self.p_k = check_p_k(p_k)
        check_sorter(sorter, steepness, distribution, art_lambda)
        if top1_mode not in TOP1_MODES:
            raise ValueError(f"top1_mode must be one of {', '.join(TOP1_MODES)}, got {top1_mode!r}")
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m <= len(self.p_k)):
            raise ValueError(f"m must be None or a whole number above len(p_k) = {len(self.p_k)} "
                             f"(and below the class count), got {m!r}")
        self.sorter, self.steepness, self.distribution = sorter, float(steepness), distribution
        self.art_lambda, self.top1_mode, self.m = float(art_lambda), top1_mode, m

    def extra_repr(self) -> str:
        return (f"p_k={self.p_k}, sorter={self.sorter}, steepness={self.steepness}, "
                f"distribution={self.distribution}, art_lambda={self.art_lambda}, "
                f"top1_mode={self.top1_mode}, m={self.m}")

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss of scores shifted to a row maximum of 0
        (:func:`~topk.losses.targets.shift_to_row_max`): every sorter's relaxation depends on the
        differences of the scores alone (a network mixes its wires in convex combinations, which
        a shift of every input carries through), and so do the softmax and cross-entropy terms.
        Unshifted, float32 scores near ``1e8`` lose the networks' mixed values to rounding."""
        scores, target = loss_inputs(scores, target)
        self.check_num_classes(scores.shape[1])
        per_sample = expected_over_targets(
            lambda s, y: diffsort_topk_ce(s, y, self.p_k, self.sorter, self.steepness, self.distribution,
                                          self.art_lambda, self.top1_mode, self.m),
            shift_to_row_max(scores), target)
        return self.reduce(per_sample, target, scores.shape[1])

    def check_num_classes(self, num_classes: int, prefix: str = "") -> None:
        """Raise ConfigError unless ``len(p_k) < m < n`` (or ``len(p_k) < n`` without ``m``); the
        sentence names ``p_k`` and ``m``, each with ``prefix`` (``train.py``'s ``loss.``, through
        :func:`~topk.losses.targets.check_num_classes_for_k`)."""
        k = len(self.p_k)
        if self.m is None and k >= num_classes:
            raise ConfigError(f"{prefix}p_k has {k} entries but the scores have only {num_classes} classes; "
                              f"len(p_k) must be below the class count: shorten p_k.")
        if self.m is not None and self.m >= num_classes:
            raise ConfigError(f"{prefix}m={self.m} must be below the class count {num_classes} "
                              f"(len(p_k) < m < n); lower m, or drop it to sort every class.")
