"""The papers' claims about their figures and tables, each read as comparisons computed from our
runs (:mod:`topk.report.comparisons`).

A claim's verdict (holds / does not hold / undecided, :data:`topk.report.verdicts.CLAIM_RULE`)
comes with the numbers it rests on: the comparisons that decided it, or the closest one when all
hold. S20's synthetic claims are the rows of ``topk/paper_results/s20_synthetic_claims.csv``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from topk.report.comparisons import (
    Comparison,
    at_most,
    claim_row,
    claims_frame,
    compare,
    evidence,
    s20_says,
    seed_values,
    threshold,
)
from topk.report.fidelity import normalise, shown
from topk.report.runs import column, number, selected_by
from topk.report.verdicts import (
    FAILS,
    HOLDS,
    UNDECIDED,
    beats,
    combine,
    not_beaten,
)

TOP2 = ("topk_group", "topk_transition")


# ------------------------------------------------------------------------ S20 Figs. 2–4


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


# ------------------------------------------------------------------------ S20 Fig. 6


def ce_reaching(ce: int | None, last_k: int) -> Comparison:
    """S20 §V-B's CE side of "k = 25 saving 8": CE's mean first reaches 99 % at k = 33 ± 3. Runs
    that record top-k only up to ``last_k`` < 36 (s20_cifar recorded k ≤ 30 before) can only show
    that CE has not reached it by then."""
    if last_k < 36:
        return Comparison(f"smallest k ≤ {last_k} where CE reaches 99 %", HOLDS if ce is None else FAILS,
                          math.nan if ce is None else float(ce))
    return Comparison("smallest k where CE reaches 99 %",
                      HOLDS if ce is not None and abs(ce - 33) <= 3 else FAILS,
                      math.nan if ce is None else float(ce))


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
    plotted = [k for k in ks if k <= FIG6_LAST_K]
    ranking = ([c for k in plotted if k <= 2 for c in best("ce", k)]
               + [c for k in plotted if k >= 3 for c in best("topk_transition", k)]
               + [compare(f"k = {k}: topk_group − ce", series(k, "topk_group"), series(k, "ce"))
                  for k in plotted if k >= 6])
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
                    ce_reaching(ce, max(ks))]
    read = ["for k ≤ 2 no loss beats CE, for k ≥ 3 no loss beats the top-5 transition loss, and "
            "for k ≥ 6 top-5 grouping beats CE",
            "the transition loss's mean top-k accuracy first reaches 99 % at k = 25 ± 3, CE's at "
            f"k = 33 ± 3 (S20: 'saving 8'; runs recording k ≤ {max(ks)} < 36 can only show it is not "
            "reached by then)"]
    frame = claims_frame([claim_row(s, c, r, comparisons) for (s, c), r, comparisons in
                          zip(zip(claims["setting"], claims["claim"]), read, (ranking, reaching))])
    frame.insert(2, "S20 says", s20_says(claims))
    return frame


# ------------------------------------------------------------------------ S20 Table I and §V-B

S20_PANELS = (("resnet18", "cutout"), ("resnet18", "mixup"), ("densenet121", "cutout"),
              ("densenet121", "mixup"))
S20_LOSSES = ("ce", "smooth_svm", "topk_group", "topk_transition")
TABLE_METRICS = ("top1", "top5")  # Table I's columns, each of the models selected by its own


def s20_losses(augment: str) -> tuple[str, ...]:
    """The losses of an S20 Table I panel: the smooth top-5 SVM with Mixup is N/A there."""
    return tuple(loss for loss in S20_LOSSES if not (loss == "smooth_svm" and augment == "mixup"))


class S20Values:
    """Per seed, the test accuracy of each (model, augmentation, loss) of an ``s20_cifar`` sweep,
    of the models selected by ``val/<selection>`` (:func:`topk.report.runs.selected_by`; a sweep
    without that selection counts every run, as the table does). Table I's top-1 and top-5 are
    each read from the models selected by the same metric (S20 §V-A: ``table=True``); the top-k
    curves of Fig. 6's text from the models selected by val top-5 (inferred: S20 does not say
    which selection Fig. 6 plots; top-5 is its target)."""

    def __init__(self, runs: pd.DataFrame, table: bool):
        self.runs, self.table, self.chosen, self.values = runs, table, {}, {}

    def selected(self, selection: str) -> pd.DataFrame:
        """The runs as selected by ``val/<selection>``, read once."""
        if selection not in self.chosen:
            chosen = selected_by(self.runs, f"val/{selection}")
            kept = chosen["selection_metric"] == f"val/{selection}"
            self.chosen[selection] = chosen[kept.to_numpy(dtype=bool)] if kept.any() else chosen
        return self.chosen[selection]

    def __call__(self, model: str, augment: str, loss: str, metric: str) -> pd.Series:
        selection = metric if self.table else "top5"
        if metric not in self.values:
            chosen = self.selected(selection)
            keys = {name: chosen[name] for name in ("model", "augment", "loss")}
            self.values[metric] = seed_values(chosen, keys, f"test.{metric}")
        return self.values[metric].get((model, augment, loss), pd.Series(dtype=float))


def _s20_pairs(get, panels, pairs, metrics, how=beats) -> list[Comparison]:
    """``how(a, b)`` in every panel, for every metric and (a, b) pair of the panel's losses."""
    return [compare(f"{model} + {augment} {metric}: {a} − {b}", get(model, augment, a, metric),
                    get(model, augment, b, metric), how)
            for model, augment in panels for metric in metrics for a, b in pairs(augment)]


