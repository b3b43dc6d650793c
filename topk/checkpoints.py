"""Checkpoints: the files a run keeps of its training, and what a resume reads back from them.

- ``checkpoints/last.pt`` (:class:`Checkpoints`): what a resume needs (model, optimiser,
  schedule, gradient scaler, the moving average of the weights with ``trainer.ema_decay``,
  every process's random-number state, :func:`rng_state`,
  :func:`restore_rng`, history, best epochs) and the run's flat ``config``, which
  :mod:`topk.run_dir` compares with a resume's; format :data:`CHECKPOINT_FORMAT`, read only with
  ``weights_only=True`` (:func:`load_checkpoint`).
- ``checkpoints/best.pt`` and ``checkpoints/best_<split>_<metric>.pt`` (:func:`best_file_name`):
  the model selected by ``trainer.selection_metric`` and by each ``trainer.also_select_on``
  metric, kept in memory between checkpoints as a :class:`BestModel`; :func:`selected_weights`
  recovers them on resume, or refuses when no file holds them any more.
- :class:`TrainingState`, what a resume restores besides the model, optimiser and schedule, and
  :func:`check_resume_epochs`, the refusal to resume past ``trainer.epochs``.

Every file is written whole or not at all (:func:`topk.records.write_atomically`), by rank 0
alone. :func:`topk.engine.fit` drives them; :mod:`topk.run_dir` reads them without the engine.
Which model is finally selected and evaluated stays in the engine
(:func:`topk.engine.final_result`).
"""

from __future__ import annotations

import copy
import logging
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from topk.distributed import SINGLE_PROCESS, Distributed
from topk.errors import CheckpointError, RunRefused
from topk.precision import MixedPrecision, unwrap
from topk.records import write_atomically, write_history

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1


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


def best_file_name(metric: str) -> str:
    """The checkpoint of the best model by an extra selection metric: ``val/top5`` ->
    ``best_val_top5.pt`` (``best.pt`` is the selection metric's)."""
    return f"best_{metric.replace('/', '_')}.pt"


def _atomic_save(obj, path: Path) -> None:
    write_atomically(path, partial(torch.save, obj))


def load_checkpoint(path: Path) -> dict:
    """Read a checkpoint written by :func:`topk.engine.fit`, with a clear error if it is unusable.

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
                 distributed: Distributed = SINGLE_PROCESS, config: dict | None = None, ema=None):
        self.run_dir, directory = Path(run_dir), Path(run_dir) / "checkpoints"
        self.last, self.best = directory / "last.pt", directory / "best.pt"
        self.model, self.optimizer, self.scheduler, self.precision = model, optimizer, scheduler, precision
        self.distributed, self.config = distributed, config
        self.ema = ema  # the weights' moving average (torch.optim.swa_utils.AveragedModel), or None
        self.saved_epoch = 0  # the epoch last.pt holds
        if distributed.is_main:
            directory.mkdir(parents=True, exist_ok=True)

    def restore(self, state: TrainingState) -> TrainingState:
        """The state ``last.pt`` holds, with model, optimiser, schedule, gradient scaler, moving
        average and random state restored from it; ``state`` (a fresh one) when there is no
        ``last.pt``."""
        if not self.last.exists():
            log.info("trainer.resume=true but %s does not exist: training from scratch", self.last)
            return state
        checkpoint = load_checkpoint(self.last)
        unwrap(self.model).load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.precision.load_state_dict(checkpoint.get("grad_scaler", {}))
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        if self.ema is not None and checkpoint.get("ema") is not None:
            self.ema.load_state_dict(checkpoint["ema"])
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
                "ema": self.ema.state_dict() if self.ema is not None else None,
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

