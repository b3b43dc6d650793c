"""Verdicts: does ours agree with a published number, and does a comparison hold over seeds.

Both rest on Student's t 95 % intervals: of our mean over completed seeds (a table cell), and of
the mean difference between two losses over the seeds they share (a paper's claim, paired: the
losses of one seed see the same data and initialisation draw).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd

# t(0.975, df) for df = 1…30, from any table of Student's t distribution (e.g. NIST/SEMATECH
# e-Handbook of Statistical Methods, §1.3.6.7.2); beyond 30 the Cornish–Fisher expansion below.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060,
        2.056, 2.052, 2.048, 2.045, 2.042)
AGREES, DIFFERS, TOO_FEW = "agrees", "differs", "too few runs"
HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "undecided"
CELL_RULE = (
    "Verdict per cell: with n ≥ 2 completed seeds, ours *agrees* when |ours − paper| ≤ h + s, "
    "where h = t(0.975, n − 1) · std / √n is the half-width of our 95 % interval (shown as "
    "[low, high]) and s the paper's reported std (0 where it reports none); with one run, it "
    "agrees when the paper reports a std s and |ours − paper| ≤ 2s; otherwise *too few runs*. "
    "Anything else *differs*.")
CLAIM_RULE = (
    "Verdict per claim: each claim is read as the comparisons in its \"read as\" column; "
    "\"A beats B\" holds when the 95 % t-interval of the mean difference A − B over the seeds "
    "both completed lies above 0 (does not hold: below 0; undecided: it contains 0, or fewer than "
    "2 seeds); \"A is (about) the best\" holds unless another loss beats A in that sense. A claim "
    "holds when all its comparisons hold, does not hold when one does not, else it is undecided.")


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom."""
    if df <= len(T975):
        return T975[df - 1]
    z = NormalDist().inv_cdf(0.975)
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def half_width(std, n: int) -> float:
    """Half-width of the 95 % interval of a mean of ``n`` values with sample std ``std``."""
    return t975(n - 1) * std / math.sqrt(n) if n >= 2 and not math.isnan(std) else math.nan


def cell_verdict(mean: float, std: float, n: int, paper: float, paper_std: float) -> str:
    """:data:`CELL_RULE` for one table cell ("" where the paper has no number)."""
    if paper is None or math.isnan(paper):
        return ""
    spread = 0.0 if paper_std is None or math.isnan(paper_std) else paper_std
    if n >= 2:
        return AGREES if abs(mean - paper) <= half_width(std, n) + spread else DIFFERS
    if n == 1 and spread > 0:
        return AGREES if abs(mean - paper) <= 2 * spread else DIFFERS
    return TOO_FEW


def paired_difference(a: pd.Series, b: pd.Series) -> tuple[float, float, int]:
    """Mean of ``a − b`` over the seeds (index) both have, its 95 % half-width and count."""
    both = pd.concat([a, b], axis=1, join="inner").dropna()
    diff = (both.iloc[:, 0] - both.iloc[:, 1]).to_numpy(dtype=float)
    if len(diff) == 0:
        return math.nan, math.nan, 0
    std = float(np.std(diff, ddof=1)) if len(diff) > 1 else math.nan
    return float(diff.mean()), half_width(std, len(diff)), len(diff)


def beats(a: pd.Series, b: pd.Series) -> str:
    """Whether ``a`` beats ``b`` over the seeds both have (:data:`CLAIM_RULE`)."""
    mean, half, n = paired_difference(a, b)
    if n < 2 or math.isnan(half):
        return UNDECIDED
    return HOLDS if mean - half > 0 else FAILS if mean + half < 0 else UNDECIDED


def not_beaten(a: pd.Series, b: pd.Series) -> str:
    """Whether ``a`` is at least as good as ``b``: ``b`` does not beat it."""
    mean, half, n = paired_difference(b, a)
    if n < 2 or math.isnan(half):
        return UNDECIDED
    return FAILS if mean - half > 0 else HOLDS


def combine(verdicts) -> str:
    verdicts = list(verdicts)
    if not verdicts:
        return UNDECIDED
    return FAILS if FAILS in verdicts else HOLDS if all(v == HOLDS for v in verdicts) else UNDECIDED
