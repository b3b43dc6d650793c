"""Run records of a sweep → the papers' figures, each as PNG, CSV and markdown.

- ``s20_exp1``, ``s20_exp2``, ``s20_exp3`` (S20 Figs. 2–4): mean top-1 and top-2 test accuracy
  over seeds against the swept parameter, one line per loss, with min–max error bars.
- ``s20_cifar`` (S20 Fig. 6): mean test top-k accuracy for k = 1…30 on CIFAR-100, one line per
  loss, for one (model, augmentation, selection) panel, and the smallest k reaching 99 %.
- ``g22_time`` (G22 Fig. 3): time per epoch against K as a ratio to cross-entropy's, with the
  paper's points converted to the same ratio.
- ``b18_tau`` (B18 Fig. 2a): training top-5 error per epoch, one line per temperature τ, with
  B18 Table 6's final numbers beside ours.

Failed, interrupted, still-running and missing runs are counted in the CSV and the markdown and
never averaged in. Every figure reads its sweep with :mod:`topk.tables`' loaders and refuses a
sweep holding runs of another experiment, or of none (:func:`topk.tables.check_experiment`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from topk import paper_results, tables
from topk.records import find_results


@dataclass(frozen=True)
class SweepFigure:
    experiment: str
    parameter: str  # the flat config key swept (a column of ``params``)
    label: str      # axis label
    title: str
    log_x: bool = False


S20_FIGURES = {
    "s20_exp1": SweepFigure("s20_exp1", "dataset.sigma", "σ (degrees)",
                            "S20 Exp. 1 (Fig. 2): class width σ"),
    "s20_exp2": SweepFigure("s20_exp2", "dataset.d", "d (degrees)",
                            "S20 Exp. 2 (Fig. 3): minor-mode shift d"),
    "s20_exp3": SweepFigure("s20_exp3", "model.hidden", "hidden units m",
                            "S20 Exp. 3 (Fig. 4): MLP width m", log_x=True),
}
FIGURE_IDS = (*S20_FIGURES, "s20_cifar", "g22_time", "b18_tau")
LOSS_ORDER = ["ce", "topk_group", "topk_transition"]
LOSS_NAMES = {
    "ce": "CE", "smooth_svm": "smooth top-{k} SVM", "topk_group": "top-{k} grouping",
    "topk_transition": "top-{k} transition", "hinge": "top-{k} hinge",
    "noised_bal": "noised top-{k} hinge",
}

S20_CIFAR_LOSSES = ("ce", "smooth_svm", "topk_group", "topk_transition")
S20_TARGET_ACCURACY = 99.0
S20_K_AT_99 = {"ce": "> 30", "topk_transition": "25"}  # S20 §IV-B: 25, "saving 8 compared with CE"
S20_FIG6_CLAIM = (
    "S20 (Fig. 6 and §IV-B, ResNet-18 with Mixup, mean of 10 seeds): CE has the best top-k "
    "accuracy for k ≤ 2, the top-5 transition loss from k = 3 on, and top-5 grouping beats CE "
    "from k = 6; the transition loss reaches 99 % at k = 25, CE only at k = 33 (beyond the "
    "k = 30 plotted, so \"> 30\"). S20 gives no smooth top-5 SVM result with Mixup (N/A)."
)
G22_LINES_FIRST = ("ce", "smooth_svm")  # then noised_bal by B
G22_FIG3_CLAIM = (
    "G22 (Fig. 3 and §4.3, DenseNet 40-40 on CIFAR-100, its own GPU): at K = 5 an epoch takes "
    "65 s with CE, 68 s with the noised loss with B = 3 (+4.6 %, ratio 1.05) and 81 s with the "
    "smoothed hinge (+24.6 %, ratio 1.25); at K = 10 the smoothed hinge takes 90 s (1.38) and "
    "the noised loss 60 s (0.92): the smoothed hinge grows about linearly with K, the noised loss "
    "does not. Stars mark these points as ratios to the paper's 65 s CE epoch."
)
B18_FIG2A_CLAIM = (
    "B18 (Fig. 2a and Table 6, DenseNet 40-12 on CIFAR-100, 300 epochs, learning rate divided by "
    "10 at epochs 150 and 225): with τ ≥ 0.01 the network fits the training set (98.95–99.78 % "
    "training top-5 accuracy, about 1 % error or less), with τ = 0 and τ = 0.001 it fails to "
    "train (10.01 % and 17.40 %, near the 95 % error of random predictions)."
)
RANDOM_TOP5_ERROR = 95.0  # B18 Fig. 2a's dashed line: top-5 of 100 classes at random
COUNTS_LEGEND = (
    "runs: runs averaged / runs expected (found + missing); failed, interrupted, still-running, "
    "value-less and missing runs are counted there and left out of every mean."
)


# ------------------------------------------------------------------------ S20 synthetic (Figs. 2–4)


def load_runs(sweep_dir: Path, parameter: str, metrics=("top1", "top2")) -> pd.DataFrame:
    """:func:`runs_table` of every run record below ``sweep_dir``."""
    return runs_table(find_results(sweep_dir), parameter, metrics)


def runs_table(records: Iterable[Mapping], parameter: str,
               metrics=("top1", "top2")) -> pd.DataFrame:
    """One row per run record: status, loss, seed, the swept parameter and test metrics.

    Runs that failed or did not finish are kept with empty metrics (so they can be counted) and
    left out of every mean.
    """
    rows = []
    for record in records:
        row = {
            "run_dir": record["run_dir"],
            "status": record["status"],
            "loss": record["loss"],
            "seed": record["seed"],
            parameter: record["params"].get(parameter),
        }
        completed = record["status"] == "completed"
        for metric in metrics:
            row[f"test/{metric}"] = record["test"].get(metric) if completed else None
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


def leaders(summary: pd.DataFrame, parameter: str, metrics=("top1", "top2"),
            tolerance=0.05) -> pd.DataFrame:
    """Per parameter value, the loss(es) with the best mean of each metric.

    Losses within ``tolerance`` percentage points of the best are listed together (a tie).
    """
    rows = []
    for value, group in summary.groupby(parameter, sort=True):
        row = {parameter: value}
        for metric in metrics:
            means = group.set_index("loss")[f"{metric}_mean"].dropna()
            row[f"best_{metric}"] = " = ".join(best_of(means, tolerance))
            if "ce" in means.index and len(means) > 1:
                row[f"ce_minus_best_other_{metric}"] = means["ce"] - means.drop("ce").max()
        rows.append(row)
    return pd.DataFrame(rows)


def best_of(means: pd.Series, tolerance: float = 0.05) -> list:
    """The index entries of ``means`` within ``tolerance`` of its maximum (NaN skipped)."""
    means = means.dropna()
    return list(means.index[means >= means.max() - tolerance]) if len(means) else []


def published_claims(experiment: str) -> pd.DataFrame:
    claims = paper_results.load("s20_synthetic_claims")
    return claims[claims["experiment"] == experiment][["setting", "claim"]]


def loss_display(loss, k=2) -> str:
    """A loss as the papers name it: ``topk_transition`` with k = 5 → "top-5 transition"."""
    return LOSS_NAMES.get(loss, str(loss)).format(k=k)


def draw_summary(summary: pd.DataFrame, figure: SweepFigure):
    """S20 Figs. 2–4: top-1 and top-2 test accuracy against the swept parameter, one line per
    loss (mean over seeds, bars min–max)."""
    plt = _pyplot()
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
                marker="o", capsize=3, label=loss_display(loss, k=2),
            )
        axis.set_xlabel(figure.label)
        axis.set_ylabel(f"{metric.replace('top', 'top-')} test accuracy (%)")
        axis.grid(alpha=0.3)
        if figure.log_x:
            axis.set_xscale("log", base=2)
    axes[0].legend()
    fig.suptitle(f"{figure.title} — mean over seeds, bars min–max")
    return fig


def _span(values: pd.Series) -> float:
    values = values.astype(float)
    return float(values.max() - values.min()) or 1.0


def make_s20_figure(experiment: str, sweep_dir: Path, out_dir: Path) -> dict[str, Path]:
    """Draw one S20 figure from ``sweep_dir`` into ``out_dir``; returns the files written."""
    if experiment not in S20_FIGURES:
        raise ValueError(f"unknown figure {experiment!r}; choose one of {', '.join(S20_FIGURES)}")
    figure = S20_FIGURES[experiment]
    sweep = read_sweep(sweep_dir, experiment)
    summary = summarise(runs_table(sweep.records, figure.parameter), figure.parameter)
    markdown = (
        f"# {figure.title}\n\n{sweep.header}\n\nTest accuracy (%) over seeds "
        "(runs: completed runs; not_completed: failed or unfinished runs, left out of the means)."
        "\n\n" + summary.to_markdown(index=False, floatfmt=".2f")
        + "\n\nBest mean per setting (losses within 0.05 points tie; `ce_minus_best_other`: CE's "
        "mean minus the best of the other losses, in points):\n\n"
        + leaders(summary, figure.parameter).to_markdown(index=False, floatfmt=".2f")
        + "\n\nWhat S20 claims for this experiment "
        "(`topk/paper_results/s20_synthetic_claims.csv`):\n\n"
        + published_claims(experiment).to_markdown(index=False)
        + "\n"
    )
    return write_outputs(experiment, out_dir, draw_summary(summary, figure), summary, markdown)


# ------------------------------------------------------------------------ shared: sweeps, points


@dataclass(frozen=True)
class Sweep:
    """The readable run records of one sweep and the run counts of its header line.

    Attributes
    ----------
    path : Path
        The sweep directory.
    records : list of dict
        Every readable ``results.json`` below it (any status), each with its ``run_dir``.
    header : str
        One sentence: runs found, completed, failed, interrupted, running, unreadable, missing.
    expected_seeds : int or None
        Seeds per setting that its ``multirun.yaml`` asks for (``None``: unknown).
    """

    path: Path
    records: list[dict]
    header: str
    expected_seeds: int | None


def read_sweep(sweep_dir: Path, experiment: str) -> Sweep:
    """Read a sweep with :func:`topk.tables.load_records`, check that its runs are runs of
    ``experiment`` and count them.

    Parameters
    ----------
    sweep_dir : Path
        A Hydra multirun directory (one sub-directory per job).
    experiment : str
        The experiment the figure belongs to: every readable record must name it.

    Returns
    -------
    Sweep

    Raises
    ------
    FileNotFoundError
        No readable ``results.json`` below ``sweep_dir``; the message names the command to run.
    ConfigError
        Runs of another experiment, or of none, in the sweep (:func:`topk.tables.check_experiment`).
    """
    sweep_dir = Path(sweep_dir)
    records, unreadable = tables.load_records(sweep_dir)
    if not records:
        found = f" ({len(unreadable)} unreadable)" if unreadable else ""
        raise FileNotFoundError(f"no readable run record (results.json) under {sweep_dir}{found}; "
                                f"run `python train.py -m +experiment={experiment}` first.")
    tables.check_experiment(records, experiment, sweep_dir)
    jobs, seeds = tables.expected_runs(sweep_dir)
    header = tables.header_line(sweep_dir, tables.run_counts(records, unreadable, jobs))
    return Sweep(sweep_dir, records, header, seeds)


def _as_number(value) -> float | None:
    """A float, or ``None`` for missing, non-numeric, boolean or NaN values."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number


