"""Run records of one sweep → a paper table, with the published number and our difference.

Each table is a :class:`TableSpec` in :data:`TABLES`: where a record's row and column keys come
from, which metrics it gives, and which published CSV (``topk/paper_results/``) to set beside it.
One generic path reads the records, aggregates each cell over completed seeds (mean, std with
ddof=1, seed count; failed, interrupted, unfinished and missing runs counted apart, never
averaged in), joins the paper's numbers and writes ``<id>.md``, ``<id>.csv`` (tidy, one row per
cell and metric) and ``<id>.tex``. A sweep holding runs of another experiment than the table's,
or of none, is refused (:func:`check_experiment`). ``b18_speed`` reads ``outputs/bench/losses.json``
(``scripts/bench_losses.py``) instead of run records.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from topk import paper_results
from topk.errors import ConfigError
from topk.records import latest_sweep_dir, read_results

FIELDS = ("ours", "paper", "ours − paper")
UNFINISHED = ("failed", "interrupted", "running")


# ----------------------------------------------------------------------------------- extractors


def _always(*_args) -> bool:
    return True


def _no_context(records: list[dict]) -> dict:
    return {}


def _no_notes(context: Mapping) -> list[str]:
    return []


def _split(record: dict, key: str) -> dict:
    """``record[key]`` (``params``, ``val``, ``test``), ``{}`` if a partial record lacks it."""
    return record.get(key) or {}


def _param(name: str, default=None) -> Callable[[dict], object]:
    return lambda record: _split(record, "params").get(name, default)


def _top(name: str) -> Callable[[dict], object]:
    return lambda record: record.get(name)


def _keys(*getters: Callable[[dict], object]) -> Callable[[dict], tuple]:
    return lambda record: tuple(getter(record) for getter in getters)


def record_k(record: dict):
    """The K of a run: the experiment's top-level ``k``, else the loss's ``loss.k``."""
    params = _split(record, "params")
    return params.get("k") if params.get("k") is not None else params.get("loss.k")


def from_test(record: dict, metric: str, context: Mapping):
    return _split(record, "test").get(metric)


def from_val_top5(record: dict, metric: str, context: Mapping):
    return _split(record, "val").get("top5")


def from_test_at_k(record: dict, metric: str, context: Mapping):
    """``metric`` with its ``K`` replaced by the run's K (``macro_topK`` → ``macro_top5``)."""
    k = record_k(record)
    return None if k is None else _split(record, "test").get(metric.replace("K", str(int(k))))


def history_value(record: dict, column: str):
    """``column`` of ``history.csv`` at the record's ``best_epoch`` (the last row if unset)."""
    path = Path(record.get("run_dir", "")) / "history.csv"
    if not path.is_file():
        return None
    try:
        history = pd.read_csv(path)
    except (OSError, ValueError):  # empty or corrupt file: the cell counts the run as value-less
        return None
    if column not in history.columns or history.empty:
        return None
    best = record.get("best_epoch")
    known = best is not None and "epoch" in history.columns
    rows = history[history["epoch"] == best] if known else history.tail(1)
    return None if rows.empty else rows[column].iloc[-1]


def b18_tau_metric(record: dict, metric: str, context: Mapping):
    """B18 Table 6: train top-5 at the selected epoch (from history) and test top-5."""
    if metric == "train_top5":
        return history_value(record, "train/top5")
    return _split(record, "test").get("top5")


def b18_tau_row(record: dict) -> tuple:
    """B18 Table 6's τ; the non-smooth top-k SVM (``hinge``) is its τ = 0 row."""
    return (0.0 if record.get("loss") == "hinge" else _split(record, "params").get("loss.tau"),)


def b18_train_images(record: dict) -> tuple:
    """B18 Table 2's training-set size; ``train_size: null`` (all the rest) is its 1.23M row."""
    size = _split(record, "params").get("dataset.train_size")
    return (1230000 if size is None else size,)


def loss_label(loss: str, n_samples=None) -> str:
    """``noised_bal`` carries its number of noise samples B (G22 Fig. 3); other losses do not."""
    if loss == "noised_bal" and _number(n_samples) is not None:
        return f"noised_bal (B={_display(n_samples)})"
    return loss


def g22_time_column(record: dict) -> tuple:
    return (loss_label(record.get("loss"), _split(record, "params").get("loss.n_samples")),)


def g22_time_context(records: list[dict]) -> dict:
    """The sweep's CE baseline: mean ``epoch_seconds`` of its completed CE runs."""
    seconds = [r.get("epoch_seconds") for r in records
               if r.get("loss") == "ce" and r.get("status") == "completed"]
    seconds = [s for s in seconds if _number(s) is not None]
    return {"ce_seconds": float(np.mean(seconds)) if seconds else None, "ce_runs": len(seconds)}


def g22_time_ratio(record: dict, metric: str, context: Mapping):
    """A run's median seconds per epoch over the sweep's CE baseline (G22 Fig. 3 as a ratio)."""
    seconds, baseline = record.get("epoch_seconds"), context.get("ce_seconds")
    return None if seconds is None or not baseline else seconds / baseline


