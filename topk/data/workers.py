"""How many worker processes decode image files: ``trainer.num_workers``, ``auto`` or a number.

``auto`` (the default) sizes the workers to the machine (:func:`resolve_workers`); a whole number
is taken as it is (0: decode in the main process). In-memory data (circles, CIFAR tensors) has no
workers whatever the setting (:func:`data_workers`), and the run record's
``provenance.num_workers`` says how many a run's image-file loaders used.
"""

from __future__ import annotations

import os
from typing import Any

from topk.errors import ConfigError

AUTO = "auto"
ALLOWED = ("auto (the cores this process may use, shared among the torchrun processes on its node, "
           "less one) or a whole number of at least 0 (0: decode in the main process)")


def valid_setting(value: Any) -> bool:
    """Whether ``value`` is a ``trainer.num_workers``: ``auto`` or a whole number of at least 0."""
    if value == AUTO:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity (``os.sched_getaffinity(0)``, which a
    cgroup cpuset, ``taskset`` or a batch scheduler narrows), or ``os.cpu_count()`` where the
    platform has no affinity (macOS, Windows), as torch's DataLoader counts them
    (``torch.utils.data.DataLoader.check_worker_number_rationality``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def local_processes() -> int:
    """The training processes on this node: ``LOCAL_WORLD_SIZE``, which torchrun sets in each
    process it starts (torch.distributed.run's documentation); 1 without torchrun."""
    value = os.environ.get("LOCAL_WORLD_SIZE", "1")
    try:
        return max(1, int(value))
    except ValueError:
        raise ConfigError(f"LOCAL_WORLD_SIZE must be a whole number (torchrun sets it), got {value!r}; "
                          "unset it or start the run with torchrun.") from None


def resolve_workers(setting: Any) -> int:
    """The decoding workers of each of this process's image loaders for ``trainer.num_workers``:
    a whole number as it is; ``auto`` = the available cores (:func:`available_cores`) divided
    among the node's training processes (:func:`local_processes`), less one, and at least 0: one
    core stays with the training loop's own thread, which moves batches to the device and runs
    the model, as Lightning's ``suggested_max_num_workers`` leaves one ("to leave some resources
    for main process", ``cpu_count // local_world_size - 1``). A one-core share gives 0: images are
    decoded in the main process rather than by a worker competing with it for the core."""
    if not valid_setting(setting):
        from topk.schema.rules import shown

        raise ConfigError(f"trainer.num_workers must be {ALLOWED}, got {shown(setting)}.")
    if setting != AUTO:
        return int(setting)
    return max(0, available_cores() // local_processes() - 1)


def data_workers(splits, setting: Any) -> int:
    """The workers a run on ``splits`` uses: :func:`resolve_workers` for image files read from
    disk (:class:`topk.data.images.ImageFileSplit`), 0 for in-memory data, which has none."""
    from topk.data.images import ImageFileSplit

    return resolve_workers(setting) if isinstance(splits.train, ImageFileSplit) else 0
