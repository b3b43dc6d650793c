"""Fit and evaluate: one readable training loop, in the spirit of torchvision's reference script.

``fit`` trains for ``settings.epochs`` epochs (:func:`train_one_epoch`), evaluates every split in
``eval_batches`` every ``settings.eval_every`` epochs (:func:`evaluate_splits`), keeps the model
that is best by ``settings.selection_metric`` (:class:`topk.checkpoints.BestModel`), writes
``checkpoints/last.pt`` (resume) and ``checkpoints/best.pt`` (selected model) with ``history.csv``
(:class:`topk.checkpoints.Checkpoints`), TensorBoard scalars, and finally evaluates the selected
model on every split (:func:`final_result`). Each metric of ``settings.also_select_on`` keeps a
best model of its own (``checkpoints/best_val_top5.pt`` for ``val/top5``), evaluated at the end
too: runs that would differ only in the selection metric (S20 Table I's columns) are one training
run.

Resuming (``settings.resume``) restores model, optimiser, schedule, gradient scaler, random-number
state, history and best model from ``last.pt``; the batches of epoch ``e`` depend only on
``(seed, e)``, so a resumed run ends exactly where an uninterrupted one does.

Ctrl-C and SIGTERM: :class:`topk.stopping.StopRequests` is the one place where the two signals
become a stop; ``fit`` takes a stop at the next batch boundary and raises
:class:`topk.stopping.RunInterrupted` with the epoch a resume continues after.

Several processes (``distributed``, see :mod:`topk.distributed`): each trains the
DistributedDataParallel model on its share of every global batch; the loss, the stop requests and
the top-k and average-k counts are summed over processes (and the largest validation probabilities,
which set the average-k threshold, gathered), so every process takes the same decisions and reports
the same metrics; only rank 0 writes checkpoints, history and TensorBoard events.

Where the rest lives: the checkpoint files, their format, random-number state and ``best.pt``
recovery in :mod:`topk.checkpoints`; signals and stops in :mod:`topk.stopping`; average-k
accuracies at the validation split's thresholds, gathered over processes, in :mod:`topk.metrics`
(:func:`topk.metrics.average_k_metrics`). The names ``train.py``, ``scripts/evaluate.py`` and
:mod:`topk.data.images` import from here stay importable from here.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

# Imported from here by others, so kept here (noqa: F401): _unusable and load_checkpoint
# (the evaluation of a saved run), StopRequests and preemption_signal (train.py, topk.data.images).
from topk.checkpoints import (  # noqa: F401
    BestModel,
    Checkpoints,
    TrainingState,
    _unusable,
    check_resume_epochs,
    load_checkpoint,
)
from topk.data.augment import NoMix
from topk.distributed import SINGLE_PROCESS, Distributed
from topk.fit_checks import (  # noqa: F401 (the checks of fit, importable from here as before)
    check_finite_metrics,
    check_finite_weights,
    check_fit_settings,
    check_selection_metric,
    epoch_loss,
    metric_names,
)
from topk.functional import topk_marginals
from topk.gradients import NonZeroGradients
from topk.metrics import AverageKAccumulator, TopKAccumulator, average_k_metrics, clip_ks
from topk.precision import MixedPrecision, unwrap
from topk.progress import BatchMeter, Progress
from topk.records import TensorBoardScalars, tensorboard_dir
from topk.stopping import (  # noqa: F401
    RunInterrupted,
    StopRequests,
    preemption_signal,
    stop_requested,
    stop_requests,
)
from topk.training_steps import OptimizerSteps, early_stop_reason, step_on_metric


def model_scores(model, inputs: torch.Tensor):
    """A batch's ranking scores and the logits its evaluation loss is computed on: both are the
    model's output (one image per sample)."""
    logits = model(inputs)
    return logits, logits


