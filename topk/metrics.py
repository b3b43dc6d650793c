"""Top-k accuracies: plain, macro-averaged over classes, and per class.

Ties count against the model: label ``y`` is in the top k when fewer than ``k`` *other* classes
score at least ``s_y``. A model that gives every class the same score therefore has top-k
accuracy 0 for every ``k < n``, never a free 100%.
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
        present = totals > 0
        count = totals.sum().clamp(min=1)
        metrics = {}
        for row, k in enumerate(self.ks):
            metrics[f"top{k}"] = float(100.0 * hits[row].sum() / count)
        for row, k in enumerate(self.ks):
            per_class = hits[row][present] / totals[present]
            metrics[f"macro_top{k}"] = float(100.0 * per_class.mean()) if present.any() else 0.0
        for group, classes in (class_groups or {}).items():
            members = torch.as_tensor(list(classes), dtype=torch.int64)
            group_count = totals[members].sum()
            if group_count == 0:  # no evaluated sample in the group: no number rather than 0 %
                continue
            for row, k in enumerate(self.ks):
                metrics[f"{group}_top{k}"] = float(100.0 * hits[row][members].sum() / group_count)
        return metrics


def topk_accuracies(scores: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]) -> dict[str, float]:
    """One-shot version of :class:`TopKAccumulator` for a single batch of scores."""
    accumulator = TopKAccumulator(ks, scores.shape[1], scores.device)
    accumulator.update(scores, labels)
    return accumulator.compute()
