"""How far a sweep kept to its experiment's protocol: the jobs ``+experiment=<id>`` runs.

(Three things carry the word "protocol" in this repository, all of them what a paper prescribes:
a data set's file holds its papers' training recipe, ``conf/protocol/`` the paper values of one
option on one data set, and an experiment's protocol, read here, is the whole sweep its file
defines, composed from both.)

The protocol of experiment ``<id>`` is what ``python train.py -m +experiment=<id>`` runs with no
other override: Hydra composes ``conf/train.yaml`` with ``+experiment=<id>``, and the sweep
definition in its ``hydra.sweeper.params`` is expanded into jobs by Hydra's own override parser
and basic sweeper (the same code that launches them). Each job's configuration is composed too,
so a sweep's runs are compared key by key with what the protocol would have run:

- a run is matched to the protocol job whose swept values it has (config group choices such as
  ``loss=ce`` by the record's ``loss``, other keys by ``params.<key>``); a run matching no job lies
  outside the protocol's sweep;
- every key of a matched run's ``params`` that differs from its job's composed config is a
  deviation (``trainer.epochs``, ``trainer.limit_batches``, ``model.*`` ...), except the keys that
  change how fast, where or how verbosely a run trains, never what it learns
  (:data:`PROTOCOL_FREE_KEYS`); keys only one side has (a config key added or removed since the
  run) are listed apart and are no deviation;
- the sweep's own command line (``multirun.yaml``): a swept key given other values there
  (``seed=0`` for ``range(10)``) narrows the sweep, a deviation; ``+scale=smoke`` makes it a
  smoke sweep.

This is the one module of :mod:`topk.report` that uses Hydra (to compose ``conf/``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from topk.repository import CONF
from topk.run_dir import HARMLESS_KEYS, RENAMED_KEYS, override_key, run_params

# How fast, where or how verbosely a run trains, and how often it evaluates or saves: never what
# it learns. The number of epochs is part of the protocol (it is harmless only to a resume).
PROTOCOL_FREE_KEYS = (HARMLESS_KEYS - {"trainer.epochs"}) | {"trainer.eval_every", "protocol_card"}
SEED = "seed"


def normalise(value):
    """A swept value as compared: numbers as floats, lists as tuples, text as text."""
    if isinstance(value, (list, tuple)):
        return tuple(normalise(item) for item in value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def shown(value) -> str:
    """A value as printed on the page: 10, 0.1, ce, [1, 0, 0]."""
    if isinstance(value, tuple):
        return "[" + ", ".join(map(shown, value)) + "]"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return "null" if value is None else str(value)


def expand(sweep: Mapping[str, str]) -> list[tuple[tuple[str, object], ...]]:
    """Every job of a sweep definition (``{"loss": "ce,topk_group", "seed": "range(2)"}``), as
    ``((key, value), ...)`` pairs, expanded by Hydra's override parser and basic sweeper."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from topk.hydra_callbacks import expand_sweep

    parser = OverridesParser.create()
    jobs = expand_sweep([f"{key}={value}" for key, value in sweep.items()])
    return [tuple((o.key_or_group, o.value()) for o in parser.parse_overrides(list(job)))
            for job in jobs]


def is_group(key: str) -> bool:
    """Whether a swept key chooses a config group option (``loss``, ``model``) or sets a value."""
    return "." not in key and (CONF / key).is_dir()


@functools.cache
def _compose(overrides: tuple[str, ...], hydra_node: bool = False):
    from hydra import compose, initialize_config_dir

    from topk.schema.store import register

    if not CONF.is_dir():
        raise FileNotFoundError(f"the experiments' protocols are composed from {CONF}, which is "
                                "missing; build the report from a checkout of the repository.")

    register()  # the config groups' schemas and the if_null resolver, as train.py does
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=hydra_node)


@dataclass(frozen=True)
class Protocol:
    """Experiment ``id``'s sweep definition, its jobs and each job's flat composed config."""

    id: str
    sweep: dict[str, str]
    jobs: list[tuple[tuple[str, object], ...]]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.sweep)

    @property
    def seeds(self) -> int:
        """Seeds per setting (1 where the sweep does not vary the seed)."""
        values = {dict(job).get(SEED) for job in self.jobs}
        return max(1, len(values - {None}))

    def params(self, job) -> dict:
        """The flat config the protocol runs for ``job`` (composed once per setting; the seed is
        set afterwards: no config value interpolates it, a test checks)."""
        setting = tuple(f"{key}={_override_text(value)}" for key, value in job if key != SEED)
        params = dict(run_params(_compose((f"+experiment={self.id}", *setting))))
        params.update({key: value for key, value in job if key == SEED})
        return params


def _override_text(value) -> str:
    """A parsed override value written back for the command line."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_override_text, value)) + "]"
    return "null" if value is None else str(value)


@functools.cache
def protocol(experiment: str) -> Protocol:
    """The protocol of ``+experiment=<experiment>`` (composed once per process)."""
    from omegaconf import OmegaConf

    cfg = _compose((f"+experiment={experiment}",), hydra_node=True)
    sweep = OmegaConf.to_container(cfg.hydra.sweeper.params) or {}
    sweep = {str(key): str(value) for key, value in sweep.items()}
    return Protocol(experiment, sweep, expand(sweep))


def run_value(run: Mapping, key: str):
    """A run's value of swept ``key``: the record's group choice (``loss``), else
    ``params.<key>``, else the record's own top-level value (``seed``)."""
    name = key if is_group(key) and key in run else f"params.{key}"
    value = run.get(name)
    return normalise(run.get(key) if value is None else value)


def signature(values: Mapping, keys: Sequence[str]) -> tuple:
    return tuple(normalise(values.get(key)) for key in keys)