@dataclass
class FitSettings:
    """Trainer settings, plain values (``trainer.*`` in the config)."""

    epochs: int
    ks: list[int] = field(default_factory=lambda: [1, 2, 3, 5, 10])
    selection_metric: str = "last"
    also_select_on: list[str] = field(default_factory=list)  # more metrics, each with a best model of its own
    eval_every: int = 1
    checkpoint_every: int = 1
    resume: bool = False
    progress: bool = True
    progress_every: int = 100  # batches between progress lines where stderr is not a terminal
    log_line: Callable[[str], None] | None = None  # writes a line to the run's train.log alone
    tensorboard: bool = True
    tensorboard_name: str = "default"  # the events' folder under <run>/tb/ (topk.records.tensorboard_dir)
    description: str = "train"
    class_groups: dict[str, list[int]] | None = None  # e.g. many/medium/few-shot classes
    amp: str = "off"  # off | bf16 | fp16: autocast of the forward pass (losses stay float32)
    config: dict | None = None  # the flat resolved run config, remembered by checkpoints/last.pt
    eval_scores: Mapping[str, Callable] = field(default_factory=dict)  # per split; model_scores elsewhere
    grad_nonzero: bool = False  # history's train/grad_nonzero (topk.gradients.NonZeroGradients)
    accumulate_grad_batches: int = 1  # batches per optimiser step (topk.training_steps.OptimizerSteps)
    clip_grad_norm: float | None = None  # the gradients' largest 2-norm at each step; None: no clipping
    ema_decay: float | None = None  # evaluate and select the weights' moving average; None: the weights
    early_stopping_patience: int | None = None  # stop after this many evaluations without a better model
    test_every_epoch: bool = False  # score the test split at each evaluation too; else only the kept models, at the end


@dataclass
class FitResult:
    best_epoch: int
    selection_metric: str
    metrics: dict[str, dict[str, float]]  # split -> metric -> value, for the selected model
    per_class: dict[str, dict[int, list]]  # split -> k -> per-class accuracy
    samples: dict[str, int]  # split -> number of samples evaluated (over all processes)
    class_samples: dict[str, list[int]]  # split -> samples of each class evaluated (all processes)
    epoch_seconds: float | None
    history: list[dict]
    # trainer.also_select_on's metric -> {"best_epoch": ..., "metrics": split -> metric -> value,
    # "per_class": split -> k -> per-class accuracy}
    also_selected: dict[str, dict] = field(default_factory=dict)
    stopped_early: str | None = None  # why training stopped before settings.epochs (early stopping)


# --- one epoch's training, evaluation -------------------------------------------------------------

