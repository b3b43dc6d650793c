"""A paper's claim read as comparisons computed from our runs (:mod:`topk.report.claims`): each
comparison's verdict with the numbers it rests on, and a claim's row with the comparisons that
decided it, or the closest one when all hold (:data:`topk.report.verdicts.CLAIM_RULE`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from topk.report.fidelity import normalise
from topk.report.runs import column
from topk.report.verdicts import (
    FAILS,
    HOLDS,
    UNDECIDED,
    beats,
    combine,
    half_width,
    paired_difference,
)


@dataclass(frozen=True)
class Comparison:
    label: str
    verdict: str
    difference: float = math.nan  # mean A − B (or the value compared with a threshold)
    half: float = math.nan  # its 95 % half-width
    n: int = 0
    signed: bool = True  # a difference (+1.00), not a value compared with a bound (99.00)

    def text(self) -> str:
        if math.isnan(self.difference):
            return f"{self.label}: no value ({self.verdict})"
        spread = "" if math.isnan(self.half) else f" ± {self.half:.2f}"
        seeds = f", {self.n} seed{'s' * (self.n != 1)}" if self.n else ""
        value = f"{self.difference:{'+' if self.signed else ''}.2f}"
        return f"{self.label} = {value}{spread}{seeds} ({self.verdict})"


def compare(label: str, a: pd.Series, b: pd.Series, how: Callable = beats) -> Comparison:
    mean, half, n = paired_difference(a, b)
    return Comparison(label, how(a, b), mean, half, n)


def at_most(label: str, values: pd.Series, bound: float) -> Comparison:
    """Whether the mean of ``values`` is at most ``bound`` (its 95 % interval decides)."""
    values = values.dropna().to_numpy(dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    half = half_width(float(np.std(values, ddof=1)), n) if n > 1 else math.nan
    if n < 2 or math.isnan(half):
        return Comparison(label, UNDECIDED, mean, half, n)
    verdict = HOLDS if mean + half <= bound else FAILS if mean - half > bound else UNDECIDED
    return Comparison(label, verdict, mean, half, n)


def threshold(label: str, values: pd.Series, low: float | None = None,
              high: float | None = None) -> Comparison:
    """Whether the mean of ``values`` (one run is enough) lies in ``[low, high]``."""
    values = values.dropna()
    if values.empty:
        return Comparison(label, UNDECIDED)
    mean = float(values.mean())
    inside = (low is None or mean >= low) and (high is None or mean <= high)
    return Comparison(label, HOLDS if inside else FAILS, mean, math.nan, len(values), signed=False)


def evidence(comparisons: list[Comparison]) -> str:
    """The comparisons that decided the verdict (up to four), or the closest when all hold."""
    if not comparisons:
        return "no completed run to compare"
    deciding = sorted((c for c in comparisons if c.verdict != HOLDS), key=lambda c: c.verdict != FAILS)
    if not deciding:
        closest = min(comparisons, key=lambda c: abs(c.difference) if not math.isnan(c.difference)
                      else math.inf)
        return f"all {len(comparisons)} comparisons hold; closest: {closest.text()}"
    more = f"; … {len(deciding) - 4} more" if len(deciding) > 4 else ""
    return f"{len(deciding)} of {len(comparisons)} not holding: " + "; ".join(
        c.text() for c in deciding[:4]) + more


def seed_values(runs: pd.DataFrame, keys: dict[str, Iterable], metric: str) -> dict:
    """``{(key values…): Series(seed → metric)}`` over the completed runs."""
    frame = pd.DataFrame({name: [normalise(v) for v in values] for name, values in keys.items()},
                         index=runs.index)
    frame["seed"] = runs["seed"]
    frame["value"] = pd.to_numeric(column(runs, metric), errors="coerce")
    frame = frame[(runs["status"] == "completed").to_numpy()]
    return {key: group.set_index("seed")["value"] for key, group in frame.groupby(list(keys))}


def s20_says(claims: pd.DataFrame) -> list[str]:
    """Each claim's own sentence in S20 and where it stands (the ``quote`` and ``location`` of
    ``s20_synthetic_claims.csv``), as the report shows it beside our paraphrase."""
    return [f"\"{quote}\" ({location})" for quote, location in zip(claims["quote"], claims["location"])]


def claim_row(setting: str, claim: str, read_as: str, comparisons: list[Comparison]) -> dict:
    return {"setting": setting, "claim": claim, "read as": read_as,
            "verdict": combine(c.verdict for c in comparisons), "numbers": evidence(comparisons)}


def claims_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["setting", "claim", "read as", "verdict", "numbers"])
