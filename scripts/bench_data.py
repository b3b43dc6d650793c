"""Training images per second delivered by the data pipelines: the command line of
:mod:`topk.bench.data` (``--help`` for its options; ``make bench-data``)."""

import sys

from topk.bench.data import main

if __name__ == "__main__":
    sys.exit(main())
