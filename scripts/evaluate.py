"""Evaluate a finished (or stopped) run's saved model again, without touching the run: the
command line of :mod:`topk.evaluate` (``python scripts/evaluate.py outputs/runs/<run> --help``)."""

import sys

from topk.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
