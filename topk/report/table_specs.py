"""The paper tables as declarations (:class:`TableSpec`): each table's keys and metrics as
sources on a sweep's runs frame (a column name or ``runs -> Series``), its published CSV, and
each published number's standard error from its sample (:data:`SamplingError`), where the paper
gives no spread. :mod:`topk.report.tables` computes and lays out the cells.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from topk import paper_results
from topk.report.cells import display, normalise_key
from topk.report.claims import s20_table_claims
from topk.report.runs import (
    column,
    number,
    objects,
    read_history,
    selected_by,
)
from topk.report.verdicts import binomial_se, macro_se

FIELDS = ("ours", "paper", "ours − paper", "verdict")
Source = str | Callable[[pd.DataFrame], pd.Series]
# the paper's number and the runs of a cell -> the number's standard error from the sample it was
# counted on (percentage points), and why there is none (verdicts.CELL_RULE's s)
SamplingError = Callable[[float, pd.DataFrame], tuple[float, str]]


def run_k(runs: pd.DataFrame) -> pd.Series:
    """The K of each run: the experiment's top-level ``k``, else the loss's ``loss.k``."""
    return objects((loss_k if k is None else k for k, loss_k in
                    zip(column(runs, "params.k"), column(runs, "params.loss.k"))), runs.index)


def at_k(prefix: str, split: str = "test") -> Callable[[pd.DataFrame], pd.Series]:
    """The ``split`` metric ``<prefix><K>`` of each run at its own K (``macro_top`` →
    ``test.macro_top5``)."""
    def values(runs):
        names = [None if k is None else f"{split}.{prefix}{int(k)}" for k in run_k(runs)]
        return objects((runs.at[i, name] if name in runs.columns else None
                        for i, name in zip(runs.index, names)), runs.index)
    return values


def binomial(split: str) -> SamplingError:
    """The binomial standard error of the paper's accuracy p on the N samples of ``split`` that
    the cell's runs evaluated (their records' ``samples.<split>``; the smallest if they differ).
    The paper's p, not ours: it stands for the spread the paper did not report, and is fixed
    before our runs, so a run far from it cannot narrow its own tolerance."""
    def error(paper: float, runs: pd.DataFrame) -> tuple[float, str]:
        sizes = [size for size in map(number, column(runs, f"samples.{split}")) if size]
        if not sizes:
            return math.nan, (f"no run recorded how many {split} samples it evaluated (records "
                              "older than `samples`)")
        return binomial_se(paper, min(sizes)), ""
    return error


def macro_error(paper: float, runs: pd.DataFrame) -> tuple[float, str]:
    """A test macro-average top-K's standard error (:func:`topk.report.verdicts.macro_se`) from
    each run's class accuracies and class sizes (``test_per_class.top<K>``,
    ``test_class_samples``), the root mean square over the cell's runs. Ours, not the paper's:
    it publishes no class accuracies, and if ours reproduce them ours estimate them."""
    sizes, errors = column(runs, "test_class_samples"), []
    for i, k in run_k(runs).items():
        per_class = None if k is None else column(runs, f"test_per_class.top{int(k)}")[i]
        if isinstance(per_class, list) and isinstance(sizes[i], list):
            errors.append(macro_se(per_class, sizes[i]))
    errors = [e for e in errors if not math.isnan(e)]
    if not errors:
        return math.nan, ("no run recorded its test split's class sizes (`test_class_samples`, "
                          "records older than it), which a macro average's standard error needs")
    return math.sqrt(float(np.mean(np.square(errors)))), ""


def no_error(reason: str) -> SamplingError:
    """A metric with no sampling error: one run of it is not judged, for ``reason``."""
    return lambda paper, runs: (math.nan, reason)


TRAIN_ACCURACY = no_error(
    "a training accuracy is counted over an epoch of changing weights and augmented images, not "
    "by one model on a fixed sample, so no binomial error describes it")
TIME_RATIO = no_error("a ratio of epoch times is no accuracy, and the paper gives one time per "
                      "loss, without a spread")
UNKNOWN_ERROR = no_error("no standard error is known for this metric")


def b18_tau(runs: pd.DataFrame) -> pd.Series:
    """B18 Table 6's τ; the non-smooth top-k SVM (``hinge``) is its τ = 0 row."""
    return column(runs, "params.loss.tau").where(runs["loss"] != "hinge", 0.0)


