"""Fit and evaluate: one readable training loop.

``fit`` trains for ``settings.epochs`` epochs, evaluates every split in ``eval_batches`` after
each epoch, keeps the model that is best by ``settings.selection_metric``, writes
``checkpoints/last.pt`` (resume) and ``checkpoints/best.pt`` (selected model), ``history.csv`` and
TensorBoard scalars, and finally evaluates the selected model on every split.

Resuming (``settings.resume``) restores model, optimiser, schedule, random-number state, history
and best model from ``last.pt``; the batches of epoch ``e`` depend only on ``(seed, e)``, so a
resumed run ends exactly where an uninterrupted one does.

Several processes (``distributed``, see :mod:`topk.distributed`): each trains the
DistributedDataParallel model on its share of every global batch; the loss, the stop requests and
the top-k counts are summed over processes, so every process takes the same decisions and reports
the same metrics; only rank 0 writes checkpoints, history and TensorBoard events.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from topk.data.augment import NoAugment
from topk.distributed import SINGLE_PROCESS, Distributed
from topk.errors import CheckpointError, ConfigError, NonFiniteLossError
from topk.functional import topk_marginals
from topk.metrics import TopKAccumulator, clip_ks
from topk.precision import MixedPrecision, unwrap
from topk.records import TensorBoardScalars, write_history

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1


@dataclass
class FitSettings:
    """Trainer settings, plain values (``trainer.*`` in the config)."""

    epochs: int
    ks: list[int] = field(default_factory=lambda: [1, 2, 3, 5, 10])
    selection_metric: str = "last"
    eval_every: int = 1
    checkpoint_every: int = 1
    resume: bool = False
    progress: bool = True
    tensorboard: bool = True
    description: str = "train"
    class_groups: dict[str, list[int]] | None = None  # e.g. many/medium/few-shot classes
    amp: str = "off"  # off | bf16 | fp16: autocast of the forward pass (losses stay float32)
    config: dict | None = None  # the flat resolved run config, remembered by checkpoints/last.pt


@dataclass
class FitResult:
    best_epoch: int
    selection_metric: str
    metrics: dict[str, dict[str, float]]  # split -> metric -> value, for the selected model
    per_class: dict[str, dict[int, list]]  # split -> k -> per-class accuracy
    samples: dict[str, int]  # split -> number of samples evaluated (over all processes)
    epoch_seconds: float | None
    history: list[dict]


class RunInterrupted(Exception):
    """Training stopped by Ctrl-C or SIGTERM; ``last.pt`` holds the epoch to resume from."""

    def __init__(self, resume_epoch: int):
        super().__init__(f"interrupted; resume continues after epoch {resume_epoch}")
        self.resume_epoch = resume_epoch


class StopRequests:
    """Turns SIGTERM and Ctrl-C into a stop that the loop takes at the next batch boundary.

    An exception raised from a signal handler can land anywhere, including inside the
    TensorBoard writer's queue or ``torch.save``, and leave them unable to close; a flag checked
    between batches cannot. A second signal stops at once (for a loop stuck inside one batch).
    Outside the main thread (some launchers) no handler can be installed and Ctrl-C behaves as
    Python's default.
    """

    signals = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = False
        self._previous = {}

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def raise_if_requested(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for number in self.signals:
                self._previous[number] = signal.signal(number, self._handle)

    def restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no CUDA device is visible; use auto or cpu.")
    return torch.device(name)


def metric_names(ks: list[int], groups=()) -> list[str]:
    names = ["loss"] + [f"top{k}" for k in ks] + [f"macro_top{k}" for k in ks]
    return names + [f"{group}_top{k}" for group in groups for k in ks]


def check_selection_metric(metric: str, splits: list[str], ks: list[int], groups=()) -> None:
    """Raise unless ``metric`` is ``last`` or ``<split>/<name>`` of an evaluated split."""
    if metric == "last":
        return
    split, _, name = metric.partition("/")
    names = metric_names(ks, groups)
    valid = ["last"] + [f"{s}/{m}" for s in splits for m in names]
    if split not in splits or name not in names:
        raise ConfigError(
            f"trainer.selection_metric={metric!r} is not available in this run; "
            f"choose one of {', '.join(valid[:8])}{', ...' if len(valid) > 8 else ''}."
        )


def _global_step_loss(loss: torch.Tensor, count: int, stop, distributed: Distributed):
    """The batch's mean loss over all processes, their sample count, and whether any process was
    asked to stop, from one all-reduce of three numbers."""
    requested = float(stop is not None and stop.requested)
    numbers = torch.stack([loss.detach().double() * count, loss.new_tensor(count, dtype=torch.float64),
                           loss.new_tensor(requested, dtype=torch.float64)])
    loss_sum, total, stops = distributed.sum_(numbers).tolist()
    return loss_sum / total, int(total), stops > 0


def gradient_clearer(optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    """A function doing what ``optimizer.zero_grad(set_to_none=True)`` does: every optimised
    parameter's ``.grad`` set to ``None``.

    torch's ``Optimizer.zero_grad`` runs the same loop inside a TorchDynamo guard and a profiler
    record, which cost about 12 µs per call in ``make bench-train``'s circles loop: 0.34 ms of a
    5.1 ms epoch of 29 batches. An optimiser class with a ``zero_grad`` of its own keeps it.
    """
    if type(optimizer).zero_grad is not torch.optim.Optimizer.zero_grad:
        return lambda: optimizer.zero_grad(set_to_none=True)
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]

    def clear_gradients() -> None:
        for parameter in parameters:
            parameter.grad = None

    return clear_gradients


def train_one_epoch(
    model, loss_fn, optimizer, batches, augment, accumulator, epoch: int, stop=None,
    precision: MixedPrecision | None = None, distributed: Distributed = SINGLE_PROCESS,
) -> float:
    """One pass over the training batches; returns the mean training loss.

    ``accumulator`` (or ``None`` to skip) counts top-k hits of the training scores as they were
    when each batch was seen, before the update (this process's share; the caller sums them).
    ``stop`` (a :class:`StopRequests`) is asked at every batch whether a signal asked the run to
    stop (in every process at once when there are several). ``precision`` autocasts the forward
    pass (``trainer.amp``); the loss then sees float32 scores.

    The loop makes no call it does not need: on the circles MLP's 0.17 ms steps, one more call
    per step shows (measured with epochs alternating: ``len(labels)``, a Python-level method of
    tensors, cost 1% of the epoch; keeping every step's ``loss.detach()`` for one read per epoch
    cost 2% more than reading ``loss.item()`` at every step).
    ``make bench-train`` compares the engine with a bare loop.
    """
    precision = precision or MixedPrecision()
    forward = precision.forward(model)
    clear_gradients = gradient_clearer(optimizer)
    several_processes = distributed.enabled
    model.train()
    loss_sum, sample_count = 0.0, 0
    for batch_index, (inputs, labels) in enumerate(batches):
        inputs, target = augment(inputs, labels)
        scores = forward(inputs)
        loss = loss_fn(scores, target)
        # One scalar read per step (as torchvision's reference loop logs it), checked before the
        # update; with several processes it is their global batch's loss, so that all of them
        # stop alike (a process that raised alone would leave the others waiting).
        if several_processes:
            loss_value, count, stop_everywhere = _global_step_loss(loss, labels.shape[0], stop, distributed)
        else:
            loss_value, count, stop_everywhere = loss.item(), labels.shape[0], False
        if not math.isfinite(loss_value):
            raise NonFiniteLossError(
                f"the training loss became {loss_value} at epoch {epoch}, batch {batch_index}; "
                "lower optim.lr or check the data and the loss parameters."
            )
        if stop_everywhere:
            raise KeyboardInterrupt
        clear_gradients()
        precision.backward_and_step(loss, optimizer)
        loss_sum += loss_value * count
        sample_count += count
        if accumulator is not None:
            accumulator.update(scores, labels)
        if stop is not None and not several_processes:
            stop.raise_if_requested()
    return loss_sum / max(sample_count, 1)


def multi_crop_scores(model, inputs: torch.Tensor, marginal_k: int):
    """Scores of images given as several crops ``[B, crops, C, H, W]`` (B18 §5.2, Appendix C).

    Returns the ranking scores, the log of each label's top-``marginal_k`` marginal probability
    averaged over the crops (:func:`topk.functional.topk_marginals`), and the crops' mean logits,
    on which the evaluation loss is computed.
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
) -> tuple[dict[str, float], TopKAccumulator]:
    """Loss and top-k accuracies of ``model`` over ``batches`` (labels are hard).

    Batches of multi-crop images (``batches.marginal_k`` set) are scored by
    :func:`multi_crop_scores`; ``class_groups`` adds ``{group}_top{k}`` accuracies; scores are
    autocast as in training and taken in float32. With several processes each evaluates its
    share of the split and the counts and loss sums are added up over processes (exact).
    """
    precision = precision or MixedPrecision()
    model.eval()
    marginal_k = getattr(batches, "marginal_k", None)
    device = next(model.parameters()).device
    accumulator = TopKAccumulator(ks, num_classes, device)
    total_loss, total_count = 0.0, 0
    for inputs, labels in batches:
        with precision.autocast():
            if marginal_k is not None and inputs.dim() == 5:
                scores, logits = multi_crop_scores(model, inputs, marginal_k)
            else:
                scores = logits = model(inputs)
        scores, logits = scores.float(), logits.float()
        accumulator.update(scores, labels)
        total_loss += float(loss_fn(logits, labels)) * len(labels)
        total_count += len(labels)
    if distributed.enabled:
        sums = distributed.sum_(torch.tensor([total_loss, total_count], dtype=torch.float64, device=device))
        total_loss, total_count = sums.tolist()
        sum_counts(accumulator, distributed)
    metrics = {"loss": total_loss / max(total_count, 1)}
    metrics.update(accumulator.compute(class_groups))
    return metrics, accumulator