def _pair(a: str, b: str):
    """The pairs of a panel: (a, b) in every panel."""
    return lambda augment: [(a, b)]


def _against(b: str, losses: tuple[str, ...]):
    """The pairs of a panel: (loss, b) for each of ``losses`` the panel has."""
    return lambda augment: [(loss, b) for loss in s20_losses(augment) if loss in losses]


def _over_others(a: str):
    """The pairs of a panel: (a, other) for every other loss the panel has."""
    return lambda augment: [(a, other) for other in s20_losses(augment) if other != a]


def _s20_best(get, panels, loss, metrics) -> list[Comparison]:
    """No other loss of the panel beats ``loss``, in every panel, for every metric."""
    return _s20_pairs(get, panels, _over_others(loss), metrics, not_beaten)


def _s20_best_per_model(get) -> list[Comparison]:
    """Per model, no (loss, augmentation) beats the transition loss with Mixup in top-5."""
    return [compare(f"{model} top5: topk_transition + mixup − {loss} + {augment}",
                    get(model, "mixup", "topk_transition", "top5"),
                    get(model, augment, loss, "top5"), not_beaten)
            for model in ("resnet18", "densenet121") for augment in ("cutout", "mixup")
            for loss in s20_losses(augment) if (loss, augment) != ("topk_transition", "mixup")]


def _s20_turning_points(get, panels, ks) -> list[Comparison]:
    """Fig. 6's turning points: for k ≤ 2 no loss beats CE, for k ≥ 3 the transition loss
    beats CE, for k ≥ 6 grouping does (k ≤ 10, the k Fig. 6 plots)."""
    shown = [k for k in ks if k <= 10]
    return (_s20_best(get, panels, "ce", [f"top{k}" for k in shown if k <= 2])
            + _s20_pairs(get, panels, _pair("topk_transition", "ce"),
                         [f"top{k}" for k in shown if k >= 3])
            + _s20_pairs(get, panels, _pair("topk_group", "ce"), [f"top{k}" for k in shown if k >= 6]))


