"""Checks of the plain Python arguments of the losses, their numerical cores and the metrics.

Each raises ``ValueError`` with one sentence that names the Python argument, the value given
and what is allowed (``k must be a whole number of at least 1, got 2.5``), without a final full
stop, so that a caller can embed it: ``topk.build.build`` turns a constructor's refusal into ``loss
cannot be built (k must be …); check the loss.* values.``, which names the config group. They
are plain ``ValueError`` rather than :class:`~topk.errors.ConfigError` for that reason (a
``ConfigError`` reaches the user as it is, without the group).
"""

from __future__ import annotations

import math
import numbers


def whole_number(name: str, value, minimum: int = 1) -> int:
    """``value`` as an ``int``; raise unless it is a whole number (a Python or numpy integer,
    not a bool or a float such as ``2.0``) of at least ``minimum``."""
    if type(value) is int and value >= minimum:  # the common case, without the ABC checks below
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be a whole number of at least {minimum}, got {value!r}")
    return int(value)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def non_negative(name: str, value, note: str = ""):
    """``value``, unchanged; raise unless it is a finite real number ``>= 0`` (``note``, e.g.
    ``" (0 is the non-smooth loss)"``, is added to the sentence)."""
    if type(value) is float and 0 <= value < math.inf:  # the common case, without the ABC checks
        return value
    if not (_is_real(value) and 0 <= value < math.inf):
        raise ValueError(f"{name} must be a finite number >= 0{note}, got {value!r}")
    return value


def positive(name: str, value):
    """``value``, unchanged; raise unless it is a finite real number ``> 0``."""
    if not (_is_real(value) and 0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value
