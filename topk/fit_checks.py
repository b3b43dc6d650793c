"""What :func:`topk.engine.fit` refuses: settings that name metrics the run does not evaluate or
that do not go together (before training, one sentence each), and a model that diverged (during
training). The names stay importable from :mod:`topk.engine`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from topk.distributed import Distributed
from topk.errors import ConfigError, NonFiniteLossError

if TYPE_CHECKING:
    from topk.engine import FitSettings

EARLY_STOPPING_NEEDS_A_METRIC = (
    "trainer.early_stopping_patience={} stops when the selection metric stops improving, and "
    "trainer.selection_metric is last; choose a validation metric (trainer.selection_metric=val/top1) "
    "or trainer.early_stopping_patience=null.")


def metric_names(ks: list[int], groups=(), average_k: bool = True) -> list[str]:
    """The metrics an evaluated split reports; ``avg{k}`` and ``macro_avg{k}`` only with
    ``average_k``, i.e. when the run evaluates a ``val`` split, whose probabilities set their
    threshold (:func:`topk.metrics.average_k_metrics`)."""
    names = ["loss"] + [f"top{k}" for k in ks] + [f"macro_top{k}" for k in ks]
    if average_k:
        names += [f"avg{k}" for k in ks] + [f"macro_avg{k}" for k in ks]
    return names + [f"{group}_top{k}" for group in groups for k in ks]


def check_selection_metric(metric: str, splits: list[str], ks: list[int], groups=(),
                           key: str = "trainer.selection_metric") -> None:
    """Raise unless ``metric`` (the value of ``key``) is ``last`` or ``<split>/<name>`` of an
    evaluated split."""
    if metric == "last":
        return
    split, _, name = metric.partition("/")
    names = metric_names(ks, groups, average_k="val" in splits)
    valid = ["last"] + [f"{s}/{m}" for s in splits for m in names]
    if split not in splits or name not in names:
        needs_val = name not in names and name in metric_names(ks, groups)  # avg{k} without val
        reason = ", as average-k accuracies need a val split to set their threshold" if needs_val else ""
        raise ConfigError(
            f"{key}={metric!r} is not available in this run{reason}; "
            f"choose one of {', '.join(valid[:8])}{', ...' if len(valid) > 8 else ''}."
        )


def check_fit_settings(settings: FitSettings, splits: list[str], ks: list[int], groups=(),
                       schedule_metric: str | None = None) -> None:
    """The metrics the settings and a schedule that follows one (``schedule_metric``,
    :class:`topk.schedules.PlateauLR`) name must be evaluated by this run; early stopping needs a
    selection metric other than ``last``."""
    check_selection_metric(settings.selection_metric, splits, ks, groups)
    for metric in settings.also_select_on:
        check_selection_metric(metric, splits, ks, groups, key="trainer.also_select_on")
    if schedule_metric is not None:
        check_selection_metric(schedule_metric, splits, ks, groups, key="schedule.metric")
    if settings.epochs < 1:
        raise ConfigError(f"trainer.epochs must be at least 1, got {settings.epochs}.")
    if settings.early_stopping_patience is not None and settings.selection_metric == "last":
        raise ConfigError(EARLY_STOPPING_NEEDS_A_METRIC.format(settings.early_stopping_patience))


def check_finite_weights(model: torch.nn.Module, epoch: int) -> None:
    """Raise :class:`NonFiniteLossError` if any weight is NaN or infinite (one read per epoch: a
    training loss can stay finite while an update sends the weights to infinity)."""
    finite = torch.stack([parameter.detach().isfinite().all() for parameter in model.parameters()])
    if not bool(finite.all()):
        raise NonFiniteLossError(
            f"the model's weights became NaN or infinite in epoch {epoch}; lower optim.lr (the "
            "data and the config were checked finite before training: the model diverged)."
        )


def check_finite_metrics(metrics: Mapping[str, Mapping[str, float]]) -> None:
    """Raise :class:`NonFiniteLossError` if the selected model's loss on a split is not finite."""
    for split, values in metrics.items():
        if not math.isfinite(values["loss"]):
            raise NonFiniteLossError(
                f"the selected model's {split} loss is {values['loss']}; lower optim.lr (the data "
                "and the config were checked finite before training: the model diverged)."
            )


def epoch_loss(loss_sum: torch.Tensor, sample_count: int, epoch: int, distributed: Distributed) -> float:
    """The epoch's mean training loss from this process's sum of ``loss · batch size`` on the
    device (summed over processes, so that all of them take the same decision); raises
    :class:`NonFiniteLossError` if it is NaN or infinite. The one read of the loss per epoch."""
    totals = torch.stack([loss_sum, loss_sum.new_tensor(float(sample_count))])
    total, count = distributed.sum_(totals).tolist()
    mean = total / max(count, 1)
    if not math.isfinite(mean):
        raise NonFiniteLossError(
            f"the training loss became {mean} at epoch {epoch}; lower optim.lr (the data and the "
            "config were checked finite before training: the model diverged)."
        )
    return mean
