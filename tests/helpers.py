"""Small helpers shared by the loss tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def value_and_grad(loss_fn, scores, *args):
    """``loss_fn(scores, *args)`` (summed if not a scalar) and its gradient in ``scores``."""
    scores = scores.clone().requires_grad_(True)
    value = loss_fn(scores, *args)
    (grad,) = torch.autograd.grad(value.sum(), scores)
    return value.detach(), grad


def mixup_target(generator, batch, n):
    """Rows λ e_a + (1-λ) e_b with a ≠ b and λ random per row; the first row is one-hot."""
    first = torch.randint(0, n, (batch,), generator=generator)
    second = (first + torch.randint(1, n, (batch,), generator=generator)) % n
    lam = torch.rand(batch, 1, generator=generator, dtype=torch.float64)
    lam[0] = 1.0
    return lam * F.one_hot(first, n).double() + (1 - lam) * F.one_hot(second, n).double()
