"""A sweep's run records read once into a pandas frame, with its run counts: one row per
readable ``results.json`` (keys flattened: ``params.loss.k``, ``test.top5``), missing values
``None``, runs in job order (0, 1, 2, …, 10). The expected runs are the experiment's protocol's
(:mod:`topk.report.fidelity`), never the sweep's own, possibly narrowed, ``multirun.yaml``.

A job is counted once. Two records of the same job (:func:`job_identity`: the same config and
seed, keys that change only speed, place or verbosity aside), such as a job re-run under another
job number by a sweep resumed with a widened grid, or a job folder copied by hand, are one run:
the newest completed is kept (else the newest), and the others are listed as duplicates left out
(:attr:`Sweep.duplicates`, in :meth:`Sweep.header`), never counted as seeds. A tuning study's
trials (``+tune=<loss>``) are no experiment's sweep: :func:`read_sweep` refuses them. A record
that is a link out of its run directory is not read (:func:`inside_run_dir`).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import yaml

from topk.errors import ConfigError
from topk.metrics import metric_at_k
from topk.records import STATUSES, flatten
from topk.report.fidelity import PROTOCOL_FREE_KEYS, Fidelity, assess, normalise
from topk.run_dir import RENAMED_KEYS, added_defaults, override_key

UNFINISHED = STATUSES[1:]
BASE_COLUMNS = ("status", "experiment", "loss", "model", "augment", "seed", "selection_metric",
                "best_epoch", "epoch_seconds", "run_dir")
# The record's own fields that name its job besides its params (records older than some params,
# and fabricated ones, still differ by these)
IDENTITY_FIELDS = ("experiment", "dataset", "model", "augment", "loss", "seed")
DUPLICATES_LISTED = 5  # duplicates named in a sweep's header; the others counted


def number(value) -> float | None:
    """A float; ``None`` for missing, non-numeric, boolean or NaN values."""
    if isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):  # None, text
        return None
    return None if math.isnan(value) else value


def display_path(path) -> str:
    """``path`` relative to the working directory where it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def objects(values, index) -> pd.Series:
    """An object Series keeping ``None`` (``Series.map`` would turn it into NaN)."""
    return pd.Series(list(values), index=index, dtype=object)


def column(runs: pd.DataFrame, name: str, default=None) -> pd.Series:
    """``runs[name]`` with ``default`` for missing values (all ``default`` if no run has it)."""
    values = runs[name] if name in runs.columns else [None] * len(runs)
    return objects((default if value is None else value for value in values), runs.index)