def train_one_epoch(
    model, loss_fn, optimizer, batches, mix, accumulator, epoch: int, stop=None,
    precision: MixedPrecision | None = None, distributed: Distributed = SINGLE_PROCESS, scheduler=None,
    meter: BatchMeter | None = None, gradients: NonZeroGradients | None = None,
    steps: OptimizerSteps | None = None,
) -> float:
    """One pass over the training batches; returns the mean training loss.

    ``mix`` turns each batch's ``(inputs, labels)`` into the ``(inputs, target)`` the model and the
    loss see (:class:`topk.data.augment.Mixup`, or :class:`~topk.data.augment.NoMix`).
    ``accumulator`` (or ``None`` to skip) counts top-k hits of the training scores as they were
    when each batch was seen, before the update (this process's share; the caller sums them).
    ``stop`` (a :class:`topk.stopping.StopRequests`) is asked after the batches whether a signal
    asked the run to stop (:func:`topk.stopping.stop_requested`). ``precision`` autocasts the
    forward pass (``trainer.amp``); the loss then sees float32 scores. ``steps``
    (:class:`topk.training_steps.OptimizerSteps`: gradient accumulation and clipping, the moving
    average of the weights) makes each backward pass and optimiser step; by default one plain step
    per batch, after which a ``scheduler`` whose class sets ``per_batch`` (:mod:`topk.schedules`)
    is stepped; others are left to the epoch's end.
    ``meter`` (:class:`topk.progress.BatchMeter`) shows the batches as they go. ``gradients``
    (:class:`topk.gradients.NonZeroGradients`, ``trainer.grad_nonzero``) counts the non-zero
    coordinates of each batch's gradient with respect to its scores.
    ``make bench-train`` compares this loop with a bare one on DenseNet, ``make bench`` the S20
    sweeps with one.

    No value is read on the host per batch (a read would make the host wait for the device,
    docs/design.md §5): the batch losses are summed on the device and read once, at the epoch
    end, where a NaN or infinite mean stops the run (:func:`epoch_loss`). An epoch whose loss
    diverges therefore runs to its end, updates included. (``trainer.amp=fp16``'s gradient scaler
    reads whether the gradients overflowed at every step: that read is torch's own.)
    """
    precision = precision or MixedPrecision()
    forward = precision.forward(model)
    model.train()
    loss_sum = torch.zeros((), dtype=torch.float64, device=next(unwrap(model).parameters()).device)
    sample_count = 0
    steps = steps or OptimizerSteps(model, optimizer, precision, scheduler)
    count = len(batches) if steps.accumulate > 1 else None
    for batch_index, (inputs, labels) in enumerate(batches):
        inputs, target = mix(inputs, labels)
        with steps.synchronised(batch_index, count):  # DDP's no_sync within an accumulation window
            scores = forward(inputs)
            if gradients is not None:
                gradients.watch(scores)
            loss = loss_fn(scores, target)
            steps.backward(loss, batch_index, count)
        steps.step_if_due(batch_index, count)
        loss_sum.add_(loss.detach(), alpha=labels.shape[0])  # in float64, on the device
        sample_count += labels.shape[0]
        if meter is not None:
            meter.update(batch_index, labels.shape[0], loss_sum, sample_count)
        if accumulator is not None:
            accumulator.update(scores, labels)
        if stop_requested(stop, batch_index, distributed, loss_sum.device):
            raise KeyboardInterrupt
    return epoch_loss(loss_sum, sample_count, epoch, distributed)


def multi_crop_scores(model, inputs: torch.Tensor, marginal_k: int):
    """Scores of images given as several crops ``[B, crops, C, H, W]`` (B18 §5.2, Appendix C).

    Returns the ranking scores, the log of each label's top-``marginal_k`` marginal probability
    averaged over the crops (:func:`topk.functional.topk_marginals`), and the crops' mean logits,
    on which the evaluation loss is computed. ``train.py`` passes it (with ``marginal_k`` bound)
    as ``FitSettings.eval_scores`` when a data set is tested on ten crops.
    """
    batch, crops = inputs.shape[:2]
    logits = model(inputs.flatten(0, 1)).float()
    k = min(marginal_k, logits.shape[1] - 1)
    marginals = topk_marginals(logits, k).unflatten(0, (batch, crops)).mean(dim=1)
    return marginals.log(), logits.unflatten(0, (batch, crops)).mean(dim=1)


@torch.inference_mode()
def evaluate(
    model, loss_fn, batches, ks, num_classes, class_groups=None,
    precision: MixedPrecision | None = None, distributed: Distributed = SINGLE_PROCESS,
    scores_of: Callable = model_scores, average_k: AverageKAccumulator | None = None,
) -> tuple[dict[str, float], TopKAccumulator]:
    """Loss and top-k accuracies of ``model`` over ``batches`` (labels are hard).

    ``scores_of(model, inputs)`` gives each batch's ranking scores and the logits of its loss
    (:func:`model_scores`, or :func:`multi_crop_scores` for ten-crop test images);
    ``class_groups`` adds ``{group}_top{k}`` accuracies; scores are autocast as in training and
    taken in float32. With several processes each evaluates its share of the split and the counts
    and loss sums are added up over processes (exact). ``average_k``, when given, collects the
    same scores' probabilities for :func:`topk.metrics.average_k_metrics` (this process's share).
    """
    precision = precision or MixedPrecision()
    model.eval()
    device = next(model.parameters()).device
    accumulator = TopKAccumulator(ks, num_classes, device)
    loss_sum, sample_count = torch.zeros((), dtype=torch.float64, device=device), 0
    for inputs, labels in batches:
        with precision.autocast():
            scores, logits = scores_of(model, inputs)
        scores, logits = scores.float(), logits.float()
        accumulator.update(scores, labels)
        if average_k is not None:
            average_k.update(scores, labels)
        loss_sum.add_(loss_fn(logits, labels), alpha=len(labels))  # summed on the device, read once
        sample_count += len(labels)
    sums = distributed.sum_(torch.stack([loss_sum, loss_sum.new_tensor(float(sample_count))]))
    total_loss, total_count = sums.tolist()
    if distributed.enabled:
        sum_counts(accumulator, distributed)
    metrics = {"loss": total_loss / max(total_count, 1)}
    metrics.update(accumulator.compute(class_groups))
    return metrics, accumulator


