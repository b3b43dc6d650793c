"""Hydra callbacks used by ``conf/train.yaml``.

This is the one module of the package that imports Hydra; nothing else imports it, so the
library itself stays usable without Hydra.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from topk.distributed import from_environment
from topk.errors import TopkError
from topk.run_dir import check_run_dir, mark_stopped_runs, run_params, unwritable_reason

# The sweep directory of the sweep this process launched, for :func:`close_interrupted_sweep`.
_sweep_dirs: list[Path] = []


def _stop(message: str) -> None:
    sys.exit(f"Error: {message}")


def sweep_statuses(sweep_dir: Path) -> Counter:
    """How many runs below ``sweep_dir`` have each status (``unreadable`` for a broken record)."""
    statuses = Counter()
    for path in Path(sweep_dir).rglob("results.json"):
        try:
            statuses[json.loads(path.read_text()).get("status", "unreadable")] += 1
        except (OSError, ValueError, AttributeError):
            statuses["unreadable"] += 1
    return statuses


def close_interrupted_sweep() -> None:
    """After Ctrl-C or SIGTERM stopped a sweep: records left ``running`` by workers the launcher
    killed become ``interrupted`` (:func:`topk.run_dir.mark_stopped_runs`)."""
    for sweep_dir in _sweep_dirs:
        mark_stopped_runs(sweep_dir)


class CheckOutputDir(Callback):
    """Checks made before Hydra writes anything in the run (or sweep) directory.

    - The directory must be writable (found by trying: as root, ``os.access`` says yes even for
      ``/proc``); Hydra would otherwise fail deep inside ``mkdir`` with a traceback.
    - A single run's directory must hold no other run unless it is resumed, with the same
      training configuration (:func:`topk.run_dir.check_run_dir`); a sweep's directory must hold
      no runs unless the sweep is resumed (each job is then checked like a single run). Checking
      here, before Hydra rewrites ``.hydra/`` and appends to ``train.log``, leaves a refused
      directory exactly as it was.
    - At the end of a sweep, one line counts its runs by status; the sweep exits with 1 if any
      run failed.

    Under torchrun only the first process checks: the others write nowhere but a scratch
    directory (:func:`topk.distributed.worker_argv`).
    """

    def _check_writable(self, directory: Path, option: str) -> None:
        reason = unwritable_reason(directory)
        if reason is not None:
            _stop(f"the output directory {directory} cannot be written ({reason}); "
                  f"choose another with {option}=PATH.")

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        run_dir = Path(config.hydra.run.dir)
        try:
            check_run_dir(run_dir, run_params(config), bool(config.trainer.resume))
        except TopkError as error:
            _stop(str(error))
        self._check_writable(run_dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        held = sum(sweep_statuses(sweep_dir).values()) if sweep_dir.is_dir() else 0
        if held and not config.trainer.resume:
            _stop(f"{sweep_dir} already holds {held} run{'s' if held > 1 else ''}; continue them with trainer.resume=true, "
                  "or choose another directory with hydra.sweep.dir=PATH (nothing was changed in it).")
        self._check_writable(sweep_dir, "hydra.sweep.dir")
        _sweep_dirs.append(sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        statuses = sweep_statuses(sweep_dir)
        counts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
        print(f"Sweep {sweep_dir}: {counts or 'no runs'}.", file=sys.stderr)
        if statuses["failed"]:
            failed = statuses["failed"]
            _stop(f"{failed} run{'s' if failed > 1 else ''} of the sweep failed; their "
                  "results.json and train.log say why.")


def sweep_values(params) -> dict[str, list]:
    """Each key of ``hydra.sweeper.params`` with its values as Python objects, as Hydra's basic
    sweeper expands them (``range(3)`` -> ``[0, 1, 2]``, ``null`` -> ``None``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    values = {}
    for key, value in params.items():
        override = parser.parse_override(f"{key}={value}")
        values[key] = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
    return values
