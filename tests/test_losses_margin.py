"""Focal loss (Lin et al. 2017) and LDAM (Cao et al. 2019) against brute-force oracles."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import mixup_target, value_and_grad
from topk.losses.margin import FocalLoss, LDAMLoss, ldam_margins


def oracle_cross_entropy(z, y):
    """-log(e^{z_y} / Σ_j e^{z_j}) with an explicit sum."""
    total = sum(torch.exp(z[j]) for j in range(len(z)))
    return -torch.log(torch.exp(z[y]) / total)


def oracle_focal(s, y, gamma):
    """-(1 - p_y)^γ log p_y, p_y = softmax(s)_y."""
    cross_entropy = oracle_cross_entropy(s, y)
    return (1 - torch.exp(-cross_entropy)) ** gamma * cross_entropy


def oracle_margins(class_counts, max_margin):
    """m_y = C / n_y^{1/4} with C such that max_y m_y = max_margin, in plain floats."""
    raw = [count**-0.25 for count in class_counts]
    constant = max_margin / max(raw)
    return [constant * value for value in raw]


def oracle_ldam(s, y, margins, scale):
    """Cross-entropy on scale · (s - m_y e_y)."""
    z = [scale * (s[j] - (margins[y] if j == y else 0.0)) for j in range(len(s))]
    return oracle_cross_entropy(z, y)


def oracle_loss(per_sample, scores, target):
    probabilities = F.one_hot(target, scores.shape[1]).double() if target.dtype == torch.int64 else target
    total = 0
    for b in range(len(scores)):
        for i in range(scores.shape[1]):
            if probabilities[b, i] > 0:
                total = total + probabilities[b, i] * per_sample(scores[b], i)
    return total / len(scores)






def random_counts(generator, n):
    return [int(c) for c in torch.randint(1, 500, (n,), generator=generator)]


@pytest.mark.parametrize("n", [2, 3, 6, 10])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0, 3.0])
@pytest.mark.parametrize("soft", [False, True])
def test_focal_matches_brute_force(n, gamma, soft):
    generator = torch.Generator().manual_seed(100 * n + int(10 * gamma) + soft)
    scores = 3 * torch.randn(8, n, generator=generator, dtype=torch.float64)
    target = mixup_target(generator, 8, n) if soft else torch.randint(0, n, (8,), generator=generator)
    value, grad = value_and_grad(FocalLoss(gamma), scores, target)
    expected = value_and_grad(lambda s, t: oracle_loss(lambda r, y: oracle_focal(r, y, gamma), s, t), scores, target)
    torch.testing.assert_close((value, grad), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n", [2, 3, 6, 10])
@pytest.mark.parametrize("max_margin,scale", [(0.5, 30.0), (0.2, 1.0), (2.0, 3.0)])
@pytest.mark.parametrize("soft", [False, True])
def test_ldam_matches_brute_force(n, max_margin, scale, soft):
    generator = torch.Generator().manual_seed(100 * n + int(10 * scale) + soft)
    counts = random_counts(generator, n)
    scores = torch.rand(8, n, generator=generator, dtype=torch.float64) * 2 - 1  # cosine scores
    target = mixup_target(generator, 8, n) if soft else torch.randint(0, n, (8,), generator=generator)
    margins = oracle_margins(counts, max_margin)
    value, grad = value_and_grad(LDAMLoss(max_margin, scale, counts), scores, target)
    expected = value_and_grad(
        lambda s, t: oracle_loss(lambda r, y: oracle_ldam(r, y, margins, scale), s, t), scores, target
    )
    torch.testing.assert_close((value, grad), expected, rtol=1e-9, atol=1e-12)


def test_ldam_margins():
    margins = ldam_margins([16, 1, 81, 10000], max_margin=0.5)
    torch.testing.assert_close(margins, torch.tensor([0.25, 0.5, 0.5 / 3, 0.05], dtype=torch.float64))
    generator = torch.Generator().manual_seed(0)
    counts = random_counts(generator, 50)
    margins = ldam_margins(counts, max_margin=0.2)
    torch.testing.assert_close(margins, torch.tensor(oracle_margins(counts, 0.2), dtype=torch.float64), rtol=1e-12, atol=0)
    assert margins.max().item() == pytest.approx(0.2, rel=1e-15)
    assert margins.argmax().item() == counts.index(min(counts))


def test_special_cases_are_cross_entropy():
    generator = torch.Generator().manual_seed(4)
    scores = torch.randn(16, 7, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 7, (16,), generator=generator)
    cross_entropy = F.cross_entropy(scores, labels)
    torch.testing.assert_close(FocalLoss(0.0)(scores, labels), cross_entropy, rtol=1e-14, atol=0)
    torch.testing.assert_close(LDAMLoss(0.0, 1.0, [5] * 7)(scores, labels), cross_entropy, rtol=1e-14, atol=0)
    # Equal counts: every margin is max_margin, so LDAM is CE with the label's score lowered by it.
    shifted = scores - 0.3 * F.one_hot(labels, 7)
    torch.testing.assert_close(LDAMLoss(0.3, 2.0, [5] * 7)(scores, labels), F.cross_entropy(2 * shifted, labels))


@pytest.mark.parametrize("make_loss", [lambda: FocalLoss(2.0), lambda: LDAMLoss(0.5, 5.0, [3, 40, 7, 900, 12])])
def test_mixup_target_is_the_mix_of_the_two_label_losses(make_loss):
    generator = torch.Generator().manual_seed(11)
    scores = torch.randn(16, 5, generator=generator, dtype=torch.float64)
    first = torch.randint(0, 5, (16,), generator=generator)
    second = torch.randint(0, 5, (16,), generator=generator)
    lam = 0.35
    mixed = lam * F.one_hot(first, 5).double() + (1 - lam) * F.one_hot(second, 5).double()
    loss = make_loss()
    value, grad = value_and_grad(loss, scores, mixed)
    expected = value_and_grad(lambda s, _: lam * loss(s, first) + (1 - lam) * loss(s, second), scores, first)
    torch.testing.assert_close((value, grad), expected, rtol=1e-12, atol=1e-14)


def test_gradcheck():
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(4, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 5, (4,), generator=generator)
    soft = mixup_target(generator, 4, 5)
    for loss in (FocalLoss(2.0), FocalLoss(0.5), LDAMLoss(0.5, 3.0, [3, 40, 7, 900, 12])):
        assert torch.autograd.gradcheck(loss, (scores, labels))
        assert torch.autograd.gradcheck(loss, (scores, soft))


def test_float32_scores_give_float32_loss():
    scores = torch.randn(4, 5, requires_grad=True)
    labels = torch.tensor([0, 1, 2, 4])
    for loss in (FocalLoss(), LDAMLoss(class_counts=[3, 40, 7, 900, 12])):
        value = loss(scores, labels)
        assert value.dtype == torch.float32 and torch.isfinite(value)


def test_bad_inputs_name_the_value():
    with pytest.raises(ValueError, match="^gamma must be a finite number >= 0, got -1$"):
        FocalLoss(-1)
    with pytest.raises(ValueError, match="^class_counts is missing: this loss needs the training split's class counts"):
        LDAMLoss()
    with pytest.raises(ValueError, match=r"^class_counts must be a non-empty list of positive counts, got \[3, 0, 5\]"):
        LDAMLoss(class_counts=[3, 0, 5])
    with pytest.raises(ValueError, match=r"^class_counts must be a non-empty list of positive counts, got \[3, 'a'\]"):
        LDAMLoss(class_counts=[3, "a"])
    with pytest.raises(ValueError, match="^scale must be a finite number > 0, got 0$"):
        LDAMLoss(scale=0, class_counts=[3, 4])
    with pytest.raises(ValueError, match="^max_margin must be a finite number >= 0, got -0.5$"):
        LDAMLoss(max_margin=-0.5, class_counts=[3, 4])
    loss = LDAMLoss(class_counts=[3, 4, 5])
    with pytest.raises(ValueError, match="^class_counts has 3 classes but the scores have 4"):
        loss(torch.randn(2, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"labels must be class indices from 0 to 2 \(3 classes\), got 3"):
        loss(torch.randn(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="labels must be class indices from 0 to 2 .*, got -1"):
        FocalLoss()(torch.randn(2, 3), torch.tensor([-1, 0]))
