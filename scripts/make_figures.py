"""Draw a paper figure from the run records of its sweep. The command line of
:mod:`topk.report.make_figures` (``--help`` says more)."""

import sys

from topk.report.make_figures import main

if __name__ == "__main__":
    sys.exit(main())
