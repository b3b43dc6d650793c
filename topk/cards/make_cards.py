"""Write the documentation pages of the protocol cards and check every card against its sweep.

    python scripts/make_cards.py            # make cards: docs/cards/<experiment>.md and index.md
    python scripts/make_cards.py --check    # every card against the composed jobs of its sweep

``--check`` prints each disagreement (a key without an entry, a value that is not the composed one,
a swept key's values, entries no job uses) and exits 1 where there is one; ``make test`` runs the
same check (tests/test_cards.py).

Writing replaces the card pages in ``--out`` and removes its other ``.md`` files (an experiment's
page left from a removed card), so ``--out`` must be a folder of card pages (its ``index.md`` is
theirs) or hold no ``.md`` file; one that cannot be written or holds other pages is refused in one
sentence, nothing written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from topk.cards import CardError, experiments_with_cards, problems
from topk.cards.render import write_documentation
from topk.report.render import out_problem, refused, write_failure
from topk.repository import ROOT

INDEX_TITLE = "# Protocol cards"  # the first line of the pages' index.md


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


def pages_folder_problem(folder: Path) -> str | None:
    """One sentence if ``folder`` holds ``.md`` files but is no folder of card pages (no
    ``index.md`` of theirs): writing would remove those files."""
    pages = sorted(path.name for path in folder.glob("*.md")) if folder.is_dir() else []
    index = folder / "index.md"
    ours = index.is_file() and index.read_text(errors="replace").startswith(INDEX_TITLE)
    if not pages or ours:
        return None
    named = ", ".join(pages[:3]) + (f" and {len(pages) - 3} more" if len(pages) > 3 else "")
    return (f"{folder} holds pages that are not protocol card pages ({named}), which writing the "
            "cards would remove; choose an empty folder, or the card pages' own, with --out.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check every card against its sweep")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "cards")
    args = parser.parse_args(argv)
    if args.check:
        return check()
    problem = out_problem(args.out, "the card pages' folder") or pages_folder_problem(args.out)
    if problem is not None:
        return refused(problem)
    try:
        written = write_documentation(args.out)
    except CardError as error:
        return refused(str(error))
    except OSError as error:
        return refused(write_failure(error))
    print(f"{len(written)} pages in {args.out} ({len(experiments_with_cards())} cards)")
    return 0
