"""The top-k entropy losses of Lapin, Hein and Schiele ("Loss functions for top-k error:
analysis and insights", CVPR 2016). The truncated one is the softmax loss with the ``k - 1``
strongest rival scores left out of its sum, so that a label ranked among the top ``k`` is barely
penalised (not convex); the top-k entropy loss is the convex one, the softmax loss's conjugate
construction over the top-k simplex.
"""

from __future__ import annotations

import math

import torch

from topk.losses.base import TopKLoss


def truncated_topk_entropy(scores: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    r"""Per-sample truncated top-k entropy loss, a ``[B]`` tensor:

    .. math::
        L_k(s, y) = \log\Big(1 + \sum_{j \in J_y} e^{s_j - s_y}\Big),

    where ``J_y`` holds the labels other than ``y`` except the ``k - 1`` with the largest scores
    (Lapin et al. 2016). ``k = 1`` is cross-entropy. Computed as the log-sum-exp of
    the scores with those ``k - 1`` set to ``-inf``, minus ``s_y``; ties among the rivals leave
    out any ``k - 1`` of the tied ones (the value is the same). The loss is invariant to adding a
    constant to every score; :class:`TruncatedTopKEntropyLoss` passes scores shifted to a row
    maximum of 0, exact in float32 at any magnitude (the log-sum-exp of unshifted scores near
    ``1e8`` rounds its ``log Σ e^{s_j - max}`` away).
    """
    label_scores = scores.gather(1, labels[:, None])
    rivals = scores.detach().scatter(1, labels[:, None], -math.inf)
    strongest = rivals.topk(k - 1, dim=1).indices
    kept = scores.scatter(1, strongest, -math.inf)
    return torch.logsumexp(kept, dim=1) - label_scores.squeeze(1)


class TruncatedTopKEntropyLoss(TopKLoss):
    r"""Truncated top-k entropy loss (Lapin et al. 2016; ``trunc_topk_entropy``).

    .. math::
        L_k(s, y) &= \log\Big(1 + \sum_{j \in J_y} e^{s_j - s_y}\Big), \\
        J_y &= \{1, …, n\} \setminus (\{y\} ∪ \text{the } k - 1 \text{ largest } s_j,\ j ≠ y)

    Dropping the ``k - 1`` strongest rivals makes the loss small as soon as ``y`` is among the top
    ``k`` scores: a top-k version of the softmax loss. For ``k > 1`` it is not convex (raising a
    rival's score past the ``(k-1)``-th largest removes it from the sum). ``k = 1`` is
    cross-entropy.

    Parameters
    ----------
    k : int
        Size of the predicted set, ``1 ≤ k < n``.
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
    loss is ``Σ_i t_i L_k(s, i)``; the per-sample losses are weighted and reduced as ``weight``
    and ``reduction`` say.

    Examples
    --------
    >>> import torch
    >>> from topk import TruncatedTopKEntropyLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> TruncatedTopKEntropyLoss(k=2)(scores, labels)
    tensor(0.8676)
    >>> TruncatedTopKEntropyLoss(k=2, reduction="none")(scores, labels)
    tensor([0.5550, 1.1803])
    """

    def per_label_loss(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return truncated_topk_entropy(scores, labels, self.k)


def _rest_log_sums(rivals: torch.Tensor, top: torch.Tensor, top_indices: torch.Tensor,
                   k: int) -> torch.Tensor:
    """``R_u + s_y`` of :func:`topk_entropy` for ``u = 0, …, k - 1``, a ``[B, k]`` tensor: column
    ``u`` is ``log Σ e^{s_j}`` over the rivals outside the ``u`` largest (``top``, sorted, with
    their ``top_indices``), a suffix log-cum-sum-exp of the ``k - 1`` largest and one
    log-sum-exp of all the others."""
    # log Σ e^{s_j} over the rivals outside the k - 1 largest, shifted by the largest of them
    shift = top[:, k - 1 :].detach()
    tail_terms = (rivals.scatter(1, top_indices[:, : k - 1], -math.inf) - shift).exp()
    tail = tail_terms.sum(dim=1).log() + shift.squeeze(1)
    pieces = torch.cat([top[:, : k - 1], tail[:, None]], dim=1)
    return torch.logcumsumexp(pieces.flip(1), dim=1).flip(1)


def topk_entropy(scores: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    r"""Per-sample top-k entropy loss (Lapin et al. 2016), a ``[B]`` tensor, computed exactly.

    With ``a = (s_j - s_y)_{j ≠ y}`` (``n - 1`` entries) the loss is the softmax loss's conjugate
    construction with the simplex replaced by the top-k simplex
    ``Δ_k = {x : ⟨1, x⟩ ≤ 1, 0 ≤ x_i ≤ ⟨1, x⟩ / k}``:

    .. math::
        L_k(a) = \max_{x \in Δ_k} \; ⟨a, x⟩ - (1 - ⟨1, x⟩) \log(1 - ⟨1, x⟩) - ⟨x, \log x⟩ .

    The definition is the one of the authors' implementation, libsdca (``l2_entropy_topk`` and
    ``thresholds_topk_entropy``; the CVX reference ``matlab/prox-cvx/prox_cvx_topk_entropy.m``).

    **Closed form**, from the KKT conditions (libsdca solves the same system with a threshold
    ``R_u - φ_u`` in place of ``φ_u``). The maximiser has ``s = ⟨1, x⟩ < 1``; the coordinates at
    the cap ``s / k`` are the ``u`` largest ``a_j`` for some ``0 ≤ u ≤ k - 1`` (the set ``U``),
    the others are proportional to ``e^{a_j}``. For a given ``u``, with
    ``R_u = \log Σ_{j ∉ U} e^{a_j}``,

    .. math::
        φ_u = \frac1k \Big( Σ_{j ∈ U} a_j + (k - u)\big(R_u - \log(k - u)\big) \Big),
        \qquad L_k = \log\big(1 + k\, e^{φ_{u^*}}\big) = -\log(1 - s),

    with ``s = k e^φ / (1 + k e^φ)``, ``x_j = s / k`` on ``U`` and
    ``x_j = s (k - u) e^{a_j - R_u} / k`` elsewhere. Equivalently
    ``k φ_{u^*} = \max\{⟨a, y⟩ - ⟨y, \log y⟩ : ⟨1, y⟩ = k, 0 ≤ y ≤ 1\}`` (``y = k x / s``).
    Candidate ``u`` is *feasible* when no uncapped coordinate exceeds the cap,
    ``a_{[u+1]} ≤ R_u - \log(k - u)`` (always true for ``u = k - 1``). The feasible ``u`` are
    exactly those ``≥ u^*`` (and ``φ_u`` is non-increasing in ``u``, so ``φ_{u^*}`` is also the
    largest feasible ``φ_u``; but neighbours agree to second order, too close to tell apart in
    float32, so ``u^*`` is taken as the first feasible ``u``). Where a test sits on its boundary
    the two candidates coincide, value and gradient, so rounding there changes nothing.
    ``k = 1`` (``u = 0``) is ``\log(1 + Σ_j e^{a_j})``, cross-entropy.

    **Gradient.** By Danskin's theorem ``∂L/∂a = x``: ``∂L/∂s_j = x_j`` (``j ≠ y``) and
    ``∂L/∂s_y = -⟨1, x⟩``. Autograd of the selected candidate's formula (its ``U`` held fixed)
    gives exactly that, so no custom backward is needed.

    Only the ``k`` largest rival scores are sorted (``topk``); the others enter through one
    log-sum-exp, and every ``R_u`` is a suffix log-cum-sum-exp of the ``k - 1`` largest scores and
    that log-sum-exp, with no data-dependent shapes. Stable in float32 for scores shifted to a
    row maximum of 0, as :class:`TopKEntropyLoss` passes them (the loss depends on the
    differences ``s_j - s_y`` alone); unshifted scores near ``1e8`` lose their ``R_u`` and ``φ_u``
    to the rounding of the scores' magnitude.
    """
    label_scores = scores.gather(1, labels[:, None]).squeeze(1)
    rivals = scores.scatter(1, labels[:, None], -math.inf)
    top, top_indices = rivals.topk(k, dim=1)  # the k largest rival scores, a_[i] + s_y, sorted
    rest = _rest_log_sums(rivals, top, top_indices, k)
    capped_sums = torch.cat([torch.zeros_like(top[:, :1]), top[:, : k - 1].cumsum(dim=1)], dim=1)
    free = torch.arange(k, 0, -1, dtype=scores.dtype, device=scores.device)  # k - u
    level = rest - free.log()  # log of the uncapped coordinates' mean e^{s_j}
    candidates = (capped_sums + free * level) / k  # φ_u + s_y
    feasible = (top.detach() <= level.detach()) | (free == 1)  # u = k - 1 always is
    first_feasible = feasible.to(torch.uint8).argmax(dim=1, keepdim=True)  # u*
    phi = candidates.gather(1, first_feasible).squeeze(1) - label_scores
    logit = phi + math.log(k)
    return torch.logaddexp(logit, torch.zeros_like(logit))


class TopKEntropyLoss(TopKLoss):
    r"""Top-k entropy loss (Lapin et al. 2016; ``topk_entropy``).

    .. math::
        L_k(s, y) = \max_{x \in Δ_k} \; ⟨a, x⟩ - (1 - ⟨1, x⟩) \log(1 - ⟨1, x⟩) - ⟨x, \log x⟩,
        \qquad a = (s_j - s_y)_{j ≠ y},

    ``Δ_k = {x : ⟨1, x⟩ ≤ 1, 0 ≤ x_i ≤ ⟨1, x⟩ / k}`` the top-k simplex: the softmax loss's
    conjugate construction over the top-k simplex instead of the simplex. Convex and smooth,
    computed exactly by :func:`topk_entropy`. Its gradient in the rival scores is the maximiser
    ``x``, in which no rival takes more than ``1/k`` of the total ``⟨1, x⟩``. As
    ``Δ_k ⊂ Δ_{k-1}``, ``L_k ≤ L_{k-1} ≤ … ≤ L_1``, and ``k = 1`` is cross-entropy. As for
    :class:`TruncatedTopKEntropyLoss`, the targets are labels or probability matrices.

    Parameters
    ----------
    k : int
        Size of the predicted set, ``1 ≤ k < n``.
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
    >>> from topk import TopKEntropyLoss
    >>> scores = torch.tensor([[2.0, 1.0, 0.5, -1.0], [1.0, 2.0, 0.0, 0.5]])
    >>> labels = torch.tensor([1, 3])  # ranked 2nd and 3rd by score
    >>> TopKEntropyLoss(k=2)(scores, labels)
    tensor(1.6707)
    >>> TopKEntropyLoss(k=1)(scores, labels), torch.nn.functional.cross_entropy(scores, labels)
    (tensor(1.7706), tensor(1.7706))
    """

    def per_label_loss(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return topk_entropy(scores, labels, self.k)
