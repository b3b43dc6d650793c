"""Learning-rate schedules of the ``schedule`` config group beside torch's own ``MultiStepLR``
(``schedule=multistep``, stepped once per epoch).

A schedule whose class sets ``per_batch = True`` is stepped by :func:`topk.engine.fit` after
every optimiser step (every training batch, or every ``trainer.accumulate_grad_batches``
batches) instead of every epoch; its position (``last_epoch``, counted in steps) is in the
checkpoint, so a resumed run continues the curve where it stopped. One whose class has a
``metric`` (:class:`PlateauLR`) is stepped with that metric's value after each evaluation.
"""

from __future__ import annotations

import math

import torch

from topk.functional.arguments import non_negative, whole_number


class WarmupCosineLR(torch.optim.lr_scheduler.LambdaLR):
    r"""Linear warm-up, then cosine decay, stepped after every training batch (``schedule=cosine``).

    With ``a = accumulate_grad_batches``, an epoch of ``steps_per_epoch`` training batches takes
    ``S = ⌈steps_per_epoch / a⌉`` optimiser steps (:class:`topk.training_steps.OptimizerSteps`).
    Over ``T = epochs · S`` steps with ``W = round(warmup_epochs · S)``
    of warm-up, the learning rate of step ``t`` is the optimiser's ``lr`` times

    .. math::
        f(t) &= \frac{t + 1}{W} \quad (t < W), \\
        f(t) &= m + (1 - m) \, \frac{1 + \cos\big(\pi \, (t - W) / (T - W)\big)}{2} \quad (t \ge W),

    ``m = min_lr_ratio``: the cosine annealing of Loshchilov & Hutter (SGDR, 2017) without
    restarts, after the gradual warm-up of Goyal et al. (2017). It is torch's ``LambdaLR`` with
    this factor, so its state is torch's. A run extended by raising ``trainer.epochs`` on resume
    stretches the curve over the new length from the step it reached (the rate jumps to that
    point of the longer curve).

    Examples
    --------
    >>> import torch
    >>> from topk.schedules import WarmupCosineLR
    >>> optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    >>> schedule = WarmupCosineLR(optimizer, epochs=2, steps_per_epoch=4, warmup_epochs=0.5)
    >>> rates = []
    >>> for _ in range(8):
    ...     rates.append(round(optimizer.param_groups[0]["lr"], 4))
    ...     optimizer.step(); schedule.step()
    >>> rates
    [0.05, 0.1, 0.1, 0.0933, 0.075, 0.05, 0.025, 0.0067]
    """

    per_batch = True

    def __init__(self, optimizer: torch.optim.Optimizer, epochs: int, steps_per_epoch: int,
                 warmup_epochs: float = 0.0, min_lr_ratio: float = 0.0, accumulate_grad_batches: int = 1,
                 last_epoch: int = -1):
        whole_number("epochs", epochs)
        whole_number("steps_per_epoch", steps_per_epoch)
        whole_number("accumulate_grad_batches", accumulate_grad_batches)
        steps_per_epoch = -(-steps_per_epoch // accumulate_grad_batches)  # optimiser steps
        non_negative("warmup_epochs", warmup_epochs)
        non_negative("min_lr_ratio", min_lr_ratio)
        if warmup_epochs >= epochs or min_lr_ratio > 1:
            raise ValueError(f"warmup_epochs must be below epochs ({epochs}) and min_lr_ratio at most 1, "
                             f"got {warmup_epochs} and {min_lr_ratio}")
        self.total_steps = epochs * steps_per_epoch
        self.warmup_steps = round(warmup_epochs * steps_per_epoch)
        self.min_lr_ratio = min_lr_ratio
        super().__init__(optimizer, self.factor, last_epoch)

    def factor(self, step: int) -> float:
        """``f(t)`` above; steps past ``T`` (none in a run) keep the final rate."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * (1 + math.cos(math.pi * progress)) / 2


class PlateauLR(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ``ReduceLROnPlateau`` on a validation ``metric`` of the run (``schedule=plateau``):
    after each evaluation :func:`topk.engine.fit` steps it with the metric's value, and once the
    metric has not improved for ``patience`` evaluations the learning rate is multiplied by
    ``factor`` (torch's rule, its defaults). Its ``mode`` follows the metric: ``min`` for a loss
    (``val/loss``), ``max`` for an accuracy (``val/top5``). ``metric`` is
    ``trainer.selection_metric`` unless the config sets it; the engine refuses one that the run
    does not evaluate (:func:`topk.engine.check_fit_settings`).

    Examples
    --------
    >>> import torch
    >>> from topk.schedules import PlateauLR
    >>> optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    >>> schedule = PlateauLR(optimizer, "val/top1", patience=1)
    >>> for accuracy in (50.0, 60.0, 55.0, 58.0):
    ...     schedule.step(accuracy)
    >>> round(optimizer.param_groups[0]["lr"], 4)  # 55 and 58 did not beat 60: two evaluations
    0.01
    """

    def __init__(self, optimizer: torch.optim.Optimizer, metric: str, factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, cooldown: int = 0, min_lr: float = 0.0):
        self.metric = metric
        super().__init__(optimizer, mode="min" if metric.endswith("/loss") else "max", factor=factor,
                         patience=patience, threshold=threshold, cooldown=cooldown, min_lr=min_lr)
