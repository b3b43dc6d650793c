"""Run records of a sweep → the figures of S20's synthetic experiments (Figs. 2–4).

Each figure plots the mean top-1 and top-2 test accuracy over seeds against the swept parameter,
one line per loss, with min–max error bars, as S20 does; the same numbers are written as CSV and
markdown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from topk import paper_results
from topk.records import find_results


@dataclass(frozen=True)
class SweepFigure:
    experiment: str
    parameter: str  # the flat config key swept (a column of ``params``)
    label: str      # axis label
    title: str
    log_x: bool = False


S20_FIGURES = {
    "s20_exp1": SweepFigure("s20_exp1", "dataset.sigma", "σ (degrees)", "S20 Exp. 1 (Fig. 2): class width σ"),
    "s20_exp2": SweepFigure("s20_exp2", "dataset.d", "d (degrees)", "S20 Exp. 2 (Fig. 3): minor-mode shift d"),
    "s20_exp3": SweepFigure("s20_exp3", "model.hidden", "hidden units m", "S20 Exp. 3 (Fig. 4): MLP width m", log_x=True),
}
LOSS_ORDER = ["ce", "topk_group", "topk_transition"]
LOSS_LABELS = {"ce": "CE", "topk_group": "top-2 grouping", "topk_transition": "top-2 transition"}


def latest_sweep_dir(outputs: Path, experiment: str) -> Path:
    """The newest ``outputs/sweeps/<experiment>/<time>`` directory."""
    root = Path(outputs) / "sweeps" / experiment
    candidates = sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []
    if not candidates:
        raise FileNotFoundError(
            f"no sweep of {experiment} under {root}; run `python train.py -m +experiment={experiment}` first."
        )
    return candidates[-1]


def load_runs(sweep_dir: Path, parameter: str, metrics=("top1", "top2")) -> pd.DataFrame:
    """One row per run record: status, loss, seed, the swept parameter and test metrics.

    Runs that failed or did not finish are kept with empty metrics (so they can be counted) and
    left out of every mean.
    """
    rows = []
    for record in find_results(sweep_dir):
        row = {
            "run_dir": record["run_dir"],
            "status": record["status"],
            "loss": record["loss"],
            "seed": record["seed"],
            parameter: record["params"].get(parameter),
        }
        for metric in metrics:
            row[f"test/{metric}"] = record["test"].get(metric) if record["status"] == "completed" else None
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(runs: pd.DataFrame, parameter: str, metrics=("top1", "top2")) -> pd.DataFrame:
    """Per (parameter value, loss): completed runs, runs that did not complete, and the mean, min
    and max of each test metric over the completed ones."""
    runs = runs.assign(completed=runs["status"].eq("completed"))
    aggregations = {}
    for metric in metrics:
        column = f"test/{metric}"
        runs[column] = pd.to_numeric(runs[column])
        for statistic in ("mean", "min", "max"):
            aggregations[f"{metric}_{statistic}"] = (column, statistic)
    summary = (
        runs.groupby([parameter, "loss"])
        .agg(
            runs=("completed", "sum"),
            not_completed=("completed", lambda done: int((~done).sum())),
            **aggregations,
        )
        .reset_index()
    )
    order = {name: i for i, name in enumerate(LOSS_ORDER)}
    summary["_order"] = summary["loss"].map(lambda name: order.get(name, len(order)))
    return summary.sort_values([parameter, "_order"]).drop(columns="_order").reset_index(drop=True)


def leaders(summary: pd.DataFrame, parameter: str, metrics=("top1", "top2"), tolerance=0.05) -> pd.DataFrame:
    """Per parameter value, the loss(es) with the best mean of each metric.

    Losses within ``tolerance`` percentage points of the best are listed together (a tie).
    """
    rows = []
    for value, group in summary.groupby(parameter, sort=True):
        row = {parameter: value}
        for metric in metrics:
            means = group.set_index("loss")[f"{metric}_mean"].dropna()
            best = means.max()
            row[f"best_{metric}"] = " = ".join(means.index[means >= best - tolerance]) if len(means) else ""
            if "ce" in means.index and len(means) > 1:
                row[f"ce_minus_best_other_{metric}"] = means["ce"] - means.drop("ce").max()
        rows.append(row)
    return pd.DataFrame(rows)


def published_claims(experiment: str) -> pd.DataFrame:
    claims = paper_results.load("s20_synthetic_claims")
    return claims[claims["experiment"] == experiment][["setting", "claim"]]


def plot_summary(summary: pd.DataFrame, figure: SweepFigure, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for axis, metric in zip(axes, ("top1", "top2")):
        for index, (loss, group) in enumerate(summary.groupby("loss", sort=False)):
            x = group[figure.parameter].astype(float)
            if figure.log_x:  # spread the three losses' markers a little so the bars stay apart
                x = x * 1.04 ** (index - 1)
            else:
                x = x + (index - 1) * 0.01 * _span(summary[figure.parameter])
            mean = group[f"{metric}_mean"]
            axis.errorbar(
                x, mean,
                yerr=[mean - group[f"{metric}_min"], group[f"{metric}_max"] - mean],
                marker="o", capsize=3, label=LOSS_LABELS.get(loss, loss),
            )
        axis.set_xlabel(figure.label)
        axis.set_ylabel(f"{metric.replace('top', 'top-')} test accuracy (%)")
        axis.grid(alpha=0.3)
        if figure.log_x:
            axis.set_xscale("log", base=2)
    axes[0].legend()
    fig.suptitle(f"{figure.title} — mean over seeds, bars min–max")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _display_path(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _span(values: pd.Series) -> float:
    values = values.astype(float)
    return float(values.max() - values.min()) or 1.0


def make_s20_figure(experiment: str, sweep_dir: Path, out_dir: Path) -> dict[str, Path]:
    """Draw one S20 figure from ``sweep_dir`` into ``out_dir``; returns the files written."""
    if experiment not in S20_FIGURES:
        raise ValueError(f"unknown figure {experiment!r}; choose one of {', '.join(S20_FIGURES)}")
    figure = S20_FIGURES[experiment]
    runs = load_runs(sweep_dir, figure.parameter)
    if runs.empty:
        raise FileNotFoundError(f"no run record (results.json) under {sweep_dir}")
    summary = summarise(runs, figure.parameter)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "png": plot_summary(summary, figure, out_dir / f"{experiment}.png"),
        "csv": out_dir / f"{experiment}.csv",
        "md": out_dir / f"{experiment}.md",
    }
    summary.to_csv(files["csv"], index=False)
    files["md"].write_text(
        f"# {figure.title}\n\nSweep: `{_display_path(sweep_dir)}`; test accuracy (%) over seeds "
        "(runs: completed runs; not_completed: failed or unfinished runs, left out of the means).\n\n"
        + summary.to_markdown(index=False, floatfmt=".2f")
        + "\n\nBest mean per setting (losses within 0.05 points tie; `ce_minus_best_other`: CE's mean "
        "minus the best of the other losses, in points):\n\n"
        + leaders(summary, figure.parameter).to_markdown(index=False, floatfmt=".2f")
        + "\n\nWhat S20 claims for this experiment (`topk/paper_results/s20_synthetic_claims.csv`):\n\n"
        + published_claims(experiment).to_markdown(index=False)
        + "\n"
    )
    return files
