"""Paper tables: each a :class:`~topk.report.table_specs.TableSpec` of sources on a sweep's runs
frame (a column name or ``runs -> Series``), beside its published CSV, computed into cells and
laid out as the paper prints it. A cell averages completed seeds (mean, std with ddof=1); failed,
interrupted, running and missing runs are counted apart, never averaged in.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from topk import paper_results
from topk.report.cells import (
    count_text,
    display,
    fmt,
    mean_text,
    normalise_key,  # noqa: F401  (imported from here by tests/test_tables.py)
    observation,
    ordered,
    summarise_cell,
    summarise_groups,
)
from topk.report.render import Table, write_table
from topk.report.runs import (
    Sweep,
    best_sweep,
    column,
    number,
    read_sweep,
    spread_over_k,
)
from topk.report.table_specs import TABLES, UNKNOWN_ERROR, Source, TableSpec
from topk.report.tuning import TUNED_TABLES, tuned_table
from topk.report.verdicts import (
    CELL_RULE,
    CLAIM_RULE,
    TOO_FEW,
    cell_verdict,
    half_width,
)

OURS_LEGEND = (
    "Each cell: ours = mean ± std (ddof=1) over completed seeds (completed/expected seeds; failed, "
    "interrupted, still-running, value-less and missing runs are counted and left out of the "
    "mean)")
CELL_LEGEND = (OURS_LEGEND + ", and [low, high] its 95 % t-interval; paper = the published mean "
               "(± its std, else (se …) its standard error from its sample); ours − paper in "
               "{unit}. " + CELL_RULE)
CLAIMS_CAPTION = ("What the paper claims about these results, in its words, and whether each "
                  "claim holds on these runs. " + CLAIM_RULE)


def observations(spec: TableSpec, runs: pd.DataFrame) -> list[dict]:
    """One entry per (run, metric) the run counts for: its cell, status, seed and value."""
    def series(source: Source) -> pd.Series:
        return column(runs, source) if isinstance(source, str) else source(runs)

    keys = {name: series(source) for name, source in {**spec.rows, **spec.columns}.items()}
    entries = []
    for metric, source in spec.metrics.items():
        values = series(source)
        used = spec.uses(runs, metric) if spec.uses else pd.Series(True, index=runs.index)
        for i in runs.index[used.to_numpy(dtype=bool)]:
            row, col = spec.keys({name: key[i] for name, key in keys.items()})
            entries.append(observation(runs.at[i, "status"], runs.at[i, "seed"], values[i],
                                       row=row, column=col, metric=metric, run=i))
    return entries


def paper_cells(spec: TableSpec) -> pd.DataFrame:
    """The published table in long form: ``row``, ``column`` (tuples of normalised keys),
    ``metric``, ``paper``, ``paper_std``."""
    rows = []
    table = paper_results.load(spec.paper) if spec.paper else pd.DataFrame()
    table = spec.paper_transform(table) if spec.paper_transform and spec.paper else table
    for _, line in table.iterrows():
        row, col = spec.keys(line)
        for metric, name in (spec.paper_columns or {m: m for m in spec.metrics}).items():
            if number(line.get(name)) is not None:
                rows.append({"row": row, "column": col, "metric": metric, "paper": float(line[name]),
                             "paper_std": number(line.get(f"{name}_std"))})
    return pd.DataFrame(rows, columns=["row", "column", "metric", "paper", "paper_std"])


def sampling_error(spec: TableSpec, metric: str, paper: float, paper_std: float,
                   runs: pd.DataFrame) -> tuple[float, str]:
    """The published number's standard error from its sample (``spec.sampling``) and why there
    is none; not needed (NaN, "") where the paper reports a std or no number."""
    if math.isnan(paper) or not math.isnan(paper_std):
        return math.nan, ""
    return spec.sampling.get(metric, UNKNOWN_ERROR)(paper, runs)


def cell_table(spec: TableSpec, sweep: Sweep) -> pd.DataFrame:
    """One row per (row key, column key, metric) that the paper or a run has, in the paper's
    order then ours: keys, statistics, ``counts``, ``paper``, ``paper_std``, ``sampling_se``
    (the paper's number's standard error where it reports no std) and ``no_error`` (why there
    is none), ``diff``, ``verdict``."""
    runs = spread_over_k(sweep.runs) if spec.each_k else sweep.runs
    entries, paper = observations(spec, runs), paper_cells(spec)
    published = {(r, col, m): (p, s) for r, col, m, p, s in paper.itertuples(index=False)}
    ours = summarise_groups(entries, ("row", "column", "metric"), sweep.seeds)
    counted: dict[tuple, list] = {}  # the runs whose value a cell averages
    for e in entries:
        if e["value"] is not None:
            counted.setdefault((e["row"], e["column"], e["metric"]), []).append(e["run"])
    rows = ordered([e["row"] for e in entries], [*spec.row_order, *paper["row"]])
    if spec.rank_rows_by:
        mean = {row: ours.get((row, (), spec.rank_rows_by), {}).get("mean", math.nan) for row in rows}
        rows = sorted(rows, key=lambda row: -mean[row] if not math.isnan(mean[row]) else math.inf)
    columns = ordered([e["column"] for e in entries], [*spec.column_order, *paper["column"]],
                        sort_all=spec.sort_columns)
    out = []
    for (row_rank, row), (column_rank, col), metric in itertools.product(
            enumerate(rows), enumerate(columns), spec.metrics):
        if (key := (row, col, metric)) not in ours and key not in published:
            continue
        cell = ours.get(key) or summarise_cell([], sweep.seeds)
        value, std = published.get(key, (math.nan, None))
        std = math.nan if std is None else std
        half = half_width(cell["std"], cell["n"])
        se, why = sampling_error(spec, metric, value, std, runs.loc[counted.get(key, [])])
        out.append({**dict(zip(spec.row_names, row)), **dict(zip(spec.column_names, col)),
                    "metric": metric, **cell, "ci_low": cell["mean"] - half,
                    "ci_high": cell["mean"] + half, "counts": count_text(cell), "paper": value,
                    "paper_std": std, "sampling_se": se, "no_error": why,
                    "diff": cell["mean"] - value,
                    "verdict": cell_verdict(cell["mean"], cell["std"], cell["n"], value, std, se),
                    "_row": row, "_column": col, "_row_rank": row_rank, "_column_rank": column_rank})
    return pd.DataFrame(out)


def paper_text(cell: Mapping) -> str:
    """"91.35 ± 0.20" (its std), "91.70 (se 0.28)" (its sampling error), "91.70", or ""."""
    if number(cell["paper_std"]) is None and number(cell["sampling_se"]) is not None:
        return f"{fmt(cell['paper'])} (se {cell['sampling_se']:.2f})"
    return mean_text(cell["paper"], cell["paper_std"], missing="")


def unjudged_notes(cells: pd.DataFrame) -> list[str]:
    """One line per metric with a one-run cell left *too few runs* for want of a spread: why."""
    if cells.empty:
        return []
    waiting = cells[(cells["verdict"] == TOO_FEW) & (cells["n"] == 1) & (cells["no_error"] != "")]
    return [f"{metric}: one run is *{TOO_FEW}*, as {why}; it takes two seeds or more."
            for metric, why in dict(zip(waiting["metric"], waiting["no_error"])).items()]


def wide_table(spec: TableSpec, cells: pd.DataFrame, metrics=None) -> pd.DataFrame:
    """The paper's layout: rows are the row keys; columns (column key…, metric, field) for
    ours (mean ± std (seed counts)), paper and ours − paper; empty cells say "no run"."""
    metrics = list(metrics or spec.metrics)
    rows, columns = (sorted(dict(zip(cells[k], cells[f"{k}_rank"])).items(), key=lambda kv: kv[1])
                     for k in ("_row", "_column"))
    texts = {}
    for cell in cells.to_dict("records"):
        counts = cell["counts"]
        interval = ("" if math.isnan(cell["ci_low"]) else
                    f" [{fmt(cell['ci_low'])}, {fmt(cell['ci_high'])}]")
        ours = (f"{mean_text(cell['mean'], cell['std'])}{interval} ({counts})" if cell["n"]
                else counts if counts == "no run" else f"– ({counts})")
        texts[cell["_row"], cell["_column"], cell["metric"]] = {
            "ours": ours, "paper": paper_text(cell),
            "ours − paper": fmt(cell["diff"], sign=True, missing=""), "verdict": cell["verdict"]}
    header, data = [], []
    for (col, _), metric, name in itertools.product(columns, metrics, spec.fields):
        header.append((*map(display, col), *((metric,) if len(metrics) > 1 else ()),
                       *((name,) if len(spec.fields) > 1 else ())))
        data.append([texts.get((r, col, metric), {"ours": "no run"}).get(name, "")
                     for r, _ in rows])
    index = pd.MultiIndex.from_tuples([tuple(map(display, r)) for r, _ in rows],
                                      names=spec.row_names)
    frame = pd.DataFrame(dict(enumerate(data)),
                         index=index.get_level_values(0) if index.nlevels == 1 else index)
    frame.columns = (pd.MultiIndex.from_tuples(header) if len(header[0]) > 1
                     else [h[0] for h in header])
    return frame


def shown(cells: pd.DataFrame) -> bool:
    """Whether a metric's section is printed: not when it has no cell, nor when completed runs
    lack it and the paper has no number for it (records older than the metric, e.g. average-K)."""
    unrecorded = cells["n"].sum() == 0 and cells["no_value"].sum() > 0 and cells["paper"].isna().all()
    return not cells.empty and not unrecorded


def build_table(table_id: str, sweep_dir: Path | None = None, outputs: Path = Path("outputs"),
                bench_file: Path | None = None, sweep: Sweep | None = None) -> Table:
    """One table from ``sweep`` (already read), else ``sweep_dir`` (default: the best
    ``<outputs>/sweeps/<id>/*``, :func:`topk.report.runs.sweep_rank`), ``b18_speed``
    from ``bench_file`` (default ``<outputs>/bench/losses.json``), a zoo's tuned table from the
    studies under ``sweep_dir`` (default ``<outputs>/tuning/<zoo>``, :mod:`topk.report.tuning`);
    FileNotFoundError or
    ConfigError name what to run or fix. Wide sections: one per metric if the paper splits them."""
    if table_id == "b18_speed":
        from topk.report.speed import speed_table

        return speed_table(bench_file or Path(outputs) / "bench" / "losses.json")
    if table_id in TUNED_TABLES:
        return tuned_table(table_id, outputs, tuning_dir=sweep_dir)
    if table_id not in TABLES:
        raise ValueError(f"unknown table {table_id!r}; choose one of {', '.join(TABLE_IDS)}")
    spec = TABLES[table_id]
    if sweep is None:
        sweep = read_sweep(sweep_dir, table_id) if sweep_dir else best_sweep(outputs, table_id)
    cells = cell_table(spec, sweep)
    metrics = [m for m in spec.metrics if not cells.empty and shown(cells[cells["metric"] == m])]
    cells = cells[cells["metric"].isin(metrics)] if metrics else cells.iloc[0:0]
    if cells.empty:
        sections = []
    elif spec.split_metrics:
        sections = [(metric, wide_table(spec, cells[cells["metric"] == metric], [metric]))
                    for metric in metrics]
    else:
        sections = [("", wide_table(spec, cells, metrics))]
    legend = CELL_LEGEND.format(unit=spec.unit) if "paper" in spec.fields else OURS_LEGEND + "."
    preamble = [sweep.header(), legend]
    preamble += [f"Paper: `topk/paper_results/{spec.paper}.csv`."] if spec.paper else []
    preamble += unjudged_notes(cells)
    tidy = cells.drop(columns=["_row", "_column", "_row_rank", "_column_rank"], errors="ignore")
    verdicts = [v for v in tidy["verdict"] if v] if "verdict" in tidy.columns else []
    if spec.claims is not None:  # the paper's claims about the table, judged on the same runs
        judged = spec.claims(sweep.runs)
        sections.append((CLAIMS_CAPTION, judged.set_index("setting")))
        verdicts += list(judged["verdict"])
    return Table(spec.id, spec.title, preamble + spec.notes(sweep.runs), sections, tidy,
                 verdicts=verdicts, sweep=sweep)


def make_table(table_id: str, out_dir: Path, **kwargs) -> tuple[Table, dict[str, Path]]:
    table = build_table(table_id, **kwargs)
    return table, write_table(table, out_dir)


TABLE_IDS = (*TABLES, "b18_speed", *TUNED_TABLES)
