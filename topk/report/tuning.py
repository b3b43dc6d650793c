"""The zoo's tuned comparison: every loss given the same number of Optuna trials over its own
parameters (``python train.py -m +experiment=<zoo> +tune=<loss>``, ``conf/tune/<loss>.yaml``; `make
tune-<zoo>` runs them all), each loss's best validation trial reported on the test split beside the
untuned zoo's mean for that loss.

A loss's study is the newest folder under ``<tuning dir>/<loss>/`` holding a run record (the
studies' folders are named by their start time), a full-scale one before any smoke-scale one. The best trial is the completed trial with the
highest value of the runs' selection metric (``val/top5`` on CIFAR-100, ``val/macro_top5`` on
Pl@ntNet-300K), the value the Optuna sweeper maximised; its test numbers are never seen by the
study. A loss without parameters has a study of one run.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from topk.errors import ConfigError
from topk.report.cells import fmt
from topk.report.fidelity import at_smoke_scale
from topk.report.render import Table
from topk.report.runs import Sweep, best_sweep, column, display_path, load_sweep, number
from topk.repository import CONF

TUNED_TABLES = {"zoo_cifar100_tuned": "zoo_cifar100", "zoo_plantnet_tuned": "zoo_plantnet"}
TEST_METRICS = ("top1", "top5", "macro_top5", "avg5")  # the zoo tables' metrics
RANKED_BY = "top5"
NOT_SEARCHED = ("loss", "seed")  # fixed in every study: the loss itself and the zoo's first seed


def search_space(loss: str) -> dict[str, str]:
    """The parameters ``+tune=<loss>`` searches and their ranges (``{"loss.tau": "tag(log, …)"}``)."""
    config = yaml.safe_load((CONF / "tune" / f"{loss}.yaml").read_text())
    params = config["hydra"]["sweeper"]["params"]
    return {key: str(value) for key, value in params.items() if key not in NOT_SEARCHED}


def newest_study(folder: Path) -> Sweep | None:
    """The newest full-scale study under ``folder`` that holds a run record, else the newest
    smoke-scale one (:func:`is_smoke`), read; ``None`` if none holds a record."""
    studies = [load_sweep(path) for path in sorted((p for p in folder.glob("*") if p.is_dir()), reverse=True)]
    studies = [study for study in studies if len(study.runs) or study.unreadable]
    return next((study for study in studies if not is_smoke(study)), studies[0] if studies else None)


def selection_values(runs: pd.DataFrame) -> pd.Series:
    """Each run's value of its own selection metric (``val/top5`` → ``val.top5``); ``None`` where
    it has none."""
    names = [str(metric).replace("/", ".", 1) for metric in column(runs, "selection_metric", "last")]
    return pd.Series([number(runs.at[i, name]) if name in runs.columns else None
                      for i, name in zip(runs.index, names)], index=runs.index, dtype=object)


def untuned_means(outputs: Path, zoo: str) -> tuple[dict[str, float], str]:
    """The untuned zoo's mean test top-5 per loss over completed seeds (its best sweep), and one
    sentence saying where it came from, or that there is none."""
    try:
        sweep = best_sweep(outputs, zoo)
    except (FileNotFoundError, ConfigError):
        return {}, (f"Untuned top5: no sweep of {zoo} under {display_path(Path(outputs) / 'sweeps' / zoo)} "
                    f"to compare with (`python train.py -m +experiment={zoo}` makes one).")
    done = sweep.runs[sweep.runs["status"] == "completed"]
    values = pd.to_numeric(column(done, f"test.{RANKED_BY}"), errors="coerce")
    means = values.groupby(done["loss"]).mean().dropna()
    return means.to_dict(), (f"Untuned top5: the mean test top-5 over the completed seeds of the untuned "
                             f"sweep `{display_path(sweep.path)}`.")


def is_smoke(study: Sweep) -> bool:
    """Whether the study ran at smoke scale: ``+scale=smoke`` among its first run's overrides
    (``.hydra/overrides.yaml``; Optuna's sweeper writes no ``multirun.yaml``)."""
    for run_dir in column(study.runs, "run_dir")[:1]:
        try:
            overrides = yaml.safe_load((Path(run_dir) / ".hydra" / "overrides.yaml").read_text()) or []
        except (OSError, yaml.YAMLError):
            return False
        return at_smoke_scale(overrides)
    return False


def searched_value(value) -> str:
    """A tuned value as printed: three significant digits."""
    return "–" if number(value) is None else f"{number(value):.3g}"


def study_row(loss: str, study: Sweep | None, untuned: float | None) -> dict:
    """One loss's line: its trials, its best trial's tuned values, selection value and test numbers."""
    space = search_space(loss)
    row = {"loss": loss, "searched": ", ".join(key.removeprefix("loss.") for key in space) or "nothing (one run)",
           "trials": 0, "completed": 0, "failed": 0, "smoke": False, "best": "", "selected_on": "", "val": None,
           **{metric: None for metric in TEST_METRICS}, "untuned_top5": untuned, "study": ""}
    if study is None:
        return row
    runs = study.runs
    statuses = column(runs, "status")
    row.update(trials=len(runs) + len(study.unreadable), completed=int((statuses == "completed").sum()),
               failed=int((statuses == "failed").sum()), study=display_path(study.path), smoke=is_smoke(study))
    values = selection_values(runs)[statuses == "completed"].dropna()
    if values.empty:
        return row
    best = runs.loc[values.astype(float).idxmax()]
    row.update(val=float(values.max()), selected_on=str(best["selection_metric"]),
               best=", ".join(f"{key.removeprefix('loss.')}={searched_value(best.get(f'params.{key}'))}"
                              for key in space),
               **{metric: number(best.get(f"test.{metric}")) for metric in TEST_METRICS})
    return row


def trials_text(row: dict) -> str:
    """"20 completed", "18 completed, 2 failed", "no study"; "(smoke)" for a smoke-scale study."""
    if not row["trials"]:
        return "no study"
    others = row["trials"] - row["completed"] - row["failed"]
    parts = [f"{row['completed']} completed"] + [f"{count} {kind}" for count, kind in
                                                 ((row["failed"], "failed"), (others, "other")) if count]
    return ", ".join(parts) + (" (smoke)" if row["smoke"] else "")


def tuned_frame(rows: list[dict]) -> pd.DataFrame:
    """The printed table: one line per loss, best tuned test top-5 first."""
    ordered = sorted(rows, key=lambda row: (row[RANKED_BY] is None, -(row[RANKED_BY] or 0)))
    frame = pd.DataFrame({
        "loss": [row["loss"] for row in ordered],
        "tuned": [row["searched"] for row in ordered],
        "trials": [trials_text(row) for row in ordered],
        "best trial": [row["best"] or ("–" if row["completed"] else "") for row in ordered],
        "val (selected on)": [f"{fmt(row['val'])} ({row['selected_on']})" if row["val"] is not None else "–"
                              for row in ordered],
        **{f"test {metric}": [fmt(row[metric]) for row in ordered] for metric in TEST_METRICS},
        "untuned top5": [fmt(row["untuned_top5"]) for row in ordered],
        "tuned − untuned": [fmt(None if row[RANKED_BY] is None or row["untuned_top5"] is None
                                else row[RANKED_BY] - row["untuned_top5"], sign=True) for row in ordered],
    })
    return frame.set_index("loss")


def tuned_table(table_id: str, outputs: Path = Path("outputs"), tuning_dir: Path | None = None) -> Table:
    """The table ``<zoo>_tuned`` from the studies under ``tuning_dir`` (default
    ``<outputs>/tuning/<zoo>``); FileNotFoundError (one sentence) if no loss has a study."""
    zoo = TUNED_TABLES[table_id]
    folder = Path(tuning_dir) if tuning_dir else Path(outputs) / "tuning" / zoo
    losses = sorted(path.stem for path in (CONF / "tune").glob("*.yaml"))
    studies = {loss: newest_study(folder / loss) for loss in losses}
    if not any(studies.values()):
        raise FileNotFoundError(f"no study of {zoo} under {folder}; run `make tune-{zoo}` (or `python "
                                f"train.py -m +experiment={zoo} +tune=<loss>`) first.")
    untuned, untuned_line = untuned_means(Path(outputs), zoo)
    rows = [study_row(loss, studies[loss], untuned.get(loss)) for loss in losses]
    completed = sum(row["completed"] for row in rows)
    preamble = [
        f"Studies: the newest under `{display_path(folder)}/<loss>/` for each loss; {completed} completed "
        f"trials in all. Each loss is tuned over its own parameters (conf/tune/<loss>.yaml) with the "
        "same number of trials (Optuna's TPE sampler, seed 0), every trial one run of seed 0; its best "
        "validation trial is shown on the test split, which no study sees. A loss without parameters "
        "has one run.", untuned_line]
    if any(row["smoke"] for row in rows):
        preamble.append("Studies marked (smoke) ran at smoke scale (+scale=smoke): their numbers mean nothing.")
    title = {"zoo_cifar100_tuned": "Every loss on CIFAR-100, each tuned with the same budget (G22's "
                                   "DenseNet 40-40 protocol, K = 5): test accuracy (%) of its best "
                                   "validation trial",
             "zoo_plantnet_tuned": "Every loss on Pl@ntNet-300K, each tuned with the same budget (G22's "
                                   "ResNet-50 protocol, K = 5): test accuracy (%) of its best "
                                   "validation trial"}[table_id]
    return Table(table_id, title, preamble, [("", tuned_frame(rows))], pd.DataFrame(rows))
