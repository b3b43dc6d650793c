"""What the paper figures (:mod:`topk.report.figures`, :mod:`topk.report.sparsity_figures`)
share: matplotlib without a display, points summarised per (line, x) over a sweep's runs, and a
figure of lines with ± std bands.
"""

from __future__ import annotations

import pandas as pd

from topk.report.cells import (
    COUNTS,
    count_text,
    in_order,
    number,
    summarise_groups,
    whole_numbers,
)

COUNTS_LEGEND = (
    "runs: runs averaged / runs expected (found + missing); failed, interrupted, still-running, "
    "value-less and missing runs are counted there and left out of every mean.")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def summarise_points(entries: list[dict], expected_seeds: int | None, names: tuple[str, str, str],
                     line_order=(), unit="seeds") -> pd.DataFrame:
    """One row per (line, x) of :func:`observation` entries, lines in order and x ascending (none
    last), columns ``names`` = (line, x, value): ``<value>_mean`` and ``_std`` over completed
    runs, the cell counts and their text."""
    line_name, x_name, value_name = names
    cells = summarise_groups(entries, ("line", "x"), expected_seeds)
    rank = {line: i for i, line in enumerate(in_order([line for line, _ in cells], line_order))}

    def position(item):
        (line, x), _ = item
        return rank[line], number(x) is None, number(x) or 0.0

    rows = [{line_name: line, x_name: x, f"{value_name}_mean": cell["mean"],
             f"{value_name}_std": cell["std"], **{k: cell[k] for k in (*COUNTS, "seeds")},
             "counts": count_text(cell, unit)} for (line, x), cell in sorted(cells.items(), key=position)]
    frame = pd.DataFrame(rows, columns=[line_name, x_name, f"{value_name}_mean",
                                        f"{value_name}_std", *COUNTS, "seeds", "counts"])
    frame[x_name] = whole_numbers(frame[x_name])  # k, K, epochs: integers
    frame[list(COUNTS)] = frame[list(COUNTS)].astype("Int64")
    return frame


def line_figure(points: pd.DataFrame, names: tuple[str, str, str], label, titles: tuple[str, str, str]):
    """Each line's mean against x (``names`` as in :func:`summarise_points`) with a ± std band,
    labelled ``label(line)``, on axes with ``titles`` (x, y, title); returns the figure, its axis
    and each drawn line's colour."""
    from matplotlib.ticker import MaxNLocator

    line_name, x_name, value_name = names
    fig, axis = pyplot().subplots(figsize=(7, 4.5), constrained_layout=True)
    axis.set(xlabel=titles[0], ylabel=titles[1])
    axis.grid(alpha=0.3)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_title(titles[2], fontsize=9)
    mean, std = f"{value_name}_mean", f"{value_name}_std"
    colours = {}
    for line, group in points.groupby(line_name, sort=False, dropna=False):
        group = group.dropna(subset=[mean, x_name])
        if group.empty:
            continue
        x = group[x_name].astype(float)
        (drawn,) = axis.plot(x, group[mean], marker="o" if len(group) <= 40 else None,
                             markersize=3, label=label(line))
        colours[line] = drawn.get_color()
        spread = group[std].notna().to_numpy()
        if spread.any():
            axis.fill_between(x[spread], (group[mean] - group[std])[spread],
                              (group[mean] + group[std])[spread], color=colours[line],
                              alpha=0.15, linewidth=0)
    return fig, axis, colours
