"""Paper figures from a sweep's runs frame, each written as PNG, CSV and markdown: S20 Figs. 2–4
(``s20_exp1``–``3``) and 6 (``s20_cifar``), G22 Fig. 3 (``g22_time``) and B18 Fig. 2a
(``b18_tau``) here, G22 Fig. 2 (``g22_sparsity``) and B18 Fig. 2b (``b18_sparsity``) in
:mod:`topk.report.sparsity_figures`; :func:`build_figure` builds any of them.
Failed, interrupted, running and missing runs are counted, never averaged in.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from topk import paper_results
from topk.report import table_specs
from topk.report.cells import (
    fmt,
    in_order,
    mean_text,
    number,
    observation,
    ordered,
    whole_numbers,
)
from topk.report.claims import (
    b18_tau_claims,
    g22_time_claims,
    s20_cifar_claims,
    s20_synthetic_claims,
)
from topk.report.plotting import COUNTS_LEGEND, line_figure, pyplot, summarise_points
from topk.report.render import FigureText
from topk.report.runs import Sweep, column, read_history, read_sweep, selected_by
from topk.report.sparsity_figures import SPARSITY, sparsity
from topk.report.verdicts import CLAIM_RULE


@dataclass(frozen=True)
class SweepFigure:
    parameter: str  # the swept config key (``params.<parameter>``)
    label: str
    title: str
    log_x: bool = False


S20_FIGURES = {
    "s20_exp1": SweepFigure("dataset.sigma", "σ (degrees)", "S20 Exp. 1 (Fig. 2): class width σ"),
    "s20_exp2": SweepFigure("dataset.d", "d (degrees)", "S20 Exp. 2 (Fig. 3): minor-mode shift d"),
    "s20_exp3": SweepFigure("model.hidden", "hidden units m", "S20 Exp. 3 (Fig. 4): MLP width m",
                            log_x=True),
}
S20_METRICS = ("top1", "top2")
LOSS_ORDER = {"ce": 0, "topk_group": 1, "topk_transition": 2}  # S20 Figs. 2–4; the others after
LOSS_NAMES = {"ce": "CE", "smooth_svm": "smooth top-{k} SVM", "topk_group": "top-{k} grouping",
              "topk_transition": "top-{k} transition", "hinge": "top-{k} hinge",
              "noised_bal": "noised top-{k} hinge"}
S20_CIFAR_LOSSES = ("ce", "smooth_svm", "topk_group", "topk_transition")
S20_K_AT_99 = {"ce": "33", "topk_transition": "25"}  # S20 §V-B: 25, "saving 8 compared with CE"
G22_LINES_FIRST = ("ce", "smooth_svm")  # then noised_bal by B
CLAIMS = {  # what each paper says its figure shows
    "s20_cifar": "S20 (Fig. 6 and §V-B, ResNet-18 with Mixup, mean of 10 seeds): CE has the best "
    "top-k accuracy for k ≤ 2, the top-5 transition loss from k = 3 on, and top-5 grouping beats "
    "CE from k = 6; the transition loss reaches 99 % at k = 25, CE only at k = 33 (S20 plots "
    "k ≤ 30; the runs record k ≤ 40). S20 gives no smooth top-5 SVM result with Mixup (N/A).",
    "g22_time": "G22 (Fig. 3 and §4.3, DenseNet 40-40 on CIFAR-100, its own GPU): at K = 5 an "
    "epoch takes 65 s with CE, 68 s with the noised loss with B = 3 (+4.6 %, ratio 1.05) and 81 s "
    "with the smoothed hinge (+24.6 %, ratio 1.25); at K = 10 the smoothed hinge takes 90 s (1.38) "
    "and the noised loss 60 s (0.92): the smoothed hinge grows about linearly with K, the noised "
    "loss does not. Stars mark these points as ratios to the paper's 65 s CE epoch.",
    "b18_tau": "B18 (Fig. 2a and Table 6, DenseNet 40-12 on CIFAR-100, 300 epochs, learning rate "
    "divided by 10 at epochs 150 and 225): with τ ≥ 0.01 the network fits the training set "
    "(98.95–99.78 % training top-5 accuracy, about 1 % error or less), with τ = 0 and τ = 0.001 "
    "it fails to train (10.01 % and 17.40 %, near the 95 % error of random predictions).",
}


def loss_display(loss, k=2) -> str:
    """A loss as the papers name it: ``topk_transition`` with k = 5 → "top-5 transition"."""
    return LOSS_NAMES.get(loss, str(loss)).format(k=k)


def best_of(means: pd.Series, tolerance: float = 0.05) -> list:
    """The index entries of ``means`` within ``tolerance`` of its maximum (NaN skipped)."""
    means = means.dropna()
    return list(means.index[means >= means.max() - tolerance]) if len(means) else []


# ------------------------------------------------------------------------ S20 synthetic (Figs. 2–4)


def summarise(runs: pd.DataFrame, parameter: str) -> pd.DataFrame:
    """S20 Figs. 2–4 per (value of ``params.<parameter>``, loss): completed runs, runs that did
    not complete, and the mean, min and max of test top-1 and top-2 over the completed ones."""
    done = runs["status"] == "completed"
    table = pd.DataFrame({
        parameter: column(runs, f"params.{parameter}").tolist(), "loss": runs["loss"].tolist(),
        "completed": done.tolist(),
        **{m: pd.to_numeric(column(runs, f"test.{m}").where(done, None).tolist()) for m in S20_METRICS}})
    summary = table.groupby([parameter, "loss"]).agg(
        runs=("completed", "sum"), not_completed=("completed", lambda done: int((~done).sum())),
        **{f"{m}_{s}": (m, s) for m in S20_METRICS for s in ("mean", "min", "max")}).reset_index()
    summary[parameter] = whole_numbers(summary[parameter])  # d = 30, not 30.00
    order = summary["loss"].map(lambda name: LOSS_ORDER.get(name, 3))
    return (summary.assign(_order=order).sort_values([parameter, "_order"])
            .drop(columns="_order").reset_index(drop=True))


def draw_summary(summary: pd.DataFrame, figure: SweepFigure):
    """Top-1 and top-2 test accuracy against the parameter, one line per loss (bars min–max)."""
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    values = summary[figure.parameter].astype(float)
    span = float(values.max() - values.min()) or 1.0
    for axis, metric in zip(axes, S20_METRICS):
        for index, (loss, group) in enumerate(summary.groupby("loss", sort=False)):
            x = group[figure.parameter].astype(float)  # markers spread apart a little
            x = x * 1.04 ** (index - 1) if figure.log_x else x + (index - 1) * 0.01 * span
            mean = group[f"{metric}_mean"]
            axis.errorbar(x, mean, yerr=[mean - group[f"{metric}_min"], group[f"{metric}_max"] - mean],
                          marker="o", capsize=3, label=loss_display(loss, k=2))
        axis.set(xlabel=figure.label, ylabel=f"{metric.replace('top', 'top-')} test accuracy (%)")
        axis.grid(alpha=0.3)
        if figure.log_x:
            axis.set_xscale("log", base=2)
    axes[0].legend()
    fig.suptitle(f"{figure.title} — mean over seeds, bars min–max")
    return fig


def s20_synthetic(experiment: str, sweep: Sweep):
    """S20 Figs. 2–4: the summary, the best loss per setting, and S20's claims."""
    figure = S20_FIGURES[experiment]
    summary = summarise(sweep.runs, figure.parameter)
    leaders = []  # per setting: the best loss(es) (0.05-point ties) and CE's lead
    for value, group in summary.groupby(figure.parameter, sort=True):
        row = {figure.parameter: value}
        for metric in S20_METRICS:
            means = group.set_index("loss")[f"{metric}_mean"].dropna()
            row[f"best_{metric}"] = " = ".join(best_of(means))
            if "ce" in means.index and len(means) > 1:
                row[f"ce_minus_best_other_{metric}"] = means["ce"] - means.drop("ce").max()
        leaders.append(row)
    claims = paper_results.load("s20_synthetic_claims")
    judged = s20_synthetic_claims(experiment, sweep.runs, figure.parameter,
                                  claims[claims["experiment"] == experiment])
    sections = [
        ("Test accuracy (%) over seeds (runs: completed runs; not_completed: failed or unfinished "
         "runs, left out of the means).", summary),
        ("Best mean per setting (losses within 0.05 points tie; `ce_minus_best_other`: CE's mean "
         "minus the best of the other losses, in points):", pd.DataFrame(leaders)),
        ("What S20 claims for this experiment (`topk/paper_results/s20_synthetic_claims.csv`), "
         "and whether it holds on these runs. " + CLAIM_RULE, judged)]
    text = FigureText(experiment, figure.title, [sweep.header()], sections, summary,
                      floatfmt=".2f", verdicts=list(judged["verdict"]), sweep=sweep)
    return draw_summary(summary, figure), text


