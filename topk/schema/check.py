"""Holding a composed config to its schema, and saying in one sentence what is wrong.

:func:`config_problem` walks a composed config: every key must be a field of its node's schema
(``+trainer.epoch=3`` adds one Hydra cannot refuse) and every value must keep its field's rule
(:mod:`topk.schema.rules`). :func:`composition_problem` turns what Hydra and OmegaConf raise
while composing (a value of the wrong type, a key or an option that does not exist) into the
same kind of sentence. Nodes without a schema (an option a user added without one) are not
checked. Checks that need the data (class counts against ``k``, the class weights' count) are
made where the data is read.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from topk.errors import ConfigError
from topk.schema.groups import OPTIONAL_TOP_LEVEL, TrainSchema
from topk.schema.rules import rule_of

GROUPS = ("trainer", "dataset", "model", "loss", "augment", "optim", "schedule", "logger")


def check_config(cfg: DictConfig) -> None:
    """Raise :class:`topk.errors.ConfigError` with one sentence for the first key of ``cfg``
    that its schema does not have or whose value breaks its rule."""
    problem = config_problem(cfg)
    if problem is not None:
        raise ConfigError(problem)


def config_problem(cfg: DictConfig) -> str | None:
    """One sentence for the first problem of the composed ``cfg`` (Hydra's own node aside), or
    ``None``. The top level is held to :class:`TrainSchema`, each group to its node's schema."""
    fields = {f.name: f for f in dataclasses.fields(TrainSchema)}
    for key in cfg:
        if key == "hydra":
            continue
        if key not in fields:
            return unknown_key(str(key), "", list(fields))
        if key in GROUPS:
            problem = _node_problem(cfg[key], key)
        else:
            problem = _value_problem(cfg, key, key, fields[key])
        if problem is not None:
            return problem
    return combination_problem(cfg)


def combination_problem(cfg: DictConfig) -> str | None:
    """One sentence for values that are valid alone but not together (early stopping without a
    selection metric to follow), or ``None``."""
    trainer = cfg.get("trainer")
    if not isinstance(trainer, DictConfig):
        return None
    patience = trainer.get("early_stopping_patience")
    if patience is not None and trainer.get("selection_metric") == "last":
        # the engine's sentence; its module imports torch, so only on a refusal
        from topk.fit_checks import EARLY_STOPPING_NEEDS_A_METRIC

        return EARLY_STOPPING_NEEDS_A_METRIC.format(patience)
    return None


def _node_problem(node: Any, path: str) -> str | None:
    schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
    if schema is None or not dataclasses.is_dataclass(schema):
        return None  # null (no Mixup) or an option without a schema
    fields = {f.name: f for f in dataclasses.fields(schema)}
    for key in node:
        full_key = f"{path}.{key}"
        if key not in fields:
            return unknown_key(str(key), path, list(fields), node.get("_target_"))
        if OmegaConf.is_missing(node, key):
            return f"{full_key} has no value; give it one with {full_key}=..."
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not OmegaConf.is_interpolation(node, key):
            problem = _node_problem(child, full_key)
        else:
            problem = _value_problem(node, key, full_key, fields[key])
        if problem is not None:
            return problem
    return None


def _value_problem(node: DictConfig, key: str, full_key: str, field: dataclasses.Field) -> str | None:
    rule = rule_of(field)
    if rule is None:
        return None
    try:
        value = node[key]
    except InterpolationResolutionError as error:
        return (f"{full_key}={node._get_node(key)._value()} cannot be resolved "
                f"({_first_line(error)}); set {full_key} directly.")
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=True)
    return None if rule.accepts(value) else rule.sentence(full_key, value)


def unknown_key(key: str, path: str, valid: list[str], target: str | None = None) -> str:
    """``<path>.<key>`` is not a setting (of ``target``, the node's class): the closest valid
    name, and all of them."""
    where = f"{path}." if path else ""
    settings = [name for name in valid if not name.startswith("_")]
    if not path:
        settings = [name for name in settings if name not in OPTIONAL_TOP_LEVEL]
    close = difflib.get_close_matches(key, settings, n=1)
    hint = f"did you mean {where}{close[0]}? " if close else ""
    of = f" of {path} ({target})" if target else ""
    group = f"{path}'s settings" if path else "the top-level settings"
    return f"{where}{key} is not a setting{of}; {hint}{group} are {', '.join(settings)}."


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


# ---- errors raised while Hydra composes ---------------------------------------------------------

def composition_problem(error: BaseException) -> str:
    """One sentence for an exception Hydra raised while composing the config: an unknown group
    option (the valid ones and the closest), a key that does not exist (the closest), a value its
    field's type refuses (the field's rule), an override that does not parse."""
    from hydra.errors import MissingConfigException, OverrideParseException

    if isinstance(error, MissingConfigException):
        return _missing_option(error)
    if isinstance(error, OverrideParseException):
        return f"the override {error.override!r} cannot be read ({_first_line(error)}); see Hydra's override grammar."
    appended = re.search(r"An item is already at '(.+?)'", str(error))
    if appended:
        return f"{appended.group(1)} is already set; set it without the leading +."
    cause = error.__cause__ if isinstance(error.__cause__, OmegaConfBaseException) else error
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        return _field_problem(cause, str(error))
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text.rstrip(".") + "."