def evaluate_splits(
    model, loss_fn, eval_batches: Mapping[str, object], ks, num_classes, class_groups=None,
    precision: MixedPrecision | None = None, distributed: Distributed = SINGLE_PROCESS,
    scores_of: Mapping[str, Callable] | None = None,
) -> dict[str, tuple[dict[str, float], TopKAccumulator]]:
    """:func:`evaluate` on every split: ``{split: (metrics, accumulator)}``, each split scored by
    ``scores_of[split]`` (:func:`multi_crop_scores` for ten-crop test images), else by
    :func:`model_scores`. With a ``val``
    split, every split's metrics hold ``avg{k}`` and ``macro_avg{k}`` too, at the threshold the
    ``val`` split sets (:func:`topk.metrics.average_k_metrics`); without one they are absent."""
    device, collected = next(model.parameters()).device, {}
    if "val" in eval_batches:  # average-k accuracy needs the val split's threshold
        collected = {split: AverageKAccumulator(split == "val", device) for split in eval_batches}
    evaluations = {
        split: evaluate(model, loss_fn, batches, ks, num_classes, class_groups, precision, distributed,
                        (scores_of or {}).get(split, model_scores), average_k=collected.get(split))
        for split, batches in eval_batches.items()
    }
    for split, metrics in average_k_metrics(collected, ks, num_classes, distributed).items():
        evaluations[split][0].update(metrics)
    return evaluations


def metric_columns(evaluations: Mapping[str, tuple]) -> dict[str, float]:
    """``{"<split>/<metric>": value}``: the history's columns of :func:`evaluate_splits`."""
    return {f"{split}/{name}": value for split, (metrics, _) in evaluations.items() for name, value in metrics.items()}


def sum_counts(accumulator: TopKAccumulator, distributed: Distributed) -> None:
    """Add up every process's top-k hits and sample counts (integers: exact)."""
    distributed.sum_(accumulator.hits)
    distributed.sum_(accumulator.totals)


def train_accuracy_columns(accumulator: TopKAccumulator, ks, distributed: Distributed) -> dict[str, float]:
    """``train/top{k}`` of the scores seen while training (summed over processes)."""
    sum_counts(accumulator, distributed)
    accuracies = accumulator.compute()
    return {f"train/top{k}": accuracies[f"top{k}"] for k in ks}


def extra_metrics(settings: FitSettings) -> list[str]:
    """``settings.also_select_on`` without repeats and without the selection metric itself
    (whose model is ``best.pt`` already)."""
    return [metric for metric in dict.fromkeys(settings.also_select_on) if metric != settings.selection_metric]


# --- progress bar, TensorBoard --------------------------------------------------------------------

def run_progress(settings: FitSettings, start_epoch: int, distributed: Distributed) -> Progress:
    """The epochs still to train with their bars or lines (:mod:`topk.progress`; rank 0 only)."""
    return Progress(settings.epochs, start_epoch, settings.description, settings.selection_metric,
                    settings.progress and distributed.is_main, settings.progress_every,
                    to_file=settings.log_line if distributed.is_main else None)


