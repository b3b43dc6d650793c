"""A sweep's run records read once into a pandas frame, with its run counts: one row per
readable ``results.json`` (keys flattened: ``params.loss.k``, ``test.top5``), missing values
``None``, runs in job order (0, 1, 2, …, 10). The expected runs are the experiment's protocol's
(:mod:`topk.report.protocol`), never the sweep's own, possibly narrowed, ``multirun.yaml``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from topk.errors import ConfigError
from topk.records import STATUSES, flatten
from topk.report.protocol import Fidelity, assess

UNFINISHED = STATUSES[1:]
BASE_COLUMNS = ("status", "experiment", "loss", "model", "augment", "seed", "selection_metric",
                "best_epoch", "epoch_seconds", "run_dir")


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

    @property
    def jobs(self) -> int | None:
        """Runs the protocol asks for (``None``: no experiment to compare with)."""
        return None if self.fidelity is None else self.fidelity.expected

    @property
    def seeds(self) -> int | None:
        """Seeds per setting the protocol asks for."""
        return None if self.fidelity is None else self.fidelity.protocol.seeds

    def counts(self) -> dict:
        """Runs found, per status, unreadable, expected and missing (protocol jobs no run
        answers)."""
        statuses = self.runs["status"].value_counts()
        found = len(self.runs) + len(self.unreadable)
        counts = {"found": found, **{s: int(statuses.get(s, 0)) for s in STATUSES},
                  "unreadable": len(self.unreadable), "expected": self.jobs}
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
        """One sentence: runs found, completed, failed, interrupted, running, missing."""
        c = self.counts()
        expected = (", missing unknown (no protocol to compare with)" if c["expected"] is None
                    else f", {c['missing']} of the protocol's {c['expected']} runs missing")
        unreadable = f", {c['unreadable']} unreadable" if c["unreadable"] else ""
        return (f"Sweep `{display_path(self.path)}`: runs {c['found']} found, {c['completed']} "
                f"completed, {c['failed']} failed, {c['interrupted']} interrupted, "
                f"{c['running']} running{unreadable}{expected}.")


def utc_text(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def job_order(path: Path) -> tuple:
    """Natural order of record paths: job 2 before job 10."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in path.parent.parts)


def load_sweep(sweep_dir: Path, experiment: str | None = None) -> Sweep:
    """Every ``results.json`` below ``sweep_dir`` as one row, in job order (a missing sweep reads
    as empty); a corrupt record is counted in ``unreadable``, never fatal. With ``experiment``
    the runs are compared with its protocol (:func:`topk.report.protocol.assess`)."""
    rows, unreadable = [], []
    for path in sorted(Path(sweep_dir).rglob("results.json"), key=job_order):
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as error:
            unreadable.append(f"{path}: {error}")
            continue
        params = record.get("params") if isinstance(record.get("params"), dict) else {}
        rows.append({**flatten(record), "run_dir": str(path.parent), "_params": params})
    runs = pd.DataFrame(rows, dtype=object)
    runs = runs.reindex(columns=[*BASE_COLUMNS, *runs.columns.difference(BASE_COLUMNS)])
    runs = runs.astype(object).where(runs.notna(), None)
    fidelity = assess(runs, sweep_dir, experiment) if experiment else None
    return Sweep(Path(sweep_dir), runs, tuple(unreadable), fidelity)


def read_sweep(sweep_dir: Path, experiment: str) -> Sweep:
    """:func:`load_sweep` for a table or figure of ``experiment``, refusing in one sentence a
    missing sweep, one without a readable record, and one holding runs of another experiment or
    of none, alone or mixed with the experiment's own (their numbers belong elsewhere)."""
    command = f"`python train.py -m +experiment={experiment}`"
    if not Path(sweep_dir).is_dir():
        raise FileNotFoundError(f"no sweep directory {sweep_dir}; run {command} first.")
    sweep = load_sweep(sweep_dir)
    if sweep.runs.empty:
        broken = f" ({len(sweep.unreadable)} unreadable)" if sweep.unreadable else ""
        raise FileNotFoundError(f"no run record (results.json) under {sweep_dir}{broken}; run "
                                f"{command} first.")
    runs = sweep.runs
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
    selected model's, and ``selection_metric = metric`` (its per-class accuracies, which are the
    selected model's, are left out); other runs stay as they are. One training run thus gives a
    column per selection metric (S20 Table I)."""
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


def read_history(run_dir) -> pd.DataFrame | None:
    """A run's ``history.csv``; ``None`` if it is missing, empty or corrupt."""
    try:
        return pd.read_csv(Path(run_dir) / "history.csv")
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
    sweeps, refused = [], []
    for root in roots:
        folder = Path(root) / "sweeps" / experiment
        for path in sorted(p for p in folder.glob("*") if p.is_dir()) if folder.is_dir() else []:
            try:
                sweeps.append(read_sweep(path, experiment))
            except (FileNotFoundError, ConfigError) as error:
                refused.append(str(error))
    return sorted(sweeps, key=sweep_rank, reverse=True), refused


def best_sweep(outputs: Path, experiment: str) -> Sweep:
    """The best sweep of ``experiment`` under ``<outputs>/sweeps/`` (:func:`sweep_rank`), read."""
    sweeps, _ = find_sweeps([outputs], experiment)
    if not sweeps:
        raise FileNotFoundError(f"no sweep of {experiment} with a run record under "
                                f"{Path(outputs) / 'sweeps' / experiment}; run "
                                f"`python train.py -m +experiment={experiment}` first.")
    return sweeps[0]


def best_sweep_dir(outputs: Path, experiment: str) -> Path:
    return best_sweep(outputs, experiment).path
