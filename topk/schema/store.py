"""The schemas in Hydra's ConfigStore, and the command line checked before Hydra runs.

:func:`register` stores each dataclass of :data:`topk.schema.groups.SCHEMAS` as
``schema/<group>/<name>``, the name ``conf/<group>/<option>.yaml`` lists first in its defaults,
and the resolvers ``conf/`` uses (``if_null``, ``if_tuning``, ``at_ks``). Anything that composes ``conf/`` calls it
first (``train.py`` on import, :mod:`topk.report.protocol`, the tests).

:func:`command_line_problem` composes the command line's config with Hydra's compose API before
``@hydra.main`` does, so that a composition error (a mistyped key, a value of the wrong type, an
unknown option) is said in one sentence instead of Hydra's report, and nothing is written; so is
a ``_target_`` that no config file of the search path names (:mod:`topk.schema.targets`).

:func:`offered` lists what the config search path offers (``conf/``, the folders of
``hydra.searchpath``, Hydra's own configs and its plugins'), :func:`search_path` is the one Hydra
composes with, and :func:`job_target_problem` holds a job's composed config to it.
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
from topk.schema.check import check_config, composition_problem
from topk.schema.groups import SCHEMAS
from topk.schema.targets import (
    Offered,
    command_line_target_sentence,
    file_offers,
    first_outside,
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


def command_line_problem(argv: list[str], config_dir: Path, config_name: str) -> str | None:
    """One sentence if the config of ``python train.py <argv>`` cannot be composed, else
    ``None``. A sweep (``-m``) is composed without its swept overrides, as Hydra composes it
    first; each of its jobs is composed by :class:`topk.hydra_callbacks.CheckOutputDir`. Help,
    shell completion, a re-run, ``--config-dir`` and a relative ``--config-path`` are left to
    Hydra (an absolute ``--config-path`` replaces ``config_dir``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from topk.hydra_private import command_line

    args = command_line(argv)
    if args.config_path and Path(args.config_path).is_absolute():
        config_dir = Path(args.config_path)
    elif args.config_path:
        return None
    if args.help or args.hydra_help or args.shell_completion or args.experimental_rerun or args.config_dir:
        return None
    try:
        overrides = OverridesParser.create().parse_overrides(args.overrides)
        swept = [o for o in overrides if args.multirun and o.is_sweep_override()]
        kept = [o.input_line for o in overrides if o not in swept]
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = compose(args.config_name or config_name, overrides=kept, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as error:
        return composition_problem(error)
    swept_targets = {o.key_or_group: list(o.sweep_string_iterator()) for o in swept
                     if o.key_or_group.split(".")[-1] == "_target_"}
    return command_line_target_problem(cfg, swept_targets)


def command_line_target_problem(cfg: DictConfig, swept: dict[str, list[str]]) -> str | None:
    """One sentence if the composed ``cfg`` (Hydra's node included: its callbacks, launcher,
    sweeper and logging) or a swept ``_target_`` names a callable that no config file of its
    search path names, else ``None``. Read unresolved: an interpolation that makes a
    ``_target_`` is caught when the job's config is resolved (:func:`job_target_problem`)."""
    offered_here = offered(sources_of(cfg.hydra))
    outside = first_outside(OmegaConf.to_container(cfg, resolve=False), offered_here)
    outside = outside or next(((key, value) for key, values in swept.items() for value in values
                               if value not in offered_here.targets), None)
    return None if outside is None else command_line_target_sentence(*outside)


def check_job(cfg: DictConfig, hydra_cfg: DictConfig) -> None:
    """The last check of a job's composed config before anything of it is built, whatever
    composed it (the command line, a sweep's job, an Optuna trial, ``--config-dir``): the schema
    (:func:`topk.schema.check.check_config`) and the callables it may name
    (:func:`job_target_problem`, docs/trust.md); :class:`~topk.errors.ConfigError` with one
    sentence for the first problem."""
    check_config(cfg)
    problem = job_target_problem(cfg, hydra_cfg)
    if problem is not None:
        raise ConfigError(problem)


def job_target_problem(cfg: DictConfig, hydra_cfg: DictConfig) -> str | None:
    """One sentence if the job's config ``cfg``, resolved, names a callable that no config file
    of its search path (``hydra_cfg.runtime.config_sources``) names, else ``None``: the last
    check before :mod:`train` builds anything, for configs composed any other way than
    :func:`command_line_problem` composes them (a sweep's jobs, ``--config-dir``)."""
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as error:
        return composition_problem(error)
    outside = first_outside(resolved, offered(sources_of(hydra_cfg)))
    return None if outside is None else command_line_target_sentence(*outside)


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
