"""Top-k accuracies: plain, macro-averaged over classes, and per class; average-k accuracies.

Ties count against the model: label ``y`` is in the top k when fewer than ``k`` *other* classes
score at least ``s_y``. A model that gives every class the same score therefore has top-k
accuracy 0 for every ``k < n``, never a free 100%.

Average-k accuracy (Garcin et al. 2021, "Pl@ntNet-300K: a plant image dataset with high label
ambiguity and a long-tailed distribution", NeurIPS Datasets and Benchmarks; the metric its
authors recommend): one probability threshold ``λ_k`` is chosen on the validation split so that
the sets ``{j : softmax(s)_j ≥ λ_k}`` hold k labels on average there (``λ_k`` is the ``N·k``-th
largest of the ``N·n`` validation probabilities); a split's ``avg{k}`` is the percentage of its
samples with ``softmax(s)_y ≥ λ_k``, ``macro_avg{k}`` the mean over its classes of that
percentage per class (:class:`AverageKAccumulator`, :func:`average_k_thresholds`,
:func:`average_k_accuracies`). :func:`average_k_metrics` computes them for every evaluated split at
the ``val`` split's thresholds, over all processes (:func:`validation_thresholds` gathers the
largest validation probabilities of each): it lives here rather than in :mod:`topk.distributed`
because the threshold is the metric's definition, and :mod:`topk.distributed` only supplies the
sums and the gather (a reader of the metric finds all of it in one place).

**Inputs**, the losses' contract (:mod:`topk.losses.targets`, whose checks are reused here):
``scores`` a floating-point ``[batch, classes]`` matrix with at least one sample; ``labels``
integer class indices ``[batch]`` (any integer dtype) in ``[0, classes)``, on the scores'
device; ``ks`` whole numbers of at least 1 (a float such as 2.5, or a bool, is refused; ks
above the class count are dropped, :func:`clip_ks`). An empty batch is refused, as the losses
refuse it; the engine has no use for one (a process with no sample of a split makes no
:meth:`~TopKAccumulator.update` call, and its counts stay 0). Each violation raises ``ValueError`` with one sentence naming the argument.
Unlike a loss's, the scores may be infinite, as long as they are not NaN: a ranking of
``-inf`` is well defined (last), and the engine's ten-crop scores are the logs of top-k
marginal probabilities, ``-inf`` where a probability underflows to 0
(:func:`topk.engine.multi_crop_scores`).

**NaN scores** compare false with everything, and made every label rank first (100 %).
:func:`topk_accuracies` refuses them (:class:`~topk.losses.targets.NonFiniteScoresError`). The
accumulators, which the engine updates at every batch, count a sample with a NaN score as a miss
for every k instead, on every device and without reading anything (a NaN probability is never
``≥ λ_k`` either): a model that diverges during an epoch is reported by the training loss at the
epoch's end (docs/design.md §5, :func:`topk.engine.train_one_epoch`), which a refusal in the
middle of the epoch would pre-empt. The check of the labels' range reads them on the host: the
accumulators make it where that read is free, in eager mode on the CPU
(:func:`topk.sync.reads_are_free`), like the losses; :func:`topk_accuracies`, a one-shot call,
on every device.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence

import torch

from topk.distributed import SINGLE_PROCESS, Distributed
from topk.functional.arguments import whole_number
from topk.losses.targets import NonFiniteScoresError, check_label_range, check_labels, check_scores


def check_ks(ks: Iterable[int]) -> list[int]:
    """``ks`` as a list of ``int``; raise ``ValueError`` unless it is a non-empty list of whole
    numbers of at least 1 (a float such as 2.5 or a bool is refused, never rounded)."""
    values = None if isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable) else list(ks)
    if not values or not all(_is_whole(k) and k >= 1 for k in values):
        shown = ks if values is None else values
        raise ValueError(f"ks must be a non-empty list of whole numbers of at least 1, e.g. [1, 5], got {shown!r}")
    return [int(k) for k in values]


def _is_whole(k) -> bool:
    return isinstance(k, numbers.Integral) and not isinstance(k, bool)


def clip_ks(ks: Iterable[int], num_classes: int) -> list[int]:
    """The requested ks that are meaningful for ``num_classes`` (``k ≤ n``), sorted, unique;
    ``ks`` must be whole numbers of at least 1 (:func:`check_ks`)."""
    return sorted({k for k in check_ks(ks) if k <= num_classes})


def check_rankable(scores: torch.Tensor) -> None:
    """Raise :class:`~topk.losses.targets.NonFiniteScoresError` if any score is NaN (infinite
    scores rank first or last and are allowed; see the module docstring). Reads the data."""
    # One pass: the sum is NaN only if some score is NaN (or +inf and -inf both occur, which the
    # full check tells apart), as in topk.losses.targets.check_finite.
    total = scores.detach().sum(dtype=torch.promote_types(scores.dtype, torch.float32))
    if math.isnan(total) and bool(torch.isnan(scores).any()):
        raise NonFiniteScoresError(
            "scores contain NaN values, which have no rank; top-k accuracy needs scores that are "
            "numbers or ±inf (a model that diverged needs a lower learning rate)"
        )


def check_batch(scores: torch.Tensor, labels: torch.Tensor, num_classes: int | None = None,
                whose: str = "") -> None:
    """An accumulator's checks of a batch: shapes, dtypes and devices (the class count when
    ``num_classes`` is given, ``whose`` saying where it comes from), and the labels' range where
    reading is free (:func:`topk.sync.reads_are_free`); the losses' own
    :func:`~topk.losses.targets.check_scores` and :func:`~topk.losses.targets.check_labels`."""
    check_scores(scores)
    if num_classes is not None and scores.shape[1] != num_classes:
        raise ValueError(f"scores must have {num_classes} classes ({whose}), got shape {tuple(scores.shape)}")
    check_labels(scores, labels)  # the range too, where reads are free


def target_rank(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Zero-based rank of each label: the number of other classes scoring at least as high; the
    class count (a miss for every k) for a sample with a NaN score, which has no rank.

    A sample's scores hold a NaN when their sum is NaN, which it also is, rarely, for scores
    only a diverged model gives (``+inf`` beside ``-inf``, or a float32 sum overflowing both
    ways): those count as misses too. The sum is cheaper than ``isnan().any(1)``, and the
    comparison writes floats (exact counts below 2^24 classes), cheaper than bools and their sum
    (docs/benchmarks.md, 'Code choices and the timings behind them').
    """
    label_scores = scores.gather(1, labels[:, None])
    at_least = torch.ge(scores, label_scores, out=torch.empty(scores.shape, dtype=torch.float32, device=scores.device))
    rank = at_least.sum(dim=1).long() - 1
    has_nan = scores.sum(dim=1, dtype=torch.promote_types(scores.dtype, torch.float32)).isnan()
    return rank.masked_fill(has_nan, scores.shape[1])