def open_tensorboard(run_dir: Path, settings: FitSettings, distributed: Distributed, start_epoch: int):
    """The run's :class:`topk.records.TensorBoardScalars` in ``<run_dir>/tb/<name>``
    (:func:`topk.records.tensorboard_dir`; rank 0, with ``settings.tensorboard``), or ``None``.
    On resume, the events a previous session wrote after the checkpoint are purged."""
    if not settings.tensorboard or not distributed.is_main:
        return None
    return TensorBoardScalars(tensorboard_dir(run_dir, settings.tensorboard_name),
                              purge_step=start_epoch + 1 if start_epoch else None)


# --- fit ------------------------------------------------------------------------------------------

@dataclass
class FitRun:
    """What :func:`fit` sets up before its first epoch (:func:`start_fit`) and each epoch uses."""

    settings: FitSettings
    ks: list[int]
    num_classes: int
    device: torch.device
    precision: MixedPrecision
    steps: OptimizerSteps  # backward passes and optimiser steps (accumulation, clipping, EMA)
    evaluated: torch.nn.Module  # the model evaluation sees and selection keeps (the EMA, if any)
    evaluate_all: Callable  # evaluate_splits of the evaluated model on every split
    evaluate_epoch: Callable  # the same at each evaluation: without the test split unless test_every_epoch
    checkpoints: Checkpoints
    state: TrainingState
    progress: Progress
    tensorboard: TensorBoardScalars | None
    gradients: NonZeroGradients | None
    distributed: Distributed


def fit(
    model: torch.nn.Module, loss_fn: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler,
    train_batches, eval_batches: Mapping[str, object], num_classes: int, run_dir: Path,
    settings: FitSettings, mix: Callable | None = None,
    on_epoch_end: Callable[[int, dict], None] | None = None, distributed: Distributed = SINGLE_PROCESS,
) -> FitResult:
    """Train ``model`` and return the selected epoch's metrics on every evaluated split.

    ``eval_batches`` maps a split name (``val``, ``test``) to its batches; ``train_batches`` come
    with their per-image transforms applied, and ``mix`` (``augment.mix``: Mixup, or ``None`` for
    none) is the batch -> target step of each training batch. ``on_epoch_end`` is called with
    ``(epoch, history_row)`` after each epoch's record is written. With several processes
    (``distributed``), ``model`` is the DistributedDataParallel wrapper and the batches are this
    process's shares; ``run_dir`` is the same directory in every process. A schedule that follows
    a metric (``schedule=plateau``) is stepped after each evaluation, others per optimiser step
    or per epoch; ``settings.early_stopping_patience`` ends the epochs early (:func:`epoch_done`).
    The test split is scored once, on the kept models at the end, unless
    ``settings.test_every_epoch`` scores it at every evaluation too (per-epoch test curves).
    """
    run = start_fit(model, loss_fn, optimizer, scheduler, eval_batches, num_classes, run_dir, settings,
                    distributed)
    mix = NoMix() if mix is None else mix
    stopped_early = None
    try:
        with stop_requests.deferred() as stop:
            for epoch in run.progress:
                started, lr = time.perf_counter(), optimizer.param_groups[0]["lr"]
                evaluate_now = epoch % max(1, settings.eval_every) == 0 or epoch == settings.epochs
                row = {"epoch": epoch, "lr": lr}
                row.update(train_epoch(run, model, loss_fn, train_batches, mix, scheduler, epoch, stop,
                                       evaluate_now))
                if evaluate_now:
                    row.update(metric_columns(run.evaluate_epoch()))
                    step_on_metric(scheduler, row)  # schedule=plateau
                row["seconds"] = time.perf_counter() - started
                stopped_early = epoch_done(run, row, on_epoch_end)
                if stopped_early is not None:
                    break
                if distributed.any(stop.requested, run.device):  # between epochs: this one is kept
                    run.checkpoints.save(run.state, run.tensorboard)
                    raise KeyboardInterrupt
        return final_result(model, run.state, run.checkpoints, run.evaluate_all, run.evaluated, stopped_early)
    except KeyboardInterrupt:  # inside an epoch the model is half-updated: last.pt stays the resume point
        raise RunInterrupted(run.checkpoints.saved_epoch) from None
    finally:
        run.progress.close()
        if run.tensorboard is not None:
            run.tensorboard.close()


