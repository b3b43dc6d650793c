"""The schemas in Hydra's ConfigStore, and the config search path.

:func:`register` stores each dataclass of :data:`topk.schema.groups.SCHEMAS` as
``schema/<group>/<name>``, the name ``conf/<group>/<option>.yaml`` lists first in its defaults,
and the resolvers ``conf/`` uses (``if_null``, ``if_tuning``, ``at_ks``). Anything that composes ``conf/`` calls it
first (``train.py`` on import, :mod:`topk.report.fidelity`, the tests).

:func:`offered` lists what the config search path offers (``conf/``, the folders of
``hydra.searchpath``, Hydra's own configs and its plugins'), the allow-list
:mod:`topk.schema.validate` holds configs to; :func:`search_path` is the one Hydra composes with.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from topk.errors import ConfigError
from topk.schema.check import composition_problem
from topk.schema.groups import SCHEMAS
from topk.schema.targets import (
    Offered,
    file_offers,
    offers_of,
)


def if_null(value, default):
    """``${if_null:${experiment},multirun}``: ``default`` where ``value`` is null (``oc.select``
    falls back only for a missing key, and ``experiment`` is a null one)."""
    return default if value is None else value


def if_tuning(study_folder, sweep_folder, *, _root_):
    """``${if_tuning:<study folder>,<sweep folder>}`` (``conf/scale/smoke.yaml``'s sweep folder):
    the study's folder where the config is a tuning study (``+tune=<loss>``, ``conf/tune/``), else
    the sweep's; so a study's trials keep their own folder whichever of ``+tune`` and ``+scale``
    comes last, never among an experiment's sweeps."""
    return study_folder if OmegaConf.select(_root_, "hydra.runtime.choices.tune") else sweep_folder


def at_ks(metric: str, ks) -> list[str]:
    """``${at_ks:${trainer.selection_metric},${g22_ks}}`` (``conf/g22_method/ce.yaml``): the
    metric at each other k of ``ks``, ``val/macro_top1`` at ``[1, 3, 5]`` being
    ``[val/macro_top3, val/macro_top5]``; one sentence where the metric names no k (``last``,
    ``val/loss``)."""
    from topk.metrics import metric_at_k

    if not re.search(r"\d$", str(metric)):
        raise ConfigError(f"a model kept at each k needs a selection metric at a k (val/top1, "
                          f"val/macro_top1), and trainer.selection_metric is {metric}")
    return [other for other in (metric_at_k(str(metric), int(k)) for k in ks) if other != metric]


def register() -> None:
    """Store every schema (again: the store keeps the last) and the ``if_null``, ``if_tuning``
    and ``at_ks`` resolvers."""
    store = ConfigStore.instance()
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=node, provider="topk")
    OmegaConf.register_new_resolver("if_null", if_null, replace=True)
    OmegaConf.register_new_resolver("if_tuning", if_tuning, replace=True)
    OmegaConf.register_new_resolver("at_ks", at_ks, replace=True)


def sources_of(hydra_cfg: DictConfig) -> tuple[str, ...]:
    """The search path a composed config came from (``hydra.runtime.config_sources``), as
    ``scheme://path`` entries."""
    return tuple(f"{source.schema}://{source.path}" for source in hydra_cfg.runtime.config_sources)


def search_path(config_dir: Path, added: Sequence[str] = ()) -> tuple[str, ...]:
    """The search path Hydra composes ``config_dir`` with, the folders of ``hydra.searchpath``
    (``added``, each ``file://DIR`` or ``pkg://module``) before its ConfigStore, as Hydra
    places them."""
    from topk.hydra_private import default_search_path

    path = default_search_path(str(config_dir))
    return (*path[:-1], *added, path[-1])


def split_searchpath(overrides: list[str]) -> tuple[list[str], list[str]]:
    """The folders of a ``hydra.searchpath=[file://DIR,...]`` among ``overrides`` (the config
    folders a command outside Hydra, ``+eval``, adds to the search path), and the other
    overrides; one sentence if its value is not a list of ``scheme://path`` entries."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    added, others = [], []
    for text in overrides:
        if text.partition("=")[0].lstrip("+") != "hydra.searchpath":
            others.append(text)
            continue
        try:
            value = OverridesParser.create().parse_override(text).value()
        except (HydraException, OmegaConfBaseException) as error:
            raise ConfigError(composition_problem(error)) from None
        if not (isinstance(value, list) and all(isinstance(v, str) and "://" in v for v in value)):
            raise ConfigError(f"{text} is not a list of config folders; write "
                              "hydra.searchpath=[file:///absolute/folder].")
        added = value
    return added, others


@functools.lru_cache(maxsize=16)
def offered(entries: tuple[str, ...]) -> Offered:
    """What the configs of the search path ``entries`` offer (:class:`topk.schema.targets.Offered`),
    read once per process: folders as plain YAML files, packages and the ConfigStore (Hydra's
    launchers and sweepers) through Hydra's config sources. An entry that does not exist offers
    nothing."""
    from topk.hydra_private import config_sources

    found = Offered()
    for source in config_sources(entries):
        found = found | (file_offers(Path(source.path)) if source.scheme() == "file" else _source_offers(source))
    return found


def _source_offers(source, group: str = "") -> Offered:
    """What every config of a Hydra config source (a package, the ConfigStore) offers."""
    from hydra.core.object_type import ObjectType

    found = Offered()
    for name in source.list(group, ObjectType.CONFIG):
        try:
            config = source.load_config(f"{group}/{name}" if group else name).config
            found = found | offers_of(OmegaConf.to_container(config, resolve=False))
        except Exception:  # noqa: BLE001 - a third party's broken config offers nothing
            continue
    for name in source.list(group, ObjectType.GROUP):
        found = found | _source_offers(source, f"{group}/{name}" if group else name)
    return found