def read_command_line(sweep_dir: Path) -> tuple[dict[str, str], list[str]] | None:
    """The sweep's ``hydra.sweeper.params`` and command-line overrides from its
    ``multirun.yaml``; ``None`` where it is absent or unreadable."""
    try:
        hydra = (yaml.safe_load((Path(sweep_dir) / "multirun.yaml").read_text()) or {})["hydra"]
        params = {str(k): str(v) for k, v in ((hydra.get("sweeper") or {}).get("params") or {}).items()}
        return params, [str(line) for line in (hydra.get("overrides") or {}).get("task") or []]
    except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        return None


@dataclass
class Fidelity:
    """How a sweep's runs compare with its experiment's protocol."""

    protocol: Protocol
    command_line: list[str] | None  # its overrides besides +experiment (None: no multirun.yaml)
    smoke: bool
    deviations: dict[str, str] = field(default_factory=dict)  # key -> "ran …; protocol …"
    unmatched_keys: dict[str, str] = field(default_factory=dict)  # keys one side lacks
    job_runs: dict[int, list] = field(default_factory=dict)  # protocol job -> run indices
    outside: list = field(default_factory=list)  # run indices matching no job

    @property
    def expected(self) -> int:
        return len(self.protocol.jobs)

    @property
    def faithful(self) -> bool:
        return not (self.smoke or self.deviations or self.outside)

    def completed_jobs(self, runs: pd.DataFrame) -> int:
        return sum(any(runs.at[i, "status"] == "completed" for i in found)
                   for found in self.job_runs.values())

    def missing_jobs(self) -> list[str]:
        """The protocol jobs no run answers, as their overrides."""
        return [" ".join(f"{key}={shown(normalise(value))}" for key, value in job)
                for index, job in enumerate(self.protocol.jobs) if not self.job_runs.get(index)]


def narrowed(proto: Protocol, sweep_params: Mapping[str, str], command_line: list[str]) -> dict:
    """Swept keys whose values the sweep's own definition and command line changed."""
    asked = dict(sweep_params)
    for line in command_line:
        key, _, value = line.partition("=")
        if key.lstrip("+~") in proto.sweep:
            asked[key.lstrip("+~")] = value
    theirs, ours = expand(asked), proto.jobs
    changed = {}
    for key in proto.sweep:
        ran = sorted({normalise(dict(job).get(key)) for job in theirs}, key=str)
        wanted = sorted({normalise(dict(job).get(key)) for job in ours}, key=str)
        if ran != wanted:
            changed[key] = (f"the sweep asked for {_values_text(ran)}; protocol "
                            f"{_values_text(wanted)} ({proto.sweep[key]})")
    return changed


def _values_text(values: list) -> str:
    text = ", ".join(map(shown, values[:8]))
    return text + (f" … ({len(values)} values)" if len(values) > 8 else "")


def config_differences(proto: Protocol, runs: pd.DataFrame, job_runs: dict) -> tuple[dict, dict]:
    """Keys whose value differs between a matched run's params and its job's composed config
    (``PROTOCOL_FREE_KEYS`` aside), and keys only one side has."""
    ran: dict[str, set] = {}
    wanted: dict[str, set] = {}
    one_side: dict[str, str] = {}
    for index, found in job_runs.items():
        expected = proto.params(proto.jobs[index])
        for i in found:
            params = {RENAMED_KEYS.get(key, key): value  # the record's own flat params, keys renamed since
                      for key, value in (runs.at[i, "_params"] or {}).items()}
            for key in sorted((set(expected) | set(params)) - PROTOCOL_FREE_KEYS):
                if key not in params or key not in expected:
                    one_side[key] = ("only in the run's record" if key in params else
                                     "only in today's protocol")
                elif normalise(params[key]) != normalise(expected[key]):
                    ran.setdefault(key, set()).add(normalise(params[key]))
                    wanted.setdefault(key, set()).add(normalise(expected[key]))
    differences = {key: f"ran {_values_text(sorted(ran[key], key=str))}; protocol "
                   f"{_values_text(sorted(wanted[key], key=str))}" for key in ran}
    return differences, {key: text for key, text in one_side.items() if key not in differences}


def at_smoke_scale(overrides) -> bool:
    """Whether a command line shrinks its runs to smoke scale (``+scale=smoke``)."""
    return any(override_key(str(line)) == "scale" for line in overrides)


def assess(runs: pd.DataFrame, sweep_dir: Path, experiment: str) -> Fidelity:
    """How the runs of ``sweep_dir`` (one row each, as :func:`topk.report.runs.load_sweep` reads
    them) compare with ``experiment``'s protocol."""
    proto = protocol(experiment)
    keys = proto.keys
    index = {signature(dict(job), keys): i for i, job in enumerate(proto.jobs)}
    job_runs: dict[int, list] = {}
    outside = []
    for i, run in runs.iterrows():
        job = index.get(tuple(run_value(run, key) for key in keys))
        (outside if job is None else job_runs.setdefault(job, [])).append(i)
    read = read_command_line(sweep_dir)
    command_line = None if read is None else [
        line for line in read[1] if override_key(line) != "experiment"]
    smoke = at_smoke_scale(command_line or [])
    deviations, one_side = config_differences(proto, runs, job_runs)
    if read is not None:
        deviations.update(narrowed(proto, read[0], read[1]))
    return Fidelity(proto, command_line, smoke, deviations, one_side, job_runs, outside)


def completeness(fidelity: Fidelity, runs: pd.DataFrame) -> float:
    """The share of the protocol's jobs with a completed run."""
    return fidelity.completed_jobs(runs) / fidelity.expected if fidelity.expected else math.nan