def start_fit(model, loss_fn, optimizer, scheduler, eval_batches: Mapping[str, object], num_classes: int,
              run_dir: Path, settings: FitSettings, distributed: Distributed) -> FitRun:
    """The settings checked (:func:`check_fit_settings`), the optimiser steps, evaluation,
    checkpoints and training state (restored on resume), TensorBoard and progress of a fit."""
    ks, groups = clip_ks(settings.ks, num_classes), settings.class_groups or {}
    check_fit_settings(settings, list(eval_batches), ks, list(groups), getattr(scheduler, "metric", None))
    device = next(unwrap(model).parameters()).device
    precision = MixedPrecision(settings.amp, device)
    steps = OptimizerSteps(model, optimizer, precision, scheduler, settings.accumulate_grad_batches,
                           settings.clip_grad_norm, settings.ema_decay)
    evaluated = steps.evaluated_model()

    def evaluator(splits: Mapping[str, object]) -> Callable:
        return partial(evaluate_splits, evaluated, loss_fn, splits, ks, num_classes, groups, precision,
                       distributed, settings.eval_scores)
    each_epoch = {split: batches for split, batches in eval_batches.items()
                  if settings.test_every_epoch or split != "test"}  # the test split: once, at the end
    checkpoints = Checkpoints(run_dir, model, optimizer, scheduler, precision, distributed, settings.config,
                              ema=steps.ema)
    state = TrainingState(BestModel(settings.selection_metric),
                          also_best=[BestModel(metric) for metric in extra_metrics(settings)])
    state = checkpoints.restore(state) if settings.resume else state
    check_resume_epochs(run_dir, state.epoch, settings.epochs)
    return FitRun(settings, ks, num_classes, device, precision, steps, evaluated, evaluator(eval_batches),
                  evaluator(each_epoch), checkpoints, state, run_progress(settings, state.epoch, distributed),
                  open_tensorboard(run_dir, settings, distributed, state.epoch),
                  NonZeroGradients(device) if settings.grad_nonzero else None, distributed)


def train_epoch(run: FitRun, model, loss_fn, train_batches, mix, scheduler, epoch: int, stop,
                evaluate_now: bool) -> dict[str, float]:
    """One epoch's training (:func:`train_one_epoch`), then the schedule stepped per epoch (one
    stepped per optimiser step or per evaluation aside), the weights checked finite and the
    evaluated model's buffers made rank 0's; returns the history's ``train/*`` columns (the
    training accuracies where the epoch is evaluated)."""
    train_batches.set_epoch(epoch)
    train_counts = TopKAccumulator(run.ks, run.num_classes, run.device) if evaluate_now else None
    meter = run.progress.batches(epoch, len(train_batches))
    columns = {"train/loss": train_one_epoch(
        model, loss_fn, run.steps.optimizer, train_batches, mix, train_counts, epoch, stop, run.precision,
        run.distributed, scheduler, meter, run.gradients, run.steps)}
    run.progress.close_batches()
    if not getattr(scheduler, "per_batch", False) and getattr(scheduler, "metric", None) is None:
        scheduler.step()
    check_finite_weights(model, epoch)
    distributed = run.distributed
    for evaluated in dict.fromkeys([run.steps.evaluated_model(), unwrap(model)]):
        distributed.sync_buffers(evaluated)
    if run.gradients is not None:
        columns.update(run.gradients.columns(distributed))
    if evaluate_now:
        columns.update(train_accuracy_columns(train_counts, run.ks, distributed))
    return columns