def sum_counts(accumulator: TopKAccumulator, distributed: Distributed) -> None:
    """Add up every process's top-k hits and sample counts (integers: exact)."""
    distributed.sum_(accumulator.hits)
    distributed.sum_(accumulator.totals)


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict:
    """Read a checkpoint written by :func:`fit`, with a clear error if it is unusable."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
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


def _rng_state() -> dict:
    return {
        "cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _restore_rng(checkpoint: dict, distributed: Distributed) -> None:
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


def check_finite_weights(model: torch.nn.Module, epoch: int) -> None:
    """Raise :class:`NonFiniteLossError` if any weight is NaN or infinite (one read per epoch: a
    training loss can stay finite while an update sends the weights to infinity)."""
    finite = torch.stack([parameter.detach().isfinite().all() for parameter in model.parameters()])
    if not bool(finite.all()):
        raise NonFiniteLossError(
            f"the model's weights became NaN or infinite in epoch {epoch}; lower optim.lr or "
            "check the data and the loss parameters."
        )


def check_finite_metrics(metrics: Mapping[str, Mapping[str, float]]) -> None:
    """Raise :class:`NonFiniteLossError` if the selected model's loss on a split is not finite."""
    for split, values in metrics.items():
        if not math.isfinite(values["loss"]):
            raise NonFiniteLossError(
                f"the selected model's {split} loss is {values['loss']}; lower optim.lr or check "
                "the data and the loss parameters."
            )