@dataclass(frozen=True)
class Sweep:
    """A sweep directory read once: its runs frame, unreadable records and, where its experiment
    is known, how it compares with the experiment's protocol (expected runs and seeds)."""

    path: Path
    runs: pd.DataFrame
    unreadable: tuple[str, ...]
    fidelity: Fidelity | None = None
    # (run left out, run kept in its place) for each record of a job another run answers
    duplicates: tuple[tuple[str, str], ...] = ()

    @property
    def jobs(self) -> int | None:
        """Runs the protocol asks for (``None``: no experiment to compare with)."""
        return None if self.fidelity is None else self.fidelity.expected

    @property
    def seeds(self) -> int | None:
        """Seeds per setting the protocol asks for."""
        return None if self.fidelity is None else self.fidelity.protocol.seeds

    def counts(self) -> dict:
        """Runs found, per status (of the runs counted), unreadable, duplicates left out,
        expected and missing (protocol jobs no run answers)."""
        statuses = self.runs["status"].value_counts()
        found = len(self.runs) + len(self.unreadable) + len(self.duplicates)
        counts = {"found": found, **{s: int(statuses.get(s, 0)) for s in STATUSES},
                  "unreadable": len(self.unreadable), "duplicates": len(self.duplicates),
                  "expected": self.jobs}
        counts["missing"] = None if self.fidelity is None else len(self.fidelity.missing_jobs())
        return counts

    def written(self) -> tuple[str | None, str | None]:
        """The first start and the last end (UTC, ISO 8601) of its runs: the records'
        ``provenance``, else the files' modification times."""
        starts = [t for t in column(self.runs, "provenance.started_utc") if t]
        ends = [t for t in column(self.runs, "provenance.ended_utc") if t]
        stamps = [utc_text(Path(d, "results.json").stat().st_mtime) for d in self.runs["run_dir"]
                  if Path(d, "results.json").exists()]
        first, last = min(starts or stamps, default=None), max(ends or stamps, default=None)
        return first, last

    def header(self) -> str:
        """One sentence: runs found, completed, failed, interrupted, running, missing, and the
        duplicates left out (:meth:`duplicates_text`)."""
        c = self.counts()
        expected = (", missing unknown (no protocol to compare with)" if c["expected"] is None
                    else f", {c['missing']} of the protocol's {c['expected']} runs missing")
        unreadable = f", {c['unreadable']} unreadable" if c["unreadable"] else ""
        duplicates = f"; {self.duplicates_text()}" if self.duplicates else ""
        return (f"Sweep `{display_path(self.path)}`: runs {c['found']} found, {c['completed']} "
                f"completed, {c['failed']} failed, {c['interrupted']} interrupted, "
                f"{c['running']} running{unreadable}{expected}{duplicates}.")

    def duplicates_text(self) -> str:
        """The duplicates left out, named by their job folders: "2 duplicates left out, ... :
        `1` (counted: `3`), `4` (counted: `5`)"."""
        count = len(self.duplicates)
        named = ", ".join(f"`{self.job_name(left)}` (counted: `{self.job_name(kept)}`)"
                          for left, kept in self.duplicates[:DUPLICATES_LISTED])
        more = f" and {count - DUPLICATES_LISTED} more" if count > DUPLICATES_LISTED else ""
        return (f"{count} duplicate{'s' if count > 1 else ''} left out, each the same job (config "
                f"and seed) as a run counted in its place (the newest completed, else the newest): "
                f"{named}{more}")

    def job_name(self, run_dir) -> str:
        """A run's folder relative to the sweep's (``3``, ``2026-01-01_00-00-00/3``)."""
        try:
            return str(Path(run_dir).relative_to(self.path))
        except ValueError:
            return str(run_dir)


