"""Top-k accuracies against a brute-force count, ties and absent classes included."""

from __future__ import annotations

import pytest
import torch

from topk.metrics import TopKAccumulator, clip_ks, target_rank, topk_accuracies


def brute_force(scores, labels, ks, num_classes):
    """Count, sample by sample: label y is in the top k if fewer than k others score >= s_y."""
    hits = {k: [0] * num_classes for k in ks}
    totals = [0] * num_classes
    for row, label in zip(scores.tolist(), labels.tolist()):
        totals[label] += 1
        others_at_least = sum(1 for j, s in enumerate(row) if j != label and s >= row[label])
        for k in ks:
            hits[k][label] += others_at_least < k
    result = {}
    n = sum(totals)
    for k in ks:
        result[f"top{k}"] = 100.0 * sum(hits[k]) / n
        present = [c for c in range(num_classes) if totals[c] > 0]
        result[f"macro_top{k}"] = 100.0 * sum(hits[k][c] / totals[c] for c in present) / len(present)
    return result


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force_with_ties_and_absent_classes(seed):
    generator = torch.Generator().manual_seed(seed)
    num_classes = 7
    # Integer-valued scores in a small range: many ties.
    scores = torch.randint(0, 4, (50, num_classes), generator=generator).float()
    labels = torch.randint(0, 5, (50,), generator=generator)  # classes 5 and 6 never appear
    ks = [1, 2, 3, 5]
    expected = brute_force(scores, labels, ks, num_classes)
    got = topk_accuracies(scores, labels, ks)
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == pytest.approx(expected[name], abs=1e-9), name


def test_accumulating_batches_equals_one_batch():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(101, 10, generator=generator)
    labels = torch.randint(0, 10, (101,), generator=generator)
    accumulator = TopKAccumulator([1, 5], 10)
    for start in range(0, 101, 16):
        accumulator.update(scores[start : start + 16], labels[start : start + 16])
    assert accumulator.compute() == pytest.approx(topk_accuracies(scores, labels, [1, 5]))


def test_all_equal_scores_count_as_wrong():
    scores = torch.zeros(4, 5)
    labels = torch.tensor([0, 1, 2, 3])
    assert target_rank(scores, labels).tolist() == [4, 4, 4, 4]
    result = topk_accuracies(scores, labels, [1, 4, 5])
    assert result["top1"] == 0 and result["top4"] == 0 and result["top5"] == 100


def test_per_class_and_macro():
    scores = torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 2.0, 1.0]])
    labels = torch.tensor([0, 1, 1, 1])
    accumulator = TopKAccumulator([1, 2], 3)
    accumulator.update(scores, labels)
    per_class = accumulator.per_class()
    assert per_class[1] == [100.0, pytest.approx(100 / 3), None]
    assert per_class[2] == [100.0, 100.0, None]
    metrics = accumulator.compute()
    assert metrics["top1"] == 50.0
    assert metrics["macro_top1"] == pytest.approx((100 + 100 / 3) / 2)


def test_clip_ks():
    assert clip_ks([1, 2, 3, 5, 10], 6) == [1, 2, 3, 5]
    assert clip_ks([5, 1, 1], 100) == [1, 5]
