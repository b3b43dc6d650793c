"""topk.hydra_private: Hydra's private calls, pinned to the Hydra versions they were written for."""

from __future__ import annotations

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from conftest import CONF
from topk.hydra_private import (
    TESTED_HYDRA,
    basic_sweeper_target,
    command_line,
    config_sources,
    default_search_path,
    sweep_jobs_of,
)


def test_the_installed_hydra_is_one_these_calls_were_written_for():
    """Another hydra-core (pyproject allows >=1.3,<1.4) fails here first: read
    topk/hydra_private.py against it, then add its version to TESTED_HYDRA."""
    major_minor = ".".join(hydra.__version__.split(".")[:2])
    assert major_minor in TESTED_HYDRA, (
        f"hydra-core {hydra.__version__} is not among {TESTED_HYDRA}, the versions topk/hydra_private.py was tested with")


def test_command_line_parses_as_hydra_main_does():
    args = command_line(["-m", "--config-path", "/x", "loss=ce,hinge", "seed=1"])
    assert args.multirun and args.config_path == "/x" and args.overrides == ["loss=ce,hinge", "seed=1"]
    assert not args.help and args.config_dir is None


def test_the_search_path_is_hydras_configs_conf_and_the_config_store():
    assert default_search_path(str(CONF)) == ["pkg://hydra.conf", f"file://{CONF}", "structured://"]


def test_config_sources_read_conf_and_skip_what_does_not_exist():
    sources = config_sources([f"file://{CONF}", "file:///no/such/folder"])
    assert [(source.scheme(), source.path) for source in sources] == [("file", str(CONF))]
    assert "ce" in [name.removesuffix(".yaml") for name in sources[0].list("loss", results_filter=None)]


def test_a_sweep_expands_into_its_jobs_as_the_basic_sweeper_launches_them():
    overrides = OverridesParser.create().parse_overrides(["loss=ce,hinge", "seed=range(2)", "k=3"])
    assert sweep_jobs_of(overrides) == [
        ["loss=ce", "seed=0", "k=3"], ["loss=ce", "seed=1", "k=3"],
        ["loss=hinge", "seed=0", "k=3"], ["loss=hinge", "seed=1", "k=3"]]
    assert basic_sweeper_target() == "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