def g22_time_notes(context: Mapping) -> list[str]:
    if context.get("ce_seconds") is None:
        return ["No completed CE run in this sweep: no baseline, so no ratio."]
    return [f"CE baseline: {context['ce_seconds']:.3f} s per epoch (mean over the sweep's "
            f"completed CE runs: {context['ce_runs']}). The paper's times are divided by its CE "
            "time at the same K, or by its one CE time where it gives CE once; hardware differs, "
            "so only ratios are compared."]


def g22_time_paper(paper: pd.DataFrame) -> pd.DataFrame:
    """G22 Fig. 3's seconds per epoch → ratio to its CE time (same K, else its one CE time)."""
    ce = paper[paper.get("loss") == "ce"].set_index("k")["epoch_seconds"]
    only = ce.iloc[0] if len(ce) == 1 else math.nan
    rows = paper[paper.get("loss") != "ce"].copy()
    baseline = rows["k"].map(ce).fillna(only)
    rows["ratio_to_ce"] = rows["epoch_seconds"] / baseline
    rows["loss"] = [loss_label(loss, b) for loss, b in zip(rows["loss"], rows["n_samples"])]
    return rows


def s20_context(records: list[dict]) -> dict:
    return {"selections": sorted({r.get("selection_metric") for r in records} - {None})}


def s20_selection(metric: str, context: Mapping) -> str | None:
    """S20 selects by val top-1 for its top-1 column and by val top-5 for its top-5 column; a
    sweep lacking that selection falls back to what it has (``None``: every run)."""
    wanted = f"val/{metric}"
    return wanted if wanted in context.get("selections", []) else None


def s20_uses(record: dict, metric: str, context: Mapping) -> bool:
    wanted = s20_selection(metric, context)
    return wanted is None or record.get("selection_metric") == wanted


def s20_notes(context: Mapping) -> list[str]:
    notes = []
    for metric in ("top1", "top5"):
        wanted = s20_selection(metric, context)
        used = wanted or " and ".join(context.get("selections", [])) or "nothing"
        remark = "as S20" if wanted else f"no run selected by val/{metric} in this sweep"
        notes.append(f"{metric}: models selected by {used} ({remark}).")
    return notes


# ------------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class TableSpec:
    """One paper table: where each record's cell and value come from, and the published CSV.

    Attributes
    ----------
    id : str
        Table id, also the experiment whose sweep it reads (``outputs/sweeps/<id>/``).
    title : str
        The paper table it reproduces, e.g. "B18 Table 1: ...".
    paper : str or None
        Name of the published CSV in ``topk/paper_results/`` (``None``: nothing published).
    row_names, column_names : tuple of str
        Names of the row / column keys, in the order ``row_key`` / ``column_key`` return them;
        also the published CSV's columns for those keys.
    row_key, column_key : callable
        ``record -> tuple``: the cell a run record belongs to.
    metrics : tuple of str
        The metrics of each cell, in print order.
    value : callable
        ``(record, metric, context) -> float or None``: a completed run's value.
    paper_columns : mapping
        Metric -> published column (a ``<column>_std`` beside it is the paper's std).
    include : callable
        ``record -> bool``: whether the record belongs to the table at all.
    uses : callable
        ``(record, metric, context) -> bool``: whether it counts for that metric.
    context : callable
        ``records -> dict``: sweep-wide facts the extractors need (a baseline, selections).
    notes : callable
        ``context -> list of str``: lines printed above the table.
    paper_transform : callable or None
        Applied to the published CSV before its cells are read (e.g. seconds -> ratios).
    split_metrics : bool
        One table per metric, as the paper prints them.
    column_order : tuple of tuple
        Column keys printed first, in the paper's order.
    sort_columns : bool
        Columns sorted (natural order) rather than in the paper's order (a figure has none).
    unit : str
        Unit of ours − paper, for the legend.
    """

    id: str
    title: str
    paper: str | None
    row_names: tuple[str, ...]
    row_key: Callable[[dict], tuple]
    column_names: tuple[str, ...]
    column_key: Callable[[dict], tuple]
    metrics: tuple[str, ...]
    value: Callable[[dict, str, Mapping], object]
    paper_columns: Mapping[str, str] = field(default_factory=dict)
    include: Callable[[dict], bool] = _always
    uses: Callable[[dict, str, Mapping], bool] = _always
    context: Callable[[list[dict]], dict] = _no_context
    notes: Callable[[Mapping], list[str]] = _no_notes
    paper_transform: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    split_metrics: bool = False
    column_order: tuple[tuple, ...] = ()
    sort_columns: bool = False
    unit: str = "percentage points"


def _same(*names: str) -> dict:
    return {name: name for name in names}


