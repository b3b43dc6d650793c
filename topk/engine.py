"""Fit and evaluate: one readable training loop, in the spirit of torchvision's reference script.

``fit`` trains for ``settings.epochs`` epochs, evaluates every split in ``eval_batches`` every
``settings.eval_every`` epochs, keeps the model that is best by ``settings.selection_metric``
(:class:`BestModel`), writes ``checkpoints/last.pt`` (resume) and ``checkpoints/best.pt``
(selected model) with ``history.csv`` (:class:`Checkpoints`), TensorBoard scalars, and finally
evaluates the selected model on every split (:func:`final_result`). Each metric of
``settings.also_select_on`` keeps a best model of its own (``checkpoints/best_val_top5.pt`` for
``val/top5``), evaluated at the end too: runs that would differ only in the selection metric
(S20 Table I's columns) are one training run.

Resuming (``settings.resume``) restores model, optimiser, schedule, gradient scaler, random-number
state, history and best model from ``last.pt``; the batches of epoch ``e`` depend only on
``(seed, e)``, so a resumed run ends exactly where an uninterrupted one does.

Ctrl-C and SIGTERM: :class:`StopRequests` is the one place where the two signals become a stop;
``fit`` takes a stop at the next batch boundary (with several processes, at the next of the checks
made every ``STOP_CHECK_EVERY`` batches) and raises :class:`RunInterrupted` with the epoch a resume
continues after.

Several processes (``distributed``, see :mod:`topk.distributed`): each trains the
DistributedDataParallel model on its share of every global batch; the loss, the stop requests and
the top-k and average-k counts are summed over processes (and the largest validation probabilities,
which set the average-k threshold, gathered), so every process takes the same decisions and reports
the same metrics; only rank 0 writes checkpoints, history and TensorBoard events.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import pickle
import signal
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from topk.data.augment import NoMix
from topk.distributed import SINGLE_PROCESS, Distributed
from topk.errors import CheckpointError, ConfigError, NonFiniteLossError, RunRefused
from topk.functional import topk_marginals
from topk.gradients import NonZeroGradients
from topk.metrics import AverageKAccumulator, TopKAccumulator, average_k_metrics, clip_ks
from topk.precision import MixedPrecision, unwrap
from topk.progress import BatchMeter, Progress
from topk.records import TensorBoardScalars, tensorboard_dir, write_atomically, write_history

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1


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


# --- Ctrl-C and SIGTERM ---------------------------------------------------------------------------

class RunInterrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C or SIGTERM; ``last.pt`` holds the epoch to resume from.

    A ``KeyboardInterrupt``, so that it stops a whole sweep as Ctrl-C does: Hydra's launchers let
    it through (they record an ordinary exception as a failed job and go on)."""

    def __init__(self, resume_epoch: int):
        super().__init__(resume_epoch)  # the only argument: pickled back as it was (joblib's workers)
        self.resume_epoch = resume_epoch

    def __str__(self) -> str:
        return f"interrupted; resume continues after epoch {self.resume_epoch}"


