"""The engine against a bare PyTorch loop: the command line of :mod:`topk.bench.train`
(``--help`` for its options; ``make bench``, ``make bench-train``)."""

import sys

from topk.bench.train import main

if __name__ == "__main__":
    sys.exit(main())
