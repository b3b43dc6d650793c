"""Each path of the noised losses' k-th largest selection forced in turn, at the papers'
settings: the command line of :mod:`topk.bench.noised_paths` (``--help`` for its options;
``make bench-noised-paths``)."""

import sys

from topk.bench.noised_paths import main

if __name__ == "__main__":
    sys.exit(main())
