"""B18 Tables 3–5 beside the loss benchmark (``scripts/bench_losses.py``'s ``losses.json``):
the forward time of the summation algorithm over the log-space divide and conquer as a ratio
(machines differ, so only ratios are compared) and ``log_esp``'s stability flags."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from topk import paper_results
from topk.report.cells import fmt, number, ordered
from topk.report.render import Table
from topk.report.runs import display_path


def _published(pass_: str) -> pd.DataFrame:
    paper = paper_results.load("b18_tables3_4_speed")
    return paper[paper["pass"] == pass_].pivot(index="n_classes", columns="algorithm",
                                               values="seconds")


def forward_rows(bench: dict) -> pd.DataFrame:
    """B18 Table 3 (forward): summation / divide-and-conquer time per n, ours vs paper."""
    keys = ["n", "divide_conquer_log_seconds", "summation_seconds", "summation_over_divide_conquer"]
    ours = pd.DataFrame(bench.get("log_esp_forward", []), columns=keys).astype(float)
    both = ours.merge(_published("forward").rename_axis("n").reset_index(), on="n", how="outer")
    both = both.sort_values("n", kind="stable")
    paper_ratio = both["summation"] / both["divide_conquer"]
    return pd.DataFrame({
        "section": "forward", "n": both["n"].astype(int),
        "ours_divide_conquer_ms": both["divide_conquer_log_seconds"] * 1e3,
        "ours_summation_ms": both["summation_seconds"] * 1e3,
        "ours_ratio": both["summation_over_divide_conquer"],
        "paper_divide_conquer_s": both["divide_conquer"], "paper_summation_s": both["summation"],
        "paper_ratio": paper_ratio, "diff": both["summation_over_divide_conquer"] - paper_ratio,
    }).reset_index(drop=True)


def stability_rows(bench: dict) -> pd.DataFrame:
    """B18 Table 5: is ``log_esp`` finite at temperature τ, per algorithm and precision."""
    published = {(float(t), a, p): int(s) for t, a, p, s in
                 paper_results.load("b18_table5_stability").itertuples(index=False)}
    ours = {(float(r["tau"]), r["algorithm"], r["precision"]): int(r["stable"])
            for r in bench.get("stability", [])}
    return pd.DataFrame([{"section": "stability", "algorithm": key[1], "precision": key[2],
                          "tau": key[0], "ours_stable": ours.get(key),
                          "paper_stable": published.get(key),
                          "agree": ours[key] == published[key]
                          if key in ours and key in published else None}
                         for key in ordered(ours, published)])


def speed_wide(forward: pd.DataFrame, backward: pd.DataFrame) -> pd.DataFrame:
    both = forward.merge(backward, on="n", how="outer", suffixes=("", "_backward"))
    columns = {("forward", "ours DC (ms)"): ("ours_divide_conquer_ms", 2, False),
               ("forward", "ours summation (ms)"): ("ours_summation_ms", 2, False),
               ("forward", "ours ratio"): ("ours_ratio", 1, False),
               ("forward", "paper ratio"): ("paper_ratio", 1, False),
               ("forward", "ours − paper"): ("diff", 1, True),
               ("backward", "paper ratio"): ("paper_ratio_backward", 1, False)}
    frame = pd.DataFrame({key: [fmt(v, digits, sign, missing="") for v in both[name]]
                          for key, (name, digits, sign) in columns.items()},
                         index=pd.Index(both["n"].astype(int).astype(str), name="n"))
    frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    return frame


def stability_wide(stability: pd.DataFrame) -> pd.DataFrame:
    marks = {1: "✓", 0: "✗", None: "–"}
    table = {}
    for row in stability.to_dict("records"):
        ours, paper = (marks[None if number(v) is None else int(v)]
                       for v in (row["ours_stable"], row["paper_stable"]))
        text = f"{ours} / {paper}" + (" (differs)" if row["agree"] is False else "")
        table.setdefault((row["algorithm"], row["precision"]), {})[f"τ = {row['tau']:g}"] = text
    frame = pd.DataFrame(table).T
    frame.index.names = ["algorithm", "precision"]
    return frame


def speed_table(bench_file: Path) -> Table:
    """B18 Tables 3–5 from ``bench_file`` (keys ``log_esp_forward`` and ``stability``)."""
    if not Path(bench_file).is_file():
        raise FileNotFoundError(f"no benchmark file {bench_file}; run "
                                "`python scripts/bench_losses.py` first.")
    bench = json.loads(Path(bench_file).read_text())
    backward = _published("backward")
    backward = pd.DataFrame({"section": "backward", "n": backward.index.astype(int),
                             "paper_ratio": (backward["autograd"] / backward["custom"]).to_numpy()})
    forward, stability = forward_rows(bench), stability_rows(bench)
    agree = stability["agree"].dropna()
    preamble = [
        f"Benchmark `{display_path(bench_file)}` (batch {bench.get('batch')}, "
        f"{bench.get('threads')} thread(s), torch {bench.get('torch')}); papers: "
        "`topk/paper_results/b18_tables3_4_speed.csv`, `b18_table5_stability.csv`.",
        "Speed: ratio = summation time / divide-and-conquer time of the k = 5 forward pass (B18 "
        "Table 3 gives both algorithms); the backward ratio is B18 Table 4's autograd / custom "
        "backward, which losses.json does not measure.",
        f"Stability: ours / paper, ✓ finite, ✗ overflow, – not measured or not in the paper; "
        f"{int(agree.sum())} of {len(agree)} compared flags agree."]
    sections = [("B18 Tables 3–4: speed", speed_wide(forward, backward)),
                ("B18 Table 5: stability", stability_wide(stability))]
    return Table("b18_speed", "B18 Tables 3–5: speed and stability of the log-space ESP", preamble,
                 sections, pd.concat([forward, backward, stability], ignore_index=True))
