"""The loss contract: checks and conversions shared by every loss (docs/design.md §5).

Every loss's ``forward(scores, target)`` starts with :func:`loss_inputs`, the one place where
its inputs are checked and converted. The contract, the same for every loss of
:mod:`topk.losses` (torch's own ``CrossEntropyLoss``, ``loss=ce``, follows torch's rules instead):

- **scores** are a floating-point ``[batch, classes]`` matrix; any other shape raises
  ``ValueError`` ("scores must be a [batch, classes] matrix, got shape (5,)").
- **An empty batch** (``batch = 0``) raises ``ValueError`` ("the batch is empty; ..."): the
  mean over no samples is undefined, and no loss returns NaN or 0 for it.
- **Devices**: the target must be on the scores' device (``ValueError`` otherwise, rather than
  torch's own error from inside a loss).
- **Non-finite scores** (NaN or ±inf anywhere) raise :class:`NonFiniteScoresError`, a
  ``ValueError`` and a :class:`~topk.errors.NonFiniteLossError` (:func:`check_finite`).
- **Low precision**: float16 and bfloat16 scores are upcast once to float32, the loss is
  computed in float32 and **returned in float32** (float32 and float64 scores are kept as they
  are). Gradients flow back to the scores in their own dtype.
- **target** is either integer labels ``[batch]`` of any integer dtype (int8 to int64, uint8),
  converted to int64, each in ``[0, classes)``; or a probability matrix ``[batch, classes]``
  (Mixup's soft labels) of any floating dtype, non-negative, with rows summing to 1 (within
  ``1e-4``, or the dtype's rounding unit if larger, e.g. for a bfloat16 target), converted to
  the scores' computation dtype. Boolean targets and out-of-range labels raise ``ValueError``.

**Large scores.** Every loss here is invariant to adding a constant to all the scores of a row,
and computes on the scores less their row maximum (:func:`shift_to_row_max`; the noised hinges,
given labels, less the label's own score, see :func:`label_scores`): a float32 loss of
scores near ``1e8`` (a diverged model) is then as exact as one of scores near 0, where the
unshifted arithmetic would lose every difference below the scores' rounding unit (8 at ``1e8``).

**Where the values are checked.** Shapes and dtypes are checked on every call. The checks of
values (finite scores, labels in range, probability rows) read the data on the host, which on an
accelerator waits for the device and under ``torch.compile`` breaks the graph; they are made only
where that read is free, in eager mode on the CPU (:func:`topk.sync.reads_are_free`), and skipped
elsewhere. There, non-finite scores give a non-finite loss, which training reports at the epoch
end (:func:`topk.engine.train_one_epoch`); an out-of-range label fails in torch's own indexing
(a device-side assertion on CUDA); an invalid probability target is not detected. A soft target
is evaluated on its :data:`SYNC_FREE_SUPPORT` largest entries there (see
:func:`expected_over_targets`). The noised hinges skip the read of the labels' range even on the
CPU: the gather of the labels' scores that their hinge starts with refuses an out-of-range label
itself, and :func:`label_scores` gives that refusal the same sentence.

The per-label functions of the losses (e.g. :func:`expected_over_targets`) take the checked
inputs that :func:`loss_inputs` returns and do not check them again.
"""

from __future__ import annotations

import math

import torch

from topk.errors import ConfigError, NonFiniteLossError
from topk.sync import reads_are_free

ROW_SUM_TOLERANCE = 1e-4
# Score dtypes upcast to float32 before any loss is computed.
LOW_PRECISION = (torch.float16, torch.bfloat16)
# Labels of a soft-target row that expected_over_targets evaluates where it cannot read the row's
# number of non-zero entries: Mixup's λ e_a + (1-λ) e_b has two.
SYNC_FREE_SUPPORT = 2


class NonFiniteScoresError(NonFiniteLossError, ValueError):
    """The scores given to a loss contain NaN or infinite values.

    A ``ValueError`` like every other breach of the loss contract, and a
    :class:`~topk.errors.NonFiniteLossError`, so that training treats a model whose scores
    diverged as it treats a loss that did (the run fails with this sentence, a sweep goes on).
    """