# ------------------------------------------------------------------------ S20 Fig. 6 (s20_cifar)


def choose_panel(runs: pd.DataFrame, wanted: dict) -> tuple[dict, pd.DataFrame, list[str]]:
    """The runs of one panel, key by key; a wanted value no run has falls back to the
    commonest one left (ties: first by name), with one sentence saying so."""
    panel, notes = {}, []
    for key, value in wanted.items():
        available = Counter(runs[key].tolist())
        if value not in available and available:
            names = sorted(available, key=str)
            fallback = max(names, key=available.get)
            notes.append(f"No run with {key} = {value} in this sweep (it has "
                         f"{', '.join(map(str, names))}): showing {key} = {fallback} instead.")
            value = fallback
        panel[key] = value
        runs = runs[runs[key] == value]
    return panel, runs, notes


def smallest_k_reaching(points: pd.DataFrame, target: float = 99.0) -> dict:
    """Per loss, the smallest k whose mean accuracy reaches ``target`` (``None``: none does)."""
    reached = points[points["accuracy_mean"] >= target].groupby("loss")["k"].min()
    return {loss: int(reached[loss]) if loss in reached.index else None
            for loss in points["loss"].unique()}


def s20_cifar_sections(points: pd.DataFrame, panel: dict, labels: dict, last_k: int) -> list:
    """S20 Fig. 6's markdown tables: per loss, top-1, top-5 and the smallest k reaching 99 %
    beside S20 Table I and §V-B; the mean accuracy per k with the best loss(es)."""
    paper = paper_results.load("s20_table1_cifar100")
    paper = paper[(paper["model"] == panel["model"]) & (paper["augment"] == panel["augment"])]
    paper, reached, rows = paper.set_index("loss"), smallest_k_reaching(points), []
    for loss in in_order(points["loss"].unique(), S20_CIFAR_LOSSES):
        mine = points[points["loss"] == loss].set_index("k")
        at = {k: (mine.at[k, "accuracy_mean"], mine.at[k, "accuracy_std"]) if k in mine.index
              else (None, None) for k in (1, 5)}
        rows.append({"loss": labels.get(loss, loss),
                     "runs (at k = 1)": mine["counts"].iloc[0] if len(mine) else "no run",
                     "top-1": mean_text(*at[1]), "top-5": mean_text(*at[5]),
                     "S20 Table I top-1": fmt(paper["top1"].get(loss)),
                     "S20 Table I top-5": fmt(paper["top5"].get(loss)),
                     "smallest k ≥ 99 %": "no run" if mine.empty else str(reached.get(loss) or "none"),
                     "S20 smallest k ≥ 99 %": S20_K_AT_99.get(loss, "–")})
    means = points.dropna(subset=["k"]).pivot(index="k", columns="loss", values="accuracy_mean")
    means = means[[loss for loss in dict.fromkeys(points["loss"]) if loss in means.columns]]
    by_k = pd.DataFrame({"k": means.index.astype(int),
                         **{labels.get(loss, loss): means[loss].map(fmt).to_numpy() for loss in means}})
    by_k["best"] = [" = ".join(labels.get(loss, loss) for loss in best_of(row))
                    for _, row in means.iterrows()]
    return [(f"Per loss: top-1 and top-5 (S20 Table I selects top-1 by val top-1 and top-5 by val "
             f"top-5), and the smallest k ≤ {last_k} whose mean reaches 99 %:", pd.DataFrame(rows)),
            ("Mean test top-k accuracy (%) per k (best: within 0.05 points of the best mean):", by_k)]