def observation(record: Mapping, line, x, value) -> dict:
    """One run's share of a plotted point; its value counts only if the run completed."""
    completed = record.get("status") == "completed"
    return {"line": line, "x": x, "seed": record.get("seed"), "status": record.get("status"),
            "value": _as_number(value) if completed else None}


def counts_text(cell: Mapping, unit: str = "seeds") -> str:
    """:func:`topk.tables.count_text` ("2/3 seeds, 1 failed") counting ``unit`` instead."""
    return tables.count_text(cell).replace(" seeds", f" {unit}")


def summarise_points(entries: Iterable[Mapping], expected_seeds: int | None, line_name: str,
                     x_name: str, value_name: str, line_order: Iterable = (),
                     unit: str = "seeds") -> pd.DataFrame:
    """Aggregate observations into the points of a line plot.

    Parameters
    ----------
    entries : iterable of dict
        :func:`observation` entries (``line``, ``x``, ``seed``, ``status``, ``value``).
    expected_seeds : int or None
        Seeds per point the sweep asks for; seeds without a record are counted ``missing``.
    line_name, x_name, value_name : str
        Column names of the line key, the x value and the plotted quantity.
    line_order : iterable
        Line keys that come first, in this order (the others follow in natural order).
    unit : str
        What the ``counts`` text counts ("seeds", or "runs" where runs repeat a seed).

    Returns
    -------
    pandas.DataFrame
        One row per (line, x), lines in order and x ascending (a run without any x, e.g. a
        failed one, gets an empty x): ``<value_name>_mean`` and ``_std`` (ddof=1) over
        completed runs, the counts of :func:`topk.tables.summarise_cell` and their text.
    """
    groups: dict[tuple, list] = {}
    for entry in entries:
        groups.setdefault((entry["line"], entry["x"]), []).append(entry)
    rank = {line: index for index, line in
            enumerate(in_order([line for line, _ in groups], line_order))}
    rows = []
    for (line, x), group in sorted(groups.items(), key=lambda item: (rank[item[0][0]],
                                                                     _x_order(item[0][1]))):
        cell = tables.summarise_cell(group, expected_seeds)
        rows.append({line_name: line, x_name: x, f"{value_name}_mean": cell["mean"],
                     f"{value_name}_std": cell["std"],
                     **{key: cell[key] for key in ("n", "runs", *tables.UNFINISHED, "no_value",
                                                   "missing", "seeds")},
                     "counts": counts_text(cell, unit)})
    columns = [line_name, x_name, f"{value_name}_mean", f"{value_name}_std", "n", "runs",
               *tables.UNFINISHED, "no_value", "missing", "seeds", "counts"]
    frame = pd.DataFrame(rows, columns=columns)
    frame[x_name] = _integers_if_whole(frame[x_name])
    counts = ["n", "runs", *tables.UNFINISHED, "no_value", "missing"]
    frame[counts] = frame[counts].astype("Int64")  # stay integers beside another source's rows
    return frame


