"""The papers' claims about their figures, each read as comparisons computed from our runs.

A claim's verdict (holds / does not hold / undecided, :data:`topk.report.verdicts.CLAIM_RULE`)
comes with the numbers it rests on: the comparisons that decided it, or the closest one when all
hold. S20's synthetic claims are the rows of ``topk/paper_results/s20_synthetic_claims.csv``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from topk.report.protocol import normalise, shown
from topk.report.runs import column, number
from topk.report.verdicts import (
    FAILS,
    HOLDS,
    UNDECIDED,
    beats,
    combine,
    half_width,
    not_beaten,
    paired_difference,
)

TOP2 = ("topk_group", "topk_transition")


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


# ------------------------------------------------------------------------ S20 Figs. 2–4


def seed_values(runs: pd.DataFrame, keys: dict[str, Iterable], metric: str) -> dict:
    """``{(key values…): Series(seed → metric)}`` over the completed runs."""
    frame = pd.DataFrame({name: [normalise(v) for v in values] for name, values in keys.items()},
                         index=runs.index)
    frame["seed"] = runs["seed"]
    frame["value"] = pd.to_numeric(column(runs, metric), errors="coerce")
    frame = frame[(runs["status"] == "completed").to_numpy()]
    return {key: group.set_index("seed")["value"] for key, group in frame.groupby(list(keys))}


@dataclass(frozen=True)
class S20Claim:
    """One row of S20's synthetic claims: which settings it covers and how it is read."""

    covers: Callable[[float], bool]
    read_as: str
    comparisons: Callable[[dict, list], list[Comparison]]


def _series(values, setting, loss, metric) -> pd.Series:
    return values[metric].get((setting, loss), pd.Series(dtype=float))


def _each(values, settings, metrics, pairs, how=beats, name="σ") -> list[Comparison]:
    """``how(a, b)`` for every setting, metric and (a, b) pair."""
    return [compare(f"{name} = {shown(s)} {m}: {a} − {b}", _series(values, s, a, m),
                    _series(values, s, b, m), how)
            for s in settings for m in metrics for a, b in pairs]


def _lead(values, settings, metric, other) -> pd.Series:
    """CE − ``other`` per seed, averaged over ``settings``."""
    leads = [_series(values, s, "ce", metric) - _series(values, s, other, metric) for s in settings]
    return pd.concat(leads, axis=1).mean(axis=1) if leads else pd.Series(dtype=float)


def _spread(values, setting) -> list[Comparison]:
    """Top-1 min–max range over seeds of each top-2 loss above CE's (descriptive)."""
    ce = _series(values, setting, "ce", "top1")
    out = []
    for loss in TOP2:
        mine = _series(values, setting, loss, "top1")
        if len(mine) < 2 or len(ce) < 2:
            out.append(Comparison(f"σ = {shown(setting)} top-1 range {loss} − ce", UNDECIDED))
            continue
        gap = float(mine.max() - mine.min() - (ce.max() - ce.min()))
        out.append(Comparison(f"σ = {shown(setting)} top-1 range {loss} − ce",
                              HOLDS if gap > 0 else FAILS, gap, math.nan, len(mine)))
    return out


BOTH = ("top1", "top2")
CE_OVER = [("ce", loss) for loss in TOP2]
OVER_CE = [(loss, "ce") for loss in TOP2]
S20_CLAIMS = {
    ("s20_exp1", "all sigma"): S20Claim(
        lambda s: True, "at every σ, in top-1 and top-2, no top-2 loss beats CE",
        lambda v, ss: _each(v, ss, BOTH, CE_OVER, not_beaten)),
    ("s20_exp1", "sigma<20"): S20Claim(
        lambda s: s < 20, "at σ < 20 CE beats each top-2 loss in top-1 and top-2; at σ = 15 each "
        "top-2 loss's top-1 min–max range over seeds is wider than CE's",
        lambda v, ss: _each(v, ss, BOTH, CE_OVER) + (_spread(v, 15.0) if 15.0 in ss else [])),
    ("s20_exp1", "sigma>=20"): S20Claim(
        lambda s: s >= 20, "over σ ≥ 20, CE's mean lead over each top-2 loss is at most 2 points "
        "in top-1 and top-2 (95 % interval)",
        lambda v, ss: [at_most(f"σ ≥ 20 {m}: lead of ce over {loss}", _lead(v, ss, m, loss), 2.0)
                       for m in BOTH for loss in TOP2]),
    ("s20_exp2", "d<=45"): S20Claim(
        lambda s: s <= 45, "at d ≤ 45 CE beats each top-2 loss in top-1 and top-2",
        lambda v, ss: _each(v, ss, BOTH, CE_OVER, name="d")),
    ("s20_exp2", "d>=60"): S20Claim(
        lambda s: s >= 60, "at d ≥ 60 each top-2 loss beats CE in top-2, and CE beats each in top-1",
        lambda v, ss: _each(v, ss, ("top2",), OVER_CE, name="d")
        + _each(v, ss, ("top1",), CE_OVER, name="d")),
    ("s20_exp3", "m<=4"): S20Claim(
        lambda s: s <= 4, "at m ≤ 4, in top-2, some top-2 loss beats CE (at each m)",
        lambda v, ss: [_some_beats_ce(v, s) for s in ss]),
    ("s20_exp3", "m>=8"): S20Claim(
        lambda s: s >= 8, "at m ≥ 8, in top-1 and top-2, no top-2 loss beats CE",
        lambda v, ss: _each(v, ss, BOTH, CE_OVER, not_beaten, name="m")),
}


