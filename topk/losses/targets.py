"""Checks and conversions shared by every loss (the loss contract, DESIGN §4).

A loss receives scores ``[B, n]`` and a target that is either int64 labels ``[B]`` or a
probability matrix ``[B, n]`` whose rows are non-negative and sum to 1 (Mixup's soft labels).
"""

from __future__ import annotations

import torch

from topk.errors import ConfigError

ROW_SUM_TOLERANCE = 1e-4


def check_k(k: int, num_classes: int, name: str = "k") -> None:
    """Raise if ``k`` is not in ``[1, num_classes - 1]``: top-k with ``k >= n`` is trivial."""
    if not 1 <= k <= num_classes - 1:
        raise ConfigError(
            f"loss.{name}={k} must be between 1 and the number of classes minus one "
            f"({num_classes - 1}); choose a smaller {name}."
        )


def check_scores(scores: torch.Tensor) -> None:
    if scores.dim() != 2:
        raise ValueError(f"scores must be a [batch, classes] matrix, got shape {tuple(scores.shape)}")


def check_labels(scores: torch.Tensor, labels: torch.Tensor) -> None:
    """Raise unless ``labels`` is an integer vector ``[B]`` of class indices for ``scores``."""
    check_scores(scores)
    batch, num_classes = scores.shape
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    if labels.shape != (batch,):
        raise ValueError(f"labels must have shape [{batch}] to match the scores, got {tuple(labels.shape)}")
    out_of_range = (labels < 0) | (labels >= num_classes)
    if bool(out_of_range.any()):
        bad = labels[out_of_range][0].item()
        raise ValueError(f"label {bad} is out of range for {num_classes} classes (0 to {num_classes - 1})")


def target_probabilities(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Return ``target`` as a probability matrix ``[B, n]`` in the scores' dtype.

    Integer labels become one-hot rows; a probability matrix is checked (shape, non-negative,
    rows summing to 1) and returned unchanged.
    """
    check_scores(scores)
    batch, num_classes = scores.shape
    if not target.dtype.is_floating_point:
        check_labels(scores, target)
        return torch.nn.functional.one_hot(target.long(), num_classes).to(scores.dtype)
    if target.shape != scores.shape:
        raise ValueError(
            f"a probability target must have the scores' shape {tuple(scores.shape)}, "
            f"got {tuple(target.shape)}"
        )
    if batch:
        if bool((target < 0).any()):
            raise ValueError("a probability target has negative entries")
        row_sums = target.sum(dim=1)
        worst = (row_sums - 1).abs().max().item()
        if worst > ROW_SUM_TOLERANCE:
            raise ValueError(
                f"the rows of a probability target must sum to 1; one sums to "
                f"{row_sums[(row_sums - 1).abs().argmax()].item():.6g}"
            )
    return target.to(scores.dtype)


def check_num_classes_for_k(module: torch.nn.Module, num_classes: int) -> None:
    """Check a loss's ``k`` (if it has one) against the data set's class count."""
    k = getattr(module, "k", None)
    if k is not None:
        check_k(k, num_classes)




def expected_over_targets(per_label_loss, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample ``Σ_i t_i · L(s, i)`` for losses defined on a hard label only.

    ``per_label_loss(scores [M, n], labels [M]) -> [M]`` is the per-sample loss for hard labels.
    For integer ``target`` this is just that loss. For a probability target only the classes
    with non-zero mass are evaluated (at most the largest count of non-zeros in a row), so a
    Mixup target ``λ e_a + (1-λ) e_b`` costs two evaluations and gives exactly
    ``λ·L(s, y_a) + (1-λ)·L(s, y_b)``, the form S20 and the loss contract use for hinge-type losses.
    """
    if not target.dtype.is_floating_point:
        check_labels(scores, target)
        return per_label_loss(scores, target)
    probabilities = target_probabilities(scores, target)
    support = int((probabilities > 0).sum(dim=1).max()) if len(probabilities) else 1
    weights, labels = torch.topk(probabilities, max(support, 1), dim=1)
    batch, width = labels.shape
    repeated = scores.unsqueeze(1).expand(batch, width, scores.shape[1]).reshape(batch * width, -1)
    losses = per_label_loss(repeated, labels.reshape(-1)).reshape(batch, width)
    return (weights * losses).sum(dim=1)