DENSENET_CUTOUT = [("densenet121", "cutout")]
S20_TABLE_CLAIMS = {  # setting of s20_cifar_claims.csv -> (read as, comparisons(get, ks))
    # Table I's claims: get reads top-1 and top-5 each of the models selected by itself
    "top-1": ("in every panel no loss beats CE in top-1",
              lambda get, ks: _s20_best(get, S20_PANELS, "ce", ["top1"])),
    "top-5 below the top-k losses": (
        "the transition loss beats CE in top-5 with ResNet-18 + Cutout, ResNet-18 + Mixup and "
        "DenseNet-121 + Mixup, and the smooth SVM does with ResNet-18 + Cutout (S20 has no "
        "smooth SVM with Mixup)",
        lambda get, ks: _s20_pairs(get, [p for p in S20_PANELS if p != DENSENET_CUTOUT[0]],
                                   _against("ce", ("smooth_svm", "topk_transition")), ["top5"])),
    "densenet121 cutout top-5": ("with DenseNet-121 + Cutout no loss beats CE in top-5",
                                 lambda get, ks: _s20_best(get, DENSENET_CUTOUT, "ce", ["top5"])),
    "best top-5 per model": ("per model, no (loss, augmentation) beats the transition loss "
                             "with Mixup in top-5", lambda get, ks: _s20_best_per_model(get)),
    "cutout smooth svm over transition": (
        "with Cutout, for each model, the smooth SVM beats the transition loss in top-5",
        lambda get, ks: _s20_pairs(get, [p for p in S20_PANELS if p[1] == "cutout"],
                                   _pair("smooth_svm", "topk_transition"), ["top5"])),
    "grouping below ce": ("in every panel CE beats top-5 grouping in top-1 and in top-5",
                          lambda get, ks: _s20_pairs(get, S20_PANELS, _pair("ce", "topk_group"),
                                                     TABLE_METRICS)),
    "transition over grouping": (
        "in every panel the transition loss beats top-5 grouping in top-5",
        lambda get, ks: _s20_pairs(get, S20_PANELS, _pair("topk_transition", "topk_group"),
                                   ["top5"])),
    # Fig. 6's text: get reads every top-k of the models selected by val top-5
    "densenet121 cutout turning points": (
        "with DenseNet-121 + Cutout the transition loss beats CE at every k ≥ 9 and top-5 "
        "grouping beats CE at every k ≥ 11 (top-k of the models selected by val top-5)",
        lambda get, ks: _s20_pairs(get, DENSENET_CUTOUT, _pair("topk_transition", "ce"),
                                   [f"top{k}" for k in ks if k >= 9])
        + _s20_pairs(get, DENSENET_CUTOUT, _pair("topk_group", "ce"),
                     [f"top{k}" for k in ks if k >= 11])),
    "other panels turning points": (
        "with ResNet-18 + Cutout and DenseNet-121 + Mixup (the other conditions but the "
        "DenseNet-121 + Cutout exception S20 describes next), for k ≤ 10: no loss beats CE for "
        "k ≤ 2, the transition loss beats CE for k ≥ 3, top-5 grouping beats CE for k ≥ 6 (the "
        "turning points are CE's defeats: with Cutout S20's own Table I has the smooth SVM above "
        "the transition loss at k = 5)",
        lambda get, ks: _s20_turning_points(
            get, [("resnet18", "cutout"), ("densenet121", "mixup")], ks)),
    "transition best beyond k = 10": (
        "in every panel, at every k from 11 to 30 (Fig. 6's), the transition loss beats every other loss",
        lambda get, ks: _s20_pairs(get, S20_PANELS, _over_others("topk_transition"),
                                   [f"top{k}" for k in ks if k > 10])),
}


FIG6_LAST_K = 30  # Fig. 6 plots k = 1…30; the runs record to 40 for CE's k = 33 (ce_reaching)
FIG6_CLAIMS = ("densenet121 cutout turning points", "other panels turning points",
               "transition best beyond k = 10")  # read on top-k curves (S20Values, table=False)


