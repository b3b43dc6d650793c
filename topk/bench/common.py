"""What the benchmarks share: where the repository's ``conf/`` and ``outputs/`` are, composing
``conf/`` the way ``train.py`` does, building a loss with the data values its constructor asks
for, and writing a result as ``<name>.json`` beside its table ``<name>.md``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from topk.build import DataFacts, build_loss
from topk.repository import CONF, OUTPUTS
from topk.schema.store import register

BENCH_OUT = OUTPUTS / "bench"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A command line whose ``--help`` prints the benchmark's module docstring as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


@contextlib.contextmanager
def configs():
    """Inside: ``hydra.compose("train", ...)`` composes ``conf/`` with the schemas registered
    (``topk.schema.store.register``), as ``train.py`` does."""
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


def conf_options(group: str) -> list[str]:
    """The options of a config group, ``conf/<group>/*.yaml``, by name."""
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


def loss_with_data(node, class_counts=None, num_classes: int | None = None):
    """The loss of the config ``node`` (a mapping, resolved or not), built as ``train.py`` builds
    it (:func:`topk.build.build_loss`) for ``num_classes`` classes of ``class_counts`` samples
    each: the data values its constructor asks for by name come from them (docs/design.md §2)."""
    node = node if isinstance(node, DictConfig) else OmegaConf.create(node)
    return build_loss(node, DataFacts(num_classes, class_counts))


def made_up_class_counts(num_classes: int) -> list[int]:
    """Distinct class counts ``100 + 10 c`` for a loss that asks for them on random scores."""
    return [100 + 10 * c for c in range(num_classes)]


def compose_loss(name: str, k: int | None, num_classes: int, more_overrides=()):
    """``conf/loss/<name>.yaml`` with ``loss.k=k`` (unless ``None``) and ``more_overrides``,
    built for ``num_classes`` classes (with :func:`made_up_class_counts`); inside :func:`configs`."""
    overrides = [f"loss={name}"] + ([f"loss.k={k}"] if k is not None else []) + list(more_overrides)
    return loss_with_data(compose("train", overrides=overrides).loss, made_up_class_counts(num_classes), num_classes)


def available_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def write_outputs(out: Path, name: str, record, markdown: str) -> None:
    """``out/<name>.json`` (``record``, indented) and ``out/<name>.md`` (the table)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    (out / f"{name}.md").write_text(markdown)