def _some_beats_ce(values, setting) -> Comparison:
    tries = _each(values, [setting], ("top2",), OVER_CE, name="m")
    verdict = (HOLDS if any(c.verdict == HOLDS for c in tries) else
               FAILS if all(c.verdict == FAILS for c in tries) else UNDECIDED)
    best = max(tries, key=lambda c: -math.inf if math.isnan(c.difference) else c.difference)
    return Comparison(best.label, verdict, best.difference, best.half, best.n)


def s20_says(claims: pd.DataFrame) -> list[str]:
    """Each claim's own sentence in S20 and where it stands (the ``quote`` and ``location`` of
    ``s20_synthetic_claims.csv``), as the report shows it beside our paraphrase."""
    return [f"\"{quote}\" ({location})" for quote, location in zip(claims["quote"], claims["location"])]


def s20_synthetic_claims(experiment: str, runs: pd.DataFrame, parameter: str,
                         claims: pd.DataFrame) -> pd.DataFrame:
    """S20's claims for ``experiment`` with our verdict and its numbers (columns setting, claim,
    S20 says: the sentence claimed and its section and figure, read as, verdict, numbers)."""
    settings = column(runs, f"params.{parameter}")
    values = {m: seed_values(runs, {"s": settings, "loss": runs["loss"]}, f"test.{m}") for m in BOTH}
    present = sorted({normalise(s) for s in settings if number(s) is not None})
    rows = []
    for setting, claim, says in zip(claims["setting"], claims["claim"], s20_says(claims)):
        rule = S20_CLAIMS[(experiment, setting)]
        comparisons = rule.comparisons(values, [s for s in present if rule.covers(s)])
        rows.append({"setting": setting, "claim": claim, "S20 says": says, "read as": rule.read_as,
                     "verdict": combine(c.verdict for c in comparisons),
                     "numbers": evidence(comparisons)})
    return pd.DataFrame(rows, columns=["setting", "claim", "S20 says", "read as", "verdict", "numbers"])


def claim_row(setting: str, claim: str, read_as: str, comparisons: list[Comparison]) -> dict:
    return {"setting": setting, "claim": claim, "read as": read_as,
            "verdict": combine(c.verdict for c in comparisons), "numbers": evidence(comparisons)}


def claims_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["setting", "claim", "read as", "verdict", "numbers"])


# ------------------------------------------------------------------------ S20 Fig. 6