_LOSS = _keys(_top("loss"))
_NOISE = _keys(_param("dataset.noise", 0.0))
SWEEP_TABLES = [
    TableSpec("s20_cifar", "S20 Table I: CIFAR-100, test accuracy (%)", "s20_table1_cifar100",
              ("model", "augment", "loss"), _keys(_top("model"), _top("augment"), _top("loss")),
              (), _keys(), ("top1", "top5"), from_test, _same("top1", "top5"),
              uses=s20_uses, context=s20_context, notes=s20_notes),
    TableSpec("b18_cifar_noise", "B18 Table 1: CIFAR-100 with label noise p, test accuracy (%)",
              "b18_table1_cifar100_noise", ("noise",), _NOISE, ("loss",), _LOSS,
              ("top1", "top5"), from_test, _same("top1", "top5")),
    TableSpec("b18_imagenet", "B18 Table 2: ImageNet subsets, test top-5 accuracy (%)",
              "b18_table2_imagenet_subsets", ("train_images",), b18_train_images, ("loss",), _LOSS,
              ("top5",), from_test, _same("top5")),
    TableSpec("b18_tau", "B18 Table 6: temperature τ of the smooth top-5 SVM, top-5 accuracy (%)",
              "b18_table6_temperature", ("tau",), b18_tau_row, (), _keys(),
              ("train_top5", "test_top5"), b18_tau_metric, _same("train_top5", "test_top5"),
              include=lambda record: record.get("loss") in ("smooth_svm", "hinge")),
    TableSpec("g22_epsilon", "G22 Table 2: noise level ε of the noised top-5 hinge, val top-5 (%)",
              "g22_table2_epsilon", ("epsilon",), _keys(_param("loss.epsilon")), (), _keys(),
              ("val_top5",), from_val_top5, _same("val_top5")),
    TableSpec("g22_samples", "G22 Table 3: noise samples B of the noised top-5 hinge, val top-5 (%)",
              "g22_table3_samples", ("n_samples",), _keys(_param("loss.n_samples")), (), _keys(),
              ("val_top5",), from_val_top5, _same("val_top5")),
    TableSpec("g22_cifar_noise", "G22 Tables 4 (top-5) and 6 (top-1): CIFAR-100 with label noise, "
              "test accuracy (%)", "g22_tables4_6_cifar100_noise", ("noise",), _NOISE, ("loss",),
              _LOSS, ("top5", "top1"), from_test, _same("top5", "top1"), split_metrics=True),
    TableSpec("g22_plantnet", "G22 Tables 5 (macro-average top-K) and 7 (top-K): Pl@ntNet-300K, "
              "test accuracy (%)", "g22_tables5_7_plantnet", ("k",), _keys(record_k), ("loss",),
              _LOSS, ("macro_topK", "topK"), from_test_at_k,
              {"macro_topK": "macro_topk", "topK": "topk"}, split_metrics=True,
              column_order=tuple((loss,) for loss in ("ce", "smooth_svm", "noised_bal", "focal",
                                                      "ldam", "noised_imbal"))),
    TableSpec("g22_imagenet_lt", "G22 §4.5.2: ImageNet-LT, test top-K accuracy (%) overall and on "
              "many-, medium- and few-shot classes (no published CSV)", None, ("k", "loss"),
              _keys(record_k, _top("loss")), (), _keys(),
              ("topK", "many_topK", "medium_topK", "few_topK"), from_test_at_k),
    TableSpec("g22_time", "G22 Fig. 3: time per epoch as a ratio to cross-entropy", "g22_fig3_epoch_time",
              ("k",), _keys(_param("loss.k")), ("loss",), g22_time_column, ("ratio_to_ce",),
              g22_time_ratio, _same("ratio_to_ce"), include=lambda record: record.get("loss") != "ce",
              context=g22_time_context, notes=g22_time_notes, paper_transform=g22_time_paper,
              sort_columns=True, unit="ratio units"),
]
TABLES: dict[str, TableSpec | None] = {spec.id: spec for spec in SWEEP_TABLES}
TABLES["b18_speed"] = None  # from outputs/bench/losses.json, see make_speed_table


# ------------------------------------------------------------------------------------- keys


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def normalise_key(value):
    """Numbers → float (so 0, 0.0 and 1230000 match the CSV's), NaN → None, the rest → str."""
    if value is None or isinstance(value, bool):
        return value
    number = _number(value)
    if number is not None:
        return number
    if isinstance(value, float):  # NaN
        return None
    return str(value)


