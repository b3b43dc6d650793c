"""The loss contract's target handling shared by every loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import compose_config
from topk.losses.targets import expected_over_targets, label_scores, loss_inputs


def per_label_cross_entropy(scores, labels):
    return F.cross_entropy(scores, labels, reduction="none")


def test_expected_over_targets_is_the_mixup_combination():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    y_a = torch.randint(0, 5, (6,), generator=generator)
    y_b = torch.randint(0, 5, (6,), generator=generator)
    lam = 0.3
    target = lam * F.one_hot(y_a, 5).double() + (1 - lam) * F.one_hot(y_b, 5).double()
    got = expected_over_targets(per_label_cross_entropy, scores, target)
    expected = lam * per_label_cross_entropy(scores, y_a) + (1 - lam) * per_label_cross_entropy(scores, y_b)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # Cross-entropy is linear in the target, so the expectation equals its native soft form.
    torch.testing.assert_close(got, F.cross_entropy(scores, target, reduction="none"))
    torch.testing.assert_close(expected_over_targets(per_label_cross_entropy, scores, y_a),
                               per_label_cross_entropy(scores, y_a))


def test_loss_inputs_upcasts_half_scores_and_converts_targets_once():
    scores = torch.randn(3, 4, dtype=torch.bfloat16)
    checked_scores, labels = loss_inputs(scores, torch.tensor([0, 3, 1], dtype=torch.uint8))
    assert checked_scores.dtype == torch.float32 and labels.dtype == torch.int64
    assert labels.tolist() == [0, 3, 1]
    _, probabilities = loss_inputs(scores, torch.full((3, 4), 0.25, dtype=torch.float16))
    assert probabilities.dtype == torch.float32
    double = torch.randn(3, 4, dtype=torch.float64)
    same_scores, int64_labels = loss_inputs(double, torch.tensor([0, 3, 1]))
    assert same_scores is double and int64_labels.dtype == torch.int64


@pytest.mark.parametrize("bad", [4, -1])
def test_the_range_left_to_the_gather_is_refused_there_in_the_same_sentence(bad):
    """``range_from_gather=True`` reads nothing of the labels; :func:`label_scores` gathers the
    labels' scores and turns torch's refusal of a bad index into the contract's sentence."""
    scores = torch.randn(3, 4)
    labels = torch.tensor([0, bad, 1])
    _, unchecked = loss_inputs(scores, labels, range_from_gather=True)
    assert unchecked.tolist() == [0, bad, 1]
    with pytest.raises(ValueError, match=rf"^labels must be class indices from 0 to 3 \(4 classes\), got {bad}$"):
        loss_inputs(scores, labels)
    with pytest.raises(ValueError, match=rf"^labels must be class indices from 0 to 3 \(4 classes\), got {bad}$"):
        label_scores(scores, unchecked)
    good = torch.tensor([0, 3, 1])
    torch.testing.assert_close(label_scores(scores, good), scores[torch.arange(3), good][:, None], rtol=0, atol=0)


def test_train_passes_data_arguments_only_to_constructors_that_ask():
    from topk import build as builder
    from topk.data.circles import circles

    splits = circles(seed=0, train_per_class=7)
    assert builder.data_arguments(compose_config(["loss=ce"]).loss, splits) == {}
    assert builder.data_arguments(compose_config(["loss=topk_group"]).loss, splits) == {}
    for loss in ("ldam", "noised_imbal"):
        arguments = builder.data_arguments(compose_config([f"loss={loss}"]).loss, splits)
        assert arguments == {"class_counts": [7] * 6}
    mixup = compose_config(["augment=mixup"]).augment
    assert builder.data_arguments(mixup.mix, splits) == {"num_classes": 6}
    assert builder.data_arguments(mixup.images, splits) == {}