def in_order(keys: Iterable, first: Iterable) -> list:
    """``first`` in its order, then the other ``keys`` in natural order (``B=3`` before
    ``B=10``, numbers by value; :func:`topk.tables.ordered`)."""
    first = list(dict.fromkeys(first))
    return first + [key for key in tables.ordered(keys, []) if key not in first]


def _x_order(x) -> tuple:
    number = _as_number(x)
    return (number is None, number or 0.0)


def _integers_if_whole(values: pd.Series) -> pd.Series:
    """Numbers as nullable integers when they are all whole (k, K, epochs), else floats."""
    numbers = pd.to_numeric(values, errors="coerce")
    known = numbers.dropna()
    return numbers.astype("Int64") if (known == known.round()).all() else numbers


def _fmt(value, digits: int = 2) -> str:
    number = _as_number(value)
    return "–" if number is None else f"{number:.{digits}f}"


def _mean_text(mean, std, digits: int = 2) -> str:
    """"91.35 ± 0.20", "91.35" for one run, "–" for none."""
    if _as_number(mean) is None:
        return "–"
    spread = "" if _as_number(std) is None else f" ± {std:.{digits}f}"
    return f"{mean:.{digits}f}{spread}"


def markdown_document(title: str, paragraphs: Iterable[str],
                      sections: Iterable[tuple[str, pd.DataFrame]]) -> str:
    """``# title``, the paragraphs, then each ``(caption, table)`` as a markdown table."""
    parts = [f"# {title}", ""]
    for paragraph in paragraphs:
        parts += [paragraph, ""]
    for caption, frame in sections:
        parts += [caption, "", frame.to_markdown(index=False, disable_numparse=True), ""]
    return "\n".join(parts)


