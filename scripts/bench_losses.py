"""Speed and stability of every loss, and ours against the published codes: the command line of
:mod:`topk.bench.losses` (``--help`` for its options; ``make bench-losses``)."""

import sys

from topk.bench.losses import main

if __name__ == "__main__":
    sys.exit(main())
