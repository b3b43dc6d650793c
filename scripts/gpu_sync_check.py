"""Does a training step with each loss make the GPU wait for the host? The command line of
:mod:`topk.bench.sync_check` (``--help`` for its options; ``make gpu-check``)."""

import sys

from topk.bench.sync_check import main

if __name__ == "__main__":
    sys.exit(main())
