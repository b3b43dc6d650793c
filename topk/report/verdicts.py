"""Verdicts: does ours agree with a published number, and does a comparison hold over seeds.

Both rest on Student's t 95 % intervals: of our mean over completed seeds (a table cell), and of
the mean difference between two losses over the seeds they share (a paper's claim, paired: the
losses of one seed see the same data and initialisation draw). A published number comes with a
spread s: the paper's std, or where it reports none the standard error that its test sample
alone gives an accuracy (:func:`binomial_se`, :func:`macro_se`), so that one run can be judged too.
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
    "Verdict per cell: s is the paper's spread, its reported std, else the standard error its "
    "number has from the test sample alone (shown as \"se\"): √(p(1 − p)/N) for an accuracy p "
    "(the paper's) on the N samples our runs evaluated (their records' `samples`), "
    "√(Σ_c v_c)/C for a macro average over C classes (v_c = p_c(1 − p_c)/(N_c − 1), our class "
    "accuracy p_c on its N_c test samples, 1/4 where N_c = 1). With n ≥ 2 completed seeds, ours "
    "*agrees* when |ours − paper| ≤ h + s, where h = t(0.975, n − 1) · std / √n is the "
    "half-width of our 95 % interval (shown as [low, high]) and s = 0 where no spread is known; "
    "with one run, it agrees when |ours − paper| ≤ 2s; one run of a metric without a spread "
    "(a training accuracy, a time ratio) is *too few runs* (the table says why). Anything else "
    "*differs*.")
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


def binomial_se(percent: float, size) -> float:
    """Standard error in percentage points of an accuracy of ``percent`` % counted on ``size``
    samples, each a hit or a miss: 100 · √(p(1 − p)/N) (NaN without a size)."""
    p = percent / 100
    if not size or size < 1 or not 0 <= p <= 1:
        return math.nan
    return 100 * math.sqrt(p * (1 - p) / size)


def macro_se(per_class, sizes) -> float:
    """Standard error in percentage points of a macro-average accuracy, the mean over the C
    classes with a sample of the class accuracies p_c (%, ``per_class``) on N_c samples
    (``sizes``): √(Σ_c v_c)/C, v_c = p_c(1 − p_c)/(N_c − 1) the unbiased estimate of the
    variance of class c's accuracy, and 1/4 (a hit-or-miss variable's largest variance) for a
    class with one sample, whose estimate is undefined (its plug-in value is always 0)."""
    variances = []
    for percent, size in zip(per_class, sizes):
        if percent is None or not size:
            continue
        p = percent / 100
        variances.append(0.25 if size == 1 else p * (1 - p) / (size - 1))
    return 100 * math.sqrt(sum(variances)) / len(variances) if variances else math.nan


def paper_spread(paper_std, sampling_se) -> float:
    """s of :data:`CELL_RULE`: the paper's std, else its number's sampling error, else 0."""
    for spread in (paper_std, sampling_se):
        if spread is not None and not math.isnan(spread):
            return spread
    return 0.0


def cell_verdict(mean: float, std: float, n: int, paper: float, paper_std: float,
                 sampling_se: float = math.nan) -> str:
    """:data:`CELL_RULE` for one table cell ("" where the paper has no number); ``sampling_se``
    is the paper's number's standard error from its test sample (:func:`binomial_se`,
    :func:`macro_se`), used where the paper reports no std."""
    if paper is None or math.isnan(paper):
        return ""
    spread = paper_spread(paper_std, sampling_se)
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
