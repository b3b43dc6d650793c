"""B18's smooth top-k SVM loss (eq. 9–10) against the enumeration of all k-subsets."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate

from conftest import compose_config
from helpers import value_and_grad
from topk.errors import ConfigError
from topk.losses.smooth_svm import SmoothTopKSVM, smooth_topk_svm

TAUS = (10.0, 1.0, 0.1, 1e-2, 1e-3, 1e-4)


def oracle_per_sample(scores, labels, k, tau, alpha):
    """B18 eq. 9 written out: a log-sum-exp over every k-subset A of the classes. float64.

    ``τ log Σ_A exp((α·1[y∉A] + Σ_{j∈A} s_j / k) / τ) - τ log Σ_{A∋y} exp(Σ_{j∈A} s_j / (kτ))``
    """
    n = scores.shape[1]
    subsets = list(itertools.combinations(range(n), k))
    losses = []
    for row, label in zip(scores, labels.tolist()):
        mean_scores = torch.stack([row[list(subset)].sum() / k for subset in subsets])
        margins = torch.tensor([0.0 if label in subset else alpha for subset in subsets], dtype=row.dtype)
        with_label = torch.tensor([label in subset for subset in subsets])
        all_subsets = tau * torch.logsumexp((margins + mean_scores) / tau, dim=0)
        label_subsets = tau * torch.logsumexp(mean_scores[with_label] / tau, dim=0)
        losses.append(all_subsets - label_subsets)
    return torch.stack(losses)




CASES = [(n, k) for n in (3, 4, 6, 10) for k in (1, 2, 3, 5) if k < n]


@pytest.mark.parametrize("n,k", CASES)
@pytest.mark.parametrize("tau,alpha", [(1.0, 1.0), (0.1, 1.0), (5.0, 0.5)])
def test_matches_enumeration_of_subsets(n, k, tau, alpha):
    generator = torch.Generator().manual_seed(100 * n + k)
    scores = 3 * torch.randn(7, n, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, n, (7,), generator=generator)
    loss = SmoothTopKSVM(k, tau, alpha)
    value, grad = value_and_grad(loss, scores, labels)
    expected_value, expected_grad = value_and_grad(
        lambda s, y: oracle_per_sample(s, y, k, tau, alpha).mean(), scores, labels
    )
    torch.testing.assert_close(value, expected_value, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-12)


def hard_oracle_per_sample(scores, labels, k, alpha):
    """B18 eq. 8 written out: eq. 9 with each log-sum-exp replaced by its max (τ → 0)."""
    n = scores.shape[1]
    subsets = list(itertools.combinations(range(n), k))
    losses = []
    for row, label in zip(scores, labels.tolist()):
        best_any = max(alpha * (label not in A) + row[list(A)].sum() / k for A in subsets)
        best_with_label = max(row[list(A)].sum() / k for A in subsets if label in A)
        losses.append(best_any - best_with_label)
    return torch.stack(losses)


@pytest.mark.parametrize("n,k", [(4, 1), (6, 2), (6, 3), (10, 5)])
def test_tau_zero_is_the_hard_top_k_svm_of_b18_eq_8(n, k):
    generator = torch.Generator().manual_seed(n + 10 * k)
    scores = 3 * torch.randn(9, n, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, n, (9,), generator=generator)
    value, grad = value_and_grad(SmoothTopKSVM(k, 0.0, 1.0), scores, labels)
    expected_value, expected_grad = value_and_grad(
        lambda s, y: hard_oracle_per_sample(s, y, k, 1.0).mean(), scores, labels
    )
    torch.testing.assert_close(value, expected_value, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-12)
    # and it is the limit of the smooth loss
    torch.testing.assert_close(SmoothTopKSVM(k, 1e-4, 1.0)(scores, labels), value, rtol=0, atol=1e-3)


def test_k1_tau1_alpha0_is_cross_entropy():
    """B18 §3.3: with k = 1, τ = 1 and no margin, L_{1,1} is exactly cross-entropy."""
    generator = torch.Generator().manual_seed(0)
    scores = 4 * torch.randn(16, 9, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 9, (16,), generator=generator)
    got = value_and_grad(SmoothTopKSVM(k=1, tau=1.0, alpha=0.0), scores, labels)
    expected = value_and_grad(F.cross_entropy, scores, labels)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)


def test_small_tau_approaches_the_hard_top_k_svm():
    """B18 §3.3 / Prop. 2: L_{k,τ} → l_k = (α + ((s\\y)_[k] - s_y) / k)_+ as τ → 0, within
    τ log C(n, k) (each log-sum-exp is within τ log(count) of its max)."""
    generator = torch.Generator().manual_seed(1)
    n, k, tau, alpha = 10, 3, 1e-3, 1.0
    scores = 3 * torch.randn(32, n, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, n, (32,), generator=generator)
    others = scores.scatter(1, labels[:, None], float("-inf"))
    kth_other = others.topk(k, dim=1).values[:, -1]
    hard = F.relu(alpha + (kth_other - scores.gather(1, labels[:, None]).squeeze(1)) / k)
    smooth = smooth_topk_svm(scores, labels, k, tau, alpha)
    assert ((smooth - hard).abs() <= tau * math.log(math.comb(n, k))).all()


def test_gradcheck():
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(4, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 6, (4,), generator=generator)
    soft = torch.softmax(torch.randn(4, 6, generator=generator, dtype=torch.float64), dim=1)
    loss = SmoothTopKSVM(k=2, tau=0.5, alpha=1.0)
    assert torch.autograd.gradcheck(loss, (scores, labels))
    assert torch.autograd.gradcheck(loss, (scores, soft))


def test_mixup_target_is_the_mixture_of_the_two_label_losses():
    generator = torch.Generator().manual_seed(3)
    scores = 3 * torch.randn(12, 8, generator=generator, dtype=torch.float64)
    label_a = torch.randint(0, 8, (12,), generator=generator)
    label_b = torch.randint(0, 8, (12,), generator=generator)
    label_b[:3] = label_a[:3]  # both images of the pair from one class: a one-hot target
    lam = torch.rand(12, 1, generator=generator, dtype=torch.float64)
    target = lam * F.one_hot(label_a, 8) + (1 - lam) * F.one_hot(label_b, 8)
    k, tau, alpha = 3, 0.5, 1.0

    def mixture(s, _):
        lam_ = lam.squeeze(1)
        return (lam_ * smooth_topk_svm(s, label_a, k, tau, alpha)
                + (1 - lam_) * smooth_topk_svm(s, label_b, k, tau, alpha)).mean()

    got = value_and_grad(SmoothTopKSVM(k, tau, alpha), scores, target)
    expected = value_and_grad(mixture, scores, target)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)


def realistic_scores(batch=64, n=1000):
    """Logits with a spread of about 100 (15·N(0, 1)); half the labels on top, half anywhere."""
    generator = torch.Generator().manual_seed(2018)
    scores = 15 * torch.randn(batch, n, generator=generator)
    labels = torch.randint(0, n, (batch,), generator=generator)
    scores[: batch // 2].scatter_(1, labels[: batch // 2, None], 40.0)
    return scores, labels


# k = 20 down to τ = 1e-3: at τ = 1e-4 its float32 log-coefficients reach about 1e6 (ulp 0.06),
# and a few near-tie gradients differ from float64 by up to 5e-5. At τ = 1e-3 (log-coefficients up to
# about 1e5, ulp 0.008) one gradient of 64,000 differs by 1.3e-5 (9e-6 with the pairs of an
# earlier pairing order): k = 20 gets an absolute tolerance of 2e-5.
@pytest.mark.parametrize(
    "tau,k", [(tau, k) for tau in TAUS for k in (1, 5)] + [(tau, 20) for tau in TAUS if tau >= 1e-3]
)
def test_float32_is_finite_and_agrees_with_float64(tau, k):
    scores, labels = realistic_scores()
    per_sample = lambda s, y: smooth_topk_svm(s, y, k, tau, 1.0)  # noqa: E731
    value32, grad32 = value_and_grad(per_sample, scores, labels)
    value64, grad64 = value_and_grad(per_sample, scores.double(), labels)
    assert torch.isfinite(value32).all() and torch.isfinite(grad32).all()
    torch.testing.assert_close(value32.double(), value64, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad32.double(), grad64, rtol=1e-4, atol=2e-5 if k == 20 else 1e-5)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_no_hard_switch_needed_where_b18_code_switches(k):
    """B18's code uses the hard loss for a sample when s_[k] - s_[k+1] ≥ kτ log 1e3. Here the
    smooth loss stays exact there: float32 values and gradients match the float64 enumeration."""
    generator = torch.Generator().manual_seed(4 + k)
    n, tau = 8, 1e-2
    scores = torch.randn(16, n, generator=generator, dtype=torch.float64)
    top = torch.randperm(n, generator=generator)[:k]
    scores[:, top] += 10.0  # a gap of about 10 between the k-th and (k+1)-th scores
    labels = torch.randint(0, n, (16,), generator=generator)
    labels[:8] = top[torch.arange(8) % k]  # half the labels in the top k, half (mostly) not
    ranked = scores.sort(dim=1, descending=True).values
    assert (ranked[:, k - 1] - ranked[:, k] >= k * tau * math.log(1e3)).all()
    loss = SmoothTopKSVM(k, tau, 1.0)
    value32, grad32 = value_and_grad(loss, scores.float(), labels)
    expected_value, expected_grad = value_and_grad(
        lambda s, y: oracle_per_sample(s, y, k, tau, 1.0).mean(), scores.float().double(), labels
    )
    assert torch.isfinite(grad32).all()
    torch.testing.assert_close(value32.double(), expected_value, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad32.double(), expected_grad, rtol=1e-4, atol=1e-5)


def test_bad_parameters_and_inputs_name_the_value():
    with pytest.raises(ValueError, match=r"^tau must be a finite number >= 0 \(0 is the non-smooth top-k SVM\), got -1$"):
        SmoothTopKSVM(tau=-1)
    with pytest.raises(ValueError, match=r"^alpha must be a finite number >= 0, got -0.5$"):
        SmoothTopKSVM(alpha=-0.5)
    with pytest.raises(ValueError, match="^k must be a whole number of at least 1, got 0$"):
        SmoothTopKSVM(k=0)
    scores = torch.randn(2, 5)
    with pytest.raises(ConfigError, match=r"^k=5 must be between 1 and .* \(4\); choose a smaller k"):
        SmoothTopKSVM(k=5)(scores, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"labels must be class indices from 0 to 4 \(5 classes\), got 5"):
        SmoothTopKSVM(k=2)(scores, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="must sum to 1"):
        SmoothTopKSVM(k=2)(scores, torch.full((2, 5), 0.1))


def test_config_has_b18_defaults():
    loss = instantiate(compose_config(["loss=smooth_svm"]).loss)
    assert isinstance(loss, SmoothTopKSVM)
    assert (loss.k, loss.tau, loss.alpha) == (5, 1.0, 1.0)