def _pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def line_axes(x_label: str, y_label: str, title: str):
    """A figure with one set of axes: labels, grid, integer x ticks (k, K, epochs), title."""
    from matplotlib.ticker import MaxNLocator

    fig, axis = _pyplot().subplots(figsize=(7, 4.5), constrained_layout=True)
    axis.set_xlabel(x_label)
    axis.set_ylabel(y_label)
    axis.grid(alpha=0.3)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_title(title, fontsize=9)
    return fig, axis


def plot_lines(axis, points: pd.DataFrame, line_name: str, x_name: str, value_name: str,
               label: Callable[[object], str]) -> dict:
    """Draw each line's mean against x, with a ± std band where several runs were averaged.

    Returns
    -------
    dict
        The colour of each line drawn, by line key (lines without any mean are skipped).
    """
    mean, std = f"{value_name}_mean", f"{value_name}_std"
    colours = {}
    for line, group in points.groupby(line_name, sort=False, dropna=False):
        group = group.dropna(subset=[mean, x_name])
        if group.empty:
            continue
        x = group[x_name].astype(float)
        marker = "o" if len(group) <= 40 else None  # dots for k and K, not for 300 epochs
        (drawn,) = axis.plot(x, group[mean], marker=marker, markersize=3, label=label(line))
        colours[line] = drawn.get_color()
        spread = group[std].notna().to_numpy()
        if spread.any():
            axis.fill_between(x[spread], (group[mean] - group[std])[spread],
                              (group[mean] + group[std])[spread], color=colours[line],
                              alpha=0.15, linewidth=0)
    return colours


