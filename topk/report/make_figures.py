"""Draw a paper figure from the run records of its sweep.

    python scripts/make_figures.py s20_exp2                 # best of outputs/sweeps/s20_exp2/*
    python scripts/make_figures.py s20_exp2 --sweep-dir DIR # a given sweep
    python scripts/make_figures.py s20_cifar --model densenet121 --augment cutout
    make figure-s20_exp2

Figures: s20_exp1, s20_exp2, s20_exp3 (S20 Figs. 2–4), s20_cifar (S20 Fig. 6), g22_sparsity
(G22 Fig. 2), g22_time (G22 Fig. 3), b18_tau (B18 Fig. 2a), b18_sparsity (B18 Fig. 2b). Writes ``<out>/<id>.png``, ``.csv`` and ``.md`` (default
``outputs/figures``). A sweep holding runs of another experiment, or of none (a sweep without
``+experiment``), or a tuning study's trials, is refused: one sentence ``Error: ...`` on stderr
and exit status 1, as is an ``--out`` that cannot be written (checked first: nothing is written
then). A job's duplicates count once: the figure's text lists those left out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from topk.errors import TopkError
from topk.report.figures import FIGURE_IDS, build_figure, write_figure
from topk.report.render import out_problem, refused, write_failure
from topk.report.runs import best_sweep
from topk.repository import ROOT


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=FIGURE_IDS)
    parser.add_argument("--sweep-dir", type=Path, help="sweep directory (default: the best one: "
                        "full scale, faithful to the protocol, most complete, newest records)")
    parser.add_argument("--outputs", type=Path, default=ROOT / "outputs", help="where sweeps live")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "figures")
    panel = parser.add_argument_group("s20_cifar panel (S20 Fig. 6: resnet18, mixup, val/top5)")
    panel.add_argument("--model", help="top-level model of the runs (default resnet18)")
    panel.add_argument("--augment", help="augmentation of the runs (default mixup)")
    panel.add_argument("--selection", help="the runs' selection metric (default val/top5)")
    args = parser.parse_args(argv)
    chosen = {name: value for name, value in
              (("model", args.model), ("augment", args.augment), ("selection", args.selection))
              if value is not None}
    if chosen and args.experiment != "s20_cifar":
        parser.error("--model, --augment and --selection choose a panel of s20_cifar only")
    problem = out_problem(args.out, "the figures' folder")
    if problem is not None:
        return refused(problem)
    try:
        sweep = None if args.sweep_dir else best_sweep(args.outputs, args.experiment)
        files = write_figure(build_figure(args.experiment, args.sweep_dir, sweep, **chosen), args.out)
    except (FileNotFoundError, TopkError) as error:  # one sentence: no traceback
        return refused(str(error))
    except OSError as error:
        return refused(write_failure(error))
    print(files["md"].read_text())
    for kind, path in files.items():
        print(f"wrote {kind}: {path}")
    return 0