def train_top5_at_best(runs: pd.DataFrame) -> pd.Series:
    """``train/top5`` of each run's ``history.csv`` at its ``best_epoch`` (else the last row)."""
    def value(run):
        history = read_history(run["run_dir"])
        if history is None or "train/top5" not in history.columns or history.empty:
            return None
        known = run["best_epoch"] is not None and "epoch" in history.columns
        rows = history[history["epoch"] == run["best_epoch"]] if known else history.tail(1)
        return None if rows.empty else rows["train/top5"].iloc[-1]
    return objects((value(run) for _, run in runs.iterrows()), runs.index)


def test_at_best_val_epoch(metric: str) -> Callable[[pd.DataFrame], pd.Series]:
    """``test/<metric>`` of each run's ``history.csv`` at the first epoch with the best
    ``val/<metric>``: P22 reports its test top-1 and top-5 each at its own best validation epoch."""
    names = [f"val/{metric}", f"test/{metric}"]

    def value(run):
        history = read_history(run["run_dir"])
        if history is None or not set(names) <= set(history.columns):
            return None
        evaluated = history[names].dropna()
        return None if evaluated.empty else evaluated.loc[evaluated[names[0]].idxmax(), names[1]]
    return lambda runs: objects((value(run) for _, run in runs.iterrows()), runs.index)


def distribution_text(p_k) -> str | None:
    """A top-k distribution p_K as printed: ``(0.5, 0, 0, 0, 0.5)``."""
    return None if p_k is None else "(" + ", ".join(f"{float(v):g}" for v in p_k) + ")"


def p22_p_k(loss, p_k, k) -> tuple | None:
    """A run's p_K in P22's tables: its top-k cross-entropy's ``p_k``; cross-entropy is P22's
    p_K = (1, 0, 0, 0, 0) row and the smooth top-k SVM its one-hot p_K of k (P22's scripts
    assert p_K = [0, 0, 0, 0, 1] for it, k = len(p_K) = 5)."""
    if loss == "ce":
        return (1, 0, 0, 0, 0)
    if loss == "smooth_svm" and number(k) is not None:
        return (0,) * (int(k) - 1) + (1,)
    return p_k


def p22_distribution(runs: pd.DataFrame) -> pd.Series:
    """P22's top-k distribution p_K of each run (:func:`p22_p_k`)."""
    return objects((distribution_text(p22_p_k(*values)) for values in
                    zip(runs["loss"], column(runs, "params.loss.p_k"), column(runs, "params.loss.k"))),
                   runs.index)


def p22_method(runs: pd.DataFrame) -> pd.Series:
    """P22's method of each run, a column of its tables: the sorter of its top-k cross-entropy,
    else its loss (``ce``, ``smooth_svm``)."""
    return objects((sorter if loss == "diffsort_topk_ce" else loss
                    for loss, sorter in zip(runs["loss"], column(runs, "params.loss.sorter"))), runs.index)


def zoo_ranks(runs: pd.DataFrame) -> list[str]:
    """Each loss's rank (1 = best mean over completed seeds) by every metric of the zoo tables."""
    done = runs[runs["status"] == "completed"]
    means = pd.DataFrame({m: pd.to_numeric(column(done, f"test.{m}"), errors="coerce")
                          for m in ZOO_METRICS}).groupby(done["loss"]).mean()
    if means.empty:
        return ["No completed run: no ranking."]
    ranks = means.rank(ascending=False, method="min").sort_values("top5")
    return ["Ranks (1 = best mean over completed seeds), by " + ", ".join(ZOO_METRICS) + ": "
            + "; ".join(f"{loss} " + "/".join("–" if math.isnan(r) else str(int(r)) for r in row)
                        for loss, row in zip(ranks.index, ranks.to_numpy()))]


def loss_label(loss, n_samples=None) -> str:
    """``noised_bal`` carries its number of noise samples B (G22 Fig. 3); other losses do not."""
    if loss == "noised_bal" and number(n_samples) is not None:
        return f"noised_bal (B={display(n_samples)})"
    return loss


def g22_line(runs: pd.DataFrame) -> pd.Series:
    return objects(map(loss_label, runs["loss"], column(runs, "params.loss.n_samples")), runs.index)


def ce_seconds(runs: pd.DataFrame) -> list[float]:
    ce = runs[(runs["loss"] == "ce") & (runs["status"] == "completed")]
    return [s for s in map(number, ce["epoch_seconds"]) if s is not None]


def g22_ratio(runs: pd.DataFrame) -> pd.Series:
    """Each run's seconds per epoch over the mean of the sweep's completed CE runs'."""
    seconds = ce_seconds(runs)
    baseline = float(np.mean(seconds)) if seconds else None
    return objects((None if s is None or not baseline else s / baseline
                    for s in runs["epoch_seconds"]), runs.index)


