"""A run's saved configuration read back as data: composed against the schema, its callables
held to those the config search path offers (docs/trust.md).

``python train.py +eval=<run>`` (``scripts/evaluate.py``) builds the data set, the model and the
loss from the run's ``.hydra/config.yaml``, a file that may come from someone else. Hydra would
call whatever its ``_target_``s name, so :func:`saved_config` reads it as data first:

1. YAML through a safe loader (no tags, no objects); a file that is not a mapping of settings,
   or lacks what an evaluation builds, is refused;
2. every callable it names, at any depth, must be one a config file of the search path names
   (:mod:`topk.schema.targets`), before anything else looks at it;
3. keys renamed or added since the run was written are brought up to date
   (:data:`topk.run_dir.RENAMED_KEYS`, :data:`topk.run_dir.ADDED_KEYS`);
4. ``trainer`` and ``augment`` compose onto their schemas, and every other group (and
   ``augment.mix``) onto the schema of the option file that names its ``_target_``, as Hydra
   composes them for a run: a key the schema lacks or a value of the wrong type is one sentence;
5. the ``key=value`` overrides are merged the same way and the interpolations resolved; the
   callables are checked again on the values (an ``${oc.decode:...}`` can make a mapping), which
   compose onto the schemas again: what is built is what was checked;
6. the schema's rules (:func:`topk.schema.check.config_problem`).

Each refusal is a :class:`topk.errors.ConfigError` of one sentence; nothing was built.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from topk.errors import ConfigError
from topk.records import flatten
from topk.run_dir import RENAMED_KEYS, added_defaults
from topk.schema.check import composition_problem, config_problem
from topk.schema.groups import AugmentSchema, TrainerSchema
from topk.schema.targets import (
    TARGET,
    Offered,
    command_line_target_sentence,
    first_outside,
    saved_target_sentence,
)

# What an evaluation builds from a run's configuration: without one of them it is no run's.
EVALUATED = ("seed", "k", "trainer", "dataset", "model", "loss", "augment")
SCHEMA_OF_GROUP = {"trainer": TrainerSchema, "augment": AugmentSchema}  # the others: by their _target_
TARGETED_GROUPS = ("dataset", "model", "loss", "optim", "schedule", "logger")


def saved_config(path: Path, overrides: list[str], offered: Offered) -> DictConfig:
    """The run configuration saved at ``path`` with ``overrides`` (``key=value``) applied,
    composed against the schema, resolved and checked; its callables are all ``offered``."""
    plain = read_saved(path)
    refuse_outside(plain, offered, path)
    upgrade(plain)
    saved = typed(plain, offered, path)
    values = resolved(with_overrides(saved, overrides, offered))
    refuse_outside(values, offered, path)
    cfg = typed(values, offered, path)
    problem = config_problem(cfg)
    if problem is not None:
        raise ConfigError(_in_file(path, problem) if problem == config_problem(saved) else problem)
    return cfg


def read_saved(path: Path) -> dict:
    """The settings of ``path`` as plain data; one sentence if it cannot be read as YAML (cut
    short, damaged, not text), is not a mapping, or lacks what an evaluation builds."""
    try:
        plain = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except OSError as error:
        raise ConfigError(f"{path} cannot be read ({error.strerror or type(error).__name__}); "
                          "make it readable, or evaluate a copy of the run directory.") from None
    except (UnicodeDecodeError, yaml.YAMLError, OmegaConfBaseException) as error:
        raise ConfigError(f"{path} is not a readable run configuration ({_first_line(error)}); "
                          "the file is damaged or cut short: copy the run directory again, or "
                          "evaluate another run.") from None
    missing = [key for key in EVALUATED if not isinstance(plain, dict) or key not in plain]
    if missing:
        raise ConfigError(f"{path} has no {', '.join(missing)}, so it is not a whole run "
                          "configuration (cut short, or not written by train.py); copy the run "
                          "directory again, or evaluate another run.")
    return plain


def refuse_outside(config: Any, offered: Offered, path: Path) -> None:
    """Refuse ``config`` in one sentence if it names a callable that ``offered`` lacks."""
    outside = first_outside(config, offered)
    if outside is not None:
        raise ConfigError(saved_target_sentence(path, *outside))


def upgrade(plain: dict) -> None:
    """Bring a configuration written by an earlier version up to date, in place: a key renamed
    since moves to its new name, a key added since gets the value it defaults to."""
    for old, new in RENAMED_KEYS.items():
        parent, key = _parent(plain, old)
        new_parent, new_key = _parent(plain, new)
        if parent is not None and key in parent and new_parent is not None and new_key not in new_parent:
            new_parent[new_key] = parent.pop(key)
    for added, default in added_defaults(flatten(plain)).items():
        parent, key = _parent(plain, added)
        if parent is not None and key not in parent:
            parent[key] = default


def _parent(plain: dict, dotted: str) -> tuple[dict | None, str]:
    """The mapping holding ``dotted`` (``None`` where a step is missing) and its last key."""
    *steps, key = dotted.split(".")
    node: Any = plain
    for step in steps:
        node = node.get(step) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), key


def typed(plain: dict, offered: Offered, path: Path) -> DictConfig:
    """``plain`` composed onto the schema of each of its groups: ``trainer`` and ``augment``
    onto theirs, the others onto the schema of the option file naming their ``_target_`` (a
    user's option file without a schema stays untyped, as when Hydra composes it)."""
    skeleton = {group: OmegaConf.structured(schema) for group, schema in SCHEMA_OF_GROUP.items()}
    augment = plain.get("augment")
    mix = augment.get("mix") if isinstance(augment, Mapping) else None
    mix_schema = offered.schemas.get(mix.get(TARGET)) if isinstance(mix, Mapping) else None
    if mix_schema is not None:  # augment.mix composes onto its option file's schema, as in a run
        skeleton["augment"].mix = OmegaConf.structured(mix_schema)
    for group in TARGETED_GROUPS:
        node = plain.get(group)
        schema = offered.schemas.get(node.get(TARGET)) if isinstance(node, Mapping) else None
        if schema is not None:
            skeleton[group] = OmegaConf.structured(schema)
    try:
        return OmegaConf.merge(OmegaConf.create(skeleton), plain)
    except OmegaConfBaseException as error:
        raise ConfigError(_in_file(path, composition_problem(error))) from None


def with_overrides(cfg: DictConfig, overrides: list[str], offered: Offered) -> DictConfig:
    """``cfg`` with the ``key=value`` ``overrides`` merged onto its schemas."""
    try:
        changes = OmegaConf.from_dotlist(overrides)
    except (OmegaConfBaseException, yaml.YAMLError, ValueError) as error:
        raise ConfigError(f"the overrides {' '.join(overrides)} cannot be read ({_first_line(error)}); "
                          "write each as key=value.") from None
    outside = first_outside(OmegaConf.to_container(changes, resolve=False), offered)
    if outside is not None:
        raise ConfigError(command_line_target_sentence(*outside))
    try:
        return OmegaConf.merge(cfg, changes)
    except OmegaConfBaseException as error:
        raise ConfigError(composition_problem(error)) from None


def resolved(cfg: DictConfig) -> dict:
    """The values of ``cfg``, every interpolation replaced by its value, as plain data (what is
    checked is what is built); each value's type checked as it is resolved."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except ValidationError as error:  # an interpolation whose value its field's type refuses
        raise ConfigError(composition_problem(error)) from None
    except OmegaConfBaseException as error:  # a key or resolver that does not exist, a broken ${...}
        key = getattr(error, "full_key", None) or "a value"
        raise ConfigError(f"{key} cannot be resolved ({_first_line(error)}); set it with {key}=VALUE.") from None


def _in_file(path: Path, problem: str) -> str:
    return f"{path} does not fit this version's schema: {problem}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
