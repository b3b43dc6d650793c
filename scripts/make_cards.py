"""Write the documentation pages of the protocol cards and check every card against its sweep. The
command line of :mod:`topk.cards.make_cards` (``--help`` says more)."""

import sys

from topk.cards.make_cards import main

if __name__ == "__main__":
    sys.exit(main())
