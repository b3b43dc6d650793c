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
:func:`average_k_accuracies`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def clip_ks(ks: Sequence[int], num_classes: int) -> list[int]:
    """The requested ks that are meaningful for ``num_classes`` (``1 ≤ k ≤ n``), sorted, unique."""
    return sorted({int(k) for k in ks if 1 <= int(k) <= num_classes})


def target_rank(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Zero-based rank of each label: the number of other classes scoring at least as high."""
    label_scores = scores.gather(1, labels[:, None])
    return (scores >= label_scores).sum(dim=1) - 1


class TopKAccumulator:
    """Counts, per class, how many samples have their label in the top k, for every k in ``ks``.

    ``update`` takes batches; ``compute`` returns percentages named as in docs/design.md §4:
    ``top{k}`` (over samples) and ``macro_top{k}`` (mean over the classes present in the
    evaluated data of the per-class top-k accuracy). The counts are plain sums, so they can be
    reduced across processes exactly.
    """

    def __init__(self, ks: Sequence[int], num_classes: int, device: torch.device | str = "cpu"):
        self.ks = clip_ks(ks, num_classes)
        if not self.ks:
            raise ValueError(f"no k in {list(ks)} is between 1 and {num_classes}")
        self.num_classes = num_classes
        self._k_column = torch.tensor(self.ks, device=device)[:, None]
        self.hits = torch.zeros(len(self.ks), num_classes, dtype=torch.int64, device=device)
        self.totals = torch.zeros(num_classes, dtype=torch.int64, device=device)

    def update(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
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
    """One-shot version of :class:`TopKAccumulator` for a single batch of scores."""
    accumulator = TopKAccumulator(ks, scores.shape[1], scores.device)
    accumulator.update(scores, labels)
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
        self._probabilities: list[torch.Tensor] = []
        self._label_probabilities: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []

    def update(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        probabilities = scores.detach().float().softmax(dim=1)
        self._label_probabilities.append(probabilities.gather(1, labels[:, None]).squeeze(1))
        self._labels.append(labels)
        if self.keep_probabilities:
            self._probabilities.append(probabilities)
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
