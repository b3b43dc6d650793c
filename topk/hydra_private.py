"""Every call into Hydra's private API (``hydra._internal``), in one place.

Hydra offers no public way to parse ``train.py``'s command line as ``@hydra.main`` will, to
list the search path it composes ``conf/`` with, to read what a search path's config sources
hold, or to expand a sweep into its jobs as the basic sweeper launches them; the checks that
refuse a run before anything is written (:mod:`topk.schema`, :mod:`topk.hydra_callbacks`,
:mod:`topk.report.fidelity`) need all four. They go through these functions, written for the
Hydra versions of :data:`TESTED_HYDRA`; ``tests/test_hydra_private.py`` fails on another one, so
that an upgrade is a decision made with these functions open, not a surprise in a user's sweep.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

TESTED_HYDRA = ("1.3",)  # hydra-core's major.minor these calls were written and tested for


def command_line(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed as ``@hydra.main`` parses it: ``overrides``, ``multirun``,
    ``config_path``, ``config_dir``, ``config_name``, ``help``, ``hydra_help`` ..."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser().parse_args(argv)


def default_search_path(config_dir: str) -> list[str]:
    """The search path Hydra composes the primary config folder ``config_dir`` with, as
    ``scheme://path`` entries: Hydra's own configs, that folder, and the ConfigStore (last)."""
    from hydra._internal.utils import create_config_search_path

    return [element.path for element in create_config_search_path(f"file://{config_dir}").get_path()]


def config_sources(entries: Iterable[str]) -> list:
    """Hydra's config sources of the search path ``entries`` (``file://``, ``pkg://``,
    ``structured://``), those that exist; each has ``scheme()``, ``path`` and ``list()``."""
    from hydra._internal.config_repository import ConfigRepository
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl

    path = ConfigSearchPathImpl()
    for entry in entries:
        path.append(provider="topk", path=entry)
    return [source for source in ConfigRepository(path).get_sources() if source.available()]


def basic_sweeper_target() -> str:
    """The ``_target_`` of Hydra's basic sweeper (``hydra.sweeper._target_``)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return f"{BasicSweeper.__module__}.{BasicSweeper.__name__}"


def sweep_jobs_of(overrides: list) -> list[list[str]]:
    """The overrides of each job of a sweep, from its parsed ``overrides``
    (``OverridesParser.parse_overrides``), as the basic sweeper expands them: the code that
    launches them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    (jobs,) = BasicSweeper.split_arguments(overrides, None) or [[]]
    return jobs