def epoch_done(run: FitRun, row: dict, on_epoch_end: Callable[[int, dict], None] | None) -> str | None:
    """The epoch's history ``row`` kept (best models considered), shown, written to TensorBoard and,
    when due, to the checkpoints, then given to ``on_epoch_end``; returns why training stops early
    (:func:`topk.training_steps.early_stop_reason`), else ``None``."""
    settings, state, epoch = run.settings, run.state, row["epoch"]
    state.add_epoch(row, run.evaluated)
    run.progress.epoch_done(row, state.best.epoch, state.best.value)
    if run.tensorboard is not None:
        run.tensorboard.write(row)
    stopped_early = early_stop_reason(state, settings.early_stopping_patience)
    if epoch % max(1, settings.checkpoint_every) == 0 or epoch == settings.epochs or stopped_early:
        run.checkpoints.save(state, run.tensorboard)
    if on_epoch_end is not None:
        on_epoch_end(epoch, row)
    return stopped_early


def evaluate_selected(model, best: BestModel, save: Callable[[BestModel], None], evaluate_all) -> dict:
    """``save`` ``best``, load it into ``model`` (the model ``evaluate_all`` evaluates) and evaluate
    it on every split (``evaluate_all``: :func:`evaluate_splits` with its arguments); returns
    :func:`evaluate_splits`'s result, whose losses must be finite (:func:`check_finite_metrics`)."""
    save(best)
    unwrap(model).load_state_dict(best.state)
    evaluations = evaluate_all()
    check_finite_metrics({split: split_metrics for split, (split_metrics, _) in evaluations.items()})
    return evaluations


def final_result(model, state: TrainingState, checkpoints: Checkpoints, evaluate_all, evaluated=None,
                 stopped_early: str | None = None) -> FitResult:
    """Select the models: the best by the selection metric and by each ``trainer.also_select_on``
    metric (the last one for ``last`` or when no epoch was evaluated); evaluate each extra one
    (written to its own file), then the selected one (written to ``best.pt``), which stays loaded
    in ``model``. ``evaluated`` is the model ``evaluate_all`` evaluates and selection keeps (the
    moving average of the weights with ``trainer.ema_decay``; ``model`` by default). S20 §V-A: "We
    evaluated the test accuracies of models both for early-stopping by top-1 validation accuracy
    and by top-5 validation accuracy": one run, a model for each."""
    evaluated = model if evaluated is None else evaluated
    for best in (state.best, *state.also_best):
        if best.metric == "last" or best.state is None:
            best.epoch, best.state = state.epoch, copy.deepcopy(unwrap(evaluated).state_dict())
    also_selected = {}
    for extra in state.also_best:
        evaluations = evaluate_selected(evaluated, extra, partial(checkpoints.save_best, metric=extra.metric),
                                        evaluate_all)
        also_selected[extra.metric] = {
            "best_epoch": extra.epoch,
            "metrics": {split: split_metrics for split, (split_metrics, _) in evaluations.items()},
            "per_class": {split: counts.per_class() for split, (_, counts) in evaluations.items()}}
    best = state.best
    evaluations = evaluate_selected(evaluated, best, checkpoints.save_best, evaluate_all)
    if unwrap(evaluated) is not unwrap(model):
        unwrap(model).load_state_dict(best.state)
    metrics = {split: split_metrics for split, (split_metrics, _) in evaluations.items()}
    seconds = [row["seconds"] for row in state.history if math.isfinite(row["seconds"])]
    return FitResult(
        best_epoch=best.epoch,
        selection_metric=best.metric,
        metrics=metrics,
        per_class={split: counts.per_class() for split, (_, counts) in evaluations.items()},
        samples={split: int(counts.totals.sum()) for split, (_, counts) in evaluations.items()},
        class_samples={split: counts.totals.tolist() for split, (_, counts) in evaluations.items()},
        epoch_seconds=statistics.median(seconds) if seconds else None,
        history=state.history,
        also_selected=also_selected,
        stopped_early=stopped_early,
    )