def g22_time_notes(runs: pd.DataFrame) -> list[str]:
    seconds = ce_seconds(runs)
    if not seconds:
        return ["No completed CE run in this sweep: no baseline, so no ratio."]
    return [f"CE baseline: {np.mean(seconds):.3f} s per epoch (mean over the sweep's completed "
            f"CE runs: {len(seconds)}). The paper's times are divided by its CE time at the same "
            "K, or by its one CE time where it gives CE once; hardware differs, so only ratios "
            "are compared."]


def g22_time_paper(paper: pd.DataFrame) -> pd.DataFrame:
    """G22 Fig. 3's seconds per epoch → ratio to its CE time (same K, else its one CE time)."""
    ce = paper[paper["loss"] == "ce"].set_index("k")["epoch_seconds"]
    rows = paper[paper["loss"] != "ce"].copy()
    baseline = rows["k"].map(ce).fillna(ce.iloc[0] if len(ce) == 1 else math.nan)
    rows["ratio_to_ce"] = rows["epoch_seconds"] / baseline
    rows["loss"] = [loss_label(loss, b) for loss, b in zip(rows["loss"], rows["n_samples"])]
    return rows


def s20_test(metric: str) -> Callable[[pd.DataFrame], pd.Series]:
    """``test.<metric>`` of each run's model selected by ``val/<metric>``: its selected model, or
    the one it kept by ``trainer.also_select_on`` (:func:`topk.report.runs.selected_by`). S20
    §V-A: "We evaluated the test accuracies of models both for early-stopping by top-1
    validation accuracy and by top-5 validation accuracy"."""
    return lambda runs: column(selected_by(runs, f"val/{metric}"), f"test.{metric}")


def s20_uses(runs: pd.DataFrame, metric: str) -> pd.Series:
    """S20 selects by val top-1 for its top-1 column and by val top-5 for its top-5 column: the
    runs with a model selected by ``val/<metric>``, as selected or kept beside it; a sweep
    lacking that selection falls back to every run."""
    selected = selected_by(runs, f"val/{metric}")["selection_metric"] == f"val/{metric}"
    return selected if selected.any() else pd.Series(True, index=runs.index)


def s20_notes(runs: pd.DataFrame) -> list[str]:
    have = " and ".join(sorted(set(runs["selection_metric"]) - {None})) or "nothing"
    notes = []
    for metric in ("top1", "top5"):
        selection = f"val/{metric}"
        chosen = selected_by(runs, selection)["selection_metric"] == selection
        kept = int((chosen & (runs["selection_metric"] != selection)).sum())
        shared = (f"; in {kept} run(s) the best model by it was kept beside the selected one "
                  "(trainer.also_select_on), one training run for both columns" if kept else "")
        notes.append(f"{metric}: models selected by {selection} (as S20){shared}." if chosen.any() else
                     f"{metric}: models selected by {have} (no run selected by {selection} in this sweep).")
    return notes


@dataclass(frozen=True, kw_only=True)
class TableSpec:
    """One paper table: keys and metrics as sources on the runs frame, and its published CSV
    (``paper`` in ``topk/paper_results/``, ``paper_columns``: metric → its column there)."""

    id: str
    title: str
    paper: str | None = None
    rows: Mapping[str, Source]
    columns: Mapping[str, Source] = field(default_factory=dict)
    metrics: Mapping[str, Source]
    paper_columns: Mapping[str, str] | None = None  # default: each metric's own name
    uses: Callable[[pd.DataFrame, str], pd.Series] | None = None  # runs counted per metric (all)
    notes: Callable[[pd.DataFrame], list[str]] = lambda runs: []
    paper_transform: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    each_k: bool = False  # a run that kept a model per K counts in each K row (spread_over_k)
    split_metrics: bool = False  # one table per metric, as the paper prints them
    row_order: tuple[tuple, ...] = ()  # row keys printed first
    column_order: tuple[tuple, ...] = ()  # column keys printed first
    sort_columns: bool = False
    rank_rows_by: str | None = None  # a metric: rows in order of its mean, best first
    fields: tuple[str, ...] = FIELDS  # ("ours",): a table of ours alone, no published column
    unit: str = "percentage points"
    # metric -> its published number's standard error where the paper reports no std
    sampling: Mapping[str, SamplingError] = field(default_factory=dict)
    claims: Callable[[pd.DataFrame], pd.DataFrame] | None = None  # runs -> the paper's claims judged

    @property
    def row_names(self) -> tuple[str, ...]:
        return tuple(self.rows)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(self.columns)

    def keys(self, values: Mapping) -> tuple[tuple, tuple]:
        """The normalised row and column keys of a run or a published line."""
        return (tuple(normalise_key(values[name]) for name in self.row_names),
                tuple(normalise_key(values[name]) for name in self.column_names))


