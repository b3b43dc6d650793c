"""Several small jobs at once against one at a time: the command line of :mod:`topk.bench.share`
(``--help`` for its options; ``make bench-share``)."""

import sys

from topk.bench.share import main

if __name__ == "__main__":
    sys.exit(main())
