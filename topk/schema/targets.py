"""Which callables a config may name: those the config files of the search path name.

A run's configuration is data, never code (docs/trust.md). Hydra calls whatever a ``_target_``
names, so a config that comes from anywhere but the user's own config folders (a run
directory's ``.hydra/config.yaml``, a value typed on the command line) may only name a callable
that some config file of the search path names: ``conf/``, a folder the user adds with
``hydra.searchpath=[file://DIR]`` (a user's own option files keep working), and Hydra's own and
its plugins' configs (launchers, sweepers). Hydra's logging configs name callables too, in the
``class`` and ``()`` keys of ``hydra.job_logging`` and ``hydra.hydra_logging``, and the Optuna
sweeper in ``hydra.sweeper.custom_search_space``: they are held to the same list. :class:`Offered` is that list (and, for each callable an option file names, the
schema the file composes onto); :func:`first_outside` finds the first callable of a config
outside it, at any depth, in mappings and lists alike.

This module reads config files as plain YAML (a safe loader: no tags, no objects);
:func:`topk.schema.store.offered` walks the search path with Hydra.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from topk.schema.groups import SCHEMAS

TARGET = "_target_"
LOGGING_NODES = ("hydra.job_logging", "hydra.hydra_logging")  # handed to logging.config.dictConfig
LOGGING_CALLABLES = ("class", "()")  # the keys dictConfig calls in them
SWEEPER_CALLABLE = "custom_search_space"  # a function Hydra's Optuna sweeper imports and calls
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's C loader when built with it


@dataclass(frozen=True)
class Offered:
    """``targets``: every callable a config file of the search path names; ``schemas``: the
    schema dataclass of each callable an option file names together with its schema
    (``/schema/loss/topk_hinge@_here_`` and ``_target_: topk.losses.hinge.TopKHingeLoss``),
    the first file of the search path deciding."""

    targets: frozenset[str] = frozenset()
    schemas: Mapping[str, type] = field(default_factory=dict)

    def __or__(self, other: Offered) -> Offered:
        return Offered(self.targets | other.targets, {**other.schemas, **self.schemas})


def entries(node: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """``(path of the mapping, key, value)`` of every entry of the plain container ``node``
    (mappings and lists, at any depth); a list item's path ends in ``[i]``."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield path, str(key), value
            yield from entries(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from entries(value, f"{path}[{index}]")


def named_callables(config: Any) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` of every callable the plain container ``config`` names: each ``_target_``
    at any depth, and ``class`` and ``()`` inside Hydra's logging configs."""
    for path, key, value in entries(config):
        in_logging = any(path == node or path.startswith(f"{node}.") for node in LOGGING_NODES)
        in_sweeper = path == "hydra.sweeper" and key == SWEEPER_CALLABLE and value is not None
        if key == TARGET or (in_logging and key in LOGGING_CALLABLES) or in_sweeper:
            yield f"{path}.{key}" if path else key, value


def first_outside(config: Any, offered: Offered) -> tuple[str, Any] | None:
    """The first ``(key, value)`` of ``config`` naming a callable that ``offered`` lacks (a
    value that is no text at all included), or ``None`` when every one is offered."""
    for key, value in named_callables(config):
        if not isinstance(value, str) or value not in offered.targets:
            return key, value
    return None


def offers_of(config: Any) -> Offered:
    """What one config file offers: every literal callable it names (an interpolation or a
    missing value names none), and the schema of the callable an option file composes onto."""
    targets = {value for _, key, value in entries(config)
               if key in (TARGET, *LOGGING_CALLABLES, SWEEPER_CALLABLE) and _literal(value)}
    return Offered(frozenset(targets), dict(_schema_pairs(config)))


def _literal(value: Any) -> bool:
    return isinstance(value, str) and "${" not in value and value != "???"


def _schema_pairs(config: Any) -> Iterator[tuple[str, type]]:
    """``(target, schema)`` for an option file whose defaults list names a schema
    (``/schema/<group>/<name>@<package>``): the ``_target_`` at that package of the file
    (``_here_``: its top; a data set file's ``@dataset``: its ``dataset`` node)."""
    defaults = config.get("defaults") if isinstance(config, Mapping) else None
    for entry in defaults if isinstance(defaults, list) else []:
        if not (isinstance(entry, str) and entry.startswith("/schema/")):
            continue
        name, _, package = entry.removeprefix("/schema/").partition("@")
        group, _, option = name.partition("/")
        schema = SCHEMAS.get(group, {}).get(option)
        node = config if package in ("", "_here_") else _select(config, package)
        target = node.get(TARGET) if isinstance(node, Mapping) else None
        if schema is not None and _literal(target):
            yield target, schema


def _select(config: Mapping, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def file_offers(directory: Path) -> Offered:
    """What the YAML files below a config folder offer (:func:`offers_of`); a file that cannot
    be read or parsed offers nothing (Hydra says what is wrong with it if it is ever used)."""
    offered = Offered()
    for path in sorted(Path(directory).rglob("*.yaml")):
        try:
            config = yaml.load(path.read_text(encoding="utf-8"), Loader=YAML_LOADER)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        offered = offered | offers_of(config)
    return offered


# ---- the sentences --------------------------------------------------------------------------------

def saved_target_sentence(path: Path, key: str, value: Any) -> str:
    """A run's saved ``path`` names a callable that no config file of the search path names."""
    return (f"{path} names {_shown(value)} in {key}, a callable no config file of conf/ or of a "
            "folder added with hydra.searchpath names, so nothing of it was run (a run's "
            "configuration is data, never code: docs/trust.md); if the run used option files of "
            "your own, give their folder with hydra.searchpath=[file://DIR].")


def command_line_target_sentence(key: str, value: Any) -> str:
    """The command line names a callable that no config file of the search path names: how to
    offer it in an option file of one's own."""
    group = key.split(".")[0]
    if key == f"{group}.{TARGET}" and group != "hydra":
        how = (f"write an option file DIR/{group}/mine.yaml holding _target_: {_shown(value)} and "
               f"its settings, and choose it with hydra.searchpath=[file://DIR] {group}=mine")
    else:
        how = ("name it in a config file of a folder you add with hydra.searchpath=[file://DIR] "
               "(docs/trust.md)")
    return (f"{key}={_shown(value)} names a callable that no config file of conf/ or of a folder "
            f"added with hydra.searchpath names; to use it, {how}.")


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)