class StopRequests:
    """The process's one handler of SIGINT (Ctrl-C) and SIGTERM: the only place where a signal
    becomes a stop, a ``KeyboardInterrupt``.

    ``with stop_requests.installed():`` handles both signals for the block. ``train.py`` wraps the
    whole process in it, and each job of a sweep (a joblib worker is a process of its own);
    ``fit`` wraps its training in :meth:`deferred`, which installs the handler too when nobody
    has (a library call, a test). Blocks nest: the outermost installs the handler and puts the
    previous ones back at its end. Only the main thread can install handlers; in another thread
    (some launchers) Python's own Ctrl-C handling stays.

    Outside ``fit``'s training a signal raises ``KeyboardInterrupt`` at once: SIGTERM acts as
    Ctrl-C during set-up, in the final evaluation, and in a launcher waiting for its workers.
    Inside it (:meth:`deferred`) the first signal only sets :attr:`requested`, which ``fit`` takes
    at the next batch boundary: an exception raised from a signal handler can land anywhere,
    inside the TensorBoard writer or ``torch.save``, and leave them unable to close; a flag read
    between batches cannot. A second signal raises at once (for a loop stuck inside one batch),
    unless it comes within :attr:`REPEAT_SECONDS` of the first: the same stop delivered twice.

    In a submitit job it handles the scheduler's preemption signal too (:func:`preemption_signal`):
    the run stops the same way, then :meth:`requeue_if_preempted` hands the signal on to submitit.
    """

    signals = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = False
        self.preempted = False  # the stop came from the scheduler's preemption signal (submitit)
        self._deferring = False
        self._requested_at = 0.0
        self._depth = 0
        self._previous: dict = {}

    # A signal this close behind the first is the same stop delivered twice (SIGTERM to a process
    # group and a launcher forwarding it: SLURM, timeout), not a user insisting.
    REPEAT_SECONDS = 2.0

    def _handle(self, signum, frame) -> None:
        if signum == preemption_signal():
            self.preempted = True
        if self._deferring and not self.requested:
            self.requested, self._requested_at = True, time.monotonic()
            return
        if self._deferring and time.monotonic() - self._requested_at < self.REPEAT_SECONDS:
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self):
        if self._depth == 0 and threading.current_thread() is threading.main_thread():
            numbers = [*self.signals, *filter(None, [preemption_signal()])]
            self._previous = {number: signal.signal(number, self._handle) for number in numbers}
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                for number, handler in self._previous.items():
                    signal.signal(number, handler)
                self._previous = {}

    def requeue_if_preempted(self) -> None:
        """After a stop by the preemption signal: hand it to the handler it displaced, submitit's,
        which checkpoints the job (hydra-submitit-launcher's ``checkpoint``: the same job again),
        requeues it and exits. The requeued job resumes the run by itself (``train.train``)."""
        number = preemption_signal()
        handler = self._previous.get(number)
        if self.preempted and callable(handler):
            handler(number, None)

    @contextlib.contextmanager
    def deferred(self):
        """The block's first signal sets :attr:`requested` (cleared on entry) instead of raising."""
        with self.installed():
            self.requested, self._deferring = False, True
            try:
                yield self
            finally:
                self._deferring = False


stop_requests = StopRequests()


def preemption_signal() -> signal.Signals | None:
    """The signal by which a submitit job learns it is preempted or about to time out (SLURM sends
    it ``signal_delay_s`` before the time limit), when this process runs a submitit job: USR2, or
    what ``SUBMITIT_PREEMPT_SIGNAL`` names; else ``None``."""
    if "SUBMITIT_FOLDER" not in os.environ:
        return None
    return getattr(signal, f"SIG{os.environ.get('SUBMITIT_PREEMPT_SIGNAL', 'USR2')}", None)


# --- configuration checks -------------------------------------------------------------------------

def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; ``cpu``, ``cuda`` and ``cuda:N`` name one.
    Anything else (``gpu``, ``cuda:x``) is one sentence listing what is allowed."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"trainer.device={name} is not a device this framework trains on; choose "
                          "auto, cpu, cuda or cuda:N.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no CUDA device is visible; use auto or cpu.")
    return device


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


def check_fit_settings(settings: FitSettings, splits: list[str], ks: list[int], groups=()) -> None:
    check_selection_metric(settings.selection_metric, splits, ks, groups)
    for metric in settings.also_select_on:
        check_selection_metric(metric, splits, ks, groups, key="trainer.also_select_on")
    if settings.epochs < 1:
        raise ConfigError(f"trainer.epochs must be at least 1, got {settings.epochs}.")


# --- one epoch's training, evaluation -------------------------------------------------------------

# With several processes, the batches between two all-reduces of the stop flag (see stop_requested).
STOP_CHECK_EVERY = 10


