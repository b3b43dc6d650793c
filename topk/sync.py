"""Where a loss may read its data on the host, and where it must not (docs/design.md §5).

Reading a tensor's value into Python (``bool(t)``, ``int(t)``, ``t.item()``) makes the host wait
until the device has computed it: on an accelerator the host stops queuing work, and the device
then idles until new work arrives (a host-device synchronisation, a stall of the whole pipeline).
Under ``torch.compile`` the same read breaks the graph (``fullgraph=True`` refuses it). On the
CPU in eager mode it costs nothing: host and device are one.

The losses read their data only where :func:`reads_are_free`, i.e. in eager mode on the CPU: for
the input checks of the loss contract (:mod:`topk.losses.targets`) and for three shortcuts that
pay on a CPU (linear space for the rows of :func:`~topk.functional.esp.log_esp` that allow it, noise drawn only
where it can matter in :func:`~topk.functional.perturbed.perturbed_topk`, and only the labels a
soft target puts mass on in :func:`~topk.losses.targets.expected_over_targets`). Everywhere else
they take a path chosen from shapes, dtypes and Python values alone, which ``torch.compile(...,
fullgraph=True)`` captures whole (``tests/test_compile.py``). :func:`sync_free` makes the CPU take
that path too, to test or time it.
"""

from __future__ import annotations

import contextlib

import torch

_forced_sync_free = False


def reads_are_free(tensor: torch.Tensor) -> bool:
    """Whether reading ``tensor``'s values on the host costs no synchronisation: eager mode, on
    the CPU, outside a :func:`sync_free` block."""
    return tensor.device.type == "cpu" and not _forced_sync_free and not torch.compiler.is_compiling()


@contextlib.contextmanager
def sync_free():
    """Within the block, the losses on the CPU take the path they take on an accelerator and
    under ``torch.compile``: no value of the data is read on the host."""
    global _forced_sync_free
    previous, _forced_sync_free = _forced_sync_free, True
    try:
        yield
    finally:
        _forced_sync_free = previous
