"""The documentation's promises that can rot silently: every public class's docstring carries an
example, and each runs as a doctest; every loss config has its page in the docs site (which
``make docs`` builds with warnings as errors, in CI)."""

from __future__ import annotations

import doctest
import importlib
import inspect

import pytest
import torch
import yaml

import topk
import topk.losses
from conftest import ROOT

# The modules whose docstrings hold examples: the package, every loss module, the metrics and
# the functional cores users call directly.
DOCTESTED = ["topk", "topk.metrics", "topk.schedules", "topk.functional.perturbed", "topk.losses.base",
             *sorted(f"topk.losses.{path.stem}" for path in (ROOT / "topk" / "losses").glob("*.py")
                     if path.stem not in {"__init__", "base"})]


def public_classes():
    names = set(topk.__all__) | set(topk.losses.__all__)
    classes = {getattr(topk.losses, name, None) or getattr(topk, name) for name in names}
    return sorted((cls for cls in classes if inspect.isclass(cls) and cls.__module__.startswith("topk")),
                  key=lambda cls: cls.__name__)


@pytest.mark.parametrize("cls", public_classes(), ids=lambda cls: cls.__name__)
def test_every_public_class_has_a_runnable_example(cls):
    assert ">>> " in (cls.__doc__ or ""), f"{cls.__name__}'s docstring has no example"


@pytest.mark.parametrize("module_name", DOCTESTED)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    tests = [test for test in doctest.DocTestFinder().find(module) if test.examples]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    state = torch.random.get_rng_state()
    try:
        for test in tests:
            runner.run(test)
    finally:
        torch.random.set_rng_state(state)
    assert runner.failures == 0, f"{runner.failures} of {runner.tries} examples of {module_name} failed (output above)"
    if module_name != "topk.losses.targets":
        assert runner.tries > 0


def test_every_loss_config_has_its_page_with_its_config_and_class():
    for config in sorted((ROOT / "conf" / "loss").glob("*.yaml")):
        if config.stem == "ce":  # torch's own cross-entropy: a row of the losses' index
            continue
        target = yaml.safe_load(config.read_text())["_target_"]
        page = ROOT / "docs" / "losses" / f"{config.stem}.md"
        assert page.exists(), f"{config.stem} has no page docs/losses/{config.stem}.md"
        text = page.read_text()
        assert f"../../conf/loss/{config.stem}.yaml" in text
        assert f"topk.{target.rsplit('.', 1)[1]}" in text or target in text
        assert f"({config.stem}.md)" in (ROOT / "docs" / "losses" / "index.md").read_text()


def test_the_migration_table_names_the_published_arguments_that_changed():
    text = (ROOT / "docs" / "migration.md").read_text()
    for renamed in ("`n_sample` → `n_samples`", "`max_m` → `max_margin`", "`cls_num_list` → `class_counts`",
                    "`inverse_temperature` → `steepness`", "`diffsort_method` → `sorter`"):
        assert renamed in text
    assert "scale=60.0" in text and "scale=50" in text
