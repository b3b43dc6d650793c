"""Compute each paper experiment needs, from training steps timed on this machine: the command
line of :mod:`topk.bench.epochs` (``--help`` for its options; ``make bench-epochs``)."""

import sys

from topk.bench.epochs import main

if __name__ == "__main__":
    sys.exit(main())
