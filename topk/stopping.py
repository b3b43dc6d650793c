"""Stop signals: Ctrl-C, SIGTERM and a scheduler's preemption become a stop at a batch boundary.

:class:`StopRequests` is the process's one handler of SIGINT and SIGTERM (and, in a submitit job,
of submitit's preemption signal, :func:`preemption_signal`): the only place where a signal becomes
a stop. :func:`topk.engine.fit` takes a stop at the next batch boundary (:func:`stop_requested`;
with several processes, at the next of the checks made every :data:`STOP_CHECK_EVERY` batches,
where all of them stop at the same batch) and raises :class:`RunInterrupted` with the epoch a
resume continues after (docs/design.md §4, "Stops"). ``train.py`` installs the handler for the
whole process and names it as ``stopping.stop_requests`` (:data:`stop_requests`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from topk.distributed import Distributed


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


# With several processes, the batches between two all-reduces of the stop flag (see stop_requested).
STOP_CHECK_EVERY = 10


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
