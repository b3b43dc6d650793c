"""``weight=`` and ``reduction=`` on every loss, as ``torch.nn.CrossEntropyLoss`` takes them
(topk/losses/base.py): each reduction of the weighted per-sample values against its definition,
for labels and Mixup targets, the same as the ``ClassWeighted`` wrapper train.py uses, and
cross-entropy's own weighting where a loss reduces to it."""

from __future__ import annotations

import pytest
import torch
from test_loss_edges import CLASS_COUNTS, LOSSES, N_CLASSES

from helpers import mixup_target
from topk.losses import SmoothTopKSVM
from topk.losses.weights import ClassWeighted

WEIGHT = torch.tensor([0.5, 2.0, 0.0, 1.0, 3.0], dtype=torch.float64)


def with_options(name: str, **options):
    """Loss ``name`` of test_loss_edges.LOSSES built again with ``options`` (weight, reduction)."""
    loss = LOSSES[name]()
    arguments = {key: getattr(loss, key) for key in ("k", "alpha", "tau", "epsilon", "n_samples", "gamma",
                                                     "max_margin", "scale") if hasattr(loss, key)}
    if hasattr(loss, "p_k"):
        arguments["p_k"] = loss.p_k
    if name in ("ldam", "noised_imbal"):
        arguments["class_counts"] = CLASS_COUNTS
    return type(loss)(**arguments, **options)


def targets(kind: str):
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(6, N_CLASSES, generator=generator, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 3, 4, 1])
    target = labels if kind == "labels" else mixup_target(generator, 6, N_CLASSES)
    sample_weight = WEIGHT[labels] if kind == "labels" else target @ WEIGHT
    return scores, target, sample_weight


def value(loss, scores, target):
    torch.manual_seed(0)  # the noised losses draw their noise from torch's generator
    return loss(scores, target)


@pytest.mark.parametrize("kind", ["labels", "mixup"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_each_reduction_of_the_weighted_values(name, kind):
    scores, target, sample_weight = targets(kind)
    per_sample = value(with_options(name, reduction="none"), scores, target)
    assert per_sample.shape == (6,)
    torch.testing.assert_close(value(with_options(name, reduction="sum"), scores, target), per_sample.sum())
    torch.testing.assert_close(value(with_options(name), scores, target), per_sample.mean())
    weighted = value(with_options(name, weight=WEIGHT, reduction="none"), scores, target)
    torch.testing.assert_close(weighted, sample_weight * per_sample)
    torch.testing.assert_close(value(with_options(name, weight=WEIGHT, reduction="sum"), scores, target),
                               (sample_weight * per_sample).sum())
    mean = value(with_options(name, weight=WEIGHT), scores, target)
    torch.testing.assert_close(mean, (sample_weight * per_sample).sum() / sample_weight.sum())
    torch.testing.assert_close(value(ClassWeighted(with_options(name), WEIGHT), scores, target), mean)


def test_weighted_gradients_flow_and_the_weight_follows_the_module():
    loss = with_options("smooth_svm", weight=WEIGHT.float())
    scores = torch.randn(6, N_CLASSES, requires_grad=True)
    loss(scores, torch.tensor([0, 1, 2, 3, 4, 1])).backward()
    assert torch.isfinite(scores.grad).all() and scores.grad.abs().sum() > 0
    assert "weight" in dict(loss.named_buffers()) and loss.to(torch.float64).weight.dtype == torch.float64


def test_smooth_svm_that_is_cross_entropy_weighs_as_torch_does():
    """B18: k = 1, τ = 1, α = 0 is cross-entropy, weighted as torch weighs it for labels."""
    scores, labels, _ = targets("labels")
    for reduction in ("mean", "sum", "none"):
        ours = SmoothTopKSVM(k=1, tau=1.0, alpha=0.0, weight=WEIGHT, reduction=reduction)(scores, labels)
        torch.testing.assert_close(ours, torch.nn.CrossEntropyLoss(weight=WEIGHT, reduction=reduction)(scores, labels))


@pytest.mark.parametrize("weight", [[1.0, -1.0, 1.0, 1.0, 1.0], [0.0] * 5, [1.0, float("nan"), 1, 1, 1],
                                    [[1.0] * 5], []])
def test_a_bad_weight_is_refused_naming_it(weight):
    with pytest.raises(ValueError, match=r"^weight must be one finite weight of at least 0 per class, not all 0"):
        SmoothTopKSVM(k=2, weight=weight)


def test_a_weight_for_another_class_count_is_refused_at_the_call():
    scores, labels, _ = targets("labels")
    with pytest.raises(ValueError, match=r"^weight has 3 entries but the scores have 5 classes"):
        SmoothTopKSVM(k=2, weight=[1.0, 2.0, 3.0])(scores, labels)


def test_an_unknown_reduction_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^reduction must be one of mean, sum, none, got 'avg'"):
        SmoothTopKSVM(k=2, reduction="avg")
