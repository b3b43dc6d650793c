"""Make a paper table from the run records of its sweep, beside the published numbers.

    python scripts/make_tables.py b18_cifar_noise                 # best of outputs/sweeps/b18_cifar_noise/*
    python scripts/make_tables.py b18_cifar_noise --sweep-dir DIR # a given sweep
    python scripts/make_tables.py b18_speed                       # from outputs/bench/losses.json

Writes ``<out>/<id>.md``, ``.csv`` and ``.tex`` (default ``outputs/tables``). A sweep holding runs
of another experiment, or of none (a sweep without ``+experiment``), or a tuning study's trials,
is refused: one sentence ``Error: ...`` on stderr and exit status 1, as for a missing sweep or an
``--out`` that cannot be written (checked first: nothing is written then). A job's duplicates (a
job re-run, a job folder copied) count once: the table's first line lists those left out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from topk.errors import TopkError
from topk.report.render import out_problem, refused, write_failure
from topk.report.tables import TABLE_IDS, make_table
from topk.repository import ROOT

TABLES = TABLE_IDS  # the ids it builds (scripts/smoke.py and tests/test_smoke.py read them)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--sweep-dir", type=Path, help="sweep directory (default: the best one: "
                        "full scale, faithful to the protocol, most complete, newest records)")
    parser.add_argument("--outputs", type=Path, default=ROOT / "outputs", help="where sweeps live")
    parser.add_argument("--out", type=Path, default=None, help="default: <outputs>/tables")
    parser.add_argument("--bench-file", type=Path, default=None,
                        help="b18_speed only (default: <outputs>/bench/losses.json)")
    args = parser.parse_args(argv)
    out = args.out or args.outputs / "tables"
    problem = out_problem(out, "the tables' folder")
    if problem is not None:
        return refused(problem)
    try:
        table, files = make_table(args.table, out, sweep_dir=args.sweep_dir, outputs=args.outputs,
                                  bench_file=args.bench_file)
    except (FileNotFoundError, TopkError) as error:  # one sentence: no traceback
        return refused(str(error))
    except OSError as error:
        return refused(write_failure(error))
    print(table.markdown())
    for kind, path in files.items():
        print(f"wrote {kind}: {path}")
    return 0
