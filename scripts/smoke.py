"""Run every paper experiment at smoke scale and build every table and figure from its records. The
command line of :mod:`topk.report.smoke` (``--help`` says more)."""

import sys

from topk.report.smoke import main

if __name__ == "__main__":
    sys.exit(main())
