"""The schemas in Hydra's ConfigStore, and the command line checked before Hydra runs.

:func:`register` stores each dataclass of :data:`topk.schema.groups.SCHEMAS` as
``schema/<group>/<name>``, the name ``conf/<group>/<option>.yaml`` lists first in its defaults,
and the ``if_null`` resolver ``conf/train.yaml`` uses. Anything that composes ``conf/`` calls it
first (``train.py`` on import, :mod:`topk.report.protocol`, the tests).

:func:`command_line_problem` composes the command line's config with Hydra's compose API before
``@hydra.main`` does, so that a composition error (a mistyped key, a value of the wrong type, an
unknown option) is said in one sentence instead of Hydra's report, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from topk.schema.check import composition_problem
from topk.schema.groups import SCHEMAS


def if_null(value, default):
    """``${if_null:${experiment},multirun}``: ``default`` where ``value`` is null (``oc.select``
    falls back only for a missing key, and ``experiment`` is a null one)."""
    return default if value is None else value


def register() -> None:
    """Store every schema (again: the store keeps the last) and the ``if_null`` resolver."""
    store = ConfigStore.instance()
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=node, provider="topk")
    OmegaConf.register_new_resolver("if_null", if_null, replace=True)


def command_line_problem(argv: list[str], config_dir: Path, config_name: str) -> str | None:
    """One sentence if the config of ``python train.py <argv>`` cannot be composed, else
    ``None``. A sweep (``-m``) is composed without its swept overrides, as Hydra composes it
    first; each of its jobs is composed by :class:`topk.hydra_callbacks.CheckOutputDir`. Help,
    shell completion, a re-run, ``--config-dir`` and a relative ``--config-path`` are left to
    Hydra (an absolute ``--config-path`` replaces ``config_dir``)."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    args = get_args_parser().parse_args(argv)
    if args.config_path and Path(args.config_path).is_absolute():
        config_dir = Path(args.config_path)
    elif args.config_path:
        return None
    if args.help or args.hydra_help or args.shell_completion or args.experimental_rerun or args.config_dir:
        return None
    try:
        overrides = OverridesParser.create().parse_overrides(args.overrides)
        kept = [o.input_line for o in overrides if not (args.multirun and o.is_sweep_override())]
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            compose(args.config_name or config_name, overrides=kept)
    except (HydraException, OmegaConfBaseException) as error:
        return composition_problem(error)
    return None
