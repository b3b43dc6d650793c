"""Truncated top-k entropy loss (Lapin et al. 2016) against a brute-force float64 definition,
values and gradients, for every n ≤ 8 and k < n; k = 1 against cross-entropy; soft targets."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import mixup_target, value_and_grad
from topk.errors import ConfigError
from topk.losses.entropy import TruncatedTopKEntropyLoss, truncated_topk_entropy


def brute_force(scores: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """``log(1 + Σ_{j ∈ J_y} exp(s_j - s_y))`` sample by sample: ``J_y`` the labels other than
    ``y`` once the ``k - 1`` with the largest scores (by a full sort) are removed."""
    losses = []
    for row, label in zip(scores, labels.tolist()):
        rivals = sorted((j for j in range(len(row)) if j != label), key=lambda j: -row[j].item())
        kept = rivals[k - 1:]
        total = 1 + sum(torch.exp(row[j] - row[label]) for j in kept)
        losses.append(torch.log(total))
    return torch.stack(losses)


@pytest.mark.parametrize("n", range(2, 9))
def test_values_and_gradients_match_the_definition(n):
    generator = torch.Generator().manual_seed(n)
    scores = 3 * torch.randn(12, n, generator=generator, dtype=torch.float64)  # no ties
    labels = torch.randint(0, n, (12,), generator=generator)
    for k in range(1, n):
        value, grad = value_and_grad(truncated_topk_entropy, scores, labels, k)
        expected_value, expected_grad = value_and_grad(brute_force, scores, labels, k)
        torch.testing.assert_close(value, expected_value, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_k_1_is_cross_entropy():
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(16, 10, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (16,), generator=generator)
    value, grad = value_and_grad(lambda s: TruncatedTopKEntropyLoss(1)(s, labels), scores)
    expected_value, expected_grad = value_and_grad(lambda s: F.cross_entropy(s, labels), scores)
    torch.testing.assert_close(value, expected_value)
    torch.testing.assert_close(grad, expected_grad)


def test_a_label_among_the_top_k_pays_only_the_weaker_rivals():
    # y = 2 is 2nd; k = 2 drops the strongest rival (label 0): log(1 + e^{-3} + e^{-4}).
    scores = torch.tensor([[5.0, 1.0, 4.0, 0.0]], dtype=torch.float64)
    value = truncated_topk_entropy(scores, torch.tensor([2]), 2)
    assert value.item() == pytest.approx(math.log(1 + math.exp(-3) + math.exp(-4)))


def test_probability_targets_average_the_label_losses():
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(8, 6, generator=generator, dtype=torch.float64)
    target = mixup_target(generator, 8, 6)
    loss = TruncatedTopKEntropyLoss(3)
    weights, labels = target.topk(2, dim=1)  # Mixup rows: two labels (row 0 one-hot)
    expected = sum(weights[:, i] * brute_force(scores, labels[:, i], 3) for i in range(2)).mean()
    torch.testing.assert_close(loss(scores, target), expected)


def test_k_must_be_below_the_class_count():
    with pytest.raises(ConfigError, match="loss.k=4 must be between 1"):
        TruncatedTopKEntropyLoss(4)(torch.zeros(2, 4), torch.tensor([0, 1]))
