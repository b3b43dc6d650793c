"""Top-k and average-k accuracies against brute-force counts, ties and absent classes included."""

from __future__ import annotations

import contextlib
import math
from unittest import mock

import numpy as np
import pytest
import torch

from topk.data import TensorBatches
from topk.data.splits import TensorSplit
from topk.engine import evaluate_splits, metric_names
from topk.losses.targets import NonFiniteScoresError
from topk.metrics import (
    AverageKAccumulator,
    TopKAccumulator,
    average_k_metrics,
    average_k_thresholds,
    clip_ks,
    largest_probabilities,
    target_rank,
    topk_accuracies,
)
from topk.sync import sync_free


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
    assert clip_ks((k for k in [np.int64(2), 1]), 6) == [1, 2]


# --- the input contract: the losses' (topk.losses.targets), one sentence per violation ---------

def batch(size=6, classes=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(size, classes, generator=generator), torch.randint(0, classes, (size,), generator=generator)


def counted(scores, labels, ks=(1, 2)):
    """Every entry point: the one-shot function and each accumulator's update."""
    topk_accuracies(scores, labels, list(ks))
    TopKAccumulator(list(ks), scores.shape[-1] if scores.dim() else 1).update(scores, labels)
    AverageKAccumulator(keep_probabilities=True).update(scores, labels)


@pytest.mark.parametrize("ks", [[2.5], [2.0], [True], [0], [-1], [], [1, "2"], "5", 5, None])
def test_ks_must_be_whole_numbers_of_at_least_1(ks):
    """A float is refused, never rounded (2.5 was reported as top2); so is a bool."""
    scores, labels = batch()
    message = r"^ks must be a non-empty list of whole numbers of at least 1, e\.g\. \[1, 5\], got "
    with pytest.raises(ValueError, match=message):
        topk_accuracies(scores, labels, ks)
    with pytest.raises(ValueError, match=message):
        TopKAccumulator(ks, 5)
    with pytest.raises(ValueError, match=message):
        clip_ks(ks, 5)


def test_ks_above_the_class_count_are_dropped_but_one_must_remain():
    scores, labels = batch()
    assert set(topk_accuracies(scores, labels, [1, 9])) == {"top1", "macro_top1"}
    with pytest.raises(ValueError, match=r"^ks must hold a k between 1 and the number of classes 5, got \[6, 9\]$"):
        topk_accuracies(scores, labels, [6, 9])


@pytest.mark.parametrize("shape", [(5,), (2, 3, 5), ()])
def test_scores_must_be_a_matrix(shape):
    with pytest.raises(ValueError, match=r"^scores must be a \[batch, classes\] matrix, got shape"):
        counted(torch.randn(shape), torch.zeros(2, dtype=torch.long))


def test_an_empty_batch_is_refused():
    """It gave {'top1': 0.0}; the mean over no samples is undefined, as for the losses."""
    with pytest.raises(ValueError, match=r"^the batch is empty; scores must hold at least one sample, got shape \(0, 5\)$"):
        topk_accuracies(torch.randn(0, 5), torch.zeros(0, dtype=torch.long), [1])
    with pytest.raises(ValueError, match="^the batch is empty"):
        TopKAccumulator([1], 5).update(torch.randn(0, 5), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="^the batch is empty"):
        AverageKAccumulator().update(torch.randn(0, 5), torch.zeros(0, dtype=torch.long))


def test_nan_scores_are_refused_or_count_as_misses():
    """NaN compares false with every score: every label ranked first, 100 %. The one-shot
    topk_accuracies refuses them; the accumulators, updated at every batch of an epoch whose
    divergence the training loss reports at its end, count such a sample as a miss for every k
    (on every device, reading nothing)."""
    scores, labels = batch(size=4, classes=3)
    labels = scores.argmax(dim=1)  # every sample a top-1 hit
    scores[2, 1] = float("nan")
    with pytest.raises(NonFiniteScoresError, match="^scores contain NaN values, which have no rank"):
        topk_accuracies(scores, labels, [1])
    for path in (contextlib.nullcontext, sync_free):  # the CPU's eager path, an accelerator's
        with path():
            accumulator = TopKAccumulator([1, 3], 3)
            accumulator.update(scores, labels)
            metrics = accumulator.compute()
            assert (metrics["top1"], metrics["top3"]) == (75.0, 75.0)  # a miss even for k = n
            assert target_rank(scores, labels).tolist() == [0, 0, 3, 0]
    val = AverageKAccumulator(keep_probabilities=True)
    val.update(torch.full((2, 3), float("nan")), torch.tensor([0, 1]))
    val.update(torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([0]))
    metrics = average_k_metrics({"val": val}, [1], 3)["val"]
    assert metrics["avg1"] == pytest.approx(100 / 3)  # the NaN samples miss; they set no λ


def test_infinite_scores_rank_first_or_last():
    """Ranking is defined for ±inf (the engine's ten-crop log-marginals are -inf where a marginal
    underflows to 0); ties at +inf count against the model, as every tie does."""
    scores = torch.tensor([[0.0, -math.inf, 1.0], [-math.inf, -math.inf, 2.0], [math.inf, 0.0, math.inf]])
    labels = torch.tensor([1, 0, 0])
    assert target_rank(scores, labels).tolist() == [2, 2, 1]
    accuracies = topk_accuracies(scores, labels, [1, 2, 3])
    assert (accuracies["top1"], accuracies["top3"]) == (0.0, 100.0)
    assert accuracies["top2"] == pytest.approx(100 / 3)
    AverageKAccumulator().update(scores, labels)  # -inf: probability 0; +inf: NaN, a miss


def test_labels_are_integer_class_indices_of_the_batch():
    scores, labels = batch()
    with pytest.raises(ValueError, match="^labels must be integers, got dtype torch.float32$"):
        counted(scores, labels.float())
    with pytest.raises(ValueError, match="^labels must be integers, got dtype torch.bool$"):
        counted(scores, labels > 2)
    with pytest.raises(ValueError, match=r"^labels must have shape \[6\] to match the scores, got \(5,\)$"):
        counted(scores, labels[:5])
    with pytest.raises(ValueError, match=r"^labels must have shape \[6\] to match the scores, got \(6, 1\)$"):
        counted(scores, labels[:, None])
    for bad in (5, -1):
        labels[3] = bad
        with pytest.raises(ValueError, match=rf"^labels must be class indices from 0 to 4 \(5 classes\), got {bad}$"):
            counted(scores, labels)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_ranks_of_every_score_dtype_are_the_brute_force_counts(dtype):
    scores = torch.randint(0, 4, (50, 7), generator=torch.Generator().manual_seed(4)).to(dtype)  # many ties
    labels = torch.randint(0, 7, (50,), generator=torch.Generator().manual_seed(5))
    expected = [sum(1 for j, s in enumerate(row) if j != y and s >= row[y]) for row, y in zip(scores.tolist(), labels.tolist())]
    assert target_rank(scores, labels).tolist() == expected


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.uint8])
def test_any_integer_label_dtype_counts_as_int64(dtype):
    scores, labels = batch(40, seed=3)
    assert topk_accuracies(scores, labels.to(dtype), [1, 3]) == topk_accuracies(scores, labels, [1, 3])