NOISE, TEST15 = {"noise": lambda r: column(r, "params.dataset.noise", 0.0)}, ("top1", "top5")
B18_MARGIN_NOTE = (
    "val_topK: the validation top-k accuracy at the run's own k (top-1 for k = 1, top-5 for "
    "k = 5) of its selected model, the epoch with the best one: B18 Appendix D.2.2's results "
    "\"are obtained on our validation set, and do not make use of multiple crops\"; "
    "(k, τ, α) = (1, 1, 0) is cross-entropy.")
AVG15 = ("avg1", "avg5")  # average-k accuracy (Garcin et al. 2021) beside top-k, ours only
AVG_NOTE = "; average-k accuracy beside it (not in the paper)"
LOSS = {"loss": "loss"}
G22_PLANTNET_LOSSES = ("ce", "smooth_svm", "noised_bal", "focal", "ldam", "noised_imbal")
ZOO_METRICS = ("top1", "top5", "macro_top5", "avg5")
P22_GRID = ((1, 0, 0, 0, 0), (0, 0, 0, 0, 1), (.5, 0, 0, 0, .5), (.25, 0, 0, 0, .75), (.1, 0, 0, 0, .9),
            (.2, .2, .2, .2, .2))  # P22's p_K, in its order
P22_METHODS = ("ce", "smooth_svm", "neuralsort", "softsort", "bitonic", "splitter_selection")
P22_TABLE = dict(rows={"p_K": p22_distribution}, columns={"method": p22_method},
                 row_order=tuple((distribution_text(p_k),) for p_k in P22_GRID),
                 column_order=tuple((method,) for method in P22_METHODS),
                 metrics={m: test_at_best_val_epoch(m) for m in TEST15}, split_metrics=True)
ZOO_TABLE = dict(rows=LOSS, metrics={m: f"test.{m}" for m in ZOO_METRICS}, notes=zoo_ranks,
                 rank_rows_by="top5", fields=("ours",))
