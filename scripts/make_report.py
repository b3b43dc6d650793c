"""Build the report page: every paper item with its tables, figures and status, on one page. The
command line of :mod:`topk.report.make_report` (``--help`` says more)."""

import sys

from topk.report.make_report import main

if __name__ == "__main__":
    sys.exit(main())
