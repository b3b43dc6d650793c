"""Make a paper table from the run records of its sweep, beside the published numbers. The command
line of :mod:`topk.report.make_tables` (``--help`` says more)."""

import sys

from topk.report.make_tables import main

if __name__ == "__main__":
    sys.exit(main())
