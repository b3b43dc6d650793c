"""The optimiser step and what the selection metric decides, beside the training loop of
:mod:`topk.engine`.

- :class:`OptimizerSteps`: each training batch's backward pass and, every
  ``trainer.accumulate_grad_batches`` batches, the optimiser step, with gradient clipping
  (``trainer.clip_grad_norm``, after the fp16 scaler has unscaled the gradients), the per-step
  schedule and the exponential moving average of the weights (``trainer.ema_decay``).
- :func:`early_stop_reason` (``trainer.early_stopping_patience``) and :func:`step_on_metric`
  (``schedule=plateau``): decisions taken after an evaluation, from the run's history.

Accumulating ``N`` batches of ``B`` samples gives the gradient of one batch of ``N·B`` for a
batch-mean loss: each batch's loss is divided by the number of batches of its window before its
backward pass (a last, shorter window of an epoch by its own count, as its step averages fewer
batches). With several processes (DistributedDataParallel), the batches that do not end a window
run under ``no_sync``, so gradients are all-reduced once per step (torch's DDP documentation,
"no_sync"). BatchNorm statistics are still those of each batch of ``B``, so a model with
BatchNorm does not train exactly as on batches of ``N·B``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from topk.checkpoints import TrainingState
from topk.precision import MixedPrecision, unwrap


class OptimizerSteps:
    """The backward pass of each training batch and the optimiser step of every
    ``accumulate_grad_batches`` batches, for ``model`` (DistributedDataParallel or not).

    ``clip_grad_norm`` (or ``None``): the gradients' total 2-norm is scaled down to at most this
    value before each step (``torch.nn.utils.clip_grad_norm_``; on the device, nothing is read on
    the host). ``ema_decay`` (or ``None``): after each step the exponential moving average of the
    weights and buffers, ``W_ema ← decay · W_ema + (1 − decay) · W`` from a copy of the weights of
    the first step (``torch.optim.swa_utils.AveragedModel`` with ``get_ema_multi_avg_fn``, as in
    torchvision's classification reference script), is :attr:`ema`; the engine evaluates and selects
    it instead of the trained model. :meth:`update_average` is ``AveragedModel.update_parameters``
    with torch's averaging function, less the copy of the step count to the device at every
    update, which makes the host wait for the device (the count stays on the CPU). A
    ``scheduler`` whose class sets ``per_batch`` (:mod:`topk.schedules`) is stepped after every
    optimiser step.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 precision: MixedPrecision | None = None, scheduler=None, accumulate_grad_batches: int = 1,
                 clip_grad_norm: float | None = None, ema_decay: float | None = None):
        self.model, self.optimizer = model, optimizer
        self.precision = precision or MixedPrecision()
        self.step_schedule = scheduler.step if getattr(scheduler, "per_batch", False) else None
        self.accumulate = int(accumulate_grad_batches)
        self.clip_grad_norm = clip_grad_norm
        self.ema = None if ema_decay is None else AveragedModel(
            unwrap(model), multi_avg_fn=get_ema_multi_avg_fn(ema_decay), use_buffers=True)
        self.averaged_groups = None if self.ema is None else same_dtype_groups(self.ema.module, unwrap(model))

    def evaluated_model(self) -> torch.nn.Module:
        """The model that evaluation sees and selection keeps: the moving average when there is
        one, else the trained model outside DistributedDataParallel (whose forward pass may
        synchronise buffers across processes that evaluate different numbers of batches)."""
        if self.ema is not None:
            return self.ema.module
        return self.model.module if isinstance(self.model, torch.nn.parallel.DistributedDataParallel) else self.model

    def ends_window(self, batch_index: int, batches: int | None) -> bool:
        """Whether batch ``batch_index`` (from 0) of an epoch of ``batches`` ends its window."""
        return (self.accumulate == 1 or (batch_index + 1) % self.accumulate == 0
                or batch_index + 1 == batches)

    def synchronised(self, batch_index: int, batches: int | None):
        """The context of a batch's forward and backward pass: DistributedDataParallel's
        ``no_sync`` for a batch that does not end its window, else none."""
        if isinstance(self.model, torch.nn.parallel.DistributedDataParallel) and not self.ends_window(
                batch_index, batches):
            return self.model.no_sync()
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, batch_index: int, batches: int | None) -> None:
        """The gradients of ``loss`` (a batch mean), added to those of its window so far (set
        afresh by the window's first batch), divided by the window's number of batches."""
        if batch_index % self.accumulate == 0:
            self.optimizer.zero_grad(set_to_none=True)
        window = self.accumulate
        if batches is not None:
            window = min(window, batches - (batch_index - batch_index % self.accumulate))
        self.precision.backward(loss / window if window > 1 else loss)

    def step_if_due(self, batch_index: int, batches: int | None) -> None:
        """At a window's end: clip, step the optimiser, then the moving average and the per-step
        schedule."""
        if not self.ends_window(batch_index, batches):
            return
        self.precision.step(self.optimizer, self.clip if self.clip_grad_norm is not None else None)
        if self.ema is not None:
            self.update_average()
        if self.step_schedule is not None:
            self.step_schedule()

    def clip(self) -> None:
        torch.nn.utils.clip_grad_norm_(unwrap(self.model).parameters(), self.clip_grad_norm)

    @torch.no_grad()
    def update_average(self) -> None:
        """The moving average after a step: the weights and buffers copied at the first, then
        ``W_ema ← decay · W_ema + (1 − decay) · W`` (:attr:`ema`'s ``multi_avg_fn``) per dtype."""
        first = int(self.ema.n_averaged) == 0  # a CPU tensor: no wait for the device
        for averaged, current in self.averaged_groups:
            if first:
                for mine, theirs in zip(averaged, current, strict=True):
                    mine.copy_(theirs)
            else:
                self.ema.multi_avg_fn(averaged, current, None)
        self.ema.n_averaged += 1


def same_dtype_groups(averaged: torch.nn.Module, model: torch.nn.Module) -> list[tuple[list, list]]:
    """The parameters and buffers of ``averaged`` and ``model`` (detached, in the same order),
    grouped by dtype as torch's foreach functions need them."""
    groups: dict[torch.dtype, tuple[list, list]] = {}
    for mine, theirs in zip([*averaged.parameters(), *averaged.buffers()],
                            [*model.parameters(), *model.buffers()], strict=True):
        group = groups.setdefault(mine.dtype, ([], []))
        group[0].append(mine.detach())
        group[1].append(theirs.detach())
    return list(groups.values())


def early_stop_reason(state: TrainingState, patience: int | None) -> str | None:
    """Why training stops before ``trainer.epochs`` (``trainer.early_stopping_patience``), or
    ``None``: the selection metric has not improved on its best for ``patience`` evaluations.
    Counted from the history (the evaluated epochs after the best one), so a resumed run stops
    where an uninterrupted one does."""
    best = state.best
    if patience is None or best.epoch is None or best.metric == "last":
        return None
    since = [row["epoch"] for row in state.history if best.metric in row and row["epoch"] > best.epoch]
    if len(since) < patience:
        return None
    return (f"early stopping after epoch {state.epoch}: {best.metric} has not improved on epoch "
            f"{best.epoch}'s {best.value:g} for {patience} evaluations (trainer.early_stopping_patience)")


def step_on_metric(scheduler, row: Mapping) -> None:
    """Step a schedule that follows a metric (:class:`topk.schedules.PlateauLR`) with the value
    of its metric in the history ``row`` of an evaluated epoch."""
    metric = getattr(scheduler, "metric", None)
    if metric is not None and metric in row:
        scheduler.step(row[metric])