def train_one_epoch(
    model, loss_fn, optimizer, batches, mix, accumulator, epoch: int, stop=None,
    precision: MixedPrecision | None = None, distributed: Distributed = SINGLE_PROCESS, scheduler=None,
    meter: BatchMeter | None = None, gradients: NonZeroGradients | None = None,
) -> float:
    """One pass over the training batches; returns the mean training loss.

    ``mix`` turns each batch's ``(inputs, labels)`` into the ``(inputs, target)`` the model and the
    loss see (:class:`topk.data.augment.Mixup`, or :class:`~topk.data.augment.NoMix`).
    ``accumulator`` (or ``None`` to skip) counts top-k hits of the training scores as they were
    when each batch was seen, before the update (this process's share; the caller sums them).
    ``stop`` (a :class:`StopRequests`) is asked after the batches whether a signal asked the run
    to stop (:func:`stop_requested`). ``precision`` autocasts the forward pass (``trainer.amp``);
    the loss then sees float32 scores. A ``scheduler`` whose class sets ``per_batch``
    (:mod:`topk.schedules`) is stepped after every batch; others are left to the epoch's end.
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
    step_schedule = scheduler.step if getattr(scheduler, "per_batch", False) else None
    for batch_index, (inputs, labels) in enumerate(batches):
        inputs, target = mix(inputs, labels)
        scores = forward(inputs)
        if gradients is not None:
            gradients.watch(scores)
        loss = loss_fn(scores, target)
        optimizer.zero_grad(set_to_none=True)
        precision.backward_and_step(loss, optimizer)
        if step_schedule is not None:
            step_schedule()
        loss_sum.add_(loss.detach(), alpha=labels.shape[0])  # in float64, on the device
        sample_count += labels.shape[0]
        if meter is not None:
            meter.update(batch_index, labels.shape[0], loss_sum, sample_count)
        if accumulator is not None:
            accumulator.update(scores, labels)
        if stop_requested(stop, batch_index, distributed, loss_sum.device):
            raise KeyboardInterrupt
    return epoch_loss(loss_sum, sample_count, epoch, distributed)


def stop_requested(stop, batch_index: int, distributed: Distributed, device: torch.device) -> bool:
    """Whether a signal asked the run to stop, asked after batch ``batch_index``.

    One process reads its own flag, a Python value, after every batch. Several must stop at the
    same batch (a process that stopped alone would leave the others waiting in an all-reduce),
    so they sum their flags, which on an accelerator makes the host wait for the device; they do
    it every :data:`STOP_CHECK_EVERY` batches (and ``fit`` at every epoch end), not every batch.
    """
    if stop is None:
        return False
    if not distributed.enabled:
        return stop.requested
    return (batch_index + 1) % STOP_CHECK_EVERY == 0 and distributed.any(stop.requested, device)


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


# --- best model, checkpoints ----------------------------------------------------------------------

def _is_better(value: float, best: float | None, metric: str) -> bool:
    if best is None:
        return True
    if metric.endswith("/loss"):
        return value < best
    return value > best


@dataclass
class BestModel:
    """The model that is best so far by ``metric`` (``<split>/<name>``: lowest for a loss, else
    highest; ``last`` selects none until the end), kept in memory until the next checkpoint."""

    metric: str
    epoch: int | None = None
    value: float | None = None
    state: dict | None = None
    unsaved: bool = False

    def consider(self, row: Mapping, model: torch.nn.Module) -> None:
        """Keep ``model`` if its history ``row`` beats the best so far."""
        value = row.get(self.metric)
        if self.metric == "last" or value is None or not _is_better(value, self.value, self.metric):
            return
        self.epoch, self.value, self.unsaved = row["epoch"], value, True
        self.state = copy.deepcopy(unwrap(model).state_dict())


@dataclass
class TrainingState:
    """What a resume restores besides the model, optimiser and schedule."""

    best: BestModel
    history: list[dict] = field(default_factory=list)  # one row per completed epoch
    epoch: int = 0  # the last completed epoch
    also_best: list[BestModel] = field(default_factory=list)  # trainer.also_select_on's, in order

    def add_epoch(self, row: dict, model: torch.nn.Module) -> None:
        self.history.append(row)
        self.epoch = row["epoch"]
        for best in (self.best, *self.also_best):
            best.consider(row, model)


def extra_metrics(settings: FitSettings) -> list[str]:
    """``settings.also_select_on`` without repeats and without the selection metric itself
    (whose model is ``best.pt`` already)."""
    return [metric for metric in dict.fromkeys(settings.also_select_on) if metric != settings.selection_metric]


def best_file_name(metric: str) -> str:
    """The checkpoint of the best model by an extra selection metric: ``val/top5`` ->
    ``best_val_top5.pt`` (``best.pt`` is the selection metric's)."""
    return f"best_{metric.replace('/', '_')}.pt"


def _atomic_save(obj, path: Path) -> None:
    write_atomically(path, partial(torch.save, obj))


def load_checkpoint(path: Path) -> dict:
    """Read a checkpoint written by :func:`fit`, with a clear error if it is unusable.

    Loaded with ``weights_only=True``: a checkpoint holds tensors and plain data only (numbers,
    strings, lists, dicts, the schedule's ``Counter``), so one from someone else's run directory
    cannot run code when resumed; a file that pickles anything else is refused."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "allowed global" not in str(error):  # not a pickle at all: as any unreadable file
            raise CheckpointError(f"checkpoint {path} cannot be read (UnpicklingError); delete it "
                                  "to train from scratch, or resume from another run directory.") from error
        raise CheckpointError(
            f"checkpoint {path} holds Python objects other than tensors and plain data, which are "
            "not loaded because unpickling them could run code; resume only from checkpoints "
            "written by topk, or delete it to train from scratch."
        ) from error
    except Exception as error:  # torch raises several types for a truncated or foreign file
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(error).__name__}); delete it to train "
            "from scratch, or resume from another run directory."
        ) from error
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"checkpoint {path} was not written by this version of topk; delete it to train "
            "from scratch."
        )
    return checkpoint


def rng_state() -> dict:
    return {
        "cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def restore_rng(checkpoint: dict, distributed: Distributed) -> None:
    """Each process's own random-number state (the noised losses' noise, Mixup, in-memory
    augmentation), so that processes stay independent after a resume. A checkpoint written by
    another number of processes gives rank 0's state to all, then a draw offset by the rank."""
    states = checkpoint.get("rank_rng")
    same_processes = states is not None and len(states) == distributed.world_size
    state = states[distributed.rank] if same_processes else {"cpu": checkpoint["rng"], "cuda": checkpoint.get("cuda_rng")}
    torch.set_rng_state(state["cpu"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if distributed.enabled and not same_processes:
        log.warning("checkpoint written by another number of processes: random states restart from rank 0's")
        torch.manual_seed(int(torch.randint(2**62, ())) + distributed.rank)


def check_resume_epochs(run_dir: Path, checkpoint_epoch: int, epochs: int) -> None:
    """Refuse, in one sentence, to resume a run whose checkpoint is past ``epochs``: the run would
    "complete" with fewer epochs than it trained."""
    if checkpoint_epoch > epochs:
        raise RunRefused(
            f"cannot resume {run_dir} with trainer.epochs={epochs}: its checkpoint is already at "
            f"epoch {checkpoint_epoch}; resume with trainer.epochs={checkpoint_epoch} or more, or "
            "start a new run in another directory."
        )


def _unusable(error: CheckpointError) -> str:
    """Why :func:`load_checkpoint` refused a file, in a few words."""
    cause = error.__cause__
    if isinstance(cause, pickle.UnpicklingError) and "allowed global" in str(cause):
        return "holds Python objects other than tensors and plain data (not loaded: unpickling them could run code)"
    return f"cannot be read ({type(cause).__name__})" if cause is not None else "was not written by this version of topk"


def selected_weights(path: Path, checkpoint: dict, note: Callable[..., None] = log.warning,
                     metric: str | None = None) -> dict | None:
    """The weights of the epoch selected so far (``checkpoint["best_epoch"]``, ``None`` before
    any): ``best.pt``'s (``path``). When ``best.pt`` is missing or unusable they are ``last.pt``'s
    own if the selected epoch is the checkpoint's (``note`` says so); if it is an earlier epoch
    no file holds them any more, and resuming is refused: a later epoch must not stand in for
    the one the selection metric chose. With ``metric`` (one of ``trainer.also_select_on``), the
    same for that metric's best model (its epoch in ``checkpoint["also_best"]``, its file ``path``)."""
    epoch = checkpoint.get("epoch")
    best_epoch = (checkpoint.get("best_epoch") if metric is None
                  else checkpoint.get("also_best", {}).get(metric, {}).get("epoch"))
    if best_epoch is None:
        return None
    problem = "is missing"
    if path.exists():
        try:
            return load_checkpoint(path)["model"]
        except CheckpointError as error:
            problem = _unusable(error)
    if best_epoch == epoch:
        note("%s %s: the selected epoch %d is the checkpoint's own, whose weights in %s are used",
             path, problem, epoch, path.with_name("last.pt"))
        return checkpoint["model"]
    deleting = "" if problem == "is missing" else " (deleting it does not make the run resumable)"
    raise CheckpointError(
        f"cannot resume {path.parent.parent}: {path}, the weights of epoch {best_epoch} that "
        f"{metric or 'the selection metric'} chose, {problem}, and no other file holds them; put "
        f"back a good copy of {path.name}, or start a new run in another directory{deleting}."
    )


class Checkpoints:
    """A run's ``checkpoints/last.pt`` (what a resume needs, and the run's flat ``config``, which
    :mod:`topk.run_dir` compares with a resume's), ``checkpoints/best.pt`` (the selected model),
    ``checkpoints/best_<split>_<metric>.pt`` (the best model by each ``trainer.also_select_on``
    metric, :func:`best_file_name`) and ``history.csv``. Every process calls :meth:`save` (the
    random states of all are gathered); only rank 0 writes."""

    def __init__(self, run_dir: Path, model, optimizer, scheduler, precision: MixedPrecision,
                 distributed: Distributed = SINGLE_PROCESS, config: dict | None = None):
        self.run_dir, directory = Path(run_dir), Path(run_dir) / "checkpoints"
        self.last, self.best = directory / "last.pt", directory / "best.pt"
        self.model, self.optimizer, self.scheduler, self.precision = model, optimizer, scheduler, precision
        self.distributed, self.config = distributed, config
        self.saved_epoch = 0  # the epoch last.pt holds
        if distributed.is_main:
            directory.mkdir(parents=True, exist_ok=True)

    def restore(self, state: TrainingState) -> TrainingState:
        """The state ``last.pt`` holds, with model, optimiser, schedule, gradient scaler and
        random state restored from it; ``state`` (a fresh one) when there is no ``last.pt``."""
        if not self.last.exists():
            log.info("trainer.resume=true but %s does not exist: training from scratch", self.last)
            return state
        checkpoint = load_checkpoint(self.last)
        unwrap(self.model).load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.precision.load_state_dict(checkpoint.get("grad_scaler", {}))
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        restore_rng(checkpoint, self.distributed)
        best_state = selected_weights(self.best, checkpoint)
        best = BestModel(state.best.metric, checkpoint["best_epoch"], checkpoint["best_value"], best_state)
        also_best = [self.restored_best(extra.metric, checkpoint) for extra in state.also_best]
        self.saved_epoch = checkpoint["epoch"]
        log.info("resumed from %s after epoch %d", self.last, self.saved_epoch)
        return TrainingState(best, checkpoint["history"], checkpoint["epoch"], also_best)

    def restored_best(self, metric: str, checkpoint: dict) -> BestModel:
        """The best model by the extra selection metric ``metric`` as ``last.pt`` remembers it."""
        remembered = checkpoint.get("also_best", {}).get(metric, {})
        weights = selected_weights(self.path(metric), checkpoint, metric=metric)
        return BestModel(metric, remembered.get("epoch"), remembered.get("value"), weights)

    def path(self, metric: str | None) -> Path:
        """``best.pt`` for the selection metric (``None``), else ``metric``'s own file."""
        return self.best if metric is None else self.best.with_name(best_file_name(metric))

    def save(self, state: TrainingState, tensorboard=None) -> None:
        """Write ``last.pt`` and ``history.csv`` (and ``best.pt`` when a better model came since
        the last save), and flush ``tensorboard`` with them; nothing when ``last.pt`` already
        holds ``state``'s epoch."""
        if state.epoch == self.saved_epoch:
            return
        rng = rng_state()
        rank_rng = self.distributed.gather(rng) if self.distributed.enabled else None  # in every process
        if self.distributed.is_main:
            if state.best.unsaved:
                self.save_best(state.best)
            for extra in state.also_best:
                if extra.unsaved:
                    self.save_best(extra, extra.metric)
            _atomic_save({
                "format": CHECKPOINT_FORMAT, "epoch": state.epoch, "model": unwrap(self.model).state_dict(),
                "grad_scaler": self.precision.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "rng": rng["cpu"], "cuda_rng": rng["cuda"],
                "rank_rng": rank_rng, "history": state.history, "best_epoch": state.best.epoch,
                "best_value": state.best.value, "config": self.config,
                "also_best": {extra.metric: {"epoch": extra.epoch, "value": extra.value} for extra in state.also_best},
            }, self.last)
            write_history(self.run_dir, state.history)
        if tensorboard is not None:
            tensorboard.flush()
        for best in (state.best, *state.also_best):
            best.unsaved = False
        self.saved_epoch = state.epoch

    def save_best(self, best: BestModel, metric: str | None = None) -> None:
        """Write ``best``'s weights to ``best.pt``, or to the file of the extra selection
        ``metric``."""
        if self.distributed.is_main:
            _atomic_save({"format": CHECKPOINT_FORMAT, "epoch": best.epoch, "model": best.state}, self.path(metric))


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
    process's shares; ``run_dir`` is the same directory in every process.
    """
    ks, groups = clip_ks(settings.ks, num_classes), settings.class_groups or {}
    mix = NoMix() if mix is None else mix
    check_fit_settings(settings, list(eval_batches), ks, list(groups))
    device = next(unwrap(model).parameters()).device
    precision = MixedPrecision(settings.amp, device)
    # Evaluation runs in each process on its own share, outside DDP (whose forward pass may
    # synchronise buffers across processes that evaluate different numbers of batches).
    eval_model = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    evaluate_all = partial(evaluate_splits, eval_model, loss_fn, eval_batches, ks, num_classes, groups,
                           precision, distributed, settings.eval_scores)
    checkpoints = Checkpoints(run_dir, model, optimizer, scheduler, precision, distributed, settings.config)
    state = TrainingState(BestModel(settings.selection_metric),
                          also_best=[BestModel(metric) for metric in extra_metrics(settings)])
    state = checkpoints.restore(state) if settings.resume else state
    check_resume_epochs(run_dir, state.epoch, settings.epochs)
    tensorboard = open_tensorboard(run_dir, settings, distributed, state.epoch)
    progress = run_progress(settings, state.epoch, distributed)
    gradients = NonZeroGradients(device) if settings.grad_nonzero else None
    try:
        with stop_requests.deferred() as stop:
            for epoch in progress:
                started, lr = time.perf_counter(), optimizer.param_groups[0]["lr"]
                evaluate_now = epoch % max(1, settings.eval_every) == 0 or epoch == settings.epochs
                train_batches.set_epoch(epoch)
                train_counts = TopKAccumulator(ks, num_classes, device) if evaluate_now else None
                meter = progress.batches(epoch, len(train_batches))
                train_loss = train_one_epoch(model, loss_fn, optimizer, train_batches, mix, train_counts,
                                             epoch, stop, precision, distributed, scheduler, meter,
                                             gradients)
                progress.close_batches()
                if not getattr(scheduler, "per_batch", False):
                    scheduler.step()
                check_finite_weights(model, epoch)
                distributed.sync_buffers(eval_model)
                row = {"epoch": epoch, "lr": lr, "train/loss": train_loss}
                if gradients is not None:
                    row.update(gradients.columns(distributed))
                if evaluate_now:
                    row.update(train_accuracy_columns(train_counts, ks, distributed))
                    row.update(metric_columns(evaluate_all()))
                row["seconds"] = time.perf_counter() - started
                state.add_epoch(row, model)
                progress.epoch_done(row, state.best.epoch, state.best.value)
                if tensorboard is not None:
                    tensorboard.write(row)
                if epoch % max(1, settings.checkpoint_every) == 0 or epoch == settings.epochs:
                    checkpoints.save(state, tensorboard)
                if on_epoch_end is not None:
                    on_epoch_end(epoch, row)
                if distributed.any(stop.requested, device):  # between epochs: this one is kept
                    checkpoints.save(state, tensorboard)
                    raise KeyboardInterrupt
        return final_result(model, state, checkpoints, evaluate_all)
    except KeyboardInterrupt:  # inside an epoch the model is half-updated: last.pt stays the resume point
        raise RunInterrupted(checkpoints.saved_epoch) from None
    finally:
        progress.close()
        if tensorboard is not None:
            tensorboard.close()


def evaluate_selected(model, best: BestModel, save: Callable[[BestModel], None], evaluate_all) -> dict:
    """``save`` ``best``, load it into ``model`` and evaluate it on every split (``evaluate_all``:
    :func:`evaluate_splits` with its arguments); returns :func:`evaluate_splits`'s result, whose
    losses must be finite (:func:`check_finite_metrics`)."""
    save(best)
    unwrap(model).load_state_dict(best.state)
    evaluations = evaluate_all()
    check_finite_metrics({split: split_metrics for split, (split_metrics, _) in evaluations.items()})
    return evaluations


def final_result(model, state: TrainingState, checkpoints: Checkpoints, evaluate_all) -> FitResult:
    """Select the models: the best by the selection metric and by each ``trainer.also_select_on``
    metric (the last one for ``last`` or when no epoch was evaluated); evaluate each extra one
    (written to its own file), then the selected one (written to ``best.pt``), which stays loaded
    in ``model``. S20 §V-A: "We evaluated the test accuracies of models both for early-stopping
    by top-1 validation accuracy and by top-5 validation accuracy": one run, a model for each."""
    for best in (state.best, *state.also_best):
        if best.metric == "last" or best.state is None:
            best.epoch, best.state = state.epoch, copy.deepcopy(unwrap(model).state_dict())
    also_selected = {}
    for extra in state.also_best:
        evaluations = evaluate_selected(model, extra, partial(checkpoints.save_best, metric=extra.metric),
                                        evaluate_all)
        also_selected[extra.metric] = {
            "best_epoch": extra.epoch,
            "metrics": {split: split_metrics for split, (split_metrics, _) in evaluations.items()},
            "per_class": {split: counts.per_class() for split, (_, counts) in evaluations.items()}}
    best = state.best
    evaluations = evaluate_selected(model, best, checkpoints.save_best, evaluate_all)
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
    )