def _display(value) -> str:
    """A key as printed: 0.2, 1230000, 0.0001, resnet18; missing → "–"."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def _sort_value(value) -> tuple:
    """Numbers first, by value; then text in natural order ("B=3" before "B=10")."""
    if isinstance(value, float):
        return (0, value, ())
    parts = re.split(r"(\d+)", str(value))
    return (1, 0.0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts))


def _sort_key(key) -> tuple:
    return tuple(map(_sort_value, key if isinstance(key, tuple) else (key,)))


def ordered(keys, first, sort_all: bool = False) -> list:
    """``first`` (the paper's order) then the other ``keys`` sorted; everything sorted if
    ``sort_all`` or if the paper's own order is already ascending."""
    first = list(dict.fromkeys(first))
    if sort_all or first == sorted(first, key=_sort_key):
        return sorted(set(keys) | set(first), key=_sort_key)
    return first + sorted(set(keys) - set(first), key=_sort_key)


# ------------------------------------------------------------------------------------- records


def load_records(sweep_dir: Path) -> tuple[list[dict], list[str]]:
    """Read every run record of a sweep.

    Parameters
    ----------
    sweep_dir : Path
        A Hydra multirun directory (one sub-directory per job).

    Returns
    -------
    records : list of dict
        Every readable ``results.json`` below ``sweep_dir``, each with its ``run_dir``.
    unreadable : list of str
        The paths (and errors) of the others: a corrupt file is counted, not fatal.
    """
    records, unreadable = [], []
    for path in sorted(Path(sweep_dir).rglob("results.json")):
        try:
            records.append(read_results(path))
        except (OSError, ValueError) as error:
            unreadable.append(f"{path}: {error}")
    return records, unreadable


def _experiment_of(record: Mapping) -> str | None:
    """The record's ``experiment`` as text; ``None`` for a run without ``+experiment``."""
    name = record.get("experiment")
    return None if name is None else str(name)


def _experiments_text(names: set) -> str:
    """``{"s20_exp1", None}`` → "experiment s20_exp1 and of no experiment (...)"."""
    named = sorted(name for name in names if name is not None)
    parts = [f"experiment{'s' if len(named) > 1 else ''} {', '.join(named)}"] if named else []
    if None in names:
        parts.append("no experiment (`experiment: null` in their results.json, a sweep run "
                     "without +experiment)")
    return " and of ".join(parts)


def check_experiment(records: list[dict], experiment: str, sweep_dir: Path) -> None:
    """Refuse a sweep whose run records are not all runs of ``experiment``.

    A table or figure sets one experiment's runs beside one paper's numbers: runs of another
    experiment, or of none (``experiment: null``, a sweep run without ``+experiment``), would
    fill its cells with numbers of another setting. A sweep that mixes such runs with the
    experiment's own is refused as well, rather than filtered, so that no run is left out
    silently; the message names a run to move out.

    Parameters
    ----------
    records : list of dict
        The sweep's readable records (:func:`load_records`); unreadable ones are not checked.
    experiment : str
        The experiment the table or figure belongs to (its id).
    sweep_dir : Path
        The sweep, named in the message.

    Raises
    ------
    ConfigError
        One sentence naming the experiment(s) found and the sweep to point at instead.
    """
    strangers = [record for record in records if _experiment_of(record) != experiment]
    if not strangers:
        return
    found = _experiments_text({_experiment_of(record) for record in strangers})
    command = f"`python train.py -m +experiment={experiment}`"
    own = len(records) - len(strangers)
    if own:
        raise ConfigError(
            f"{_display_path(sweep_dir)} mixes {own} run(s) of {experiment} with "
            f"{len(strangers)} run(s) of {found} (e.g. {_display_path(strangers[0]['run_dir'])}); "
            f"move those out of the sweep, or point --sweep-dir at a sweep of {command} alone.")
    raise ConfigError(f"{_display_path(sweep_dir)} holds runs of {found}, not {experiment}; "
                      f"point --sweep-dir at a sweep of {command}.")


def sweep_overrides(sweep_dir: Path) -> dict:
    """Hydra's sweep overrides of ``multirun.yaml`` (config ``hydra.sweeper.params`` then the
    command line's, which win), parsed by Hydra, by key; ``{}`` if absent or unreadable."""
    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return {}
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        hydra_cfg = (yaml.safe_load(path.read_text()) or {}).get("hydra", {})
        params = (hydra_cfg.get("sweeper") or {}).get("params") or {}
        lines = [f"{key}={value}" for key, value in params.items()]
        lines += list((hydra_cfg.get("overrides") or {}).get("task") or [])
        parser = OverridesParser.create()
        return {o.key_or_group: o for o in parser.parse_overrides(lines)}
    except Exception:  # noqa: BLE001 - a sweep file we cannot read only costs the expected count
        return {}


def sweep_values(params: Mapping) -> dict[str, list]:
    """Each key of ``hydra.sweeper.params`` with its values as Python objects, as Hydra's basic
    sweeper expands them (``range(3)`` -> ``[0, 1, 2]``, ``null`` -> ``None``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    values = {}
    for key, value in params.items():
        override = parser.parse_override(f"{key}={value}")
        values[key] = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
    return values


def _sweep_size(override) -> int | None:
    if not override.is_sweep_override():
        return 1
    if not override.is_discrete_sweep():
        return None
    return len(list(override.sweep_string_iterator()))


def expected_runs(sweep_dir: Path) -> tuple[int | None, int | None]:
    """What the sweep's ``multirun.yaml`` asks for.

    Parameters
    ----------
    sweep_dir : Path
        The sweep directory.

    Returns
    -------
    jobs : int or None
        The product of the sizes of its sweep lists (``None``: no readable multirun.yaml, or a
        continuous sweep).
    seeds : int or None
        The size of its ``seed`` list (1 if ``seed`` is not swept).
    """
    overrides = sweep_overrides(sweep_dir)
    if not overrides:
        return None, None
    sizes = [_sweep_size(o) for o in overrides.values()]
    jobs = None if None in sizes else int(np.prod(sizes))
    seeds = _sweep_size(overrides["seed"]) if "seed" in overrides else 1
    return jobs, seeds


def run_counts(records: list[dict], unreadable: list, expected_jobs: int | None) -> dict:
    statuses = Counter(r.get("status") for r in records)
    found = len(records) + len(unreadable)
    counts = {"found": found, **{s: statuses.get(s, 0) for s in ("completed", *UNFINISHED)}}
    counts["unreadable"] = len(unreadable)
    counts["expected"] = expected_jobs
    counts["missing"] = None if expected_jobs is None else max(0, expected_jobs - found)
    return counts


# ------------------------------------------------------------------------------------- cells


def observations(spec: TableSpec, records: list[dict], context: Mapping) -> list[dict]:
    """One entry per (record, metric) the record counts for: its cell, status, seed and value
    (``None`` unless the run completed)."""
    rows = []
    for record in filter(spec.include, records):
        row = tuple(map(normalise_key, spec.row_key(record)))
        column = tuple(map(normalise_key, spec.column_key(record)))
        for metric in spec.metrics:
            if not spec.uses(record, metric, context):
                continue
            done = record.get("status") == "completed"
            value = _number(spec.value(record, metric, context)) if done else None
            rows.append({"row": row, "column": column, "metric": metric, "seed": record.get("seed"),
                         "status": record.get("status"), "value": value})
    return rows


def summarise_cell(entries: list[dict], expected_seeds: int | None) -> dict:
    """Statistics of one cell.

    Parameters
    ----------
    entries : list of dict
        The cell's observations (see :func:`observations`).
    expected_seeds : int or None
        Seeds the sweep asks for per cell; seeds without a record are counted ``missing``.

    Returns
    -------
    dict
        ``mean`` and ``std`` (ddof=1, NaN for fewer than two) over completed runs with a value,
        ``n`` of them, ``runs`` in the cell, counts ``failed``, ``interrupted``, ``running``,
        ``no_value`` (completed without the metric) and ``missing``, and the ``seeds`` seen.
    """
    values = [e["value"] for e in entries if e["value"] is not None]
    statuses = Counter(e["status"] for e in entries)
    seeds = {e["seed"] for e in entries}
    missing = max(0, expected_seeds - len(seeds)) if expected_seeds else 0
    return {
        "mean": float(np.mean(values)) if values else math.nan,
        "std": float(np.std(values, ddof=1)) if len(values) > 1 else math.nan,
        "n": len(values),
        "runs": len(entries),
        **{s: statuses.get(s, 0) for s in UNFINISHED},
        "no_value": statuses.get("completed", 0) - len(values),
        "missing": missing,
        "seeds": " ".join(str(s) for s in sorted(seeds, key=str)),
    }


def count_text(cell: Mapping) -> str:
    """"3/3 seeds", "2/3 seeds, 1 failed", "no run"."""
    if cell["runs"] == 0:
        return "no run"
    total = cell["runs"] + cell["missing"]
    parts = [f"{cell['n']}/{total} seeds"]
    for kind in (*UNFINISHED, "no_value", "missing"):
        if cell[kind]:
            parts.append(f"{cell[kind]} {kind.replace('_', ' ')}")
    return ", ".join(parts)


def _value_text(mean, std=math.nan, digits=2) -> str:
    if _number(mean) is None:
        return ""
    return f"{mean:.{digits}f}" + ("" if _number(std) is None else f" ± {std:.{digits}f}")


def ours_text(cell: Mapping) -> str:
    counts = count_text(cell)
    if cell["n"] == 0:
        return counts if counts == "no run" else f"– ({counts})"
    return f"{_value_text(cell['mean'], cell['std'])} ({counts})"


def paper_cells(spec: TableSpec) -> pd.DataFrame:
    """The published table in long form: ``row``, ``column``, ``metric``, ``paper``,
    ``paper_std`` (tuples of normalised keys, as the records give them)."""
    empty = pd.DataFrame(columns=["row", "column", "metric", "paper", "paper_std"])
    if spec.paper is None:
        return empty
    table = paper_results.load(spec.paper)
    if spec.paper_transform is not None:
        table = spec.paper_transform(table)
    rows = []
    for _, line in table.iterrows():
        row = tuple(normalise_key(line[name]) for name in spec.row_names)
        column = tuple(normalise_key(line[name]) for name in spec.column_names)
        for metric, name in spec.paper_columns.items():
            if _number(line.get(name)) is not None:
                rows.append({"row": row, "column": column, "metric": metric,
                             "paper": float(line[name]), "paper_std": _number(line.get(f"{name}_std"))})
    return pd.DataFrame(rows) if rows else empty


def cell_table(spec: TableSpec, records: list[dict], expected_seeds: int | None = None) -> pd.DataFrame:
    """Aggregate a sweep's records into the cells of ``spec``'s table beside the paper's numbers.

    Parameters
    ----------
    spec : TableSpec
        The table.
    records : list of dict
        The sweep's run records (any status).
    expected_seeds : int, optional
        Seeds per cell the sweep asks for (from :func:`expected_runs`).

    Returns
    -------
    pandas.DataFrame
        One row per (row key, column key, metric) that the paper or a run has, in the paper's
        order then ours: the keys, :func:`summarise_cell`'s statistics, ``counts`` (text),
        ``paper``, ``paper_std`` and ``diff`` = ours − paper (NaN where either is missing).
    """
    context = spec.context(records)
    entries = observations(spec, records, context)
    paper = paper_cells(spec)
    published = {(r, c, m): (p, s) for r, c, m, p, s in paper.itertuples(index=False)}
    rows = ordered([e["row"] for e in entries], paper["row"])
    columns = ordered([e["column"] for e in entries], [*spec.column_order, *paper["column"]],
                      sort_all=spec.sort_columns)
    grouped = {}
    for entry in entries:
        grouped.setdefault((entry["row"], entry["column"], entry["metric"]), []).append(entry)
    out = []
    for row_rank, row in enumerate(rows):
        for column_rank, column in enumerate(columns):
            for metric in spec.metrics:
                mine = grouped.get((row, column, metric), [])
                if not mine and (row, column, metric) not in published:
                    continue
                cell = summarise_cell(mine, expected_seeds)
                value, std = published.get((row, column, metric), (math.nan, None))
                out.append({
                    **dict(zip(spec.row_names, row)), **dict(zip(spec.column_names, column)),
                    "metric": metric, **cell, "counts": count_text(cell), "paper": value,
                    "paper_std": math.nan if std is None else std,
                    "diff": cell["mean"] - value, "_row": row, "_column": column,
                    "_row_rank": row_rank, "_column_rank": column_rank,
                })
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------- layout


def cell_texts(cell: Mapping) -> dict:
    diff = cell["diff"]
    return {"ours": ours_text(cell), "paper": _value_text(cell["paper"], cell["paper_std"]),
            "ours − paper": "" if _number(diff) is None else f"{diff:+.2f}"}


def wide_table(spec: TableSpec, cells: pd.DataFrame, metrics=None) -> pd.DataFrame:
    """The paper's layout: rows are the row keys; columns (column key…, metric, field) for the
    fields ours (mean ± std (seed counts)), paper and ours − paper; empty cells say "no run"."""
    metrics = list(metrics or spec.metrics)
    rows = _in_rank_order(cells, "_row")
    column_keys = _in_rank_order(cells, "_column")
    lookup = {(r, c, m): cell_texts(cell) for r, c, m, cell in
              zip(cells["_row"], cells["_column"], cells["metric"], cells.to_dict("records"))}
    header, data = [], []
    for column in column_keys:
        for metric in metrics:
            labels = tuple(map(_display, column)) + ((metric,) if len(metrics) > 1 else ())
            for name in FIELDS:
                header.append((*labels, name))
                data.append([lookup.get((r, column, metric), {"ours": "no run"}).get(name, "")
                             for r in rows])
    index = pd.MultiIndex.from_tuples([tuple(map(_display, r)) for r in rows], names=spec.row_names)
    if index.nlevels == 1:
        index = index.get_level_values(0)
    frame = pd.DataFrame(dict(enumerate(data)), index=index)
    frame.columns = pd.MultiIndex.from_tuples(header) if len(header[0]) > 1 else [h[0] for h in header]
    return frame


def _in_rank_order(cells: pd.DataFrame, key: str) -> list:
    ranks = dict(zip(cells[key], cells[f"{key}_rank"]))
    return sorted(ranks, key=ranks.get)


def sections(spec: TableSpec, cells: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(caption, wide table)`` pairs: one per metric if the paper prints them apart."""
    if cells.empty:
        return []
    if spec.split_metrics:
        return [(metric, wide_table(spec, cells[cells["metric"] == metric], [metric]))
                for metric in spec.metrics if (cells["metric"] == metric).any()]
    return [("", wide_table(spec, cells))]


def _display_path(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def header_line(sweep_dir: Path, counts: Mapping) -> str:
    expected = ", missing unknown (no readable multirun.yaml)" if counts["expected"] is None else (
        f", {counts['missing']} missing ({counts['expected']} expected from multirun.yaml)")
    unreadable = f", {counts['unreadable']} unreadable" if counts["unreadable"] else ""
    return (f"Sweep `{_display_path(sweep_dir)}`: runs {counts['found']} found, "
            f"{counts['completed']} completed, {counts['failed']} failed, "
            f"{counts['interrupted']} interrupted, {counts['running']} running{unreadable}{expected}.")


def cell_legend(unit: str) -> str:
    return ("Each cell: ours = mean ± std (ddof=1) over completed seeds (completed/expected "
            "seeds; failed, interrupted, still-running, value-less and missing runs are counted "
            "and left out of the mean); paper = the published mean (± its std); ours − paper "
            f"in {unit}.")


@dataclass
class Table:
    """A built table: markdown lines before the tables, the wide sections and the tidy CSV."""

    id: str
    title: str
    preamble: list[str]
    sections: list[tuple[str, pd.DataFrame]]
    tidy: pd.DataFrame

    def markdown(self) -> str:
        parts = [f"# {self.title}", "", *[line for text in self.preamble for line in (text, "")]]
        for caption, frame in self.sections:
            if caption:
                parts += [f"### {caption}", ""]
            parts += [_markdown(frame), ""]
        return "\n".join(parts)

    def latex(self) -> str:
        parts = [f"% {self.title}"] + [f"% {line}" for line in self.preamble]
        for caption, frame in self.sections:
            parts.append(_latex(frame, f"{self.title}: {caption}" if caption else self.title))
        return "\n".join(parts) + "\n"


def _markdown(frame: pd.DataFrame) -> str:
    flat = frame.copy()
    if isinstance(flat.columns, pd.MultiIndex):
        flat.columns = [" · ".join(str(p) for p in col if p != "") for col in flat.columns]
    flat = flat.reset_index()
    return flat.to_markdown(index=False, disable_numparse=True)


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}"}
_LATEX_UNICODE = {"±": r"$\pm$", "−": "$-$", "–": "--", "✓": r"\checkmark{}", "✗": r"$\times$",
                  "τ": r"$\tau$", "≠": r"$\neq$", "·": r"$\cdot$"}


def latex_escape(text) -> str:
    text = "".join(_LATEX_SPECIAL.get(char, char) for char in str(text))
    return "".join(_LATEX_UNICODE.get(char, char) for char in text)


def _latex(frame: pd.DataFrame, caption: str) -> str:
    escaped = frame.map(latex_escape)
    escaped.index = escaped.index.map(lambda key: tuple(map(latex_escape, key))
                                      if isinstance(key, tuple) else latex_escape(key))
    escaped.index.names = [latex_escape(n) for n in frame.index.names]
    escaped.columns = frame.columns.map(lambda key: tuple(map(latex_escape, key))
                                        if isinstance(key, tuple) else latex_escape(key))
    return escaped.to_latex(escape=False, multicolumn=True, multicolumn_format="c", multirow=False,
                            caption=latex_escape(caption), label=None)


def build_sweep_table(spec: TableSpec, sweep_dir: Path) -> Table:
    """Read the sweep's records and build ``spec``'s table (see :func:`cell_table`); a sweep
    with runs of another experiment than ``spec.id`` is refused (:func:`check_experiment`)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"no sweep directory {sweep_dir}; run `python train.py -m "
                                f"+experiment={spec.id}` first.")
    records, unreadable = load_records(sweep_dir)
    if not records and not unreadable:
        raise FileNotFoundError(f"no run record (results.json) under {sweep_dir}; run "
                                f"`python train.py -m +experiment={spec.id}` first.")
    check_experiment(records, spec.id, sweep_dir)
    jobs, seeds = expected_runs(sweep_dir)
    cells = cell_table(spec, records, seeds)
    preamble = [header_line(sweep_dir, run_counts(records, unreadable, jobs)), cell_legend(spec.unit)]
    if spec.paper:
        preamble.append(f"Paper: `topk/paper_results/{spec.paper}.csv`.")
    preamble += spec.notes(spec.context(records))
    tidy = cells.drop(columns=["_row", "_column", "_row_rank", "_column_rank"], errors="ignore")
    return Table(spec.id, spec.title, preamble, sections(spec, cells), tidy)


# ------------------------------------------------------------------------------------- b18_speed


def speed_section(bench: Mapping) -> pd.DataFrame:
    """B18 Table 3 (forward): summation time / divide-and-conquer time per n, ours vs paper."""
    paper = paper_results.load("b18_tables3_4_speed")
    forward = paper[paper["pass"] == "forward"].pivot(index="n_classes", columns="algorithm",
                                                        values="seconds")
    ours = {row["n"]: row for row in bench.get("log_esp_forward", [])}
    rows = []
    for n in ordered([float(n) for n in ours], [float(n) for n in forward.index]):
        mine = ours.get(int(n), {})
        published = forward.loc[int(n)] if int(n) in forward.index else {}
        paper_ratio = _ratio(published.get("summation"), published.get("divide_conquer"))
        ratio = _number(mine.get("summation_over_divide_conquer"))
        rows.append({
            "section": "forward", "n": int(n),
            "ours_divide_conquer_ms": _scale(mine.get("divide_conquer_log_seconds"), 1e3),
            "ours_summation_ms": _scale(mine.get("summation_seconds"), 1e3),
            "ours_ratio": ratio,
            "paper_divide_conquer_s": _number(published.get("divide_conquer")),
            "paper_summation_s": _number(published.get("summation")),
            "paper_ratio": paper_ratio,
            "diff": math.nan if ratio is None or paper_ratio is None else ratio - paper_ratio,
        })
    return pd.DataFrame(rows)


def backward_section() -> pd.DataFrame:
    """B18 Table 4 (backward): autograd time / custom backward time; ``losses.json`` has no such
    measurement, so only the paper's ratio is shown."""
    paper = paper_results.load("b18_tables3_4_speed")
    backward = paper[paper["pass"] == "backward"].pivot(index="n_classes", columns="algorithm",
                                                          values="seconds")
    return pd.DataFrame({"section": "backward", "n": backward.index.astype(int),
                         "paper_ratio": (backward["autograd"] / backward["custom"]).to_numpy()})


def stability_section(bench: Mapping) -> pd.DataFrame:
    """B18 Table 5: is ``log_esp`` finite at temperature τ, per algorithm and precision."""
    paper = paper_results.load("b18_table5_stability")
    published = {(float(t), a, p): int(s) for t, a, p, s in paper.itertuples(index=False)}
    ours = {(float(r["tau"]), r["algorithm"], r["precision"]): int(r["stable"])
            for r in bench.get("stability", [])}
    rows = []
    for key in ordered(ours, published):
        tau, algorithm, precision = key
        rows.append({"section": "stability", "algorithm": algorithm, "precision": precision,
                     "tau": tau, "ours_stable": ours.get(key), "paper_stable": published.get(key),
                     "agree": None if key not in ours or key not in published
                     else ours[key] == published[key]})
    return pd.DataFrame(rows)


def _ratio(numerator, denominator) -> float | None:
    numerator, denominator = _number(numerator), _number(denominator)
    return None if numerator is None or not denominator else numerator / denominator


def _scale(value, factor) -> float | None:
    value = _number(value)
    return None if value is None else value * factor


def _fmt(value, digits=2, sign=False) -> str:
    value = _number(value)
    return "" if value is None else f"{value:{'+' if sign else ''}.{digits}f}"


def speed_wide(forward: pd.DataFrame, backward: pd.DataFrame) -> pd.DataFrame:
    rows = ordered(list(map(float, forward["n"])), list(map(float, backward["n"])))
    fwd, bwd = forward.set_index("n"), backward.set_index("n")
    table = {}
    for n in map(int, rows):
        f = fwd.loc[n] if n in fwd.index else {}
        table[str(n)] = {
            ("forward", "ours DC (ms)"): _fmt(f.get("ours_divide_conquer_ms")),
            ("forward", "ours summation (ms)"): _fmt(f.get("ours_summation_ms")),
            ("forward", "ours ratio"): _fmt(f.get("ours_ratio"), 1),
            ("forward", "paper ratio"): _fmt(f.get("paper_ratio"), 1),
            ("forward", "ours − paper"): _fmt(f.get("diff"), 1, sign=True),
            ("backward", "paper ratio"): _fmt(bwd.loc[n, "paper_ratio"], 1) if n in bwd.index else "",
        }
    frame = pd.DataFrame(table).T
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    frame.index.name = "n"
    return frame


def stability_wide(stability: pd.DataFrame) -> pd.DataFrame:
    marks = {1: "✓", 0: "✗", None: "–"}
    table = {}
    for row in stability.to_dict("records"):
        ours, paper = (marks[None if _number(v) is None else int(v)]
                       for v in (row["ours_stable"], row["paper_stable"]))
        text = f"{ours} / {paper}" + (" (differs)" if row["agree"] is False else "")
        table.setdefault((row["algorithm"], row["precision"]), {})[f"τ = {row['tau']:g}"] = text
    frame = pd.DataFrame(table).T
    frame.index.names = ["algorithm", "precision"]
    return frame


def read_bench(bench_file: Path) -> dict:
    bench_file = Path(bench_file)
    if not bench_file.is_file():
        raise FileNotFoundError(f"no benchmark file {bench_file}; run "
                                "`python scripts/bench_losses.py` first.")
    return json.loads(bench_file.read_text())


def make_speed_table(bench_file: Path) -> Table:
    """B18 Tables 3–5 from ``scripts/bench_losses.py``'s ``losses.json``.

    Parameters
    ----------
    bench_file : Path
        The benchmark's JSON (keys ``log_esp_forward`` and ``stability``).

    Returns
    -------
    Table
        The forward time of the summation algorithm over the log-space divide-and-conquer
        ``log_esp`` as a ratio, ours beside B18 Tables 3–4's (the machines differ, so only
        ratios are compared), and B18 Table 5's stability flags beside ours.
    """
    bench = read_bench(bench_file)
    forward, backward, stability = speed_section(bench), backward_section(), stability_section(bench)
    agree = stability["agree"].dropna()
    preamble = [
        f"Benchmark `{_display_path(bench_file)}` (batch {bench.get('batch')}, "
        f"{bench.get('threads')} thread(s), torch {bench.get('torch')}); papers: "
        "`topk/paper_results/b18_tables3_4_speed.csv`, `b18_table5_stability.csv`.",
        "Speed: ratio = summation time / divide-and-conquer time of the k = 5 forward pass (B18 "
        "Table 3 gives both algorithms); the backward ratio is B18 Table 4's autograd / custom "
        "backward, which losses.json does not measure.",
        f"Stability: ours / paper, ✓ finite, ✗ overflow, – not measured or not in the paper; "
        f"{int(agree.sum())} of {len(agree)} compared flags agree.",
    ]
    sections = [("B18 Tables 3–4: speed", speed_wide(forward, backward)),
                ("B18 Table 5: stability", stability_wide(stability))]
    tidy = pd.concat([forward, backward, stability], ignore_index=True)
    return Table("b18_speed", "B18 Tables 3–5: speed and stability of the log-space ESP",
                 preamble, sections, tidy)


# ------------------------------------------------------------------------------------- entry


def write_table(table: Table, out_dir: Path) -> dict[str, Path]:
    """Write ``<out>/<id>.md``, ``.csv`` and ``.tex``; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {kind: out_dir / f"{table.id}.{kind}" for kind in ("md", "csv", "tex")}
    files["md"].write_text(table.markdown())
    table.tidy.to_csv(files["csv"], index=False)
    files["tex"].write_text(table.latex())
    return files


def build_table(table_id: str, sweep_dir: Path | None = None, outputs: Path = Path("outputs"),
                bench_file: Path | None = None) -> Table:
    """Build one registered table.

    Parameters
    ----------
    table_id : str
        A key of :data:`TABLES`.
    sweep_dir : Path, optional
        The sweep to read (default: the newest ``<outputs>/sweeps/<table_id>/<time>``).
    outputs : Path
        Where sweeps (and ``bench/losses.json``) live.
    bench_file : Path, optional
        ``b18_speed`` only (default ``<outputs>/bench/losses.json``).

    Returns
    -------
    Table

    Raises
    ------
    FileNotFoundError
        No sweep, no run record, or no benchmark file; the message names the command to run.
    ConfigError
        The sweep holds runs of another experiment or of none (:func:`check_experiment`).
    """
    if table_id not in TABLES:
        raise ValueError(f"unknown table {table_id!r}; choose one of {', '.join(sorted(TABLES))}")
    if table_id == "b18_speed":
        return make_speed_table(bench_file or Path(outputs) / "bench" / "losses.json")
    spec = TABLES[table_id]
    return build_sweep_table(spec, sweep_dir or latest_sweep_dir(outputs, table_id))


def make_table(table_id: str, out_dir: Path, **kwargs) -> tuple[Table, dict[str, Path]]:
    table = build_table(table_id, **kwargs)
    return table, write_table(table, out_dir)
