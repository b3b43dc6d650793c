"""Timing calls in turn: each function timed alternately with the others, so that all see the
same machine state (caches, other load), medians over the repeats that fit in a budget."""

from __future__ import annotations

import statistics
import time

import torch


def no_sync() -> None:
    pass


def synchronizer(device: torch.device):
    """What to call before and after a timed call so that it measures the device's work."""
    return torch.cuda.synchronize if device.type == "cuda" else no_sync


def timed(step, sync=no_sync) -> float:
    """The wall seconds of one call of ``step()``, ``sync`` called before and after it."""
    sync()
    begin = time.perf_counter()
    step()
    sync()
    return time.perf_counter() - begin


def alternate_medians(steps, budget: float, min_repeats: int, max_repeats: int, sync=no_sync) -> list[float]:
    """Median wall times of the functions ``steps``, called in turn (one warm-up call each first)
    for repeats that fit in about ``budget`` seconds, so that all see the same machine state
    (caches, other load); ``sync`` is called around every timed call."""
    for step in steps:
        step()
    times = [[] for _ in steps]
    started = time.perf_counter()
    while len(times[0]) < max_repeats and (len(times[0]) < min_repeats or time.perf_counter() - started < budget):
        for step, step_times in zip(steps, times):
            step_times.append(timed(step, sync))
    return [statistics.median(step_times) for step_times in times]


def block_medians(steps, budget: float, min_rounds: int = 3, block: int = 5, sync=no_sync) -> list[float]:
    """Median wall times of the functions ``steps``, each timed ``block`` times in a row after
    one untimed call, the steps' blocks taken in turn for rounds that fit in about ``budget``
    seconds (at least ``min_rounds``). Where one step allocates or touches far more memory than
    another, the call after it is slowed (freed memory given back to the system, caches
    evicted), so the calls of :func:`alternate_medians` time each step partly in the state the
    previous one left; here each is timed as a loop calling it again and again finds it."""
    times = [[] for _ in steps]
    started, rounds = time.perf_counter(), 0
    while rounds < min_rounds or time.perf_counter() - started < budget:
        for step, step_times in zip(steps, times):
            step()
            step_times.extend(timed(step, sync) for _ in range(block))
        rounds += 1
    return [statistics.median(step_times) for step_times in times]


def median_seconds(step, budget: float, min_repeats: int = 3, max_repeats: int = 50, sync=no_sync) -> float:
    """Median wall time of ``step()`` over repeats that fit in about ``budget`` seconds."""
    return alternate_medians([step], budget, min_repeats, max_repeats, sync)[0]


def paired_median_seconds(baseline, step, budget: float, min_repeats: int = 5, max_repeats: int = 60, sync=no_sync):
    """Medians of ``baseline()`` and ``step()`` timed alternately; returns ``(baseline_seconds, step_seconds)``."""
    baseline_seconds, step_seconds = alternate_medians([baseline, step], budget, min_repeats, max_repeats, sync)
    return baseline_seconds, step_seconds


def forward_backward(loss_fn, scores, labels):
    """A step to time: forward and backward of ``loss_fn`` on a fresh leaf of ``scores``."""
    def step():
        leaf = scores.detach().requires_grad_(True)
        loss_fn(leaf, labels).backward()

    return step
