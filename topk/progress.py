"""What a run shows while it trains (rank 0 only): tqdm bars on a terminal, plain lines elsewhere.

On a terminal (``trainer.progress=true`` and stderr a TTY), the epoch bar carries the last
training loss, the selection metric and the best value so far, and a second bar inside each
epoch of more than one batch shows batches, images per second, the running loss and the ETA.
Where stderr is not a terminal (a SLURM log, a pipe), no bar is redrawn: a line is logged every
``trainer.progress_every`` batches and one per evaluated epoch. ``train.log`` gets one line per
evaluated epoch in every case.

The running loss is summed on the device (:func:`topk.engine.train_one_epoch`); reading it on
the host makes the host wait for the device, so it is read at most once a second
(``LOSS_READ_SECONDS``) on a terminal and once per logged line elsewhere.
"""

from __future__ import annotations

import logging
import sys
import time

import torch
from tqdm import tqdm

log = logging.getLogger("topk.progress")

LOSS_READ_SECONDS = 1.0


def is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def shown_metric(row: dict, selection_metric: str) -> str | None:
    """The metric an epoch's line shows: the selection metric, else (``last``) the top-1 accuracy
    of the validation split, else of the test split; ``None`` for an epoch not evaluated."""
    return next((key for key in (selection_metric, "val/top1", "test/top1") if row.get(key) is not None), None)


def epoch_summary(row: dict, selection_metric: str, best_epoch: int | None, best_value: float | None) -> str:
    """``epoch 3: train/loss 1.2345, val/top5 45.10 (best 46.00 at epoch 2), 4.1 s``."""
    parts = [f"train/loss {row['train/loss']:.4f}"]
    metric = shown_metric(row, selection_metric)
    if metric is not None:
        best = f" (best {best_value:.2f} at epoch {best_epoch})" if metric == selection_metric else ""
        parts.append(f"{metric} {row[metric]:.2f}{best}")
    return f"epoch {row['epoch']}: {', '.join(parts)}, {row['seconds']:.1f} s"


class Progress:
    """The epoch bar and the per-batch meters of one run (see the module docstring).

    ``enabled`` is ``trainer.progress`` on rank 0; ``to_file`` writes a line to ``train.log``
    alone (:func:`log_to_file_only`), or ``None`` outside a Hydra run."""

    def __init__(self, epochs: int, start_epoch: int, description: str, selection_metric: str, enabled: bool,
                 every: int = 100, stream=None, to_file=None):
        self.stream = sys.stderr if stream is None else stream
        self.enabled, self.every, self.to_file = enabled, max(1, every), to_file
        self.terminal = enabled and is_terminal(self.stream)
        self.selection_metric = selection_metric
        self.epoch_bar = tqdm(range(start_epoch + 1, epochs + 1), initial=start_epoch, total=epochs,
                              desc=description, disable=not self.terminal, unit="epoch", dynamic_ncols=True,
                              file=self.stream)
        self.batch_bar = None

    def __iter__(self):
        return iter(self.epoch_bar)

    def batches(self, epoch: int, count: int) -> BatchMeter | None:
        """The meter of epoch ``epoch``'s ``count`` training batches (``None`` when nothing shows)."""
        if not self.enabled:
            return None
        if self.terminal and count > 1:  # cleared at the epoch's end (while it is evaluated)
            self.batch_bar = tqdm(total=count, desc=f"epoch {epoch}", unit="batch", leave=False,
                                  dynamic_ncols=True, file=self.stream, position=1)
        return BatchMeter(epoch, count, self.batch_bar, None if self.terminal else self.every)

    def close_batches(self) -> None:
        if self.batch_bar is not None:
            self.batch_bar.close()
            self.batch_bar = None

    def epoch_done(self, row: dict, best_epoch: int | None, best_value: float | None) -> None:
        """After an epoch: the bar's postfix, and for an evaluated epoch its line (train.log; the
        console too where no bar shows it)."""
        metric = shown_metric(row, self.selection_metric)
        if self.terminal:
            postfix = {"loss": f"{row['train/loss']:.4f}"}
            if metric is not None:
                postfix[metric] = f"{row[metric]:.2f}"
                if metric == self.selection_metric:
                    postfix["best"] = f"{best_value:.2f}@{best_epoch}"
            self.epoch_bar.set_postfix(postfix, refresh=False)
        if metric is None:
            return
        line = epoch_summary(row, self.selection_metric, best_epoch, best_value)
        if self.enabled and not self.terminal:
            log.info(line)
        elif self.to_file is not None:
            self.to_file(line)

    def close(self) -> None:
        self.close_batches()
        self.epoch_bar.close()


class BatchMeter:
    """Counts one epoch's training batches and images for :class:`Progress`."""

    def __init__(self, epoch: int, count: int, bar, every: int | None):
        self.epoch, self.count, self.bar, self.every = epoch, count, bar, every
        self.started = self.last_read = time.perf_counter()
        self.images = 0

    def update(self, batch_index: int, batch_size: int, loss_sum: torch.Tensor, sample_count: int) -> None:
        """After training batch ``batch_index`` (from 0) of ``batch_size`` samples; ``loss_sum``
        and ``sample_count`` are the epoch's running sum of ``loss · batch size`` and samples."""
        self.images += batch_size
        if self.bar is not None:
            self.bar.update()
            now = time.perf_counter()
            if now - self.last_read >= LOSS_READ_SECONDS:
                self.last_read = now
                self.bar.set_postfix(loss=f"{float(loss_sum) / sample_count:.4f}",
                                     img_s=f"{self.images / (now - self.started):.0f}", refresh=False)
        elif self.every is not None and (batch_index + 1) % self.every == 0:
            seconds = time.perf_counter() - self.started
            rate = self.images / seconds
            left = (self.count - batch_index - 1) * seconds / (batch_index + 1)
            log.info("epoch %d, batch %d/%d: loss %.4f, %.0f images/s, %.0f s left in the epoch", self.epoch,
                     batch_index + 1, self.count, float(loss_sum) / sample_count, rate, left)


def log_to_file_only(message: str, level: int = logging.INFO) -> None:
    """Append ``message`` to the run's log file (Hydra's ``train.log``, logger ``train``) without
    echoing it on the console, where ``train.py`` prints an error once and a progress bar shows
    an epoch."""
    logger = logging.getLogger("train")
    entry = logger.makeRecord(logger.name, level, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(entry)