class TopKAccumulator:
    """Counts, per class, how many samples have their label in the top k, for every k in ``ks``.

    ``update`` takes batches; ``compute`` returns percentages named as in docs/design.md §4:
    ``top{k}`` (over samples) and ``macro_top{k}`` (mean over the classes present in the
    evaluated data of the per-class top-k accuracy). The counts are plain sums, so they can be
    reduced across processes exactly. ``ks`` are whole numbers of at least 1; those above
    ``num_classes`` are dropped (:func:`clip_ks`), and at least one must remain.
    """

    def __init__(self, ks: Sequence[int], num_classes: int, device: torch.device | str = "cpu"):
        num_classes = whole_number("num_classes", num_classes)
        self.ks = clip_ks(ks, num_classes)
        if not self.ks:
            raise ValueError(f"ks must hold a k between 1 and the number of classes {num_classes}, got {list(ks)}")
        self.num_classes = num_classes
        self._k_column = torch.tensor(self.ks, device=device)[:, None]
        self.hits = torch.zeros(len(self.ks), num_classes, dtype=torch.int64, device=device)
        self.totals = torch.zeros(num_classes, dtype=torch.int64, device=device)

    def update(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        """Count one batch: ``scores [batch, num_classes]`` and integer ``labels [batch]`` on the
        scores' device (the module docstring's contract). Shapes, dtypes and devices are checked
        at every call; the labels' range only where reading the data is free (eager mode on the
        CPU): on an accelerator that check would make the host wait for the device at every
        batch (:func:`topk_accuracies` makes it on every device). A sample with a NaN score is
        a miss (see the module docstring)."""
        check_batch(scores, labels, self.num_classes, "the accumulator's num_classes")
        self._count(scores, labels)

    def _count(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        labels = labels.long()
        if self.hits.device != scores.device:  # counts follow the scores (CPU or GPU)
            self.hits, self.totals = self.hits.to(scores.device), self.totals.to(scores.device)
            self._k_column = self._k_column.to(scores.device)
        rank = target_rank(scores.detach(), labels)
        hits = (rank[None, :] < self._k_column).long()
        self.hits.index_add_(1, labels, hits)
        # index_add_ rather than bincount, which reads the largest label on the host (a wait on a GPU)
        self.totals.index_add_(0, labels, torch.ones_like(labels, dtype=self.totals.dtype))

    def per_class(self) -> dict[int, list[float | None]]:
        """Per-class top-k accuracy in percent for each k; ``None`` for classes with no sample."""
        hits = self.hits.double().cpu()
        totals = self.totals.double().cpu()
        result = {}
        for row, k in enumerate(self.ks):
            values = (100.0 * hits[row] / totals.clamp(min=1)).tolist()
            result[k] = [v if n > 0 else None for v, n in zip(values, totals.tolist())]
        return result

    def compute(self, class_groups: Mapping[str, Sequence[int]] | None = None) -> dict[str, float]:
        """``top{k}``, ``macro_top{k}`` and, for each named group of classes,
        ``{group}_top{k}``: top-k accuracy over the samples whose label is in the group (absent
        when the evaluated data has none)."""
        hits = self.hits.double().cpu()
        totals = self.totals.double().cpu()
        metrics = accuracy_percentages(hits, totals, self.ks, "top")
        for group, classes in (class_groups or {}).items():
            members = torch.as_tensor(list(classes), dtype=torch.int64)
            group_count = totals[members].sum()
            if group_count == 0:  # no evaluated sample in the group: no number rather than 0 %
                continue
            for row, k in enumerate(self.ks):
                metrics[f"{group}_top{k}"] = float(100.0 * hits[row][members].sum() / group_count)
        return metrics


def accuracy_percentages(hits: torch.Tensor, totals: torch.Tensor, ks: Sequence[int], name: str) -> dict[str, float]:
    """``{name}{k}`` (percent of the samples that are hits) and ``macro_{name}{k}`` (mean over
    the classes with a sample of the per-class percentage; 0 when there is none) from per-class
    counts: ``hits[row, c]`` for ``ks[row]``, ``totals[c]`` samples of class ``c``."""
    hits, totals = hits.double().cpu(), totals.double().cpu()
    present = totals > 0
    count = totals.sum().clamp(min=1)
    metrics = {f"{name}{k}": float(100.0 * hits[row].sum() / count) for row, k in enumerate(ks)}
    for row, k in enumerate(ks):
        per_class = hits[row][present] / totals[present]
        metrics[f"macro_{name}{k}"] = float(100.0 * per_class.mean()) if present.any() else 0.0
    return metrics


def topk_accuracies(scores: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]) -> dict[str, float]:
    """``top{k}`` and ``macro_top{k}`` of one batch (:class:`TopKAccumulator` for a single batch).

    The inputs follow the module docstring's contract, checked in full on every device: the
    labels' range and NaN scores are read on the host here even on an accelerator (a wait for
    the device, once per call; the engine counts its batches with
    :meth:`TopKAccumulator.update`, which does not). An empty batch is refused.

    Examples
    --------
    Ties count against the model: the second sample's label shares its score with another class.

    >>> import torch
    >>> from topk import topk_accuracies
    >>> scores = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.5, 0.0], [0.9, 0.05, 0.05]])
    >>> accuracies = topk_accuracies(scores, torch.tensor([1, 0, 2]), ks=[1, 2])
    >>> {name: round(value, 2) for name, value in accuracies.items()}
    {'top1': 33.33, 'top2': 66.67, 'macro_top1': 33.33, 'macro_top2': 66.67}
    """
    check_scores(scores)
    check_labels(scores, labels)
    check_label_range(labels, scores.shape[1])
    check_rankable(scores)
    accumulator = TopKAccumulator(ks, scores.shape[1], scores.device)
    accumulator._count(scores, labels)
    return accumulator.compute()


# --- average-k accuracy (Garcin et al. 2021) ------------------------------------------------------

class AverageKAccumulator:
    """What average-k accuracy (Garcin et al. 2021, NeurIPS Datasets and Benchmarks; see the
    module docstring) needs of one split's scores: each sample's softmax probability of its label
    and its label, and with ``keep_probabilities`` (the validation split, which sets the
    threshold) every softmax probability.

    ``update`` takes batches and keeps them on their device, as they come (a list of tensors,
    concatenated once by :meth:`probabilities`): nothing is read on the host. Memory: 4·N·n bytes
    of float32 for N validation samples of n classes (twice that while they are concatenated):
    Pl@ntNet-300K's 31,118 × 1,081 take 135 MB, 50,000 × 1,000 ImageNet images 200 MB;
    12 bytes a sample for a split without ``keep_probabilities``.
    """

    def __init__(self, keep_probabilities: bool = False, device: torch.device | str = "cpu"):
        self.keep_probabilities = keep_probabilities
        self.device = torch.device(device)
        self.sample_count = 0  # a Python int, from the batches' shapes
        self.num_classes: int | None = None  # the first batch's
        self._probabilities: list[torch.Tensor] = []
        self._label_probabilities: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []

    def update(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        """Keep one batch's probabilities: the module docstring's contract, checked as
        :meth:`TopKAccumulator.update` checks it, every batch with the first one's class count.
        A sample with a NaN score (or ``+inf``: its softmax is NaN) is a miss: its label's NaN
        probability is never ``≥ λ_k``, and its kept probabilities are -1, below every real one,
        so that they never set ``λ_k``."""
        check_batch(scores, labels, self.num_classes, "those of the earlier batches")
        self.num_classes = scores.shape[1]
        labels = labels.long()
        probabilities = scores.detach().float().softmax(dim=1)
        self._label_probabilities.append(probabilities.gather(1, labels[:, None]).squeeze(1))
        self._labels.append(labels)
        if self.keep_probabilities:
            self._probabilities.append(probabilities.nan_to_num(nan=-1.0))
        self.sample_count += labels.shape[0]

    def probabilities(self) -> torch.Tensor:
        """All kept softmax probabilities, ``[samples, classes]`` (``[0, 0]`` when none)."""
        if not self._probabilities:
            return torch.zeros(0, 0, device=self.device)
        self._probabilities = [torch.cat(self._probabilities)]  # concatenated once
        return self._probabilities[0]

    def hits(self, thresholds: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per class, the samples with ``softmax(s)_y ≥ λ`` for each threshold ``λ`` (``[len(thresholds),
        num_classes]``), and the samples per class (``[num_classes]``): integer counts, which
        add up exactly over processes."""
        hits = torch.zeros(len(thresholds), num_classes, dtype=torch.int64, device=thresholds.device)
        totals = torch.zeros(num_classes, dtype=torch.int64, device=thresholds.device)
        if not self._labels:
            return hits, totals
        labels, label_probabilities = torch.cat(self._labels), torch.cat(self._label_probabilities)
        in_set = (label_probabilities[None, :] >= thresholds[:, None]).long()
        hits.index_add_(1, labels, in_set)
        totals.index_add_(0, labels, torch.ones_like(labels, dtype=totals.dtype))
        return hits, totals


def largest_probabilities(probabilities: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` largest entries of ``probabilities`` (all of them when there are fewer),
    flattened, in descending order: what a process contributes to :func:`average_k_thresholds`
    (the ``N·max(ks)`` largest of all processes' contributions are the ``N·max(ks)`` largest
    overall)."""
    flat = probabilities.flatten()
    return flat.topk(min(count, flat.numel())).values


def average_k_thresholds(candidates: torch.Tensor, sample_count: int, ks: Sequence[int]) -> torch.Tensor:
    """``λ_k`` for each k of ``ks`` (Garcin et al. 2021, average-k accuracy): the
    ``N·k``-th largest validation probability, ``N = sample_count``. ``candidates`` holds the
    validation probabilities, or at least their ``N·max(ks)`` largest (:func:`largest_probabilities`).

    The prediction sets ``{j : p_j ≥ λ_k}`` then hold ``N·k`` labels over the validation split,
    k per sample on average, when no other probability equals ``λ_k``; ties at ``λ_k`` enter the
    sets too and make them slightly larger than k on average.
    """
    largest = candidates.topk(sample_count * max(ks)).values  # descending
    return torch.stack([largest[sample_count * k - 1] for k in ks])  # Python indices: no host read


def average_k_accuracies(hits: torch.Tensor, totals: torch.Tensor, ks: Sequence[int]) -> dict[str, float]:
    """``avg{k}`` and ``macro_avg{k}`` in percent from :meth:`AverageKAccumulator.hits` (summed
    over processes): the samples whose label is in its average-k set, over all samples and
    averaged over the classes present in the split."""
    return accuracy_percentages(hits, totals, ks, "avg")


def average_k_metrics(collected: Mapping[str, AverageKAccumulator], ks, num_classes: int,
                      distributed: Distributed = SINGLE_PROCESS) -> dict[str, dict[str, float]]:
    """``{split: {avg{k}, macro_avg{k}}}``: average-k accuracies (Garcin et al. 2021,
    "Pl@ntNet-300K: a plant image dataset with high label ambiguity and a long-tailed
    distribution", NeurIPS Datasets and Benchmarks) of every split in ``collected``, at the
    thresholds ``λ_k`` that ``collected["val"]`` sets (:func:`validation_thresholds`). Empty
    without a ``val`` split, or with an empty one: average-k accuracy is never computed from a
    split's own threshold. Hits are counted per process and summed over processes (exact)."""
    ks = clip_ks(ks, num_classes)
    thresholds = validation_thresholds(collected["val"], ks, distributed) if "val" in collected else None
    if thresholds is None:
        return {}
    metrics = {}
    for split, accumulator in collected.items():
        hits, totals = accumulator.hits(thresholds, num_classes)
        distributed.sum_(hits)
        distributed.sum_(totals)
        metrics[split] = average_k_accuracies(hits, totals, ks)
    return metrics


def validation_thresholds(val: AverageKAccumulator, ks, distributed: Distributed) -> torch.Tensor | None:
    """``λ_k`` for each k (:func:`average_k_thresholds`), the same in every process;
    ``None`` when the split has no sample.

    ``N`` is the number of validation samples over all processes. Each process contributes the
    ``N·max(ks)`` largest probabilities of its share (all of them when it holds fewer), and every
    process gathers all contributions (:meth:`topk.distributed.Distributed.gather_concat`): they hold the
    ``N·max(ks)`` largest overall, so the threshold is exact; in float32 they take at most
    ``4·min(N·n, P·N·max(ks))`` bytes in each of ``P`` processes (n classes). With several
    processes the host reads ``N`` and the gathered lengths, once per evaluation."""
    sample_count = val.sample_count
    if distributed.enabled:
        count = torch.tensor(sample_count, dtype=torch.int64, device=val.device)
        sample_count = int(distributed.sum_(count).item())
    if sample_count == 0:
        return None
    candidates = largest_probabilities(val.probabilities(), sample_count * max(ks))
    return average_k_thresholds(distributed.gather_concat(candidates), sample_count, ks)


def metric_at_k(metric: str, k: int) -> str:
    """``metric`` (a selection metric's name, ending in its k) at ``k``: ``val/macro_top1`` at 5
    is ``val/macro_top5``."""
    return re.sub(r"\d+$", str(k), metric)
