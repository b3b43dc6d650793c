"""Hydra callbacks used by ``conf/train.yaml``.

This module and :mod:`topk.schema.store` are the ones of the package that import Hydra, so the
library itself stays usable without Hydra.
"""

from __future__ import annotations

import atexit
import json
import sys
from collections import Counter
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from topk.distributed import from_environment
from topk.errors import ConfigError, TopkError
from topk.job_share import remove_slots
from topk.locks import RunLock, acquire_sweep_lock
from topk.run_dir import (
    check_run_dir,
    file_in_place_of_folder,
    mark_stopped_runs,
    record_status,
    run_params,
    unwritable_reason,
)
from topk.schema import composition_problem
from topk.schema.check import null_option_problem
from topk.schema.paths import output_dir_problem
from topk.schema.store import offered, sources_of
from topk.schema.validate import job_problem

# The sweep directory of the sweep this process launched, and its sweep.lock, for
# :func:`close_interrupted_sweep`.
_sweep_dirs: list[Path] = []
_sweep_locks: list[RunLock] = []


def tuning_problem(config: DictConfig) -> str | None:
    """Hydra's Optuna sweeper optimises what each job returns, the selected model's
    ``trainer.selection_metric`` (``topk.cli.selected_value``): one sentence if a sweep under it
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


def interrupted_sweep_dir() -> Path | None:
    """The folder of the sweep this process launched, if it started."""
    return _sweep_dirs[-1] if _sweep_dirs else None


def close_interrupted_sweep() -> None:
    """After Ctrl-C or SIGTERM stopped a sweep: records left ``running`` by workers the launcher
    killed become ``interrupted`` (:func:`topk.run_dir.mark_stopped_runs`), and the sweep's
    ``sweep.lock`` goes."""
    for sweep_dir in _sweep_dirs:
        mark_stopped_runs(sweep_dir)
    release_sweep_locks()


def release_sweep_locks() -> None:
    """Release the ``sweep.lock`` of every sweep this process launched (once each)."""
    while _sweep_locks:
        _sweep_locks.pop().release()


atexit.register(release_sweep_locks)  # a sweep that ended in an error of Hydra's leaves no lock


class CheckOutputDir(Callback):
    """Checks made before Hydra writes anything in the run (or sweep) directory.

    - The job's config (a single run's, or each of a basic sweep's jobs) is held to
      :func:`topk.schema.validate.job_problem`, the one check of a composed job config.
    - The directory must be writable (found by trying: as root, ``os.access`` says yes even for
      ``/proc``); Hydra would otherwise fail deep inside ``mkdir`` with a traceback.
    - A single run's directory must hold no other run unless it is resumed, with the same
      training configuration, no files of someone else's and no run still training
      (:func:`topk.run_dir.check_run_dir`). A sweep first claims its directory
      (``sweep.lock``, :func:`topk.locks.acquire_sweep_lock`: a second sweep there, or a resume
      while it runs, is refused naming the live one); the directory must then hold no runs unless
      the sweep is resumed (each job is then checked like a single run, and a refused job
      writes nothing: ``conf/train.yaml`` has Hydra write no ``.hydra/`` and open ``train.log``
      only when the job logs, and :func:`train.train` saves the job's config once its folder
      is locked), and a resumed sweep's directory must exist. Every job of a basic sweep is
      composed and checked before any runs (:func:`sweep_job_folders`), and two jobs that would
      share a folder are refused.
    - At the end of a sweep, one line counts its runs by status and the refused jobs
      (:func:`note_refused_run`); the sweep exits with 1 if any run failed, was refused or ended
      still marked ``running``.

    Under torchrun only the first process checks: the others write nowhere but a scratch
    directory (:func:`topk.distributed.worker_argv`).
    """

    job_folders: list[Path] = []  # each job's folder, for a basic sweep (set in on_multirun_start)

    def _check_writable(self, directory: Path, option: str) -> None:
        reason = unwritable_reason(directory)
        if reason is not None:
            _stop(f"the output directory {directory} cannot be written ({reason}); "
                  f"choose another with {option}=PATH.")

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        problem = job_problem(config, offered(sources_of(config.hydra))) or output_dir_problem(config, multirun=False)
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
        if (problem := output_dir_problem(config, multirun=True)) is not None:
            _stop(problem)
        sweep_dir = Path(config.hydra.sweep.dir)
        n_jobs = (config.hydra.get("launcher") or {}).get("n_jobs")
        if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0):
            _stop(f"hydra.launcher.n_jobs must be a whole number of runs at once other than 0 (-1: "
                  f"one per CPU core), got {n_jobs!r}.")
        problem = tuning_problem(config)
        if problem is not None:
            _stop(problem)
        try:
            self.job_folders = sweep_job_folders(config)
        except ConfigError as error:
            _stop(str(error))
        if config.trainer.resume and not sweep_dir.exists():
            _stop(f"trainer.resume=true but the sweep directory {sweep_dir} does not exist; give the "
                  "directory of the sweep to continue with hydra.sweep.dir=PATH, or leave out trainer.resume.")
        self._check_writable(sweep_dir, "hydra.sweep.dir")
        try:
            _sweep_locks.append(acquire_sweep_lock(sweep_dir))
        except TopkError as error:
            _stop(str(error))
        held = sum(sweep_statuses(sweep_dir).values())
        if held and not config.trainer.resume:
            release_sweep_locks()
            _stop(f"{sweep_dir} already holds {_runs(held)}; continue them with trainer.resume=true, "
                  "or choose another directory with hydra.sweep.dir=PATH (nothing was changed in it).")
        take_refused_runs(sweep_dir)  # notes a stopped sweep left behind
        _sweep_dirs.append(sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if not from_environment().is_main:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        refused_dirs = take_refused_runs(sweep_dir)
        statuses = job_statuses(self.job_folders, refused_dirs) if self.job_folders else sweep_statuses(sweep_dir)
        refused = len(refused_dirs)
        release_sweep_locks()
        remove_slots(sweep_dir)  # a joblib sweep's job slots, if it ran several jobs at once
        counts = [f"{count} {status}" for status, count in sorted(statuses.items())]
        counts += [f"{refused} refused"] if refused else []
        print(f"Sweep {sweep_dir}: {', '.join(counts) or 'no runs'}.", file=sys.stderr)
        problems = sweep_problems(statuses["failed"], statuses["running"], refused,
                                  statuses[NO_RECORD] + statuses["unreadable"])
        if problems:
            _stop("; ".join(problems) + ".")


def _runs(count: int) -> str:
    return f"{count} run{'s' if count > 1 else ''}"


NO_RECORD = "without a record"


def job_statuses(job_folders: list[Path], refused_dirs: list[Path]) -> Counter:
    """How many of the sweep's jobs (their folders) have each status, its refused jobs left out;
    a job whose folder holds no ``results.json`` (it stopped before its record could be written:
    a full disk) is :data:`NO_RECORD`, one whose record cannot be read ``unreadable``."""
    refused = {Path(run_dir).resolve() for run_dir in refused_dirs}
    statuses = Counter()
    for folder in job_folders:
        if Path(folder).resolve() not in refused:
            status = record_status(folder)
            statuses["unreadable" if status == "unreadable results.json" else status or NO_RECORD] += 1
    return statuses


def sweep_problems(failed: int, running: int, refused: int, unrecorded: int = 0) -> list[str]:
    """What went wrong in a finished sweep, one clause per kind (none: nothing did). A run still
    ``running`` once the sweep is over died before writing its final status; an ``unrecorded``
    one before it could write a readable record."""
    plural = refused > 1
    clauses = [
        (failed, f"{_runs(failed)} of the sweep failed; their results.json and train.log say why"),
        (running, f"{_runs(running)} of the sweep ended without writing a final status (a killed "
                  f"process or a full disk); train.log says how far {'they' if running > 1 else 'it'} got"),
        (unrecorded, f"{_runs(unrecorded)} of the sweep left no readable results.json (a full disk, or a stop "
                     "before the run began); the errors above say why"),
        (refused, f"{_runs(refused)} {'were' if plural else 'was'} refused and left as "
                  f"{'they were' if plural else 'it was'} (the errors above say why)"),
    ]
    return [clause for count, clause in clauses if count]


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The overrides of each job of the sweep ``config`` launches, as Hydra's basic sweeper
    expands them (``hydra.sweeper.params``, then the command line's overrides); none for another
    sweeper (Optuna's draws its values as it goes)."""
    from topk.hydra_private import basic_sweeper_target

    sweeper = config.hydra.sweeper
    if sweeper.get("_target_") != basic_sweeper_target():
        return []
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    return expand_sweep(params + list(config.hydra.overrides.task))


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """The overrides of each job of a sweep (``loss=ce,hinge``, ``seed=range(3)``), expanded by
    Hydra's override parser and basic sweeper: the code that launches them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from topk.hydra_private import sweep_jobs_of

    return sweep_jobs_of(OverridesParser.create().parse_overrides(overrides))


def sweep_job_folders(config: DictConfig) -> list[Path]:
    """The folder of each job of the sweep (:func:`job_folder`; none for a sweeper other than the
    basic one), checked before any job starts: a :class:`~topk.errors.ConfigError` of one sentence
    for the first job whose config cannot be composed or fails :func:`topk.schema.validate.job_problem`,
    or for two jobs that would write in one folder. Each job is composed as its launcher will
    compose it (Hydra's ``load_sweep_config``); its cost per job is in docs/benchmarks.md, "Code
    choices and the timings behind them"."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    loader = GlobalHydra.instance().config_loader()
    config_dir = primary_config_dir(config)
    folders: dict[Path, str] = {}
    for number, job in enumerate(sweep_jobs(config)):
        described = f"{number} ({' '.join(job)})"
        try:
            problem = null_option_problem(list(job), config_dir) if config_dir else None
            job_config = loader.load_sweep_config(config, list(job)) if problem is None else None
            problem = problem or job_problem(job_config, offered(sources_of(job_config.hydra)))
            folder = job_folder(job_config, number) if problem is None else None
        except (HydraException, OmegaConfBaseException) as error:
            problem = composition_problem(error)
        except ConfigError as error:
            problem = str(error)
        if problem is not None:
            raise ConfigError(f"job {number} of the sweep ({' '.join(job)}): {problem} Nothing was run.")
        if folder in folders:
            raise ConfigError(f"jobs {folders[folder]} and {described} of the sweep would both write in {folder}; "
                              "give hydra.sweep.subdir a value that tells every job apart (the default is "
                              "${hydra.job.num}). Nothing was run.")
        folders[folder] = described
    return list(folders)


def primary_config_dir(config: DictConfig) -> Path | None:
    """The folder of the primary config (``conf/``, or ``--config-path``), from Hydra's record of
    its config sources; ``None`` if it is no folder (a package's configs)."""
    for source in config.hydra.runtime.get("config_sources") or []:
        if source.get("provider") == "main" and source.get("schema") == "file":
            return Path(source.path)
    return None


def job_folder(job_config: DictConfig, number: int) -> Path:
    """The folder job ``number`` of a sweep writes in, as Hydra's launchers name it:
    ``hydra.sweep.dir`` / ``hydra.sweep.subdir`` with ``hydra.job.num`` set; a
    :class:`~topk.errors.ConfigError` if the subdir is no name (``${loss}``: a config group)."""
    with open_dict(job_config):
        job_config.hydra.job.num = number
        job_config.hydra.job.id = f"job_id_for_{number}"
    subdir = OmegaConf.select(job_config, "hydra.sweep.subdir")
    if isinstance(subdir, (DictConfig, ListConfig)) or subdir is None or str(subdir) == "":
        written = OmegaConf.to_container(job_config.hydra.sweep, resolve=False)["subdir"]
        raise ConfigError(f"hydra.sweep.subdir={written} gives no folder name (it must resolve to a string or a number, e.g. "
                          "${hydra.job.num} or job${hydra.job.num}_${seed}).")
    return Path(str(job_config.hydra.sweep.dir)) / str(subdir)


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
