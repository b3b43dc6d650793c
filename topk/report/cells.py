"""What tables and figures share: a cell's statistics over seeds, its counts, key order, text."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from topk.report.runs import UNFINISHED, number

COUNTS = ("n", "runs", *UNFINISHED, "no_value", "missing")


def observation(status, seed, value, **keys) -> dict:
    """One run's share of a cell; its value counts only if the run completed."""
    done = status == "completed"
    return {**keys, "seed": seed, "status": status, "value": number(value) if done else None}


def summarise_cell(entries: list[dict], expected_seeds: int | None) -> dict:
    """``mean`` and ``std`` (ddof=1) over the completed runs with a value, ``n`` of them,
    ``runs``, counts of each unfinished status, ``no_value`` and ``missing`` seeds, ``seeds``."""
    values = [e["value"] for e in entries if e["value"] is not None]
    statuses = Counter(e["status"] for e in entries)
    seeds = {e["seed"] for e in entries}
    return {
        "mean": float(np.mean(values)) if values else math.nan,
        "std": float(np.std(values, ddof=1)) if len(values) > 1 else math.nan,
        "n": len(values), "runs": len(entries), **{s: statuses.get(s, 0) for s in UNFINISHED},
        "no_value": statuses.get("completed", 0) - len(values),
        "missing": max(0, expected_seeds - len(seeds)) if expected_seeds else 0,
        "seeds": " ".join(str(s) for s in sorted(seeds, key=str)),
    }


def summarise_groups(entries: Iterable[dict], keys: tuple[str, ...],
                     expected_seeds: int | None) -> dict[tuple, dict]:
    """:func:`summarise_cell` of the entries sharing each value of ``keys``, in first-seen order."""
    groups: dict[tuple, list] = {}
    for entry in entries:
        groups.setdefault(tuple(entry[key] for key in keys), []).append(entry)
    return {key: summarise_cell(group, expected_seeds) for key, group in groups.items()}


def count_text(cell: Mapping, unit: str = "seeds") -> str:
    """"3/3 seeds", "2/3 seeds, 1 failed", "no run"."""
    if cell["runs"] == 0:
        return "no run"
    parts = [f"{cell['n']}/{cell['runs'] + cell['missing']} {unit}"]
    parts += [f"{cell[kind]} {kind.replace('_', ' ')}" for kind in COUNTS[2:] if cell[kind]]
    return ", ".join(parts)


def fmt(value, digits: int = 2, sign: bool = False, missing: str = "–") -> str:
    value = number(value)
    return missing if value is None else f"{value:{'+' if sign else ''}.{digits}f}"


def mean_text(mean, std=None, digits: int = 2, missing: str = "–") -> str:
    """"91.35 ± 0.20", "91.35" without a std, ``missing`` without a mean."""
    if number(mean) is None:
        return missing
    return fmt(mean, digits) + ("" if number(std) is None else f" ± {std:.{digits}f}")


def normalise_key(value):
    """Numbers → float (so 0, 0.0 and 1230000 match the CSV's), NaN → None, the rest → str."""
    if value is None or isinstance(value, bool):
        return value
    if number(value) is not None:
        return number(value)
    return None if isinstance(value, float) else str(value)


def display(value) -> str:
    """A key as printed: 0.2, 1230000, 0.0001, resnet18; missing → "–"."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def whole_numbers(values: pd.Series) -> pd.Series:
    """``values`` as numbers, whole ones as integers (``Int64``) where every known one is whole
    and exact in float64 (a config value such as ``dataset.d`` = 30.0 prints as 30, not 30.00,
    in a table whose floats get two decimals), else as floats."""
    numbers = pd.to_numeric(values, errors="coerce")
    known = numbers.dropna()
    whole = (known.abs() < 2**53).all() and (known == known.round()).all()
    return numbers.astype("Int64") if whole else numbers


def _sort_key(key) -> tuple:
    """Numbers first, by value; then text in natural order ("B=3" before "B=10"); a tuple key
    part by part."""
    if isinstance(key, tuple):
        return tuple(map(_sort_key, key))
    if isinstance(key, float):
        return (0, key, ())
    parts = re.split(r"(\d+)", str(key))
    return (1, 0.0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts))


def in_order(keys: Iterable, first: Iterable) -> list:
    """``first`` in its order, then the other ``keys`` in natural order."""
    first = list(dict.fromkeys(first))
    return first + sorted(set(keys) - set(first), key=_sort_key)


def ordered(keys: Iterable, first: Iterable, sort_all: bool = False) -> list:
    """:func:`in_order`, but everything sorted if ``sort_all`` or if ``first`` (the paper's
    order) is already ascending."""
    first = list(dict.fromkeys(first))
    if sort_all or first == sorted(first, key=_sort_key):
        return sorted(set(keys) | set(first), key=_sort_key)
    return in_order(keys, first)