def null_option_problem(argv: list[str], config_dir: Path) -> str | None:
    """One sentence if the command line ``argv`` of ``python train.py`` sets a config group to
    null (``loss=null``, ``dataset=null``, or among a sweep's values, ``-m loss=ce,null``), else
    ``None``. Hydra stops on it with a traceback (a group's override must name one of its
    options); nothing is written. ``logger=null`` is refused alike: leaving it out keeps its
    default, no logger. ``config_dir`` is ``conf/`` (or an absolute ``--config-path``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from topk.hydra_private import command_line

    args = command_line(argv)
    if args.config_path and Path(args.config_path).is_absolute():
        config_dir = Path(args.config_path)
    try:
        overrides = OverridesParser.create().parse_overrides(args.overrides)
    except HydraException:
        return None  # an override that does not parse: topk.schema.validate.command_line_problem says so
    for override in overrides:
        group = override.key_or_group
        is_group = "/" in group or (config_dir / group).is_dir()
        if is_group and not override.is_delete() and None in _override_values(override):
            return _null_option_sentence(group, config_dir)
    return None


def _override_values(override) -> list:
    """The values an override sets: one, or each of a sweep's (``ce,null`` -> ``["ce", None]``)."""
    if not override.is_sweep_override():
        return [override.value()]
    try:
        return list(override.sweep_iterator())
    except Exception:  # noqa: BLE001 - a sweep Hydra expands otherwise (glob): its values are names
        return []


def _null_option_sentence(group: str, config_dir: Path) -> str:
    """``loss=null``: the group needs one of its options; the options of ``conf/`` are listed
    (Hydra's own groups, ``hydra/launcher``, have more than ``conf/`` holds)."""
    options = sorted(path.stem for path in (config_dir / group).glob("*.yaml"))
    listed = f"choose one of {', '.join(options)}" if options and "/" not in group else "name one of its options"
    return (f"{group}=null chooses no option, and the config group {group} needs one; {listed}, "
            f"or leave {group} out for its default.")


def _missing_option(error) -> str:
    """``loss=hnge``: the option does not exist; list the group's options (Hydra's schemas hidden)."""
    path = str(error.missing_cfg_file or "")
    group, _, name = path.rpartition("/")
    options = [option for option in (error.options or []) if not option.startswith("schema")]
    if not group or not options:
        return _first_line(error).rstrip(".") + "."
    close = difflib.get_close_matches(name, options, n=1)
    hint = f"did you mean {group}={close[0]}? " if close else ""
    return f"{group}={name} is not an option of {group}; {hint}choose one of {', '.join(options)}."


def _field_problem(cause: OmegaConfBaseException, message: str) -> str:
    full_key, item = re.subn(r"\[\d+\]$", "", str(cause.full_key))
    path, _, key = full_key.rpartition(".")
    schema = _schema_of(cause) if path else TrainSchema
    fields = {f.name: f for f in dataclasses.fields(schema)} if schema else {}
    if key not in fields:  # a key the node does not have
        target = _target_of(cause)
        return unknown_key(key, path, list(fields), target) if fields else f"{full_key} is not a setting."
    rule = rule_of(fields[key])
    value = _refused_value(str(cause))
    if rule is None:
        return f"{full_key} cannot take {value} ({_first_line(cause)})."
    return f"{full_key} must be {rule.allowed}, got {value}{' in the list' if item else ''}."


def _target_of(cause: OmegaConfBaseException) -> str | None:
    node = getattr(cause, "parent_node", None)
    return node.get("_target_") if isinstance(node, DictConfig) and "_target_" in node else None


def _schema_of(cause: OmegaConfBaseException):
    """The dataclass of the node holding the refused key (the list's parent for an element)."""
    node = getattr(cause, "parent_node", None)
    while node is not None:
        schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
        if schema is not None and dataclasses.is_dataclass(schema):
            return schema
        node = node._get_parent()
    schema = getattr(cause, "object_type", None)
    return schema if schema is not None and dataclasses.is_dataclass(schema) else None


def _refused_value(message: str) -> str:
    """The refused value, as OmegaConf's message has it (``Value '2.5' of type 'float'``;
    ``field 'trainer.epochs' is not Optional``: null)."""
    if re.search(r"field '.*' is not Optional|NoneType is not a subclass", message):
        return "null"
    match = (re.search(r"Value '(.*?)' of type '(\w+)'", message, re.DOTALL)
             or re.search(r"Value '(.*?)' is not a valid bool \(type (\w+)\)", message, re.DOTALL))
    if not match:
        return "that value"
    value, kind = match.groups()
    return value.lower() if kind == "bool" else repr(value) if kind == "str" else value