def test_labels_on_another_device_are_refused():
    """They gave garbage (or torch's error from inside the counting)."""
    scores, labels = batch()
    with pytest.raises(ValueError, match="^labels must be on the scores' device cpu, got meta$"):
        counted(scores, labels.to("meta"))


def test_scores_must_keep_the_class_count():
    scores, labels = batch()
    with pytest.raises(ValueError, match=r"^scores must have 7 classes \(the accumulator's num_classes\), got shape \(6, 5\)$"):
        TopKAccumulator([1], 7).update(scores, labels)
    accumulator = AverageKAccumulator(keep_probabilities=True)
    accumulator.update(scores, labels)
    with pytest.raises(ValueError, match=r"^scores must have 5 classes \(those of the earlier batches\), got shape \(6, 7\)$"):
        accumulator.update(torch.randn(6, 7), labels)


def test_the_accumulators_read_no_value_where_reads_are_not_free():
    """On an accelerator (``sync_free`` makes the CPU take its path) the per-batch update checks
    shapes, dtypes and devices only: a read of the values would wait for the device at every
    batch. The one-shot topk_accuracies checks the values on every device."""
    scores, labels = batch()
    scores[0, 0] = float("nan")
    reads = [mock.patch.object(torch.Tensor, method, side_effect=AssertionError(f"read: {method}"))
             for method in ("item", "__bool__", "__float__", "__int__", "tolist")]
    with sync_free(), reads[0], reads[1], reads[2], reads[3], reads[4]:
        TopKAccumulator([1], 5).update(scores, labels)
        AverageKAccumulator().update(scores, labels)
        with pytest.raises(ValueError, match="^labels must be integers"):
            TopKAccumulator([1], 5).update(scores, labels.float())
    with sync_free(), pytest.raises(NonFiniteScoresError, match="^scores contain NaN values"):
        topk_accuracies(scores, labels, [1])
    labels[1] = 9
    with sync_free(), pytest.raises(ValueError, match=r"^labels must be class indices from 0 to 4"):
        topk_accuracies(torch.randn(6, 5), labels, [1])