def check_k(k: int, num_classes: int, name: str = "k", key: str | None = None) -> None:
    """Raise if ``k`` is not in ``[1, num_classes - 1]``: top-k with ``k >= n`` is trivial.

    The sentence names the argument ``name``, or ``key`` where the caller knows the value by
    another name (``train.py``'s ``loss.k``, through :func:`check_num_classes_for_k`).
    """
    if num_classes < 2:
        raise ConfigError(f"{key or name}={k} needs at least 2 classes, and the data has {num_classes}: "
                          "top-k of a single class is always right; give the data at least 2 classes.")
    if not 1 <= k <= num_classes - 1:
        raise ConfigError(
            f"{key or name}={k} must be between 1 and the number of classes minus one "
            f"({num_classes - 1}); choose a smaller {name}."
        )


def loss_inputs(scores: torch.Tensor, target: torch.Tensor,
                range_from_gather: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Check ``scores`` and ``target`` against the loss contract and return them ready to use.

    Returns the scores (upcast to float32 if they are float16 or bfloat16) and the target as
    int64 labels ``[B]`` or a probability matrix ``[B, n]`` in the scores' new dtype. Raises
    ``ValueError`` with one sentence naming the problem otherwise (see the module docstring).
    ``range_from_gather=True`` leaves the labels' range to the loss's first use of them, which
    must be :func:`label_scores` (it checks the range on the way, without a read of its own).
    """
    check_scores(scores)
    if reads_are_free(scores):
        check_finite(scores)
    if scores.dtype in LOW_PRECISION:
        scores = scores.float()
    return scores, checked_target(scores, target, check_range=not range_from_gather)


def label_scores(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``scores[i, labels[i]]`` as a column ``[B, 1]``, the labels' range checked on the way.

    torch's ``gather`` refuses an index out of range on the CPU (a ``RuntimeError``); here that
    refusal becomes the contract's sentence (:func:`check_label_range`). A loss whose first use of
    the labels is this gather can therefore skip :func:`loss_inputs`'s read of their range
    (``range_from_gather=True``): at the papers' small label sets that read is a measurable share
    of the noised loss's forward+backward timed against pytopk's (``make bench-losses``;
    docs/benchmarks.md, 'Code choices and the timings behind them'). On an accelerator ``gather`` asserts on the
    device instead, as it did before this check, which reads nothing there either.
    """
    try:
        return scores.gather(1, labels.unsqueeze(1))
    except RuntimeError:
        check_label_range(labels, scores.shape[1])
        raise


def shift_to_row_max(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` less each row's maximum: every entry ``<= 0``, the largest exactly 0.

    For a loss invariant to adding a constant to every score of a row (all the losses of
    :mod:`topk.losses`: hinge and max-margin losses, softmax-based ones, the sorters' relaxations),
    this changes nothing in exact arithmetic, and in floating point it keeps what large scores
    lose: near ``1e8`` float32 scores are 8 apart at least, so a margin of 1 added to one of them,
    or a log-sum-exp's ``log Σ e^{s_j - max}`` added to the maximum, rounds away (the top-2
    hinge of scores ``1e8 + 2·N(0, 1)`` came out 0.5 where it is 1.44). The differences
    ``s_j - max`` are exact for the scores within a factor 2 of the maximum (Sterbenz's lemma),
    the ones that matter; the rest enter a loss only
    through terms that are far smaller or far larger than 1.

    The maximum is detached: the gradient of the shift is ``-(Σ_j ∂L/∂s_j) · ∂max/∂s``, and
    ``Σ_j ∂L/∂s_j = 0`` for a shift-invariant ``L``, so dropping it leaves the gradient exact.
    One ``amax`` and one subtraction; nothing is read on the host.
    """
    return scores - scores.detach().amax(dim=1, keepdim=True)


def check_scores(scores: torch.Tensor, name: str = "scores") -> None:
    """Raise unless ``scores`` is a floating-point ``[batch, classes]`` matrix with a sample and a
    class (``name``: the argument's name in the message). Shapes and dtype only: nothing is read."""
    if not isinstance(scores, torch.Tensor):
        raise ValueError(f"{name} must be a [batch, classes] tensor, got {type(scores).__name__}")
    if scores.dim() != 2:
        raise ValueError(f"{name} must be a [batch, classes] matrix, got shape {tuple(scores.shape)}")
    if not scores.dtype.is_floating_point:
        raise ValueError(f"{name} must be floating point, got dtype {scores.dtype}")
    batch, num_classes = scores.shape
    if batch == 0:
        raise ValueError(
            f"the batch is empty; {name} must hold at least one sample, got shape {tuple(scores.shape)}"
        )
    if num_classes == 0:
        raise ValueError(f"{name} must have at least one class, got shape {tuple(scores.shape)}")


def check_finite(scores: torch.Tensor) -> None:
    """Raise if any score is NaN or infinite (a read of the data: :func:`loss_inputs` calls it
    only where :func:`~topk.sync.reads_are_free`)."""
    # The sum is finite unless some score is not (or the sum overflows, which the full check
    # tells apart): one pass instead of isfinite's four, a third of cross-entropy's time at
    # batch 256 and 1,000 classes.
    total = scores.detach().sum(dtype=torch.promote_types(scores.dtype, torch.float32))
    if not math.isfinite(total) and not bool(torch.isfinite(scores).all()):
        raise NonFiniteScoresError(
            "scores contain NaN or infinite values; a loss needs finite scores "
            "(a model that diverged needs a lower learning rate)"
        )


def checked_target(scores: torch.Tensor, target: torch.Tensor, check_range: bool = True) -> torch.Tensor:
    """``target`` checked against ``scores``: int64 labels ``[B]`` or a probability matrix in the
    scores' dtype (``check_range``: that of :func:`check_labels`)."""
    if target.dtype.is_floating_point:
        check_probabilities(scores, target)
        return target.to(scores.dtype)
    check_labels(scores, target, check_range)
    return target.long()


def check_labels(scores: torch.Tensor, labels: torch.Tensor, check_range: bool = True) -> None:
    """Raise unless ``labels`` is an integer vector ``[B]`` of class indices for ``scores`` (the
    range is checked only where :func:`~topk.sync.reads_are_free`, and not at all for
    ``check_range=False``: see :func:`label_scores`)."""
    if not isinstance(labels, torch.Tensor):
        raise ValueError(f"labels must be a tensor of class indices, got {type(labels).__name__}")
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    batch = scores.shape[0]
    if labels.shape != (batch,):
        raise ValueError(f"labels must have shape [{batch}] to match the scores, got {tuple(labels.shape)}")
    check_same_device(scores, labels, "labels")
    if check_range and reads_are_free(labels):
        check_label_range(labels, scores.shape[1])


def check_label_range(labels: torch.Tensor, num_classes: int) -> None:
    """Raise unless every label is in ``[0, num_classes)`` (reads the labels on the host)."""
    lowest, highest = torch.aminmax(labels)  # one pass: a third of a comparison-and-any's time
    if int(lowest) < 0 or int(highest) >= num_classes:
        bad = labels[(labels < 0) | (labels >= num_classes)][0].item()
        raise ValueError(
            f"labels must be class indices from 0 to {num_classes - 1} ({num_classes} classes), got {bad}"
        )


def check_same_device(scores: torch.Tensor, other: torch.Tensor, name: str) -> None:
    """Raise unless ``other`` (the argument ``name``) is on the scores' device (no read)."""
    if other.device != scores.device:
        raise ValueError(f"{name} must be on the scores' device {scores.device}, got {other.device}")


def check_probabilities(scores: torch.Tensor, target: torch.Tensor) -> None:
    """Raise unless ``target`` is a ``[B, n]`` matrix of non-negative rows summing to 1.

    The tolerance on the row sums is ``1e-4``, or the rounding unit of the target's dtype if
    larger (a bfloat16 Mixup row ``λ e_a + (1-λ) e_b`` can be off by half of it). A NaN or
    infinite entry makes its row's sum fail. The values are checked only where
    :func:`~topk.sync.reads_are_free` (the shape always).
    """
    if target.shape != scores.shape:
        raise ValueError(
            f"a probability target must have the scores' shape {tuple(scores.shape)}, "
            f"got {tuple(target.shape)}"
        )
    check_same_device(scores, target, "a probability target")
    if not reads_are_free(target):
        return
    if bool((target < 0).any()):
        raise ValueError("a probability target has negative entries")
    row_sums = target.sum(dim=1, dtype=torch.promote_types(target.dtype, torch.float32))
    errors = (row_sums - 1).abs()
    if not errors.max().item() <= max(ROW_SUM_TOLERANCE, torch.finfo(target.dtype).eps):  # NaN fails too
        raise ValueError(
            f"the rows of a probability target must sum to 1; one sums to {row_sums[errors.argmax()].item():.6g}"
        )


def check_num_classes_for_k(module: torch.nn.Module, num_classes: int, prefix: str = "loss.") -> None:
    """Check a loss's values that depend on the class count (its ``k``, if it has one, and
    whatever its own ``check_num_classes(num_classes, prefix)`` checks) against the data set's
    class count before training. ``train.py`` calls it: the sentence names the values by their
    config keys, ``prefix`` (``loss.``) and the argument's name (``loss.k=6 must be …``)."""
    k = getattr(module, "k", None)
    if k is not None:
        check_k(k, num_classes, key=f"{prefix}k")
    check = getattr(module, "check_num_classes", None)
    if check is not None:
        check(num_classes, prefix)


def expected_over_targets(per_label_loss, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample ``Σ_i t_i · L(s, i)`` for losses defined on a hard label only.

    ``per_label_loss(scores [M, n], labels [M]) -> [M]`` is the per-sample loss for hard labels.
    For integer ``target`` this is just that loss. For a probability target only the ``W``
    largest entries of each row are evaluated, so a Mixup target ``λ e_a + (1-λ) e_b`` costs two
    evaluations and gives exactly ``λ·L(s, y_a) + (1-λ)·L(s, y_b)``, the form S20 and the loss
    contract use for hinge-type losses. In eager mode on the CPU ``W`` is the largest count of
    non-zero entries in a row, read from the target: exact for every target. Where that read is
    not free (:func:`topk.sync.reads_are_free`) ``W`` is fixed beforehand,
    ``min(n, SYNC_FREE_SUPPORT)`` (2: Mixup's rows), and a row with more non-zero entries gets a
    NaN loss, which training reports at the epoch end, rather than a silently truncated one.
    ``scores`` and ``target`` are those :func:`loss_inputs` returns (they are not checked again).
    """
    if not target.dtype.is_floating_point:
        return per_label_loss(scores, target)
    num_classes = scores.shape[1]
    if reads_are_free(target):
        weights, labels = torch.topk(target, int((target > 0).sum(dim=1).max()), dim=1)
        return _weighted_losses(per_label_loss, scores, weights, labels)
    width = min(num_classes, SYNC_FREE_SUPPORT)
    weights, labels = torch.topk(target, min(num_classes, width + 1), dim=1)
    per_sample = _weighted_losses(per_label_loss, scores, weights[:, :width], labels[:, :width])
    if width == num_classes:
        return per_sample
    return per_sample.masked_fill(weights[:, width] > 0, float("nan"))  # a row with more labels


def _weighted_losses(per_label_loss, scores: torch.Tensor, weights: torch.Tensor, labels: torch.Tensor):
    """``Σ_j weights[:, j] · L(s, labels[:, j])`` per sample, in one call of ``per_label_loss``."""
    batch, width = labels.shape
    repeated = scores.unsqueeze(1).expand(batch, width, scores.shape[1]).reshape(batch * width, -1)
    losses = per_label_loss(repeated, labels.reshape(-1)).reshape(batch, width)
    return (weights * losses).sum(dim=1)
