"""What a config value may be: one :class:`Rule` per schema field, attached as field metadata.

A schema field is declared with one of the helpers below, e.g. ``epochs: int = whole(1)``. Its
annotation is the type OmegaConf converts to while Hydra composes (``no``/``off`` become
``False`` on a ``bool``; ``abc`` on an ``int`` is refused there); its rule is what
:func:`topk.schema.check.check_config` checks on the composed value (ranges, finiteness, the
allowed words), and the words of the one sentence either refusal prints:
``<key> must be <rule.allowed>, got <value>.``

Fields have no default (``MISSING``): every value is set in one YAML file (docs/design.md §3).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

MISSING: Any = "???"  # OmegaConf's marker of a value not given (omegaconf.MISSING)
RULE = "rule"  # the metadata key of a field's Rule


@dataclass(frozen=True)
class Rule:
    """``allowed``: the values a key takes, in words (``a whole number of at least 1``);
    ``accepts``: whether a composed, resolved value is one of them."""

    allowed: str
    accepts: Callable[[Any], bool]

    def sentence(self, key: str, value: Any) -> str:
        return f"{key} must be {self.allowed}, got {shown(value)}."


def shown(value: Any) -> str:
    """A value as the command line writes it: ``'abc'``, ``-1``, ``[1.5]``, ``null``, ``true``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(item) for item in value) + "]"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _field(rule: Rule) -> Any:
    return field(default=MISSING, metadata={RULE: rule})


def _or_null(allowed: str, accepts: Callable[[Any], bool], null: str | None) -> Rule:
    """``null``: what null means where it is allowed (``None``: null is refused)."""
    if null is None:
        return Rule(allowed, accepts)
    return Rule(f"{allowed} or null ({null})", lambda value: value is None or accepts(value))


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def whole(minimum: int = 0, maximum: int | None = None, *, null: str | None = None) -> Any:
    """A whole number from ``minimum`` (to ``maximum``)."""
    top = None if maximum is None else (maximum if maximum < 2**32 else "2**63 - 1")
    allowed = f"a whole number of at least {minimum}" if top is None else f"a whole number from {minimum} to {top}"
    return _field(_or_null(
        allowed,
        lambda value: is_whole(value) and value >= minimum and (maximum is None or value <= maximum),
        null,
    ))


def number(minimum: float | None = None, *, above: float | None = None, below: float | None = None,
           maximum: float | None = None, null: str | None = None) -> Any:
    """A finite number within the bounds given (``above``/``below``: strict ones)."""
    bounds = [f"of at least {minimum:g}" if minimum is not None else "",
              f"above {above:g}" if above is not None else "",
              f"below {below:g}" if below is not None else "",
              f"at most {maximum:g}" if maximum is not None else ""]

    def accepts(value: Any) -> bool:
        return (is_number(value) and math.isfinite(value)
                and (minimum is None or value >= minimum) and (above is None or value > above)
                and (below is None or value < below) and (maximum is None or value <= maximum))

    words = " and ".join(filter(None, bounds))
    return _field(_or_null(f"a finite number {words}".strip(), accepts, null))


def flag() -> Any:
    """A switch: true or false (OmegaConf reads yes/no, on/off, y/n and 1/0 as such)."""
    return _field(Rule("true or false (yes/no and on/off read as such)", lambda value: isinstance(value, bool)))


def choice(*options: str, null: str | None = None) -> Any:
    """One of the words ``options``."""
    return _field(_or_null(f"one of {', '.join(options)}", lambda value: value in options, null))


def target() -> Any:
    """A ``_target_``: the dotted path of the class or function an option builds."""
    return text("the dotted path of a class or function")


def text(what: str = "a text", *, null: str | None = None) -> Any:
    """Any text (a path, a name); ``what`` says which."""
    return _field(_or_null(what, lambda value: isinstance(value, str) and value != "", null))


def matching(pattern: str, allowed: str) -> Any:
    """Text matching the regular expression ``pattern`` whole; ``allowed`` says it in words."""
    regex = re.compile(pattern)
    return _field(Rule(allowed, lambda value: isinstance(value, str) and regex.fullmatch(value) is not None))


def whole_list(minimum: int = 1, *, increasing: bool = False, empty: bool = False, what: str = "") -> Any:
    """A list of whole numbers from ``minimum`` (strictly increasing if ``increasing``; may be
    empty if ``empty``); ``what`` adds what they are (``epochs``)."""
    order = " increasing" if increasing else ""
    note = f" ({what})" if what else ""
    example = "[60, 120]" if increasing else "[1, 5]"

    def accepts(value: Any) -> bool:
        if not isinstance(value, Sequence) or isinstance(value, str) or (not value and not empty):
            return False
        items = list(value)
        ordered = all(a < b for a, b in zip(items, items[1:])) if increasing else True
        return all(is_whole(item) and item >= minimum for item in items) and ordered

    return _field(Rule(f"a list of{order} whole numbers of at least {minimum}{note}, e.g. {example}", accepts))


def number_list(minimum: float = 0.0, what: str = "") -> Any:
    """A non-empty list of finite numbers of at least ``minimum``."""
    note = f" ({what})" if what else ""

    def accepts(value: Any) -> bool:
        return (isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0
                and all(is_number(item) and math.isfinite(item) and item >= minimum for item in value))

    return _field(Rule(f"a list of finite numbers of at least {minimum:g}{note}", accepts))


@dataclass(frozen=True)
class CheckedRule(Rule):
    """A rule whose refusal a library words (``problem(key, value)``: the sentence, or ``None``
    for a value it accepts), e.g. an unknown model name with the closest of the library's."""

    problem: Callable[[str, Any], str | None] = lambda key, value: None

    def sentence(self, key: str, value: Any) -> str:
        return self.problem(key, value) or super().sentence(key, value)


def checked(allowed: str, problem: Callable[[str, Any], str | None]) -> Any:
    """A value that ``problem(key, value)`` checks and refuses in its own sentence (``allowed``
    says in words what it takes, for a value of the wrong type)."""
    return _field(CheckedRule(allowed, lambda value: problem("", value) is None, problem))


def anything(allowed: str, accepts: Callable[[Any], bool]) -> Any:
    """A value checked by ``accepts`` alone (a field OmegaConf types as ``Any``)."""
    return _field(Rule(allowed, accepts))


def rule_of(data_field) -> Rule | None:
    """The rule of a dataclass field (``None`` for a field declared without one)."""
    return data_field.metadata.get(RULE)