TABLES: dict[str, TableSpec] = {spec.id: spec for spec in [
    TableSpec(id="s20_cifar", title="S20 Table I: CIFAR-100, test accuracy (%)",
              paper="s20_table1_cifar100", rows={"model": "model", "augment": "augment", **LOSS},
              metrics={m: s20_test(m) for m in TEST15}, uses=s20_uses, notes=s20_notes,
              claims=lambda runs: s20_table_claims(runs, paper_results.load("s20_cifar_claims"))),
    TableSpec(id="b18_cifar_noise", paper="b18_table1_cifar100_noise", rows=NOISE, columns=LOSS,
              title="B18 Table 1: CIFAR-100 with label noise p, test accuracy (%)" + AVG_NOTE,
              metrics={m: f"test.{m}" for m in (*TEST15, *AVG15)},
              sampling=dict.fromkeys(TEST15, binomial("test"))),
    TableSpec(id="b18_imagenet", paper="b18_table2_imagenet_subsets",
              title="B18 Table 2: ImageNet subsets, test top-5 accuracy (%)" + AVG_NOTE,
              rows={"train_images": lambda r: column(r, "params.dataset.train_size", 1230000)},
              columns=LOSS, metrics={"top5": "test.top5", "avg5": "test.avg5"},
              sampling={"top5": binomial("test")}),
    TableSpec(id="b18_margin", paper="b18_tables7_8_margin",
              title="B18 Tables 7 (k = 1, τ = 1: top-1) and 8 (k = 5, τ = 0.1: top-5): margin α "
              "of the smooth top-k SVM on ImageNet, ResNet-18, best validation top-k accuracy "
              "(%), one crop",
              rows={"k": run_k, "tau": "params.loss.tau", "alpha": "params.loss.alpha"},
              metrics={"val_topK": at_k("top", "val")}, paper_columns={"val_topK": "accuracy"},
              sampling={"val_topK": binomial("val")},
              notes=lambda runs: [B18_MARGIN_NOTE]),
    TableSpec(id="b18_tau", paper="b18_table6_temperature", rows={"tau": b18_tau},
              title="B18 Table 6: temperature τ of the smooth top-5 SVM, top-5 accuracy (%)",
              metrics={"train_top5": train_top5_at_best, "test_top5": "test.top5"},
              uses=lambda runs, metric: runs["loss"].isin(["smooth_svm", "hinge"]),
              sampling={"train_top5": TRAIN_ACCURACY, "test_top5": binomial("test")}),
    TableSpec(id="g22_epsilon", paper="g22_table2_epsilon", rows={"epsilon": "params.loss.epsilon"},
              title="G22 Table 2: noise level ε of the noised top-5 hinge, val top-5 (%)",
              metrics={"val_top5": "val.top5"}, sampling={"val_top5": binomial("val")}),
    TableSpec(id="g22_samples", paper="g22_table3_samples",
              title="G22 Table 3: noise samples B of the noised top-5 hinge, val top-5 (%)",
              rows={"n_samples": "params.loss.n_samples"}, metrics={"val_top5": "val.top5"},
              sampling={"val_top5": binomial("val")}),
    TableSpec(id="g22_cifar_noise", paper="g22_tables4_6_cifar100_noise", rows=NOISE, columns=LOSS,
              title="G22 Tables 4 (top-5) and 6 (top-1): CIFAR-100 with label noise, test "
              "accuracy (%)" + AVG_NOTE, split_metrics=True,
              metrics={m: f"test.{m}" for m in (*TEST15[::-1], *AVG15[::-1])},
              sampling=dict.fromkeys(TEST15, binomial("test"))),
    TableSpec(id="g22_plantnet", each_k=True, paper="g22_tables5_7_plantnet", rows={"k": run_k}, columns=LOSS,
              title="G22 Tables 5 (macro-average top-K) and 7 (top-K): Pl@ntNet-300K, test "
              "accuracy (%)" + AVG_NOTE,
              metrics={f"{p}{a}K": at_k(f"{p}{a}") for a in ("top", "avg") for p in ("macro_", "")},
              paper_columns={"macro_topK": "macro_topk", "topK": "topk"}, split_metrics=True,
              column_order=tuple((loss,) for loss in G22_PLANTNET_LOSSES),
              sampling={"macro_topK": macro_error, "topK": binomial("test")}),
    TableSpec(id="g22_imagenet_lt", each_k=True, rows={"k": run_k, **LOSS},
              title="G22 preprint §4.5.2, Table 6: ImageNet-LT, test top-K accuracy (%) overall and "
              "on many-, medium- and few-shot classes (its numbers are lost from the preprint's "
              "text: no published column)" + AVG_NOTE,
              metrics={**{f"{p}topK": at_k(f"{p}top") for p in ("", "many_", "medium_", "few_")},
                       "avgK": at_k("avg")},
              row_order=tuple((float(k), loss) for k in (1, 3, 5) for loss in G22_PLANTNET_LOSSES)),
    TableSpec(id="g22_imagenet", each_k=True, rows={"k": run_k}, columns=LOSS,
              title="G22 preprint App. D, Table 9: ImageNet (ResNet-18), test top-K accuracy (%) "
              "(its numbers are lost from the preprint's text: no published column)" + AVG_NOTE,
              metrics={"topK": at_k("top"), "avgK": at_k("avg")}, split_metrics=True,
              column_order=tuple((loss,) for loss in G22_PLANTNET_LOSSES[:3])),
    TableSpec(id="g22_time", paper="g22_fig3_epoch_time", rows={"k": "params.loss.k"},
              title="G22 Fig. 3: time per epoch as a ratio to cross-entropy",
              columns={"loss": g22_line}, metrics={"ratio_to_ce": g22_ratio},
              uses=lambda runs, metric: runs["loss"] != "ce", notes=g22_time_notes,
              paper_transform=g22_time_paper, sort_columns=True, unit="ratio units",
              sampling={"ratio_to_ce": TIME_RATIO}),
    TableSpec(id="p22_cifar", title="P22 Tables 1, 4: CIFAR-100, test top-1 and top-5 accuracy (%), "
              "each at its best validation epoch (P22's numbers are not on file)", **P22_TABLE),
    TableSpec(id="p22_imagenet", title="P22 Tables 2, 3 (ImageNet-1K): ImageNet-1K embeddings, test "
              "top-1 and top-5 accuracy (%), each at its best validation epoch (P22's numbers are not "
              "on file)",
              **P22_TABLE),
    TableSpec(id="zoo_cifar100", title="Every loss on CIFAR-100 (G22's DenseNet 40-40 protocol, "
              "K = 5): test accuracy (%)", **ZOO_TABLE),
    TableSpec(id="zoo_plantnet", title="Every loss on Pl@ntNet-300K (G22's ResNet-50 protocol, "
              "K = 5): test accuracy (%)", **ZOO_TABLE),
]}
