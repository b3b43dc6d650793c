"""B18 Fig. 2b (``b18_sparsity``) and G22 Fig. 2 (``g22_sparsity``): how many coordinates of a
loss's gradient are not zero, per value of its smoothing parameter (B18's τ, G22's ε), from the
first epoch of each run of a sweep. Failed, interrupted, running and missing runs are counted,
never averaged in.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pandas as pd

from topk.gradients import COLUMN as GRAD_COLUMN
from topk.report.cells import fmt, mean_text, number, observation
from topk.report.claims import b18_sparsity_claims, g22_sparsity_claims
from topk.report.plotting import COUNTS_LEGEND, pyplot, summarise_points
from topk.report.render import FigureText
from topk.report.runs import Sweep, column, read_history
from topk.report.verdicts import CLAIM_RULE


@dataclass(frozen=True)
class SparsityFigure:
    parameter: str  # the swept loss parameter (``params.<parameter>``)
    symbol: str
    title: str
    share: bool  # B18 plots the proportion of the coordinates (%), G22 their number


SPARSITY = {
    "b18_sparsity": SparsityFigure(
        "loss.tau", "τ", "B18 Fig. 2b: non-zero coordinates of the smooth top-5 SVM's gradient at "
        "the initial weights, per temperature τ (DenseNet 40-12, CIFAR-100)", share=True),
    "g22_sparsity": SparsityFigure(
        "loss.epsilon", "ε", "G22 Fig. 2: non-zero coordinates of the noised top-5 hinge's "
        "gradient (B = 3) in the first epoch, per noise level ε (DenseNet 40-40, CIFAR-100)",
        share=False),
}
SPARSITY_CLAIMS = {
    "b18_sparsity": "B18 (§3, Fig. 2b, numbers not in its text): at τ = 0 the gradient has at most "
    "two non-zero coordinates; positive but small τ gives numerically sparse gradients, τ of 0.01 "
    "or more (the ones that train) gradients that are not sparse.",
    "g22_sparsity": "G22 (§4.1, Fig. 2, numbers not in its text): the number of non-zero "
    "coordinates grows with ε, and stays small even for large ε: about 4 of 100.",
}


def first_epoch_nonzero(run_dir) -> float | None:
    """``train/grad_nonzero`` of a run's first epoch (``history.csv``), else ``None``."""
    history = read_history(run_dir)
    if history is None or not {"epoch", GRAD_COLUMN} <= set(history.columns):
        return None
    rows = history[history["epoch"] == 1]
    return None if rows.empty else number(rows[GRAD_COLUMN].iloc[0])


def sparsity_points(sweep: Sweep, figure: SparsityFigure) -> tuple[pd.DataFrame, dict, int | None]:
    """Per value of the swept parameter: the mean number of non-zero gradient coordinates per
    example over the completed runs (``count_mean``; ``share_mean`` = its percentage of the
    classes) and the run counts; each value's runs' numbers (value → Series); and the number of
    classes (``None`` if the records do not agree on one)."""
    runs = sweep.runs
    sizes = {len(c) for c in column(runs, "class_counts") if isinstance(c, list) and c}
    classes = sizes.pop() if len(sizes) == 1 else None
    entries = [observation(status, seed, first_epoch_nonzero(run_dir) if status == "completed"
                           else None, line="ours", x=number(value))
               for status, seed, value, run_dir in zip(runs["status"], runs["seed"],
                                                       column(runs, f"params.{figure.parameter}"),
                                                       runs["run_dir"])]
    points = summarise_points(entries, sweep.seeds, ("line", figure.symbol, "count"))
    points.insert(4, "share_mean", 100.0 * points["count_mean"] / classes if classes else None)
    values: dict[float, list] = {}
    for entry in entries:
        if entry["value"] is not None and entry["x"] is not None:
            values.setdefault(entry["x"], []).append(entry["value"])
    return points.drop(columns="line"), {x: pd.Series(v) for x, v in values.items()}, classes


def draw_sparsity(points: pd.DataFrame, figure: SparsityFigure, classes: int | None):
    """The mean (share or count) against the parameter's values, evenly spaced (0 included)."""
    fig, axis = pyplot().subplots(figsize=(7, 4.5), constrained_layout=True)
    shown = points.dropna(subset=[figure.symbol])
    values = shown["share_mean" if figure.share else "count_mean"]
    axis.plot(range(len(shown)), values, marker="o", label="ours (mean over seeds)")
    axis.set_xticks(range(len(shown)), [f"{x:g}" for x in shown[figure.symbol]])
    axis.set(xlabel=figure.symbol, ylim=(0, 105 if figure.share else max(5.0, values.max() * 1.1)),
             ylabel="non-zero coordinates of ∂L/∂s (% of the classes)" if figure.share else
             f"non-zero coordinates of ∂L/∂s (of {classes or 'n'})")
    if not figure.share:
        axis.axhline(4.0, color="grey", linestyle="--", linewidth=1,
                     label="G22 §4.1: on average 4 of 100 at large ε")
    axis.grid(alpha=0.3)
    axis.set_title(textwrap.fill(figure.title, 90), fontsize=9)
    axis.legend(fontsize=8)
    return fig


def sparsity(figure_id: str, sweep: Sweep):
    """B18 Fig. 2b or G22 Fig. 2 from the first epoch's ``train/grad_nonzero`` of each run
    (``trainer.grad_nonzero``, :mod:`topk.gradients`); the CSV has one row per value."""
    figure = SPARSITY[figure_id]
    points, values, classes = sparsity_points(sweep, figure)
    judged = (b18_sparsity_claims(values, classes) if figure_id == "b18_sparsity"
              else g22_sparsity_claims(values))
    paragraphs = [
        sweep.header(), f"Each run's `train/grad_nonzero` of its first epoch (`history.csv`, "
        "`trainer.grad_nonzero`): the mean over the training examples of the number of "
        "coordinates of the loss's gradient with respect to the example's scores that are not "
        f"exactly 0 in float32; share = that number over the {classes or 'unknown number of'} "
        f"classes. Mean ± std (ddof=1) over completed seeds. {COUNTS_LEGEND}",
        SPARSITY_CLAIMS[figure_id]]
    table = pd.DataFrame({figure.symbol: [f"{x:g}" for x in points[figure.symbol]],
                          "non-zero coordinates per example": [
                              mean_text(m, s) for m, s in zip(points["count_mean"], points["count_std"])],
                          f"share of the {classes or '?'} classes (%)": points["share_mean"].map(fmt),
                          "runs": points["counts"]})
    sections = [("Non-zero gradient coordinates per example:", table),
                ("Whether the paper's claims hold on these runs. " + CLAIM_RULE, judged)]
    text = FigureText(figure_id, figure.title, paragraphs, sections, points,
                      verdicts=list(judged["verdict"]), sweep=sweep)
    return draw_sparsity(points, figure, classes), text