def s20_cifar(sweep: Sweep, model: str = "resnet18", augment: str = "mixup",
              selection: str = "val/top5"):
    """S20 Fig. 6 for one panel; its CSV has one row per (loss, k) and ``smallest_k_99``. A run
    that kept the best model by ``selection`` beside its selected one (``trainer.also_select_on``)
    counts with that model's test accuracies (:func:`topk.report.runs.selected_by`)."""
    panel, runs, notes = choose_panel(
        selected_by(sweep.runs, selection), {"model": model, "augment": augment, "selection_metric": selection})
    done = runs[runs["status"] == "completed"]  # k of every test top-k recorded (else 1…30)
    ks = sorted(int(m.group(1)) for name in runs.columns
                if (m := re.fullmatch(r"test\.top(\d+)", name)) and done[name].notna().any())
    ks = ks or list(range(1, 31))
    entries = [observation(status, seed, value, line=loss, x=k) for k in ks for status, seed, loss, value
               in zip(runs["status"], runs["seed"], runs["loss"], column(runs, f"test.top{k}"))]
    points = summarise_points(entries, sweep.seeds, ("loss", "k", "accuracy"), S20_CIFAR_LOSSES)
    reached = smallest_k_reaching(points)
    points["smallest_k_99"] = points["loss"].map(lambda loss: str(reached.get(loss) or "none"))
    labels = {loss: loss_display(loss, 5) for loss in S20_CIFAR_LOSSES}
    labels.update(zip(runs["loss"], map(loss_display, runs["loss"],
                                        column(runs, "params.loss.k", 5))))
    paragraphs = [sweep.header(), f"Panel: model = {panel['model']}, augment = {panel['augment']}"
                  f", models selected by {panel['selection_metric']} ({len(runs)} runs); test "
                  f"top-k accuracy (%) for k = {ks[0]}…{ks[-1]}, mean ± std (ddof=1) over "
                  f"completed seeds. {COUNTS_LEGEND}", *notes, CLAIMS["s20_cifar"]]
    claims = paper_results.load("s20_synthetic_claims")
    judged = s20_cifar_claims(runs, ks, claims[claims["experiment"] == "s20_cifar"])
    sections = [*s20_cifar_sections(points, panel, labels, ks[-1]),
                ("What S20 claims, and whether it holds on these runs. " + CLAIM_RULE, judged)]
    text = FigureText("s20_cifar", "S20 Fig. 6: CIFAR-100 test top-k accuracy against k",
                      paragraphs, sections, points, verdicts=list(judged["verdict"]), sweep=sweep)
    fig, axis, _ = line_figure(
        points, ("loss", "k", "accuracy"), lambda loss: labels.get(loss, loss),
        ("k", "top-k test accuracy (%)", f"S20 Fig. 6: CIFAR-100, {panel['model']} + "
         f"{panel['augment']}, selected by {panel['selection_metric']}; mean over seeds, "
         "band ± std"))
    axis.axhline(99.0, color="grey", linestyle="--", linewidth=1)
    axis.text(0.98, 0.03, "S20: 99 % at k = 25 (top-5 transition), k = 33 (CE)",
              transform=axis.transAxes, ha="right", va="bottom", fontsize=8, color="grey")
    axis.legend(loc="center right")
    return fig, text