def s20_cifar_claims(runs: pd.DataFrame, ks: list[int], claims: pd.DataFrame) -> pd.DataFrame:
    """S20's two CIFAR-100 claims (ResNet-18 with Mixup) on one panel's runs, each beside its
    sentence in S20 (column S20 says)."""
    values = {k: seed_values(runs, {"loss": runs["loss"]}, f"test.top{k}") for k in ks}
    losses = sorted({key[0] for by_loss in values.values() for key in by_loss})

    def series(k, loss):
        return values[k].get((loss,), pd.Series(dtype=float))

    def best(loss, k):
        return [compare(f"k = {k}: {loss} − {other}", series(k, loss), series(k, other), not_beaten)
                for other in losses if other != loss]
    ranking = ([c for k in ks if k <= 2 for c in best("ce", k)]
               + [c for k in ks if k >= 3 for c in best("topk_transition", k)]
               + [compare(f"k = {k}: topk_group − ce", series(k, "topk_group"), series(k, "ce"))
                  for k in ks if k >= 6])
    means = {loss: {k: series(k, loss).mean() for k in ks} for loss in losses}
    reach = {loss: min((k for k, m in by_k.items() if m >= 99.0), default=None)
             for loss, by_k in means.items()}
    seeds = min((len(series(k, loss)) for k in ks for loss in ("ce", "topk_transition")), default=0)
    if seeds < 2:
        reaching = [Comparison("smallest k reaching 99 %", UNDECIDED)]
    else:
        transition, ce = reach.get("topk_transition"), reach.get("ce")
        reaching = [Comparison("smallest k where the transition loss reaches 99 %",
                               HOLDS if transition is not None and abs(transition - 25) <= 3 else FAILS,
                               math.nan if transition is None else float(transition)),
                    Comparison(f"smallest k ≤ {max(ks)} where CE reaches 99 %",
                               HOLDS if ce is None else FAILS, math.nan if ce is None else float(ce))]
    read = ["for k ≤ 2 no loss beats CE, for k ≥ 3 no loss beats the top-5 transition loss, and "
            "for k ≥ 6 top-5 grouping beats CE",
            "the transition loss's mean top-k accuracy first reaches 99 % at k = 25 ± 3, CE's "
            f"not by k = {max(ks)} (S20: k = 33)"]
    frame = claims_frame([claim_row(s, c, r, comparisons) for (s, c), r, comparisons in
                          zip(zip(claims["setting"], claims["claim"]), read, (ranking, reaching))])
    frame.insert(2, "S20 says", s20_says(claims))
    return frame


# ------------------------------------------------------------------------ G22 Fig. 3


def g22_time_claims(ratios: pd.Series, lines: pd.Series, ks: pd.Series, repeats: pd.Series,
                    claim: str, setting: str) -> pd.DataFrame:
    """G22's claim that the smoothed hinge's epoch time grows with K and the noised loss's does
    not, on each run's epoch-time ratio to CE (smooth SVM timed once per B: three repeats);
    ``setting`` names what the runs timed (:func:`topk.report.figures.g22_time_setting`)."""
    frame = pd.DataFrame({"ratio": pd.to_numeric(ratios, errors="coerce"), "line": lines,
                          "k": pd.to_numeric(ks, errors="coerce"), "repeat": repeats}).dropna(
        subset=["ratio", "k"])
    comparisons = []
    if frame["k"].nunique() < 2:
        comparisons.append(Comparison("ratios at two values of K", UNDECIDED))
    else:
        low, high = frame["k"].min(), frame["k"].max()
        svm = frame[frame["line"] == "smooth_svm"]
        at = {k: svm[svm["k"] == k].set_index("repeat")["ratio"] for k in (low, high)}
        growth = compare(f"smooth_svm ratio at K = {high:g} − at K = {low:g}", at[high], at[low])
        comparisons.append(growth)
        for line, group in frame[frame["line"].str.startswith("noised")].groupby("line"):
            by_k = group.groupby("k")["ratio"].mean()
            if {low, high} <= set(by_k.index) and not math.isnan(growth.difference):
                comparisons.append(threshold(
                    f"{line} growth from K = {low:g} to {high:g} (below smooth_svm's "
                    f"{growth.difference:+.2f})", pd.Series([by_k[high] - by_k[low]]),
                    high=growth.difference))
    read = ("the smooth SVM's ratio grows from the smallest to the largest K (paired over its "
            "repeats), and each noised loss's grows less")
    return claims_frame([claim_row(setting, claim, read, comparisons)])


# ------------------------------------------------------------------------ B18 Fig. 2a


def b18_tau_claims(last: list[dict], claim: str) -> pd.DataFrame:
    """B18's claim on training: τ ≥ 0.01 fits the training set, τ = 0 and 0.001 do not (the
    last logged training top-5 accuracy of each run, :func:`topk.report.figures.b18_tau_observations`)."""
    accuracy = pd.DataFrame([{"tau": e["line"], "value": 100.0 - e["value"]} for e in last
                             if e["value"] is not None and e["line"] is not None])
    comparisons = []
    for tau, group in (accuracy.groupby("tau") if not accuracy.empty else []):
        fits = tau >= 0.01
        comparisons.append(threshold(f"τ = {tau:g} last training top-5 accuracy", group["value"],
                                     low=95.0 if fits else None, high=None if fits else 50.0))
    read = ("every τ ≥ 0.01 ends with a training top-5 accuracy of at least 95 %, τ = 0 and "
            "τ = 0.001 with at most 50 %")
    return claims_frame([claim_row("DenseNet 40-12, CIFAR-100", claim, read, comparisons)])
