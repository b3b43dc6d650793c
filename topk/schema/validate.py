"""Every check of a configuration before anything of it is built or written: two checks, each
made once, at the first point its configuration exists.

- :func:`command_line_problem`: ``python train.py``'s command line, before Hydra starts
  (:func:`topk.cli.exit_on_composition_problem`). It is composed with Hydra's compose API (a
  group set to null, a mistyped key, a value of the wrong type, an unknown option: one sentence
  instead of Hydra's report), and every callable the composed config names, Hydra's own node
  included (its callbacks, launcher and sweeper, which Hydra builds before any job), must be one
  a config file of the search path names (:mod:`topk.schema.targets`, docs/trust.md).
- :func:`job_problem`: a job's composed config: every key a field of its schema and every value
  within its rule (:func:`topk.schema.check.config_problem`), then every callable of its
  resolved values offered by the search path. Where it is made, for each entry:

  ========================================  ==================================================
  a single run                              Hydra's ``on_run_start``, before the run directory
                                            exists (:class:`topk.hydra_callbacks.CheckOutputDir`)
  each job of a basic sweep (``-m``)        ``on_multirun_start``: every job composed as its
                                            launcher will compose it and checked before the
                                            first starts
  an Optuna trial, another sweeper's job,   :func:`check_job` as ``train.train`` starts (their
  a config composed with the compose API    values are drawn as the sweep goes)
  a saved run's config (``+eval``)          :func:`topk.schema.saved.saved_config`
  ========================================  ==================================================

  ``train.train`` calls :func:`check_job` for every job; it checks only those no callback checked
  before launch (:func:`checked_before_launch`).

The run directory is checked once too, by :func:`topk.run_dir.check_run_dir` (before Hydra
writes, and again under the run's lock by :func:`topk.run_session.run_session`, which is what
makes the check true when two commands start at once). Checks that need the data (``k`` against
the class count, class weights against the classes) are made where the data is read.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from topk.errors import ConfigError
from topk.schema.check import composition_problem, config_problem, null_option_problem
from topk.schema.store import offered, sources_of
from topk.schema.targets import Offered, command_line_target_sentence, first_outside

CHECKER = "topk.hydra_callbacks.CheckOutputDir"  # the callback that checks jobs before launch


def command_line_problem(argv: list[str], config_dir: Path, config_name: str) -> str | None:
    """One sentence if the config of ``python train.py <argv>`` cannot be composed or names a
    callable no config file offers, else ``None``. A sweep (``-m``) is composed without its swept
    overrides, as Hydra composes it first (each of its jobs is held to :func:`job_problem` before
    any starts). Help, shell completion, a re-run, ``--config-dir`` and a relative
    ``--config-path`` are left to Hydra (an absolute ``--config-path`` replaces ``config_dir``)."""
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
    if (problem := null_option_problem(argv, config_dir)) is not None:
        return problem
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
    ``_target_`` is caught on the job's resolved values (:func:`job_problem`)."""
    offered_here = offered(sources_of(cfg.hydra))
    outside = first_outside(OmegaConf.to_container(cfg, resolve=False), offered_here)
    outside = outside or next(((key, value) for key, values in swept.items() for value in values
                               if value not in offered_here.targets), None)
    return None if outside is None else command_line_target_sentence(*outside)


def job_problem(cfg: DictConfig, offered_here: Offered) -> str | None:
    """One sentence for the first problem of a job's composed config ``cfg`` (Hydra's node, if
    present, aside), else ``None``: a key its schema lacks or a value outside its rule
    (:func:`topk.schema.check.config_problem`), an interpolation that does not resolve, or a
    callable of its resolved values that ``offered_here`` (the search path's configs) lacks."""
    problem = config_problem(cfg)
    if problem is not None:
        return problem
    try:
        resolved = _without_hydra(cfg)
    except OmegaConfBaseException as error:
        return composition_problem(error)
    outside = first_outside(resolved, offered_here)
    return None if outside is None else command_line_target_sentence(*outside)


def _without_hydra(cfg: DictConfig) -> dict:
    """``cfg``'s values resolved, Hydra's own node left out (its callables are checked on the
    command line, before Hydra builds them)."""
    return {str(key): OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key])
            else cfg[key] for key in cfg if key != "hydra"}


def checked_before_launch(hydra_cfg: DictConfig) -> bool:
    """Whether Hydra's callbacks held this job to :func:`job_problem` before launching it: a
    single run or a basic sweep's job, with :class:`topk.hydra_callbacks.CheckOutputDir` among
    ``hydra.callbacks``."""
    from hydra.types import RunMode

    from topk.hydra_private import basic_sweeper_target

    callbacks = [str(node.get("_target_")) for node in (hydra_cfg.get("callbacks") or {}).values()]
    if CHECKER not in callbacks:
        return False
    if hydra_cfg.get("mode") == RunMode.RUN:
        return True
    return hydra_cfg.get("mode") == RunMode.MULTIRUN and hydra_cfg.sweeper.get("_target_") == basic_sweeper_target()


def check_job(cfg: DictConfig, hydra_cfg: DictConfig) -> None:
    """Hold a job's config to :func:`job_problem` as its run starts, unless a callback did so
    before launching it (:func:`checked_before_launch`); :class:`~topk.errors.ConfigError` with
    one sentence for the first problem."""
    if checked_before_launch(hydra_cfg):
        return
    problem = job_problem(cfg, offered(sources_of(hydra_cfg)))
    if problem is not None:
        raise ConfigError(problem)
