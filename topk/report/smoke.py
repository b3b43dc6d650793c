"""Run every paper experiment at smoke scale and build every table and figure from its records.

    python scripts/smoke.py                     # make smoke: all experiments, tables, figures
    python scripts/smoke.py g22_epsilon b18_tau # some of them

Each experiment runs as ``python train.py -m +experiment=<id> +scale=smoke`` (one seed, one
epoch of at most two batches, a small MLP unless the sweep chooses models) on the tiny data sets
that :mod:`topk.data.fixtures` writes in the real formats under ``outputs/smoke_data``. Tables go
to ``outputs/smoke/tables``, figures to ``outputs/smoke/figures``, and a summary of runs and
seconds per experiment to ``outputs/smoke/summary.md``; then the report page is built
(``outputs/report/index.html``, ``make report``) from every run there is. The numbers mean
nothing; every step that turns a command into a table does run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from topk.data.fixtures import write_smoke_data
from topk.report.runs import load_sweep
from topk.repository import ROOT

EXPERIMENTS = [
    "s20_exp1", "s20_exp2", "s20_exp3", "s20_cifar", "b18_cifar_noise", "b18_imagenet", "b18_margin",
    "b18_tau", "b18_sparsity", "g22_sparsity",
    "g22_epsilon", "g22_samples", "g22_cifar_noise", "g22_plantnet", "g22_imagenet_lt", "g22_imagenet",
    "g22_time", "p22_cifar", "p22_imagenet", "zoo_cifar100", "zoo_plantnet",
]
# Values that name sizes of the real data sets: the smoke ImageNet has 12 classes, the smoke
# embeddings 240 training rows.
EXTRA_OVERRIDES = {"b18_imagenet": ["dataset.train_size=12,null"], "p22_imagenet": ["dataset.val_size=48"]}
FIGURES = {"s20_exp1", "s20_exp2", "s20_exp3", "s20_cifar", "b18_tau", "b18_sparsity", "g22_sparsity",
           "g22_time"}
TABLE_FROM_BENCH = "b18_speed"


def run_experiment(experiment: str, sweep_dir: Path) -> dict:
    """One smoke sweep; returns its run counts and wall time."""
    command = [sys.executable, str(ROOT / "train.py"), "-m", f"+experiment={experiment}",
               "+scale=smoke", f"hydra.sweep.dir={sweep_dir}", *EXTRA_OVERRIDES.get(experiment, [])]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    counts = load_sweep(sweep_dir).counts()  # a corrupt record is counted as a run, not completed
    if result.returncode != 0:
        print(result.stderr[-3000:], file=sys.stderr)
    return {"experiment": experiment, "exit": result.returncode, "runs": counts["found"],
            "completed": counts["completed"], "seconds": seconds}


def build_outputs(experiment: str, sweep_dir: Path, out: Path) -> list[str]:
    """The experiment's table and figure (where it has them); returns what failed."""
    from topk.report import make_figures, make_tables

    failures = []
    if experiment in make_tables.TABLES:
        if make_tables.main([experiment, "--sweep-dir", str(sweep_dir), "--out", str(out / "tables")]):
            failures.append(f"table-{experiment}")
    if experiment in FIGURES:
        if make_figures.main([experiment, "--sweep-dir", str(sweep_dir), "--out", str(out / "figures")]):
            failures.append(f"figure-{experiment}")
    return failures


def build_speed_table(out: Path) -> list[str]:
    """B18 Tables 3–5 from a quick loss benchmark (the full one is `make bench-losses`)."""
    from topk.report import make_tables

    bench = out / "bench"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_losses.py"), "--quick", "--out", str(bench)],
                   cwd=ROOT, check=True, capture_output=True)
    code = make_tables.main([TABLE_FROM_BENCH, "--bench-file", str(bench / "losses.json"),
                             "--out", str(out / "tables")])
    return [f"table-{TABLE_FROM_BENCH}"] if code else []


def build_report(out: Path) -> list[str]:
    """The report page from every run there is, this smoke's included (`make report`)."""
    from topk.report import make_report

    return ["report"] if make_report.main(["--outputs", str(ROOT / "outputs"), "--smoke", str(out)]) else []


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="*", metavar="ID",
                        help=f"some of: {', '.join([*EXPERIMENTS, TABLE_FROM_BENCH])} (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "smoke")
    parser.add_argument("--data", type=Path, default=ROOT / "outputs" / "smoke_data")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.experiments) - {*EXPERIMENTS, TABLE_FROM_BENCH})
    if unknown:
        parser.error(f"unknown experiment(s) {', '.join(unknown)}")
    selected = args.experiments or [*EXPERIMENTS, TABLE_FROM_BENCH]
    if not (args.data / "cifar-100-python").is_dir():
        write_smoke_data(args.data)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    rows, failures = [], []
    for experiment in selected:
        if experiment == TABLE_FROM_BENCH:
            failures += build_speed_table(args.out)
            continue
        sweep_dir = args.out / "sweeps" / experiment / stamp
        row = run_experiment(experiment, sweep_dir)
        rows.append(row)
        print(f"{experiment}: {row['completed']}/{row['runs']} runs completed in {row['seconds']:.0f} s",
              flush=True)
        if row["exit"] != 0 or row["completed"] < row["runs"] or row["runs"] == 0:
            failures.append(f"sweep-{experiment}")
        failures += build_outputs(experiment, sweep_dir, args.out)
    lines = ["| experiment | runs completed | seconds |", "|---|---|---|"]
    lines += [f"| {r['experiment']} | {r['completed']}/{r['runs']} | {r['seconds']:.0f} |" for r in rows]
    lines.append(f"| total | {sum(r['completed'] for r in rows)}/{sum(r['runs'] for r in rows)} "
                 f"| {sum(r['seconds'] for r in rows):.0f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    failures += build_report(args.out)
    if failures:
        print(f"Error: these smoke steps failed: {', '.join(failures)}.", file=sys.stderr)
        return 1
    return 0