# --- average-k accuracy (Garcin et al. 2021) ------------------------------------------------------

def brute_force_average_k(val, splits, ks, num_classes):
    """Sample by sample: λ_k is the (N·k)-th largest of all N·n validation probabilities; a
    sample is a hit when its label's probability is at least λ_k. ``val`` and each of ``splits``
    are (probabilities, labels) as Python lists."""
    everything = sorted((p for row in val[0] for p in row), reverse=True)
    result = {}
    for split, (probabilities, labels) in splits.items():
        metrics = {}
        for k in ks:
            threshold = everything[len(val[0]) * k - 1]
            hits, totals = [0] * num_classes, [0] * num_classes
            for row, label in zip(probabilities, labels):
                totals[label] += 1
                hits[label] += row[label] >= threshold
            present = [c for c in range(num_classes) if totals[c] > 0]
            metrics[f"avg{k}"] = 100.0 * sum(hits) / sum(totals)
            metrics[f"macro_avg{k}"] = 100.0 * sum(hits[c] / totals[c] for c in present) / len(present)
        result[split] = metrics
    return result


def collect(scores, labels, keep_probabilities, batch_size=16):
    accumulator = AverageKAccumulator(keep_probabilities)
    for start in range(0, len(labels), batch_size):
        accumulator.update(scores[start : start + batch_size], labels[start : start + batch_size])
    return accumulator


@pytest.mark.parametrize("seed", range(4))
def test_average_k_matches_brute_force_with_ties_and_absent_classes(seed):
    generator = torch.Generator().manual_seed(seed)
    num_classes, ks = 7, [1, 2, 3, 5, 7]
    data = {}
    for split, size in (("val", 40), ("test", 53)):
        # Integer-valued scores in a small range: many equal probabilities, at λ too.
        scores = torch.randint(0, 3, (size, num_classes), generator=generator).float()
        data[split] = (scores, torch.randint(0, 5, (size,), generator=generator))  # classes 5, 6 absent
    collected = {split: collect(scores, labels, split == "val") for split, (scores, labels) in data.items()}
    got = average_k_metrics(collected, ks, num_classes)
    as_lists = {split: (scores.softmax(dim=1).tolist(), labels.tolist()) for split, (scores, labels) in data.items()}
    expected = brute_force_average_k(as_lists["val"], as_lists, ks, num_classes)
    assert got.keys() == expected.keys()
    for split in expected:
        assert got[split] == pytest.approx(expected[split], abs=1e-9), split


def test_average_set_size_on_val_is_k_without_ties():
    probabilities = torch.randn(300, 20, generator=torch.Generator().manual_seed(0)).softmax(dim=1)
    assert probabilities.flatten().unique().numel() == probabilities.numel()
    ks = [1, 2, 5, 20]
    thresholds = average_k_thresholds(probabilities.flatten(), 300, ks)
    set_sizes = [(probabilities >= threshold).sum(dim=1).double().mean().item() for threshold in thresholds]
    assert set_sizes == [1.0, 2.0, 5.0, 20.0]