def utc_text(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def job_order(path: Path) -> tuple:
    """Natural order of record paths: job 2 before job 10."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in path.parent.parts)


def inside_run_dir(path: Path) -> bool:
    """Whether the file ``path`` of a run (or sweep) directory lies in that directory once links
    are followed: a link to a file elsewhere (any file of the machine) is never read, nor copied
    beside the report page."""
    try:
        return Path(path).resolve().is_relative_to(Path(path).parent.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def read_record(path: Path) -> dict:
    """A ``results.json`` as a dict; ``ValueError`` (its reason) if it is no JSON object or a link
    out of its run directory, ``OSError`` if it cannot be read."""
    if not inside_run_dir(path):
        raise ValueError("a link to a file outside its run directory, not read")
    record = json.loads(Path(path).read_text())
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


def job_identity(row: dict) -> tuple | None:
    """The job a run record answers: its params (the flat resolved config, keys renamed or added
    since read as today's, :data:`topk.run_dir.RENAMED_KEYS`, :func:`topk.run_dir.added_defaults`)
    but the keys that change only speed, place or verbosity (:data:`PROTOCOL_FREE_KEYS`), and
    its experiment, data set, model, augmentation, loss and seed; two records with one identity
    trained the same thing. ``None`` for a record without params: its job cannot be told."""
    params = {RENAMED_KEYS.get(key, key): value for key, value in (row.get("_params") or {}).items()}
    if not params:
        return None
    params = {**added_defaults(params), **params}
    config = tuple(sorted((key, normalise(value)) for key, value in params.items()
                          if key not in PROTOCOL_FREE_KEYS))
    return (*(normalise(row.get(name)) for name in IDENTITY_FIELDS), config)


def recency(row: dict) -> str:
    """When a run last wrote its record: its ``provenance`` end (else start), else the file's
    modification time (UTC, ISO 8601: such texts sort in time order)."""
    written = row.get("provenance.ended_utc") or row.get("provenance.started_utc")
    if written:
        return str(written)
    try:
        return utc_text((Path(row["run_dir"]) / "results.json").stat().st_mtime)
    except OSError:
        return ""


def one_run_per_job(rows: list[dict]) -> tuple[list[dict], tuple[tuple[str, str], ...]]:
    """``rows`` with one run per job (:func:`job_identity`): the newest completed run, else the
    newest, in job order; and ``(left out, kept)`` run directories for the others."""
    jobs: dict = {}
    for row in rows:
        identity = job_identity(row)
        jobs.setdefault(row["run_dir"] if identity is None else identity, []).append(row)
    kept_dirs, duplicates = set(), []
    for runs in jobs.values():
        kept = max(runs, key=lambda row: (row.get("status") == "completed", recency(row)))
        kept_dirs.add(kept["run_dir"])
        duplicates += [(row["run_dir"], kept["run_dir"]) for row in runs if row is not kept]
    duplicates.sort(key=lambda pair: job_order(Path(pair[0], "results.json")))
    return [row for row in rows if row["run_dir"] in kept_dirs], tuple(duplicates)


def load_sweep(sweep_dir: Path, experiment: str | None = None) -> Sweep:
    """Every ``results.json`` below ``sweep_dir`` as one row, in job order (a missing sweep reads
    as empty), one run per job (:func:`one_run_per_job`); a corrupt record, or a link out of its
    run directory, is counted in ``unreadable``, never fatal. With ``experiment`` the runs are
    compared with its protocol (:func:`topk.report.fidelity.assess`)."""
    rows, unreadable = [], []
    for path in sorted(Path(sweep_dir).rglob("results.json"), key=job_order):
        try:
            record = read_record(path)
        except (OSError, ValueError) as error:
            unreadable.append(f"{path}: {error}")
            continue
        params = record.get("params") if isinstance(record.get("params"), dict) else {}
        rows.append({**flatten(record), "run_dir": str(path.parent), "_params": params})
    rows, duplicates = one_run_per_job(rows)
    runs = pd.DataFrame(rows, dtype=object)
    runs = runs.reindex(columns=[*BASE_COLUMNS, *runs.columns.difference(BASE_COLUMNS)])
    runs = runs.astype(object).where(runs.notna(), None)
    fidelity = assess(runs, sweep_dir, experiment) if experiment else None
    return Sweep(Path(sweep_dir), runs, tuple(unreadable), fidelity, duplicates)


def tuning_study(run) -> str | None:
    """The loss whose tuning study a run is a trial of (``+tune=<loss>`` among its overrides: its
    record's ``provenance.command``, else its ``.hydra/overrides.yaml``); ``None`` for a run of no
    study."""
    try:
        overrides = shlex.split(str(run.get("provenance.command") or ""))[2:]
    except ValueError:  # unbalanced quotes
        overrides = []
    path = Path(run["run_dir"]) / ".hydra" / "overrides.yaml"
    if not overrides and path.is_file() and inside_run_dir(path):
        try:
            overrides = [str(line) for line in yaml.safe_load(path.read_text()) or []]
        except (OSError, yaml.YAMLError, TypeError):
            overrides = []
    return next((line.partition("=")[2] for line in overrides if override_key(line) == "tune"), None)


def tuning_trials_problem(runs: pd.DataFrame, sweep_dir: Path, experiment: str) -> str | None:
    """One sentence if some runs of ``sweep_dir`` are a tuning study's trials: each has values of
    its own, and reading them as a sweep would average them as seeds."""
    studies = {i: tuning_study(run) for i, run in runs.iterrows()}
    trials = [i for i, loss in studies.items() if loss is not None]
    if not trials:
        return None
    loss = studies[trials[0]]
    return (f"{display_path(sweep_dir)} holds {len(trials)} trial(s) of a tuning study (`+tune={loss}` "
            f"in their command, e.g. {display_path(runs.at[trials[0], 'run_dir'])}), which are no "
            f"seeds of a sweep of {experiment}; move the study to "
            f"outputs/tuning/{experiment}/{loss}/, where the tuned tables read studies, or point "
            f"--sweep-dir at a sweep of `python train.py -m +experiment={experiment}`.")


def read_sweep(sweep_dir: Path, experiment: str) -> Sweep:
    """:func:`load_sweep` for a table or figure of ``experiment``, refusing in one sentence a
    missing sweep, one without a readable record, one holding a tuning study's trials
    (:func:`tuning_trials_problem`), and one holding runs of another experiment or of none,
    alone or mixed with the experiment's own (their numbers belong elsewhere)."""
    command = f"`python train.py -m +experiment={experiment}`"
    if not Path(sweep_dir).is_dir():
        raise FileNotFoundError(f"no sweep directory {sweep_dir}; run {command} first.")
    sweep = load_sweep(sweep_dir)
    if sweep.runs.empty:
        broken = f" ({len(sweep.unreadable)} unreadable)" if sweep.unreadable else ""
        raise FileNotFoundError(f"no run record (results.json) under {sweep_dir}{broken}; run "
                                f"{command} first.")
    runs = sweep.runs
    problem = tuning_trials_problem(runs, sweep_dir, experiment)
    if problem is not None:
        raise ConfigError(problem)
    names = objects((None if name is None else str(name) for name in runs["experiment"]),
                    runs.index)
    strangers = runs[names != experiment]
    if strangers.empty:
        return replace(sweep, fidelity=assess(runs, sweep_dir, experiment))
    others = set(names[strangers.index])
    named = sorted(name for name in others if name is not None)
    found = [f"experiment{'s' if len(named) > 1 else ''} {', '.join(named)}"] if named else []
    if None in others:
        found.append("no experiment (`experiment: null` in their results.json, a sweep run "
                     "without +experiment)")
    found = " and of ".join(found)
    if len(strangers) < len(runs):
        raise ConfigError(
            f"{display_path(sweep_dir)} mixes {len(runs) - len(strangers)} run(s) of {experiment} "
            f"with {len(strangers)} run(s) of {found} (e.g. "
            f"{display_path(strangers['run_dir'].iloc[0])}); move those out of the sweep, or "
            f"point --sweep-dir at a sweep of {command} alone.")
    raise ConfigError(f"{display_path(sweep_dir)} holds runs of {found}, not {experiment}; "
                      f"point --sweep-dir at a sweep of {command}.")


def selected_by(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The runs as selected by ``metric`` (``val/top5``): a run whose selection metric is another
    one but which kept the best model by ``metric`` too (``trainer.also_select_on``, the record's
    ``also_selected``) gets that model's ``best_epoch``, ``val.*`` and ``test.*`` in place of its
    selected model's, and ``selection_metric = metric`` (its ``test_per_class.*`` too: that
    model's where the record kept them, else left out, as the selected model's are not its);
    other runs stay as they are. One training run thus gives a column per selection metric (S20
    Table I)."""
    prefix = f"also_selected.{metric}."
    extra = [name for name in runs.columns if name.startswith(prefix)]
    shared = runs[extra].notna().any(axis=1).to_numpy(dtype=bool) if extra else None
    if shared is None or not shared.any():
        return runs
    out = runs.copy()
    replaced = [name for name in out.columns if name.startswith(("val.", "test.", "test_per_class."))]
    out.loc[shared, replaced] = None
    for name in extra:
        target = name[len(prefix):]
        out[target] = column(out, target)
        out.loc[shared, target] = runs.loc[shared, name]
    out.loc[shared, "selection_metric"] = metric
    return out


def spread_over_k(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs, plus one row per other K that a run kept a best model for: a run selected on
    ``val/macro_top1`` that also kept the best model by ``val/macro_top5``
    (``trainer.also_select_on``, as a loss whose training does not depend on K does in G22's
    sweeps, ``conf/g22_method/``) stands in the K = 5 row too, with that model's metrics and
    per-class accuracies (:func:`selected_by`) and ``params.k = 5``. The added rows' index is
    ``"<run>@k<K>"``. One training run thus gives every K row of G22 Tables 5 to 9."""
    added = []
    for name in runs.columns:
        found = re.fullmatch(r"also_selected\.(.+\D(\d+))\.best_epoch", name)
        if not found:
            continue
        metric, k = found.group(1), int(found.group(2))
        same_kind = [isinstance(selected, str) and metric_at_k(selected, k) == metric
                     for selected in column(runs, "selection_metric")]
        kept = runs[name].notna() & pd.Series(same_kind, index=runs.index)
        if not kept.any():
            continue
        rows = selected_by(runs, metric).loc[kept.to_numpy(dtype=bool)].copy()
        rows["params.k"] = k
        rows.index = [f"{i}@k{k}" for i in rows.index]
        added.append(rows)
    return pd.concat([runs, *added]) if added else runs


def read_history(run_dir) -> pd.DataFrame | None:
    """A run's ``history.csv``; ``None`` if it is missing, empty, corrupt or a link out of its run
    directory (:func:`inside_run_dir`)."""
    path = Path(run_dir) / "history.csv"
    if not inside_run_dir(path):
        return None
    try:
        return pd.read_csv(path)
    except (OSError, ValueError):
        return None


def sweep_rank(sweep: Sweep) -> tuple:
    """Better sweeps rank higher: full scale before smoke, protocol-faithful before deviating,
    more of the protocol's runs completed, then the newest records (not directory names)."""
    fidelity = sweep.fidelity
    done = fidelity.completed_jobs(sweep.runs) / max(1, fidelity.expected) if fidelity else 0.0
    return (not (fidelity and fidelity.smoke), bool(fidelity and fidelity.faithful), done,
            sweep.written()[1] or "")


def find_sweeps(roots, experiment: str) -> tuple[list[Sweep], list[str]]:
    """Every readable sweep of ``experiment`` under ``<root>/sweeps/<experiment>/`` of each root,
    best first (:func:`sweep_rank`), and one sentence for each folder that is not one."""
    sweeps, refusals = sweeps_and_refusals(roots, experiment)
    return sweeps, [str(error) for error in refusals]


def sweeps_and_refusals(roots, experiment: str) -> tuple[list[Sweep], list[Exception]]:
    """:func:`find_sweeps` with each refusal as raised (``FileNotFoundError``: no record in the
    folder; ``ConfigError``: records that are no sweep of ``experiment``)."""
    sweeps, refused = [], []
    for root in roots:
        folder = Path(root) / "sweeps" / experiment
        for path in sorted(p for p in folder.glob("*") if p.is_dir()) if folder.is_dir() else []:
            try:
                sweeps.append(read_sweep(path, experiment))
            except (FileNotFoundError, ConfigError) as error:
                refused.append(error)
    return sorted(sweeps, key=sweep_rank, reverse=True), refused


def best_sweep(outputs: Path, experiment: str) -> Sweep:
    """The best sweep of ``experiment`` under ``<outputs>/sweeps/`` (:func:`sweep_rank`), read;
    where none can be, the reason the first folder holding records was refused (another
    experiment's runs, a tuning study's trials)."""
    sweeps, refused = sweeps_and_refusals([outputs], experiment)
    held = [str(error) for error in refused if isinstance(error, ConfigError)]
    if not sweeps and held:
        others = f" ({len(held) - 1} other folder(s) refused too)" if len(held) > 1 else ""
        raise ConfigError(held[0].removesuffix(".") + others + ".")
    if not sweeps:
        raise FileNotFoundError(f"no sweep of {experiment} with a run record under "
                                f"{Path(outputs) / 'sweeps' / experiment}; run "
                                f"`python train.py -m +experiment={experiment}` first.")
    return sweeps[0]


def best_sweep_dir(outputs: Path, experiment: str) -> Path:
    return best_sweep(outputs, experiment).path
