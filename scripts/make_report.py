"""Build the report page: every paper item with its tables, figures and status, on one page.

    python scripts/make_report.py                    # make report: outputs/report/index.html
    python scripts/make_report.py --outputs DIR      # sweeps under DIR/sweeps, DIR/smoke/sweeps

Each item of the README's "Paper results" table reads its newest full-scale sweep (else its
newest smoke one; b18_speed: the loss benchmark), so the page shows whatever runs exist. It is
one static file with relative links: it opens from disk, and the folder can be copied whole.
Exit status 1 if an item could not be built (the page says why).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from topk.report.page import build_page  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", type=Path, default=ROOT / "outputs", help="where sweeps live")
    parser.add_argument("--smoke", type=Path, default=None, help="smoke outputs (default: <outputs>/smoke)")
    parser.add_argument("--out", type=Path, default=None, help="page folder (default: <outputs>/report)")
    args = parser.parse_args(argv)
    path, errors = build_page(args.outputs, args.smoke, args.out)
    print(f"wrote {path}")
    for error in errors:
        print(f"Error: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