def _is_better(value: float, best: float | None, metric: str) -> bool:
    if best is None:
        return True
    if metric.endswith("/loss"):
        return value < best
    return value > best


def fit(
    model: torch.nn.Module,
    loss_fn: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    train_batches,
    eval_batches: Mapping[str, object],
    num_classes: int,
    run_dir: Path,
    settings: FitSettings,
    augment: Callable = NoAugment(),
    on_epoch_end: Callable[[int, dict], None] | None = None,
    distributed: Distributed = SINGLE_PROCESS,
) -> FitResult:
    """Train ``model`` and return the selected epoch's metrics on every evaluated split.

    ``eval_batches`` maps a split name (``val``, ``test``) to its batches. ``on_epoch_end`` is
    called with ``(epoch, history_row)`` after each epoch's record is written. With several
    processes (``distributed``), ``model`` is the DistributedDataParallel wrapper and the batches
    are this process's shares; ``run_dir`` is the same directory in every process.
    """
    run_dir = Path(run_dir)
    checkpoint_dir = run_dir / "checkpoints"
    if distributed.is_main:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
    # Evaluation runs in each process on its own share, outside DDP (whose forward pass may
    # synchronise buffers across processes that evaluate different numbers of batches).
    eval_model = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    ks = clip_ks(settings.ks, num_classes)
    groups = settings.class_groups or {}
    check_selection_metric(settings.selection_metric, list(eval_batches), ks, list(groups))
    if settings.epochs < 1:
        raise ConfigError(f"trainer.epochs must be at least 1, got {settings.epochs}.")
    eval_every = max(1, settings.eval_every)
    device = next(unwrap(model).parameters()).device
    precision = MixedPrecision(settings.amp, device)

    history: list[dict] = []
    start_epoch = 0
    best_epoch, best_value, best_state = None, None, None
    last_path, best_path = checkpoint_dir / "last.pt", checkpoint_dir / "best.pt"
    if settings.resume and last_path.exists():
        checkpoint = load_checkpoint(last_path)
        unwrap(model).load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        precision.load_state_dict(checkpoint.get("grad_scaler", {}))
        scheduler.load_state_dict(checkpoint["scheduler"])
        _restore_rng(checkpoint, distributed)
        history = checkpoint["history"]
        start_epoch = checkpoint["epoch"]
        best_epoch, best_value = checkpoint["best_epoch"], checkpoint["best_value"]
        if best_path.exists():
            best_state = load_checkpoint(best_path)["model"]
        log.info("resumed from %s after epoch %d", last_path, start_epoch)
    elif settings.resume:
        log.info("trainer.resume=true but %s does not exist: training from scratch", last_path)

    tensorboard = None
    if settings.tensorboard and distributed.is_main:
        tensorboard = TensorBoardScalars(run_dir / "tb", purge_step=start_epoch + 1 if start_epoch else None)

    def save_checkpoints(completed_epoch: int, best_changed: bool) -> None:
        rng = _rng_state()
        rank_rng = distributed.gather(rng) if distributed.enabled else None  # in every process
        if not distributed.is_main:
            return
        if best_changed and best_state is not None:
            _atomic_save({"format": CHECKPOINT_FORMAT, "epoch": best_epoch, "model": best_state}, best_path)
        _atomic_save(
            {
                "format": CHECKPOINT_FORMAT,
                "epoch": completed_epoch,
                "model": unwrap(model).state_dict(),
                "grad_scaler": precision.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rng["cpu"],
                "cuda_rng": rng["cuda"],
                "rank_rng": rank_rng,
                "history": history,
                "best_epoch": best_epoch,
                "best_value": best_value,
                "config": settings.config,
            },
            last_path,
        )
        write_history(run_dir, history)
        if tensorboard is not None:
            tensorboard.flush()

    completed_epoch = start_epoch
    saved_epoch = start_epoch
    best_unsaved = False
    in_epoch = False
    progress = tqdm(
        range(start_epoch + 1, settings.epochs + 1),
        initial=start_epoch,
        total=settings.epochs,
        desc=settings.description,
        disable=not settings.progress or not distributed.is_main,
        unit="epoch",
        dynamic_ncols=True,
    )
    stop = StopRequests()
    try:
        stop.install()
        for epoch in progress:
            in_epoch = True
            started = time.perf_counter()
            lr = optimizer.param_groups[0]["lr"]
            evaluate_now = epoch % eval_every == 0 or epoch == settings.epochs
            train_batches.set_epoch(epoch)
            train_accumulator = TopKAccumulator(ks, num_classes, device) if evaluate_now else None
            train_loss = train_one_epoch(
                model, loss_fn, optimizer, train_batches, augment, train_accumulator, epoch, stop,
                precision, distributed,
            )
            scheduler.step()
            check_finite_weights(model, epoch)
            distributed.sync_buffers(eval_model)
            row = {"epoch": epoch, "lr": lr, "train/loss": train_loss}
            if evaluate_now:
                sum_counts(train_accumulator, distributed)
                train_metrics = train_accumulator.compute()
                row.update({f"train/top{k}": train_metrics[f"top{k}"] for k in ks})
                for split, batches in eval_batches.items():
                    metrics, _ = evaluate(
                        eval_model, loss_fn, batches, ks, num_classes, groups, precision, distributed
                    )
                    row.update({f"{split}/{name}": value for name, value in metrics.items()})
            row["seconds"] = time.perf_counter() - started
            in_epoch = False
            completed_epoch = epoch
            history.append(row)

            metric = settings.selection_metric
            value = row.get(metric)
            if metric != "last" and value is not None and _is_better(value, best_value, metric):
                best_epoch, best_value = epoch, value
                best_state = copy.deepcopy(unwrap(model).state_dict())
                best_unsaved = True
            if tensorboard is not None:
                tensorboard.write(epoch, row)
            if epoch % max(1, settings.checkpoint_every) == 0 or epoch == settings.epochs:
                save_checkpoints(epoch, best_unsaved)
                saved_epoch, best_unsaved = epoch, False
            if settings.progress and evaluate_now:
                progress.set_postfix({"loss": f"{train_loss:.4f}"}, refresh=False)
            if on_epoch_end is not None:
                on_epoch_end(epoch, row)
            if distributed.any(stop.requested, device):
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        # Between epochs the model is consistent with ``completed_epoch``: save it. Inside an
        # epoch it is half-updated, so the last checkpoint on disk stays the resume point.
        if not in_epoch and completed_epoch > saved_epoch:
            save_checkpoints(completed_epoch, best_unsaved)
            saved_epoch = completed_epoch
        raise RunInterrupted(saved_epoch) from None
    finally:
        stop.restore()
        progress.close()
        if tensorboard is not None:
            tensorboard.close()

    if settings.selection_metric == "last" or best_state is None:
        # ``last`` keeps the final epoch; without any evaluated epoch there is nothing to select.
        best_epoch, best_state = completed_epoch, copy.deepcopy(unwrap(model).state_dict())
    if distributed.is_main:
        _atomic_save({"format": CHECKPOINT_FORMAT, "epoch": best_epoch, "model": best_state}, best_path)
    unwrap(model).load_state_dict(best_state)
    final_metrics, per_class, samples = {}, {}, {}
    for split, batches in eval_batches.items():
        metrics, accumulator = evaluate(
            eval_model, loss_fn, batches, ks, num_classes, groups, precision, distributed
        )
        final_metrics[split] = metrics
        per_class[split] = accumulator.per_class()
        samples[split] = int(accumulator.totals.sum())
    check_finite_metrics(final_metrics)
    seconds = [row["seconds"] for row in history if math.isfinite(row["seconds"])]
    return FitResult(
        best_epoch=best_epoch,
        selection_metric=settings.selection_metric,
        metrics=final_metrics,
        per_class=per_class,
        samples=samples,
        epoch_seconds=statistics.median(seconds) if seconds else None,
        history=history,
    )