def write_outputs(figure_id: str, out_dir: Path, figure, data: pd.DataFrame,
                  markdown: str) -> dict[str, Path]:
    """Write ``<out_dir>/<figure_id>.png`` (closing ``figure``), ``.csv`` and ``.md``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {kind: out_dir / f"{figure_id}.{kind}" for kind in ("png", "csv", "md")}
    figure.savefig(files["png"], dpi=110)
    _pyplot().close(figure)
    data.to_csv(files["csv"], index=False)
    files["md"].write_text(markdown)
    return files


# ------------------------------------------------------------------------ S20 Fig. 6 (s20_cifar)


def choose_panel(records: list[dict], wanted: Mapping) -> tuple[dict, list[dict], list[str]]:
    """The runs of one panel of S20 Fig. 6, falling back key by key to what the sweep has.

    Parameters
    ----------
    records : list of dict
        The sweep's run records.
    wanted : mapping
        Top-level record key → wanted value, applied in order (``model``, ``augment``,
        ``selection_metric``).

    Returns
    -------
    panel : dict
        The values used; a wanted value that no run has is replaced by the commonest one among
        the runs left (ties: first by name).
    runs : list of dict
        The panel's records, any status.
    notes : list of str
        One sentence per replaced value.
    """
    panel, runs, notes = {}, list(records), []
    for key, value in wanted.items():
        available = Counter(record.get(key) for record in runs)
        if value not in available and available:
            names = sorted(available, key=str)
            fallback = max(names, key=available.get)
            notes.append(f"No run with {key} = {value} in this sweep (it has "
                         f"{', '.join(map(str, names))}): showing {key} = {fallback} instead.")
            value = fallback
        panel[key] = value
        runs = [record for record in runs if record.get(key) == value]
    return panel, runs, notes


def recorded_ks(records: Iterable[Mapping]) -> list[int]:
    """Every k of a ``test`` ``top{k}`` metric in the completed records (1…30 for S20 Fig. 6's
    ``trainer.ks``); 1…30 if there is none."""
    ks = {int(match.group(1))
          for record in records if record.get("status") == "completed"
          for name in (record.get("test") or {})
          if (match := re.fullmatch(r"top(\d+)", name))}
    return sorted(ks) or list(range(1, 31))


def smallest_k_reaching(points: pd.DataFrame, target: float = S20_TARGET_ACCURACY) -> dict:
    """Per loss, the smallest k whose mean test top-k accuracy is at least ``target`` (S20
    §IV-B's "number of prediction candidates" for 99 %); ``None`` if no recorded k does."""
    reached = points[points["accuracy_mean"] >= target].groupby("loss")["k"].min()
    return {loss: int(reached[loss]) if loss in reached.index else None
            for loss in points["loss"].unique()}


def _loss_labels(runs: Iterable[Mapping]) -> dict:
    """Each loss's display name with its k (``params["loss.k"]``, 5 as in S20 if unset)."""
    labels = {loss: loss_display(loss, 5) for loss in S20_CIFAR_LOSSES}
    for record in runs:
        k = (record.get("params") or {}).get("loss.k", 5)
        labels[record.get("loss")] = loss_display(record.get("loss"), k)
    return labels


def accuracy_by_k(points: pd.DataFrame, labels: Mapping) -> pd.DataFrame:
    """k rows × loss columns of mean accuracy, and the best loss(es) per k (0.05-point ties)."""
    means = points.dropna(subset=["k"]).pivot(index="k", columns="loss", values="accuracy_mean")
    means = means[[loss for loss in dict.fromkeys(points["loss"]) if loss in means.columns]]
    table = pd.DataFrame({"k": means.index.astype(int)})
    for loss in means.columns:
        table[labels.get(loss, loss)] = [_fmt(value) for value in means[loss]]
    table["best"] = [" = ".join(labels.get(loss, loss) for loss in best_of(row))
                     for _, row in means.iterrows()]
    return table


def s20_loss_table(points: pd.DataFrame, panel: Mapping, reached: Mapping,
                   labels: Mapping) -> pd.DataFrame:
    """Per loss: runs, our top-1 / top-5 and smallest k reaching 99 %, beside S20 Table I's
    top-1 / top-5 for the panel's model and augmentation and S20's k at 99 %."""
    paper = paper_results.load("s20_table1_cifar100")
    in_panel = (paper["model"] == panel.get("model")) & (paper["augment"] == panel.get("augment"))
    paper = paper[in_panel].set_index("loss")
    rows = []
    for loss in in_order(points["loss"].unique(), S20_CIFAR_LOSSES):
        mine = points[points["loss"] == loss].set_index("k")
        first = mine.iloc[0] if len(mine) else None
        rows.append({
            "loss": labels.get(loss, loss),
            "runs (at k = 1)": "no run" if first is None else first["counts"],
            "top-1": _mean_text(*_at(mine, 1)),
            "top-5": _mean_text(*_at(mine, 5)),
            "S20 Table I top-1": _fmt(paper["top1"].get(loss)),
            "S20 Table I top-5": _fmt(paper["top5"].get(loss)),
            "smallest k ≥ 99 %": ("no run" if first is None
                                  else _k_text(reached.get(loss))),
            "S20 smallest k ≥ 99 %": S20_K_AT_99.get(loss, "–"),
        })
    return pd.DataFrame(rows)


def _at(points_by_k: pd.DataFrame, k: int) -> tuple:
    if k not in points_by_k.index:
        return None, None
    return points_by_k.loc[k, "accuracy_mean"], points_by_k.loc[k, "accuracy_std"]


def _k_text(k) -> str:
    return "none" if k is None else str(k)


def draw_s20_cifar(points: pd.DataFrame, panel: Mapping, labels: Mapping):
    """S20 Fig. 6: mean test top-k accuracy against k, one line per loss."""
    fig, axis = line_axes(
        "k", "top-k test accuracy (%)",
        f"S20 Fig. 6: CIFAR-100, {panel.get('model')} + {panel.get('augment')}, selected by "
        f"{panel.get('selection_metric')}; mean over seeds, band ± std")
    plot_lines(axis, points, "loss", "k", "accuracy", lambda loss: labels.get(loss, loss))
    axis.axhline(S20_TARGET_ACCURACY, color="grey", linestyle="--", linewidth=1)
    axis.text(0.98, 0.03, "S20: 99 % at k = 25 (top-5 transition), k = 33 (CE)",
              transform=axis.transAxes, ha="right", va="bottom", fontsize=8, color="grey")
    axis.legend(loc="center right")
    return fig


def make_s20_cifar_figure(sweep_dir: Path, out_dir: Path, model: str = "resnet18",
                          augment: str = "mixup", selection: str = "val/top5") -> dict[str, Path]:
    """S20 Fig. 6: test top-k accuracy for every recorded k, one line per loss.

    Parameters
    ----------
    sweep_dir : Path
        An ``s20_cifar`` sweep (runs trained with ``trainer.ks`` = 1..30).
    out_dir : Path
        Where ``s20_cifar.png``, ``.csv`` and ``.md`` go.
    model, augment, selection : str
        The panel: S20's figure is ResNet-18 with Mixup; models selected by val top-5 here.
        A value the sweep lacks falls back to the commonest one, and the markdown says so.

    Returns
    -------
    dict
        The files written, by kind. The CSV has one row per (loss, k): mean and std over
        completed seeds, run counts, and ``smallest_k_99`` (the loss's smallest k with a mean
        of at least 99 %, "none" if no recorded k reaches it).
    """
    sweep = read_sweep(sweep_dir, "s20_cifar")
    panel, runs, notes = choose_panel(
        sweep.records, {"model": model, "augment": augment, "selection_metric": selection})
    ks = recorded_ks(runs)
    entries = [observation(record, record.get("loss"), k, (record.get("test") or {}).get(f"top{k}"))
               for record in runs for k in ks]
    points = summarise_points(entries, sweep.expected_seeds, "loss", "k", "accuracy",
                              S20_CIFAR_LOSSES)
    reached = smallest_k_reaching(points)
    points["smallest_k_99"] = points["loss"].map(lambda loss: _k_text(reached.get(loss)))
    labels = _loss_labels(runs)
    paragraphs = [
        sweep.header,
        f"Panel: model = {panel['model']}, augment = {panel['augment']}, models selected by "
        f"{panel['selection_metric']} ({len(runs)} runs); test top-k accuracy (%) for k = "
        f"{ks[0]}…{ks[-1]}, mean ± std (ddof=1) over completed seeds. {COUNTS_LEGEND}",
        *notes,
        S20_FIG6_CLAIM,
    ]
    sections = [
        (f"Per loss: top-1 and top-5 (S20 Table I selects top-1 by val top-1 and top-5 by val "
         f"top-5), and the smallest k ≤ {ks[-1]} whose mean reaches 99 %:",
         s20_loss_table(points, panel, reached, labels)),
        ("Mean test top-k accuracy (%) per k (best: within 0.05 points of the best mean):",
         accuracy_by_k(points, labels)),
    ]
    markdown = markdown_document("S20 Fig. 6: CIFAR-100 test top-k accuracy against k",
                                 paragraphs, sections)
    return write_outputs("s20_cifar", out_dir, draw_s20_cifar(points, panel, labels), points,
                         markdown)


# ------------------------------------------------------------------------ G22 Fig. 3 (g22_time)


def g22_paper_points() -> pd.DataFrame:
    """G22 Fig. 3's epoch times as ratios to its CE epoch time (65 s at K = 5).

    Returns
    -------
    pandas.DataFrame
        ``source`` = "paper", ``line`` (``noised_bal (B=3)`` style, as ours), ``k``,
        ``ratio_to_ce_mean`` and ``paper_epoch_seconds``.
    """
    published = paper_results.load("g22_fig3_epoch_time")
    ce = published[published["loss"] == "ce"].assign(ratio_to_ce=1.0)
    others = tables.g22_time_paper(published)
    points = pd.concat([ce, others], ignore_index=True)
    return pd.DataFrame({"source": "paper", "line": points["loss"], "k": points["k"].astype(int),
                         "ratio_to_ce_mean": points["ratio_to_ce"],
                         "paper_epoch_seconds": points["epoch_seconds"]})


def g22_time_table(ours: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Per (line, K): our ratio (mean ± std) and run counts beside G22's ratio and seconds."""
    merged = pd.merge(ours.drop(columns="source"), paper.drop(columns="source"), how="outer",
                      on=["line", "k"], suffixes=("", "_paper"))
    lines = in_order(merged["line"].unique(), G22_LINES_FIRST)
    merged["_rank"] = merged["line"].map({line: rank for rank, line in enumerate(lines)})
    merged = merged.sort_values(["_rank", "k"])
    return pd.DataFrame({
        "line": merged["line"],
        "K": [_fmt(k, 0) for k in merged["k"]],
        "ours: epoch time / CE": [_mean_text(m, s, 3) for m, s in
                                  zip(merged["ratio_to_ce_mean"], merged["ratio_to_ce_std"])],
        "runs": merged["counts"].fillna("no run"),
        "G22: epoch time / CE": [_fmt(value, 3) for value in merged["ratio_to_ce_mean_paper"]],
        "G22 seconds": [_fmt(value, 0) for value in merged["paper_epoch_seconds"]],
    })


def draw_g22_time(ours: pd.DataFrame, paper: pd.DataFrame):
    """G22 Fig. 3 as ratios: our epoch time / CE's against K, G22's points as stars."""
    fig, axis = line_axes("K", "epoch time / mean CE epoch time",
                          "G22 Fig. 3: time per epoch against K, as a ratio to cross-entropy "
                          "(lines: ours, mean ± std; stars: G22)")
    colours = plot_lines(axis, ours, "line", "k", "ratio_to_ce", str)
    for index, (line, group) in enumerate(paper.groupby("line", sort=False)):
        axis.scatter(group["k"], group["ratio_to_ce_mean"], marker="*", s=160, zorder=3,
                     color=colours.get(line, f"C{len(colours) + index}"), edgecolors="black",
                     linewidths=0.6, label=f"G22 Fig. 3: {line}")
    axis.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    axis.legend(fontsize=8)
    return fig


def make_g22_time_figure(sweep_dir: Path, out_dir: Path) -> dict[str, Path]:
    """G22 Fig. 3: epoch time against K per loss, as a ratio to the sweep's CE epoch time.

    Parameters
    ----------
    sweep_dir : Path
        A ``g22_time`` sweep of 1-epoch timing runs; each record's ``epoch_seconds`` is divided
        by the mean ``epoch_seconds`` of the sweep's completed CE runs
        (:func:`topk.tables.g22_time_context`). K is the top-level ``k`` (else ``loss.k``), B of
        ``noised_bal`` is ``loss.n_samples``: one line per B.
    out_dir : Path
        Where ``g22_time.png``, ``.csv`` and ``.md`` go.

    Returns
    -------
    dict
        The files written, by kind. The CSV has our points (``source`` = "ours": mean and std
        over the runs at that K, run counts) then G22's (``source`` = "paper").
    """
    sweep = read_sweep(sweep_dir, "g22_time")
    context = tables.g22_time_context(sweep.records)
    entries = [observation(record, tables.g22_time_column(record)[0], tables.record_k(record),
                           tables.g22_time_ratio(record, "ratio_to_ce", context))
               for record in sweep.records]
    ours = summarise_points(entries, sweep.expected_seeds, "line", "k", "ratio_to_ce",
                            G22_LINES_FIRST, unit="runs")
    ours.insert(0, "source", "ours")
    paper = g22_paper_points()
    paragraphs = [sweep.header, *tables.g22_time_notes(context),
                  "ours: mean ± std (ddof=1) of the ratio over the runs at that K (CE and smooth "
                  f"SVM are timed once per B, as repeats). {COUNTS_LEGEND}", G22_FIG3_CLAIM]
    markdown = markdown_document("G22 Fig. 3: time per epoch against K, as a ratio to "
                                 "cross-entropy", paragraphs,
                                 [("Epoch time / CE epoch time:", g22_time_table(ours, paper))])
    return write_outputs("g22_time", out_dir, draw_g22_time(ours, paper),
                         pd.concat([ours, paper], ignore_index=True), markdown)


# ------------------------------------------------------------------------ B18 Fig. 2a (b18_tau)


def training_top5_error(record: Mapping) -> pd.DataFrame | None:
    """The run's top-5 training error per evaluated epoch (B18 Fig. 2a).

    Returns
    -------
    pandas.DataFrame or None
        ``epoch`` and ``train_top5_error`` = 100 − ``train/top5`` of its ``history.csv``, rows
        without a training accuracy (epochs that were not evaluated) skipped; ``None`` if the
        file is missing or unreadable or has no such column.
    """
    path = Path(record.get("run_dir", "")) / "history.csv"
    try:
        history = pd.read_csv(path)
    except (OSError, ValueError):  # missing, empty or corrupt: the run is counted as value-less
        return None
    if not {"epoch", "train/top5"} <= set(history.columns):
        return None
    accuracy = pd.to_numeric(history["train/top5"], errors="coerce")
    logged = accuracy.notna()
    return pd.DataFrame({"epoch": history["epoch"][logged].astype(int).to_numpy(),
                         "train_top5_error": 100.0 - accuracy[logged].to_numpy()})


def b18_tau_observations(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """Per-epoch and last-epoch observations of the smooth SVM / hinge runs, keyed by τ.

    τ is :func:`topk.tables.b18_tau_row`'s (``loss.tau``; the ``hinge`` runs are τ = 0). A run
    that did not complete, or has no training accuracy, gives one observation without epoch.

    Returns
    -------
    per_epoch : list of dict
        :func:`observation` entries with x = epoch.
    last : list of dict
        One entry per run with its last logged error (x empty).
    """
    include = tables.TABLES["b18_tau"].include
    per_epoch, last = [], []
    for record in filter(include, records):
        tau = _as_number(tables.b18_tau_row(record)[0])
        errors = training_top5_error(record) if record.get("status") == "completed" else None
        if errors is None or errors.empty:
            per_epoch.append(observation(record, tau, None, None))
            last.append(observation(record, tau, None, None))
            continue
        per_epoch += [observation(record, tau, epoch, error)
                      for epoch, error in zip(errors["epoch"], errors["train_top5_error"])]
        last.append(observation(record, tau, None, errors["train_top5_error"].iloc[-1]))
    return per_epoch, last


def b18_final_table(points: pd.DataFrame, final: pd.DataFrame) -> pd.DataFrame:
    """Per τ: our last-epoch training top-5 error and accuracy beside B18 Table 6's."""
    paper = paper_results.load("b18_table6_temperature").set_index("tau")["train_top5"]
    last_epochs = points.dropna(subset=["epoch"]).groupby("tau", dropna=False)["epoch"].max()
    by_tau = final.set_index("tau")
    rows = []
    for tau in tables.ordered([*by_tau.index], [float(t) for t in paper.index]):
        mine = by_tau.loc[tau] if tau in by_tau.index else None
        error = None if mine is None else _as_number(mine["train_top5_error_mean"])
        published = _as_number(paper.get(tau))
        rows.append({
            "τ": _tau_text(tau),
            "runs": "no run" if mine is None else mine["counts"],
            "last epoch": _fmt(last_epochs.get(tau), 0),
            "ours: train top-5 error (%)": "–" if mine is None else _mean_text(
                error, mine["train_top5_error_std"]),
            "ours: train top-5 accuracy (%)": _fmt(None if error is None else 100.0 - error),
            "B18 Table 6: train top-5 accuracy (%)": _fmt(published),
            "B18: error (%)": _fmt(None if published is None else 100.0 - published),
            "ours − B18 (accuracy points)": (
                "–" if error is None or published is None
                else f"{100.0 - error - published:+.2f}"),
        })
    return pd.DataFrame(rows)


def _tau_text(tau) -> str:
    return "–" if _as_number(tau) is None else f"{tau:g}"


def draw_b18_tau(points: pd.DataFrame):
    """B18 Fig. 2a: top-5 training error (%) against epoch, one line per τ."""
    fig, axis = line_axes("epoch", "top-5 training error (%)",
                          "B18 Fig. 2a: smooth top-5 SVM, top-5 training error per temperature τ "
                          "(mean over seeds)")
    plot_lines(axis, points, "tau", "epoch", "train_top5_error",
               lambda tau: f"τ = {_tau_text(tau)}")
    axis.axhline(RANDOM_TOP5_ERROR, color="grey", linestyle="--", linewidth=1,
                 label="random predictions (95 %)")
    axis.set_ylim(0, 100)
    axis.legend(fontsize=8)
    return fig


def make_b18_tau_figure(sweep_dir: Path, out_dir: Path) -> dict[str, Path]:
    """B18 Fig. 2a: top-5 training error per epoch, one line per temperature τ.

    Parameters
    ----------
    sweep_dir : Path
        A ``b18_tau`` sweep; each run's ``history.csv`` gives ``train/top5`` on its evaluated
        epochs.
    out_dir : Path
        Where ``b18_tau.png``, ``.csv`` and ``.md`` go.

    Returns
    -------
    dict
        The files written, by kind. The CSV has one row per (τ, epoch): the mean and std of
        100 − ``train/top5`` over completed seeds, and run counts; a run without any logged
        epoch (failed, interrupted, no history) has a row with an empty epoch. The markdown
        sets the last-epoch values beside B18 Table 6's training accuracy.
    """
    sweep = read_sweep(sweep_dir, "b18_tau")
    per_epoch, last = b18_tau_observations(sweep.records)
    points = summarise_points(per_epoch, sweep.expected_seeds, "tau", "epoch", "train_top5_error")
    final = summarise_points(last, sweep.expected_seeds, "tau", "epoch", "train_top5_error")
    paragraphs = [
        sweep.header,
        "Top-5 training error (%) = 100 − `train/top5` of each run's `history.csv` on the epochs "
        "where it was logged; mean ± std (ddof=1) over completed seeds. τ = 0 is the non-smooth "
        f"top-5 SVM (`loss=hinge` or `loss.tau=0`). {COUNTS_LEGEND}",
        B18_FIG2A_CLAIM,
    ]
    markdown = markdown_document(
        "B18 Fig. 2a: top-5 training error per temperature τ", paragraphs,
        [("Last logged epoch, ours beside B18 Table 6 "
          "(`topk/paper_results/b18_table6_temperature.csv`):", b18_final_table(points, final))])
    return write_outputs("b18_tau", out_dir, draw_b18_tau(points), points, markdown)


# ------------------------------------------------------------------------ entry


def make_figure(figure_id: str, sweep_dir: Path, out_dir: Path, **panel) -> dict[str, Path]:
    """Draw one figure of :data:`FIGURE_IDS` from ``sweep_dir`` into ``out_dir``.

    Parameters
    ----------
    figure_id : str
        ``s20_exp1``…``s20_exp3``, ``s20_cifar``, ``g22_time`` or ``b18_tau``.
    sweep_dir, out_dir : Path
        The sweep to read and where ``<figure_id>.png``, ``.csv`` and ``.md`` go.
    **panel
        ``s20_cifar`` only: ``model``, ``augment``, ``selection`` (see
        :func:`make_s20_cifar_figure`).

    Returns
    -------
    dict
        The files written, by kind.
    """
    if figure_id not in FIGURE_IDS:
        raise ValueError(f"unknown figure {figure_id!r}; choose one of {', '.join(FIGURE_IDS)}")
    if panel and figure_id != "s20_cifar":
        raise ValueError(f"{', '.join(panel)} select a panel of s20_cifar only, not {figure_id}")
    if figure_id in S20_FIGURES:
        return make_s20_figure(figure_id, sweep_dir, out_dir)
    if figure_id == "s20_cifar":
        return make_s20_cifar_figure(sweep_dir, out_dir, **panel)
    if figure_id == "g22_time":
        return make_g22_time_figure(sweep_dir, out_dir)
    return make_b18_tau_figure(sweep_dir, out_dir)
