"""One writer per directory: ``run.lock`` in a run's directory, ``sweep.lock`` in a sweep's
(:class:`RunLock`), held from the moment a run claims or resumes its directory (a sweep: from
before Hydra writes there) until it ends, however it ends. A second writer is refused in one
sentence naming the live one while that process runs; a lock whose process is gone from this
host, or whose pid now belongs to a process started after the lock was written (a reused pid), is
taken over with a log line; one written on another host cannot be checked and is refused until
the user deletes it (:mod:`topk.run_dir` says what else keeps two runs apart)."""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from topk.errors import RunRefused
from topk.records import utc_now

log = logging.getLogger(__name__)

LOCK_NAME = "run.lock"


def _this_host() -> str:
    return socket.gethostname()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (a zombie still does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except (OverflowError, ValueError):
        return False
    return True


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from Linux's ``/proc``: the boot
    time of ``/proc/stat`` plus the start tick of ``/proc/<pid>/stat`` (field 22); ``None`` where
    that cannot be read (another system, a process gone meanwhile)."""
    try:
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _seconds(utc: str) -> float | None:
    """A record's UTC time (:func:`topk.records.utc_now`) in seconds since the epoch."""
    try:
        return datetime.datetime.fromisoformat(utc.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):
        return None


# A lock is written within moments of its process's start; one whose pid belongs to a process
# started more than this many seconds after the lock was written names a pid reused since.
PID_REUSE_SLACK = 2.0


def holder_running(holder: Mapping) -> bool:
    """Whether the process a lock names (``pid``, ``started_utc``) still runs on this host: its
    pid exists and, where its start time can be read (:func:`process_started`), it started
    before the lock was written (else the pid was reused by another process since)."""
    if not _alive(holder["pid"]):
        return False
    started, locked = process_started(holder["pid"]), _seconds(holder.get("started_utc"))
    return started is None or locked is None or started <= locked + PID_REUSE_SLACK


def lock_holder(run_dir: Path, name: str = LOCK_NAME) -> dict | None:
    """What ``run_dir``'s lock ``name`` says (``pid``, ``host``, ``started_utc``), ``None``
    without one; :class:`~topk.errors.RunRefused` for a lock that cannot be read."""
    path = Path(run_dir) / name
    try:
        holder = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        holder = None
    if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int) or not isinstance(holder.get("host"), str):
        raise RunRefused(
            f"{path} cannot be read, so whether a run is still training in {run_dir} cannot be "
            "told; if none is, delete that file and run again (nothing was changed in the directory)."
        )
    return holder


def check_lock(run_dir: Path, name: str = LOCK_NAME, holds: str = "a run that is still training") -> dict | None:
    """Refuse, in one sentence, a second writer into ``run_dir`` while the process holding its
    lock ``name`` (``run.lock`` of a run, ``sweep.lock`` of a sweep) may still be writing there;
    returns the holder of a stale lock (its process is gone from this host, or its pid now
    belongs to another process), or ``None`` without a lock."""
    holder = lock_holder(run_dir, name)
    if holder is None:
        return None
    pid, host, since = holder["pid"], holder["host"], holder.get("started_utc", "at an unknown time")
    if host != _this_host():
        raise RunRefused(
            f"{run_dir} is locked by pid {pid} on host {host} (since {since}), which cannot be checked from "
            f"{_this_host()}; wait for it to end, or if it is dead delete "
            f"{Path(run_dir) / name} and run again (nothing was changed in the directory)."
        )
    if holder_running(holder):
        raise RunRefused(
            f"{run_dir} holds {holds} (pid {pid} on host {host}, started {since}); wait for it "
            f"to end, or stop it (kill {pid}), before writing there (nothing was changed in the directory)."
        )
    return holder


SWEEP_LOCK_NAME = "sweep.lock"


class RunLock:
    """A lock file held by this process: ``run.lock`` in a run's directory, ``sweep.lock`` in a
    sweep's (``name``). It is created exclusively with its content (written to a temporary file
    first, then hard-linked into place, so that no reader sees it half written) and removed by
    :meth:`release` if it is still this process's. ``holds`` says, in a refusal, what holds it."""

    def __init__(self, run_dir: Path, name: str = LOCK_NAME, holds: str = "a run that is still training"):
        self.path = Path(run_dir) / name
        self.holds = holds
        self.content = json.dumps({"pid": os.getpid(), "host": _this_host(), "started_utc": utc_now()})
        self.held = False

    def acquire(self) -> RunLock:
        """Take the lock, or raise :class:`~topk.errors.RunRefused` (:func:`check_lock`). A stale
        lock is taken over, with a log line."""
        directory, name = self.path.parent, self.path.name
        temporary = self.path.with_name(f"{name}.{os.getpid()}.tmp")
        temporary.write_text(self.content)
        try:
            for _ in range(2):
                try:
                    os.link(temporary, self.path)
                    self.held = True
                    return self
                except FileExistsError:
                    stale = check_lock(directory, name, self.holds)
                    if stale is None:
                        continue  # released meanwhile
                    log.warning("%s names pid %d on %s, which is no longer running: the lock is taken over",
                                self.path, stale["pid"], stale["host"])
                    if lock_holder(directory, name) == stale:
                        self.path.unlink(missing_ok=True)
            check_lock(directory, name, self.holds)
            raise RunRefused(f"{self.path} is being taken by another process at this moment; run again.")
        finally:
            temporary.unlink(missing_ok=True)

    def release(self) -> None:
        """Remove the lock, unless another process has taken it over since."""
        if not self.held:
            return
        self.held = False
        try:
            if self.path.read_text() == self.content:
                self.path.unlink()
        except FileNotFoundError:
            pass


def acquire_lock(run_dir: Path) -> RunLock:
    """This process's :class:`RunLock` on ``run_dir`` (see :meth:`RunLock.acquire`)."""
    return RunLock(run_dir).acquire()


def acquire_sweep_lock(sweep_dir: Path) -> RunLock:
    """This process's ``sweep.lock`` on ``sweep_dir``, taken before Hydra writes anything there:
    a second sweep into the same directory, or a resume of it while it runs, is refused in one
    sentence naming the live one; the lock goes at the sweep's end (or, if the process dies
    without releasing it, is taken over as stale)."""
    return RunLock(sweep_dir, SWEEP_LOCK_NAME, "a sweep that is still running").acquire()
