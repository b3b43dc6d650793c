"""B18 Tables 3–5 beside the loss benchmark (``scripts/bench_losses.py``'s ``losses.json``):
the forward time of the summation algorithm over the log-space divide and conquer as a ratio
(machines differ, so only ratios are compared) and ``log_esp``'s stability flags."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from topk import paper_results
from topk.report.cells import fmt, ordered
from topk.report.render import Table
from topk.report.runs import display_path

MARKS = {1: "✓", 0: "✗", None: "–"}
SPEED_COLUMNS = {  # wide column → (tidy column, digits, sign)
    ("forward", "ours DC (ms)"): ("ours_divide_conquer_ms", 2, False),
    ("forward", "ours summation (ms)"): ("ours_summation_ms", 2, False),
    ("forward", "ours ratio"): ("ours_ratio", 1, False),
    ("forward", "paper ratio"): ("paper_ratio", 1, False),
    ("forward", "ours − paper"): ("diff", 1, True),
    ("backward", "paper ratio"): ("paper_ratio_backward", 1, False)}


def speed_rows(bench: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """B18 Table 3: summation / divide-and-conquer forward time per n, ours beside the paper's;
    B18 Table 4: the paper's autograd / custom backward time (losses.json has no backward)."""
    published = paper_results.load("b18_tables3_4_speed").pivot(
        index=["pass", "n_classes"], columns="algorithm", values="seconds")
    keys = ["n", "divide_conquer_log_seconds", "summation_seconds", "summation_over_divide_conquer"]
    ours = pd.DataFrame(bench.get("log_esp_forward", []), columns=keys).astype(float)
    paper = published.loc["forward"].rename_axis("n").reset_index()
    both = ours.merge(paper, on="n", how="outer").sort_values("n", kind="stable")
    paper_ratio = both["summation"] / both["divide_conquer"]
    forward = pd.DataFrame({
        "section": "forward", "n": both["n"].astype(int),
        "ours_divide_conquer_ms": both["divide_conquer_log_seconds"] * 1e3,
        "ours_summation_ms": both["summation_seconds"] * 1e3,
        "ours_ratio": both["summation_over_divide_conquer"],
        "paper_divide_conquer_s": both["divide_conquer"], "paper_summation_s": both["summation"],
        "paper_ratio": paper_ratio, "diff": both["summation_over_divide_conquer"] - paper_ratio,
    }).reset_index(drop=True)
    backward = published.loc["backward"]
    backward = pd.DataFrame({"section": "backward", "n": backward.index.astype(int),
                             "paper_ratio": (backward["autograd"] / backward["custom"]).to_numpy()})
    return forward, backward


def stability_rows(bench: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """B18 Table 5: is ``log_esp`` finite at temperature τ, per algorithm and precision; tidy
    rows and the wide "ours / paper" marks."""
    published = {(float(t), a, p): int(s) for t, a, p, s in
                 paper_results.load("b18_table5_stability").itertuples(index=False)}
    ours = {(float(r["tau"]), r["algorithm"], r["precision"]): int(r["stable"])
            for r in bench.get("stability", [])}
    rows, wide = [], {}
    for key in ordered(ours, published):
        tau, algorithm, precision = key
        agree = ours[key] == published[key] if key in ours and key in published else None
        rows.append({"section": "stability", "algorithm": algorithm, "precision": precision,
                     "tau": tau, "ours_stable": ours.get(key), "paper_stable": published.get(key),
                     "agree": agree})
        text = f"{MARKS[ours.get(key)]} / {MARKS[published.get(key)]}"
        wide.setdefault((algorithm, precision), {})[f"τ = {tau:g}"] = (
            text + (" (differs)" if agree is False else ""))
    wide = pd.DataFrame(wide).T
    wide.index.names = ["algorithm", "precision"]
    return pd.DataFrame(rows), wide


def speed_table(bench_file: Path) -> Table:
    """B18 Tables 3–5 from ``bench_file`` (keys ``log_esp_forward`` and ``stability``)."""
    if not Path(bench_file).is_file():
        raise FileNotFoundError(f"no benchmark file {bench_file}; run "
                                "`python scripts/bench_losses.py` first.")
    bench = json.loads(Path(bench_file).read_text())
    (forward, backward), (stability, stability_wide) = speed_rows(bench), stability_rows(bench)
    both = forward.merge(backward, on="n", how="outer", suffixes=("", "_backward"))
    speed_wide = pd.DataFrame({key: [fmt(v, digits, sign, missing="") for v in both[name]]
                               for key, (name, digits, sign) in SPEED_COLUMNS.items()},
                              index=pd.Index(both["n"].astype(int).astype(str), name="n"))
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
    sections = [("B18 Tables 3–4: speed", speed_wide), ("B18 Table 5: stability", stability_wide)]
    return Table("b18_speed", "B18 Tables 3–5: speed and stability of the log-space ESP", preamble,
                 sections, pd.concat([forward, backward, stability], ignore_index=True))
