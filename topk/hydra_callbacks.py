"""Hydra callbacks used by ``conf/train.yaml``.

This module and :mod:`topk.schema.store` are the ones of the package that import Hydra, so the
library itself stays usable without Hydra.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from topk.distributed import from_environment
from topk.errors import TopkError
from topk.run_dir import (
    check_run_dir,
    file_in_place_of_folder,
    mark_stopped_runs,
    record_status,
    run_params,
    unwritable_reason,
)
from topk.schema import composition_problem, config_problem

# The sweep directory of the sweep this process launched, for :func:`close_interrupted_sweep`.
_sweep_dirs: list[Path] = []


def tuning_problem(config: DictConfig) -> str | None:
    """Hydra's Optuna sweeper optimises what each job returns, the selected model's
    ``trainer.selection_metric`` (``train.selected_value``): one sentence if a sweep under it
    selects on nothing (``last``) or on the test split, which is never tuned on, or would push the
    metric the wrong way (maximise ``val/loss``, minimise an accuracy: Optuna's default)."""
    sweeper = config.hydra.get("sweeper") or {}
    metric = str(config.trainer.selection_metric)
    if "optuna" not in str(sweeper.get("_target_", "")).lower():
        return None
    if not metric.startswith("val/"):
        return (f"hydra/sweeper=optuna tunes the selected model's trainer.selection_metric, and {metric} is "
                "not a validation metric; set trainer.selection_metric=val/top5 (or another val/ metric) and "
                "give the data set a validation split (e.g. dataset.val_per_class=50). Nothing was run.")
    direction = str(sweeper.get("direction", "minimize")).rpartition(".")[2].lower()
    wanted = "minimize" if metric == "val/loss" else "maximize"
    if direction != wanted:
        better = "low" if wanted == "minimize" else "high"
        return (f"the Optuna sweeper would {direction} {metric}, which is better {better}; set "
                f"hydra.sweeper.direction={wanted}. Nothing was run.")
    return None


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


def hydra_files(sweep_dir: Path, log_name: str = "train.log") -> dict[Path, bytes | int]:
    """What Hydra rewrites in each job's directory below ``sweep_dir`` before the job can be
    checked: the ``.hydra/*.yaml`` files (their bytes) and the log ``log_name`` it appends to
    (its size). A refused job gets them back as they were (:func:`put_back_hydra_files`)."""
    if not Path(sweep_dir).is_dir():
        return {}
    kept: dict[Path, bytes | int] = {
        path: path.read_bytes() for path in Path(sweep_dir).rglob("*.yaml") if path.parent.name == ".hydra"
    }
    kept.update({path: path.stat().st_size for path in Path(sweep_dir).rglob(log_name) if path.is_file()})
    return kept


def put_back_hydra_files(run_dir: Path, kept: dict[Path, bytes | int], log_name: str = "train.log") -> None:
    """Leave the directory of a refused job as it was before the sweep (:func:`hydra_files`):
    the ``.hydra/`` files it held put back, those Hydra created removed, and its log removed if
    Hydra created it, or cut back to its earlier length if the directory holds no run of ours
    (a run's own log keeps the refused job's lines: that run may be writing to it still)."""
    run_dir = Path(run_dir)
    hydra_dir = run_dir / ".hydra"
    for path in sorted(hydra_dir.glob("*.yaml")) if hydra_dir.is_dir() else []:
        if path in kept:
            path.write_bytes(kept[path])
        else:
            path.unlink()
    if hydra_dir.is_dir() and not any(hydra_dir.iterdir()):
        hydra_dir.rmdir()
    log = run_dir / log_name
    if log.is_file() and log not in kept:
        log.unlink()
    elif log.is_file() and record_status(run_dir) is None:
        os.truncate(log, kept[log])


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
      training configuration, no files of someone else's and no run still training
      (:func:`topk.run_dir.check_run_dir`); a sweep's directory must hold no runs unless the
      sweep is resumed (each job is then checked like a single run), and a resumed sweep's
      directory must exist. Checking here, before Hydra rewrites ``.hydra/`` and appends to
      ``train.log``, leaves a refused directory exactly as it was; a sweep's refused jobs get
      their ``.hydra/`` files and ``train.log`` back as they were at the sweep's end.
    - At the end of a sweep, one line counts its runs by status and the refused jobs
      (:func:`note_refused_run`); the sweep exits with 1 if any run failed, was refused or ended
      still marked ``running``.

    Under torchrun only the first process checks: the others write nowhere but a scratch
    directory (:func:`topk.distributed.worker_argv`).
    """

    # The sweep's .hydra/ files and log sizes as they were at its start (set in on_multirun_start)
    kept_hydra_files: dict[Path, bytes | int] = {}
    log_name = "train.log"

    def _check_writable(self, directory: Path, option: str) -> None:
        reason = unwritable_reason(directory)
        if reason is not None:
            _stop(f"the output directory {directory} cannot be written ({reason}); "
                  f"choose another with {option}=PATH.")

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        problem = config_problem(config)
        if problem is not None:
            _stop(problem)
        run_dir = Path(config.hydra.run.dir)
        misplaced = file_in_place_of_folder(run_dir)
        if misplaced is not None:
            _stop(f"{misplaced} with hydra.run.dir=PATH.")
        try:
            check_run_dir(run_dir, run_params(config), bool(config.trainer.resume))
        except TopkError as error:
            _stop(str(error))
        self._check_writable(run_dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        n_jobs = (config.hydra.get("launcher") or {}).get("n_jobs")
        if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0):
            _stop(f"hydra.launcher.n_jobs must be a whole number of runs at once other than 0 (-1: "
                  f"one per CPU core), got {n_jobs!r}.")
        problem = tuning_problem(config) or sweep_job_problem(config)
        if problem is not None:
            _stop(problem)
        held = sum(sweep_statuses(sweep_dir).values()) if sweep_dir.is_dir() else 0
        if held and not config.trainer.resume:
            _stop(f"{sweep_dir} already holds {_runs(held)}; continue them with trainer.resume=true, "
                  "or choose another directory with hydra.sweep.dir=PATH (nothing was changed in it).")
        if config.trainer.resume and not sweep_dir.exists():
            _stop(f"trainer.resume=true but the sweep directory {sweep_dir} does not exist; give the "
                  "directory of the sweep to continue with hydra.sweep.dir=PATH, or leave out trainer.resume.")
        self._check_writable(sweep_dir, "hydra.sweep.dir")
        take_refused_runs(sweep_dir)  # notes a stopped sweep left behind
        self.log_name = f"{config.hydra.job.name}.log"
        self.kept_hydra_files = hydra_files(sweep_dir, self.log_name)
        _sweep_dirs.append(sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        statuses, refused_dirs = sweep_statuses(sweep_dir), take_refused_runs(sweep_dir)
        for run_dir in refused_dirs:
            put_back_hydra_files(run_dir, self.kept_hydra_files, self.log_name)
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


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The overrides of each job of the sweep ``config`` launches, as Hydra's basic sweeper
    expands them (``hydra.sweeper.params``, then the command line's overrides); none for another
    sweeper (Optuna's draws its values as it goes)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    sweeper = config.hydra.sweeper
    if sweeper.get("_target_") != f"{BasicSweeper.__module__}.{BasicSweeper.__name__}":
        return []
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    return expand_sweep(params + list(config.hydra.overrides.task))


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """The overrides of each job of a sweep (``loss=ce,hinge``, ``seed=range(3)``), expanded by
    Hydra's override parser and basic sweeper: the code that launches them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None) or [[]]
    return jobs


def sweep_job_problem(config: DictConfig) -> str | None:
    """One sentence for the first job of the sweep whose config cannot be composed or breaks
    the schema (:mod:`topk.schema`), before any job starts: each job is composed as its launcher
    will compose it (Hydra's ``load_sweep_config``), at about 60 ms a job."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    loader = GlobalHydra.instance().config_loader()
    for number, job in enumerate(sweep_jobs(config)):
        try:
            problem = config_problem(loader.load_sweep_config(config, list(job)))
        except (HydraException, OmegaConfBaseException) as error:
            problem = composition_problem(error)
        if problem is not None:
            return f"job {number} of the sweep ({' '.join(job)}): {problem} Nothing was run."
    return None


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
