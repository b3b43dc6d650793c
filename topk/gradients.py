"""How sparse a loss's gradient with respect to the scores is during training: the mean number
of non-zero coordinates of ∂L/∂s per training example, ``train/grad_nonzero`` in ``history.csv``
when ``trainer.grad_nonzero`` is on.

B18 (§3, Fig. 2b) argues that the non-smooth top-k SVM fails to train because its gradient has
at most two non-zero coordinates, and plots the "Proportion of non (numerically) zero elements in
the loss derivatives for different values of τ ... obtained with the initial random weights of
the neural network, and ... averaged over the training set" (experiment ``b18_sparsity``). G22
(§4.1, Fig. 2) answers with the "Average number of non-zero gradient coordinates as a function of
ε" of its noised top-K hinge, "computing ∇_s ℓ ... for each training example during the first
epoch" (experiment ``g22_sparsity``).

A coordinate counts when it is not exactly 0 in the gradient's own dtype (float32 unless
``trainer.amp`` makes the scores half precision): "numerically" zero read as a float that
underflowed to zero. The gradient is the one the training step back-propagates, of the batch's
mean loss, so each example's row is its own loss's gradient divided by the batch size, which
moves no coordinate to or from zero except one within a factor of the batch size of float32's
smallest subnormal (about 1e-45).
"""

from __future__ import annotations

import torch

from topk.distributed import SINGLE_PROCESS, Distributed

COLUMN = "train/grad_nonzero"


class NonZeroGradients:
    """Counts, over one epoch's training batches, the non-zero coordinates of the gradient of the
    loss with respect to each example's scores, on ``device``, the scores' (nothing is read on
    the host before :meth:`columns`, so an accelerator never waits for it)."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.count = torch.zeros((), dtype=torch.float64, device=device)
        self.examples = 0

    def watch(self, scores: torch.Tensor) -> None:
        """Count the gradient that the coming backward pass gives ``scores`` ``[batch, classes]``
        (scores that need no gradient get none, and are not counted)."""
        if scores.requires_grad:
            self.examples += scores.shape[0]
            scores.register_hook(self._add)

    def _add(self, grad: torch.Tensor) -> None:
        self.count.add_(torch.count_nonzero(grad))  # returns None: the gradient goes on unchanged

    def columns(self, distributed: Distributed = SINGLE_PROCESS) -> dict[str, float]:
        """``{"train/grad_nonzero": mean non-zero coordinates per example}`` over every process's
        examples (NaN when none was counted); the count starts afresh."""
        totals = torch.stack([self.count, self.count.new_tensor(float(self.examples))])
        count, examples = distributed.sum_(totals).tolist()
        self.count.zero_()
        self.examples = 0
        return {COLUMN: count / examples if examples else float("nan")}