def test_ties_at_the_threshold_make_the_sets_larger_than_k():
    probabilities = torch.full((4, 5), 0.2)  # every probability is λ
    thresholds = average_k_thresholds(probabilities.flatten(), 4, [1])
    assert thresholds.tolist() == pytest.approx([0.2]) and int((probabilities >= thresholds[0]).sum()) == 20


def test_macro_average_is_the_mean_over_present_classes_at_the_val_threshold():
    val_scores = torch.tensor([[3.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 2.0]])
    val = collect(val_scores.log_softmax(dim=1), torch.tensor([0, 1, 2, 2]), keep_probabilities=True)
    # λ_1 = the 4th largest of the 12 probabilities: softmax([0, 0, 1])_2 ≈ 0.58, the label
    # probability of val's third sample; every val label is in its set.
    test = collect(val_scores.log_softmax(dim=1)[[0, 0, 3, 2]], torch.tensor([0, 1, 2, 1]), keep_probabilities=False)
    metrics = average_k_metrics({"val": val, "test": test}, [1], 3)
    assert metrics["val"] == pytest.approx({"avg1": 100.0, "macro_avg1": 100.0})
    # test: class 0 1/1, class 1 0/2 (label probabilities well under λ), class 2 1/1
    assert metrics["test"] == pytest.approx({"avg1": 50.0, "macro_avg1": 100 * (1 + 0 + 1) / 3})


def test_thresholds_from_each_shards_largest_probabilities_equal_the_whole_splits():
    """What several processes gather (each its N·max(k) largest) gives the single process's λ."""
    generator = torch.Generator().manual_seed(1)
    probabilities = torch.randint(0, 4, (37, 6), generator=generator).float().softmax(dim=1)
    ks = [1, 3, 6]
    whole = average_k_thresholds(probabilities.flatten(), 37, ks)
    for shards in (2, 3, 5):
        parts = [largest_probabilities(probabilities[rank::shards], 37 * max(ks)) for rank in range(shards)]
        assert torch.equal(average_k_thresholds(torch.cat(parts), 37, ks), whole)


def test_average_k_needs_a_val_split_with_samples():
    scores, labels = torch.randn(10, 4), torch.randint(0, 4, (10,))
    assert average_k_metrics({"test": collect(scores, labels, False)}, [1, 2], 4) == {}
    assert average_k_metrics({"val": AverageKAccumulator(True), "test": collect(scores, labels, False)}, [1], 4) == {}


def test_evaluation_reports_average_k_of_every_split_at_the_val_threshold():
    """The engine's evaluation: val's batches set λ, test's are counted at it; ten-crop or not,
    the probabilities are the softmax of the scores the evaluation ranks by."""
    generator = torch.Generator().manual_seed(2)
    model = torch.nn.Linear(3, 5)
    splits = {name: TensorSplit(torch.randn(size, 3, generator=generator), torch.randint(0, 5, (size,), generator=generator))
              for name, size in (("val", 45), ("test", 30))}
    batches = {name: TensorBatches(split, 8) for name, split in splits.items()}
    evaluations = evaluate_splits(model, torch.nn.functional.cross_entropy, batches, [1, 2, 10], 5)
    with torch.no_grad():
        as_lists = {name: (model(split.x).softmax(dim=1).tolist(), split.y.tolist()) for name, split in splits.items()}
    expected = brute_force_average_k(as_lists["val"], as_lists, [1, 2], 5)
    for name, (metrics, _) in evaluations.items():
        assert {key: metrics[key] for key in expected[name]} == pytest.approx(expected[name], abs=1e-9)
        assert set(metrics) == set(metric_names([1, 2]))
    without_val = evaluate_splits(model, torch.nn.functional.cross_entropy, {"test": batches["test"]}, [1, 2], 5)
    assert set(without_val["test"][0]) == set(metric_names([1, 2], average_k=False))
