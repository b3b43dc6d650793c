"""How long the entry points take to start, against ``import torch``: the command line of
:mod:`topk.bench.startup` (``--help`` for its options; ``make bench-startup``)."""

import sys

from topk.bench.startup import main

if __name__ == "__main__":
    sys.exit(main())