def s20_table_claims(runs: pd.DataFrame, claims: pd.DataFrame) -> pd.DataFrame:
    """S20's claims about its CIFAR-100 results (``s20_cifar_claims.csv``: setting, claim, the
    quoted sentence and its section) on an ``s20_cifar`` sweep's runs, each with its sentence
    (column S20 says), reading, verdict and numbers (:data:`S20_TABLE_CLAIMS`)."""
    curves = selected_by(runs, "val/top5").columns  # the k of every test top-k recorded
    ks = sorted({int(name[len("test.top"):]) for name in curves  # those Fig. 6 plots
                 if name.startswith("test.top") and name[len("test.top"):].isdigit()
                 and int(name[len("test.top"):]) <= FIG6_LAST_K})
    table, curves, rows = S20Values(runs, table=True), S20Values(runs, table=False), []
    for setting, claim in zip(claims["setting"], claims["claim"]):
        read_as, comparisons = S20_TABLE_CLAIMS[setting]
        rows.append(claim_row(setting, claim, read_as,
                              comparisons(curves if setting in FIG6_CLAIMS else table, ks)))
    frame = claims_frame(rows)
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


# ------------------------------------------------------------------------ B18 Fig. 2b, G22 Fig. 2


def _at(values: dict[float, pd.Series], test: Callable[[float], bool]) -> dict[float, pd.Series]:
    return {x: v for x, v in sorted(values.items()) if test(x)}


def b18_sparsity_claims(counts: dict[float, pd.Series], classes: int | None) -> pd.DataFrame:
    """B18's claims on its Fig. 2b, on the mean number of non-zero coordinates of each run's
    gradient per τ (``counts``: τ → the runs' values) and their share of the ``classes``
    coordinates. "Sparse" is read as most coordinates zero (a share under 50 %), "not sparse" as
    most non-zero: B18 gives no threshold."""
    def share(values):
        return 100.0 * values / classes if classes else pd.Series(dtype=float)
    claims = [
        ("τ = 0", '"its weak derivatives have at most two non-zero elements" (§3, of l_k)',
         "at τ = 0 (the non-smooth l_5) the mean count is at most 2",
         [threshold("τ = 0 mean count", v, high=2.0) for v in _at(counts, lambda t: t == 0).values()]),
        ("τ ≥ 0.01", '"In Figure 2b, we observe that such high temperatures yield gradients that '
         'are not sparse" (§3, Fig. 2); "such high": "τ is high enough (0.01 or larger)"',
         "at every τ ≥ 0.01 most coordinates are non-zero (a share of at least 50 %)",
         [threshold(f"τ = {t:g} share (%)", share(v), low=50.0)
          for t, v in _at(counts, lambda t: t >= 0.01).items()]),
        ("0 < τ < 0.01", '"When τ is positive but small, the function is smooth but the gradients '
         'are numerically sparse (see Figure 2b)" (§3)',
         "at every τ strictly between 0 and 0.01 most coordinates are zero (a share under 50 %)",
         [threshold(f"τ = {t:g} share (%)", share(v), high=50.0)
          for t, v in _at(counts, lambda t: 0 < t < 0.01).items()]),
    ]
    return claims_frame([claim_row(*claim) for claim in claims])


def g22_sparsity_claims(counts: dict[float, pd.Series]) -> pd.DataFrame:
    """G22's claims on its Fig. 2, on the mean number of non-zero gradient coordinates of each
    run's first epoch per ε (``counts``: ε → the runs' values)."""
    means = {e: float(v.mean()) for e, v in sorted(counts.items()) if len(v.dropna())}
    steps = list(zip(means, list(means)[1:]))
    largest = max(means, default=None)
    claims = [
        ("every ε", '"The number of non-zero gradients coordinates increases with ε" (§4.1)',
         "the mean count never falls from one ε of the grid to the next",
         [threshold(f"ε = {a:g} → {b:g}: change in the mean count", pd.Series([means[b] - means[a]]),
                    low=0.0) for a, b in steps]),
        ("largest ε", '"Even when ε is large, the number of non-zero gradient coordinates is small: '
         'on average, 4 out of 100" (§4.1)',
         "at the largest ε of the grid the mean count is 4 to the nearest whole number "
         "(3.5 to 4.5; with B = 3 noise samples a gradient has at most 4 non-zero coordinates)",
         [] if largest is None else [threshold(f"ε = {largest:g} mean count", counts[largest],
                                               low=3.5, high=4.5)]),
    ]
    return claims_frame([claim_row(*claim) for claim in claims])
