"""topk: reproduce and extend research on top-k classification losses.

The library is importable without Hydra; ``train.py`` is the only place that turns
configuration into objects.
"""

__version__ = "0.1.0"
