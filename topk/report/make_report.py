"""Build the report page: every paper item with its tables, figures and status, on one page.

    python scripts/make_report.py                    # make report: outputs/report/index.html
    python scripts/make_report.py --outputs DIR      # sweeps under DIR/sweeps, DIR/smoke/sweeps

    python scripts/make_report.py --sweep-dir outputs/sweeps/s20_exp1/2026-11-25_08-00-00

Each item of the README's "Paper results" table shows the best of its sweeps (full scale before
smoke, faithful to its experiment's protocol, most complete, newest records; b18_speed: the loss
benchmark), lists the others, and says whether it reproduced: see topk/report/page.py. It is one
static file with relative links and copies of the run records it cites: it opens from disk, and
the folder can be copied whole. Exit status 1 if an item could not be built (the page says why).
A page folder (``--out``) that cannot be written, or that holds files of something other than an
earlier page, is refused in one sentence before anything is written; a record that is a link out
of its run directory is never copied beside the page.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from topk.report.page import build_page
from topk.report.render import out_problem, refused, write_failure
from topk.repository import ROOT

README_FIGURES = ("s20_exp1", "s20_exp2", "s20_exp3")
FULL_SCALE = ("reproduced", "differs", "undecided", "ran")  # the whole protocol ran


def copy_readme_figures(page_dir: Path, target: Path) -> None:
    """The page's S20 synthetic figures (PNG, markdown, CSV) into ``target``: the README shows
    what the report computed, from the same sweeps; refused unless each ran its whole protocol."""
    status = json.loads((page_dir / "status.json").read_text())
    short = [f"{item} ({status[item]['status']})" for item in README_FIGURES
             if status[item]["status"] not in FULL_SCALE]
    if short:
        raise ValueError(f"the README's figures need complete full-scale protocol sweeps, and "
                         f"{', '.join(short)} lack one; run `make sweeps` first.")
    target.mkdir(parents=True, exist_ok=True)
    for item in README_FIGURES:
        for kind in ("png", "md", "csv"):
            shutil.copy2(page_dir / "figures" / f"{item}.{kind}", target / f"{item}.{kind}")
        print(f"copied {item} figure ({status[item]['status']}) to {target}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", type=Path, default=ROOT / "outputs", help="where sweeps live")
    parser.add_argument("--smoke", type=Path, default=None, help="smoke outputs (default: <outputs>/smoke)")
    parser.add_argument("--out", type=Path, default=None, help="page folder (default: <outputs>/report)")
    parser.add_argument("--sweep-dir", type=Path, action="append", default=[],
                        help="show this sweep for its experiment (repeat for several)")
    parser.add_argument("--readme-figures", type=Path, default=None, metavar="DIR",
                        help="copy the S20 synthetic figures into DIR (docs/figures), only when "
                             "the page shows them from complete full-scale protocol sweeps")
    args = parser.parse_args(argv)
    problem = out_problem(args.out or args.outputs / "report", "the page folder")
    if problem is not None:
        return refused(problem)
    try:
        path, errors = build_page(args.outputs, args.smoke, args.out, args.sweep_dir)
        if args.readme_figures:
            copy_readme_figures(path.parent, args.readme_figures)
    except (ValueError, FileNotFoundError) as error:  # a --sweep-dir that is no sweep
        return refused(str(error))
    except OSError as error:
        return refused(write_failure(error))
    print(f"wrote {path}")
    for error in errors:
        print(f"Error: {error}", file=sys.stderr)
    return 1 if errors else 0
