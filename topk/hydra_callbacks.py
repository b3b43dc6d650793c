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


def note_refused_run(sweep_dir: Path, job: int, run_dir: Path) -> None:
    """Remember, for :meth:`CheckOutputDir.on_multirun_end`, that the job running in ``run_dir``
    was refused: it wrote nothing there, and under joblib it ran in another process. The note is
    a file in ``<sweep_dir>/.refused/``, removed when the sweep ends."""
    notes = Path(sweep_dir) / ".refused"
    notes.mkdir(parents=True, exist_ok=True)
    (notes / str(job)).write_text(str(run_dir))


def take_refused_runs(sweep_dir: Path) -> list[Path]:
    """The run directories of the sweep's refused jobs (:func:`note_refused_run`); the notes are
    removed."""
    notes = Path(sweep_dir) / ".refused"
    if not notes.is_dir():
        return []
    run_dirs = []
    for path in list(notes.iterdir()):
        run_dirs.append(Path(path.read_text()))
        path.unlink()
    notes.rmdir()
    return run_dirs


def hydra_files(sweep_dir: Path) -> dict[Path, bytes]:
    """The ``.hydra/*.yaml`` files of every run below ``sweep_dir``. Hydra rewrites them for each
    job of a resumed sweep before the job can be checked; a refused job gets its own back."""
    return {path: path.read_bytes() for path in Path(sweep_dir).rglob("*.yaml") if path.parent.name == ".hydra"}


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
    - At the end of a sweep, one line counts its runs by status and the refused jobs
      (:func:`note_refused_run`); the sweep exits with 1 if any run failed, was refused or ended
      still marked ``running``.

    Under torchrun only the first process checks: the others write nowhere but a scratch
    directory (:func:`topk.distributed.worker_argv`).
    """

    # A resumed sweep's .hydra/ files as they were at its start (replaced in on_multirun_start)
    kept_hydra_files: dict[Path, bytes] = {}

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
            _stop(f"{sweep_dir} already holds {_runs(held)}; continue them with trainer.resume=true, "
                  "or choose another directory with hydra.sweep.dir=PATH (nothing was changed in it).")
        self._check_writable(sweep_dir, "hydra.sweep.dir")
        take_refused_runs(sweep_dir)  # notes a stopped sweep left behind
        self.kept_hydra_files = hydra_files(sweep_dir) if config.trainer.resume else {}
        _sweep_dirs.append(sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        statuses, refused_dirs = sweep_statuses(sweep_dir), take_refused_runs(sweep_dir)
        for path, content in self.kept_hydra_files.items():
            if path.parent.parent in refused_dirs:
                path.write_bytes(content)
        refused = len(refused_dirs)
        counts = [f"{count} {status}" for status, count in sorted(statuses.items())]
        counts += [f"{refused} refused"] if refused else []
        print(f"Sweep {sweep_dir}: {', '.join(counts) or 'no runs'}.", file=sys.stderr)
        problems = sweep_problems(statuses["failed"], statuses["running"], refused)
        if problems:
            _stop("; ".join(problems) + ".")


def _runs(count: int) -> str:
    return f"{count} run{'s' if count > 1 else ''}"


def sweep_problems(failed: int, running: int, refused: int) -> list[str]:
    """What went wrong in a finished sweep, one clause per kind (none: nothing did). A run still
    ``running`` once the sweep is over died before writing its final status."""
    plural = refused > 1
    clauses = [
        (failed, f"{_runs(failed)} of the sweep failed; their results.json and train.log say why"),
        (running, f"{_runs(running)} of the sweep ended without writing a final status (a killed "
                  f"process or a full disk); train.log says how far {'they' if running > 1 else 'it'} got"),
        (refused, f"{_runs(refused)} {'were' if plural else 'was'} refused and left as "
                  f"{'they were' if plural else 'it was'} (the errors above say why)"),
    ]
    return [clause for count, clause in clauses if count]


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