# ------------------------------------------------------------------------ G22 Fig. 3 (g22_time)


def g22_time_table(ours: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Per (line, K): our ratio (mean ± std) and run counts beside G22's ratio and seconds."""
    merged = pd.merge(ours.drop(columns="source"), paper.drop(columns="source"), how="outer",
                      on=["line", "k"], suffixes=("", "_paper"))
    rank = {line: i for i, line in enumerate(in_order(merged["line"].unique(), G22_LINES_FIRST))}
    merged = merged.assign(_rank=merged["line"].map(rank)).sort_values(["_rank", "k"])
    return pd.DataFrame({
        "line": merged["line"], "K": [fmt(k, 0) for k in merged["k"]],
        "ours: epoch time / CE": [mean_text(m, s, 3) for m, s in
                                  zip(merged["ratio_to_ce_mean"], merged["ratio_to_ce_std"])],
        "runs": merged["counts"].fillna("no run"),
        "G22: epoch time / CE": [fmt(value, 3) for value in merged["ratio_to_ce_mean_paper"]],
        "G22 seconds": [fmt(value, 0) for value in merged["paper_epoch_seconds"]]})


def g22_time_setting(runs: pd.DataFrame) -> str:
    """The network the runs timed, from their records (DenseNet 40-12 in the sweep, 40-40 in
    ``make gpu-check``), beside G22's DenseNet 40-40 on CIFAR-100 on a GPU."""
    nets = sorted({f"DenseNet {int(depth)}-{int(growth)}" for depth, growth in
                   zip(column(runs, "params.model.depth"), column(runs, "params.model.growth_rate"))
                   if pd.notna(depth) and pd.notna(growth)})
    return (f"{' and '.join(nets) or 'the runs’ network'} on random CIFAR-100-shaped images "
            "(G22: DenseNet 40-40 on CIFAR-100, on a GPU)")


def g22_time(sweep: Sweep):
    """G22 Fig. 3: each run's epoch time over the sweep's mean CE epoch time, against K, beside
    G22's times over its 65 s CE epoch; the CSV has our points then G22's (``source``)."""
    runs = sweep.runs
    entries = [observation(status, seed, ratio, line=line, x=k) for status, seed, ratio, line, k
               in zip(runs["status"], runs["seed"], table_specs.g22_ratio(runs),
                      table_specs.g22_line(runs), table_specs.run_k(runs))]
    names = ("line", "k", "ratio_to_ce")
    ours = summarise_points(entries, sweep.seeds, names, G22_LINES_FIRST, unit="runs")
    ours.insert(0, "source", "ours")
    published = paper_results.load("g22_fig3_epoch_time")
    published = pd.concat([published[published["loss"] == "ce"].assign(ratio_to_ce=1.0),
                           table_specs.g22_time_paper(published)], ignore_index=True)
    paper = pd.DataFrame({"source": "paper", "line": published["loss"],
                          "k": published["k"].astype(int),
                          "ratio_to_ce_mean": published["ratio_to_ce"],
                          "paper_epoch_seconds": published["epoch_seconds"]})
    paragraphs = [sweep.header(), *table_specs.g22_time_notes(runs),
                  "ours: mean ± std (ddof=1) of the ratio over the runs at that K (CE and smooth "
                  f"SVM are timed once per B, as repeats). {COUNTS_LEGEND}", CLAIMS["g22_time"]]
    title = "G22 Fig. 3: time per epoch against K, as a ratio to cross-entropy"
    judged = g22_time_claims(table_specs.g22_ratio(runs), table_specs.g22_line(runs),
                             table_specs.run_k(runs), column(runs, "params.n_samples"),
                             CLAIMS["g22_time"], g22_time_setting(runs))
    text = FigureText("g22_time", title, paragraphs,
                      [("Epoch time / CE epoch time:", g22_time_table(ours, paper)),
                       ("Whether G22's claim holds on these runs. " + CLAIM_RULE, judged)],
                      pd.concat([ours, paper], ignore_index=True),
                      verdicts=list(judged["verdict"]), sweep=sweep)
    fig, axis, colours = line_figure(ours, names, str, (
        "K", "epoch time / mean CE epoch time", f"{title} (lines: ours, mean ± std; stars: G22)"))
    for index, (line, group) in enumerate(paper.groupby("line", sort=False)):
        axis.scatter(group["k"], group["ratio_to_ce_mean"], marker="*", s=160, zorder=3,
                     color=colours.get(line, f"C{len(colours) + index}"), edgecolors="black",
                     linewidths=0.6, label=f"G22 Fig. 3: {line}")
    axis.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    axis.legend(fontsize=8)
    return fig, text


# ------------------------------------------------------------------------ B18 Fig. 2a (b18_tau)


def b18_tau_observations(runs: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """Per-epoch and last-epoch top-5 training error (100 − ``train/top5`` where ``history.csv``
    logged it) of the smooth SVM / hinge runs by τ; a run without any gives one, without x."""
    per_epoch, last = [], []
    for tau, loss, status, seed, run_dir in zip(table_specs.b18_tau(runs), runs["loss"],
                                                runs["status"], runs["seed"], runs["run_dir"]):
        if loss not in ("smooth_svm", "hinge"):
            continue
        history = read_history(run_dir) if status == "completed" else None
        errors = []
        if history is not None and {"epoch", "train/top5"} <= set(history.columns):
            accuracy = pd.to_numeric(history["train/top5"], errors="coerce")
            logged = accuracy.notna()
            errors = list(zip(history["epoch"][logged].astype(int).to_numpy(),
                              100.0 - accuracy[logged].to_numpy()))
        per_epoch += [observation(status, seed, error, line=number(tau), x=epoch)
                      for epoch, error in errors or [(None, None)]]
        last.append(observation(status, seed, errors[-1][1] if errors else None,
                                line=number(tau), x=None))
    return per_epoch, last


def b18_final_table(points: pd.DataFrame, final: pd.DataFrame) -> pd.DataFrame:
    """Per τ: our last-epoch training top-5 error and accuracy beside B18 Table 6's."""
    paper = paper_results.load("b18_table6_temperature").set_index("tau")["train_top5"]
    last_epochs = points.dropna(subset=["epoch"]).groupby("tau", dropna=False)["epoch"].max()
    by_tau, rows = final.set_index("tau"), []
    for tau in ordered([*by_tau.index], [float(t) for t in paper.index]):
        mine = by_tau.loc[tau] if tau in by_tau.index else None
        error = None if mine is None else number(mine["train_top5_error_mean"])
        published = number(paper.get(tau))
        rows.append({
            "τ": "–" if number(tau) is None else f"{tau:g}",
            "runs": "no run" if mine is None else mine["counts"],
            "last epoch": fmt(last_epochs.get(tau), 0),
            "ours: train top-5 error (%)": "–" if mine is None else mean_text(
                error, mine["train_top5_error_std"]),
            "ours: train top-5 accuracy (%)": fmt(None if error is None else 100.0 - error),
            "B18 Table 6: train top-5 accuracy (%)": fmt(published),
            "B18: error (%)": fmt(None if published is None else 100.0 - published),
            "ours − B18 (accuracy points)": "–" if error is None or published is None
            else f"{100.0 - error - published:+.2f}"})
    return pd.DataFrame(rows)


def b18_tau(sweep: Sweep):
    """B18 Fig. 2a; the CSV has one row per (τ, epoch), the markdown the last epoch beside
    B18 Table 6's training accuracy."""
    per_epoch, last = b18_tau_observations(sweep.runs)
    names = ("tau", "epoch", "train_top5_error")
    points = summarise_points(per_epoch, sweep.seeds, names)
    final = summarise_points(last, sweep.seeds, names)
    paragraphs = [
        sweep.header(), "Top-5 training error (%) = 100 − `train/top5` of each run's "
        "`history.csv` on the epochs where it was logged; mean ± std (ddof=1) over completed "
        "seeds. τ = 0 is the non-smooth top-5 SVM (`loss=hinge` or `loss.tau=0`). "
        f"{COUNTS_LEGEND}", CLAIMS["b18_tau"]]
    judged = b18_tau_claims(last, CLAIMS["b18_tau"])
    sections = [("Last logged epoch, ours beside B18 Table 6 "
                 "(`topk/paper_results/b18_table6_temperature.csv`):",
                 b18_final_table(points, final)),
                ("Whether B18's claim holds on these runs. " + CLAIM_RULE, judged)]
    text = FigureText("b18_tau", "B18 Fig. 2a: top-5 training error per temperature τ",
                      paragraphs, sections, points, verdicts=list(judged["verdict"]), sweep=sweep)
    fig, axis, _ = line_figure(
        points, names, lambda tau: f"τ = {'–' if number(tau) is None else f'{tau:g}'}",
        ("epoch", "top-5 training error (%)", "B18 Fig. 2a: smooth top-5 SVM, top-5 training "
         "error per temperature τ (mean over seeds)"))
    axis.axhline(95.0, color="grey", linestyle="--", linewidth=1,
                 label="random predictions (95 %)")  # top-5 of 100 classes at random
    axis.set_ylim(0, 100)
    axis.legend(fontsize=8)
    return fig, text


# ------------------------------------------------------------------------ entry

FIGURES = {**{name: lambda sweep, name=name: s20_synthetic(name, sweep) for name in S20_FIGURES},
           "s20_cifar": s20_cifar, "g22_time": g22_time, "b18_tau": b18_tau,
           **{name: lambda sweep, name=name: sparsity(name, sweep) for name in SPARSITY}}
FIGURE_IDS = tuple(FIGURES)


def build_figure(figure_id: str, sweep_dir: Path | None = None, sweep: Sweep | None = None,
                 **panel):
    """``(matplotlib figure, its FigureText)`` of one figure of ``sweep`` (already read), else of
    ``sweep_dir``; ``panel`` (``model``, ``augment``, ``selection``) chooses a panel of
    ``s20_cifar``."""
    if figure_id not in FIGURES:
        raise ValueError(f"unknown figure {figure_id!r}; choose one of {', '.join(FIGURES)}")
    if panel and figure_id != "s20_cifar":
        raise ValueError(f"{', '.join(panel)} select a panel of s20_cifar only, not {figure_id}")
    return FIGURES[figure_id](sweep if sweep is not None else read_sweep(sweep_dir, figure_id),
                              **panel)


def write_figure(built: tuple, out_dir: Path) -> dict[str, Path]:
    """Write :func:`build_figure`'s result as ``<out_dir>/<figure id>.{png,csv,md}``."""
    figure, text = built
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {kind: out_dir / f"{text.id}.{kind}" for kind in ("png", "csv", "md")}
    figure.savefig(files["png"], dpi=110)
    pyplot().close(figure)
    text.tidy.to_csv(files["csv"], index=False)
    files["md"].write_text(text.markdown())
    return files


def make_figure(figure_id: str, sweep_dir: Path, out_dir: Path, **panel) -> dict[str, Path]:
    """:func:`build_figure` then :func:`write_figure`."""
    return write_figure(build_figure(figure_id, sweep_dir, **panel), out_dir)
