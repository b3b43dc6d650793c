"""A sweep's run records read once into a pandas frame, with its run counts: one row per
readable ``results.json`` (keys flattened: ``params.loss.k``, ``test.top5``), missing values
``None``; expected runs from the sweep's ``multirun.yaml``, read with YAML (no Hydra).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from topk.errors import ConfigError
from topk.records import STATUSES, flatten

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


def sweep_size(value) -> int | None:
    """How many values a Hydra override value sweeps over (``None``: continuous or unknown):
    ``a,b,c`` 3, ``range(3)`` 3, ``choice(a,b)`` 2, ``x`` 1."""
    text = str(value).strip()
    call = re.fullmatch(r"(\w+)\((.*)\)", text, re.S)
    name = call.group(1) if call else None
    if name in ("interval", "glob"):
        return None
    if name in ("choice", "sort", "shuffle"):
        return sweep_size(call.group(2))
    if name == "range":
        args = [float(arg) for arg in call.group(2).split(",")]
        start, stop, step = (0.0, args[0], 1.0) if len(args) == 1 else (*args, 1.0)[:3]
        return max(0, math.ceil((stop - start) / step))
    text, previous = re.sub(r"'[^']*'|\"[^\"]*\"", "", text), None
    while previous != text:  # drop quoted and bracketed parts: their commas separate no items
        previous, text = text, re.sub(r"\([^()]*\)|\[[^][]*\]|\{[^{}]*\}", "", text)
    return text.count(",") + 1


def expected_runs(sweep_dir: Path) -> tuple[int | None, int | None]:
    """Jobs (product of the sweep lists' sizes) and seeds per setting that the sweep's
    ``multirun.yaml`` asks for; ``(None, None)`` if it is absent or unreadable."""
    try:
        hydra = (yaml.safe_load((Path(sweep_dir) / "multirun.yaml").read_text()) or {})["hydra"]
        lines = [f"{key}={value}" for key, value in
                 ((hydra.get("sweeper") or {}).get("params") or {}).items()]
        lines += list((hydra.get("overrides") or {}).get("task") or [])
        sizes = {}
        for line in lines:
            key, _, value = str(line).partition("=")
            sizes[key.lstrip("+~")] = sweep_size(value)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        return None, None
    if not sizes:
        return None, None
    jobs = None if None in sizes.values() else math.prod(sizes.values())
    return jobs, sizes.get("seed", 1)


@dataclass(frozen=True)
class Sweep:
    """A sweep directory read once: its runs frame, unreadable records and expected counts."""

    path: Path
    runs: pd.DataFrame
    unreadable: tuple[str, ...]
    jobs: int | None
    seeds: int | None

    def counts(self) -> dict:
        """Runs found, per status, unreadable, expected and missing."""
        statuses = self.runs["status"].value_counts()
        found = len(self.runs) + len(self.unreadable)
        counts = {"found": found, **{s: int(statuses.get(s, 0)) for s in STATUSES},
                  "unreadable": len(self.unreadable), "expected": self.jobs}
        counts["missing"] = None if self.jobs is None else max(0, self.jobs - found)
        return counts

    def header(self) -> str:
        """One sentence: runs found, completed, failed, interrupted, running, missing."""
        c = self.counts()
        expected = (", missing unknown (no readable multirun.yaml)" if c["expected"] is None
                    else f", {c['missing']} missing ({c['expected']} expected from multirun.yaml)")
        unreadable = f", {c['unreadable']} unreadable" if c["unreadable"] else ""
        return (f"Sweep `{display_path(self.path)}`: runs {c['found']} found, {c['completed']} "
                f"completed, {c['failed']} failed, {c['interrupted']} interrupted, "
                f"{c['running']} running{unreadable}{expected}.")


def load_sweep(sweep_dir: Path) -> Sweep:
    """Every ``results.json`` below ``sweep_dir`` as one row (a missing sweep reads as empty);
    a corrupt record is counted in ``unreadable``, never fatal."""
    rows, unreadable = [], []
    for path in sorted(Path(sweep_dir).rglob("results.json")):
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as error:
            unreadable.append(f"{path}: {error}")
            continue
        rows.append({**flatten(record), "run_dir": str(path.parent)})
    runs = pd.DataFrame(rows, dtype=object)
    runs = runs.reindex(columns=[*BASE_COLUMNS, *runs.columns.difference(BASE_COLUMNS)])
    runs = runs.astype(object).where(runs.notna(), None)
    return Sweep(Path(sweep_dir), runs, tuple(unreadable), *expected_runs(sweep_dir))


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
        return sweep
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


def read_history(run_dir) -> pd.DataFrame | None:
    """A run's ``history.csv``; ``None`` if it is missing, empty or corrupt."""
    try:
        return pd.read_csv(Path(run_dir) / "history.csv")
    except (OSError, ValueError):
        return None
