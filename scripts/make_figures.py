"""Draw a paper figure from the run records of its sweep.

    python scripts/make_figures.py s20_exp2                 # newest outputs/sweeps/s20_exp2/*
    python scripts/make_figures.py s20_exp2 --sweep-dir DIR # a given sweep
    make figure-s20_exp2

Writes ``<out>/<experiment>.png``, ``.csv`` and ``.md`` (default ``outputs/figures``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from topk.figures import S20_FIGURES, latest_sweep_dir, make_s20_figure  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=sorted(S20_FIGURES))
    parser.add_argument("--sweep-dir", type=Path, help="sweep directory (default: the newest one)")
    parser.add_argument("--outputs", type=Path, default=ROOT / "outputs", help="where sweeps live")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "figures")
    args = parser.parse_args(argv)
    try:
        sweep_dir = args.sweep_dir or latest_sweep_dir(args.outputs, args.experiment)
        files = make_s20_figure(args.experiment, sweep_dir, args.out)
    except FileNotFoundError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    print(files["md"].read_text())
    for kind, path in files.items():
        print(f"wrote {kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
