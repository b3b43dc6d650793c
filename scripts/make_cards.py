"""Write the documentation pages of the protocol cards and check every card against its sweep.

    python scripts/make_cards.py            # make cards: docs/cards/<experiment>.md and index.md
    python scripts/make_cards.py --check    # every card against the composed jobs of its sweep

``--check`` prints each disagreement (a key without an entry, a value that is not the composed one,
a swept key's values, entries no job uses) and exits 1 where there is one; ``make test`` runs the
same check (tests/test_cards.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from topk.cards import CardError, experiments_with_cards, problems  # noqa: E402
from topk.cards.render import write_documentation  # noqa: E402


def check() -> int:
    experiments = sorted(path.stem for path in (ROOT / "conf" / "experiment").glob("*.yaml"))
    failed = 0
    for experiment in experiments:
        try:
            found = problems(experiment)
        except CardError as error:
            found = [str(error)]
        failed += bool(found)
        print(f"{experiment}: " + ("card true to every job" if not found else f"{len(found)} problem(s)"))
        for line in found:
            print(f"  {line}")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check every card against its sweep")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "cards")
    args = parser.parse_args(argv)
    if args.check:
        return check()
    try:
        written = write_documentation(args.out)
    except (CardError, OSError) as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    print(f"{len(written)} pages in {args.out} ({len(experiments_with_cards())} cards)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
