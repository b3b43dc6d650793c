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


def public_losses():
    return [cls for cls in public_classes() if issubclass(cls, topk.losses.base.Loss)]


def numpy_section(doc: str, title: str) -> str:
    """The text of one numpy-style section (``title`` over a dashed line) of ``doc``, or ''."""
    lines = doc.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == title and set(lines[i + 1].strip()) == {"-"}:
            rest = lines[i + 2:]
            ends = [j for j in range(len(rest) - 1) if rest[j].strip() and set(rest[j + 1].strip()) == {"-"}]
            return "\n".join(rest[:ends[0]] if ends else rest)
    return ""


def documented_parameters(doc: str) -> dict[str, str]:
    """Each entry of the Parameters section (``name : type`` at the section's indent) and its text."""
    entries: dict[str, str] = {}
    name = None
    for line in numpy_section(doc, "Parameters").splitlines():
        if line and not line[0].isspace() and " : " in line:
            name = line.split(" : ")[0].strip()
            entries[name] = line
        elif name:
            entries[name] += "\n" + line
    return entries


def test_the_loss_list_is_every_public_loss():
    names = {cls.__name__ for cls in public_losses()}
    assert {"TopKHingeLoss", "TopKEntropyLoss", "SmoothTopKSVM", "TopKTransitionLoss"} <= names
    assert len(names) == 14  # the 13 losses of topk.__all__ and their base TopKLoss


@pytest.mark.parametrize("cls", public_losses(), ids=lambda cls: cls.__name__)
def test_every_loss_documents_each_parameter_weight_and_reduction(cls):
    """numpydoc's Parameters section (rendered by napoleon on the loss pages) lists every argument
    of the constructor, ``weight`` and ``reduction`` with what each reduction returns; the Notes
    promise no fixed reduction."""
    doc = inspect.getdoc(cls)
    entries = documented_parameters(doc)
    arguments = [name for name in inspect.signature(cls.__init__).parameters if name != "self"]
    assert {"weight", "reduction"} <= set(arguments), cls.__name__
    missing = [name for name in arguments if name not in entries]
    assert not missing, f"{cls.__name__}'s docstring does not document {', '.join(missing)}"
    assert "class" in entries["weight"] and "None" in entries["weight"], entries["weight"]
    for value in ("mean", "sum", "none"):
        assert f'"{value}"' in entries["reduction"].split("\n", 1)[1], (cls.__name__, value)
    assert "batch mean" not in numpy_section(doc, "Notes"), f"{cls.__name__}'s Notes name one reduction"


def test_the_parameter_check_fails_on_a_loss_without_them():
    class Undocumented(topk.TopKHingeLoss):
        __doc__ = topk.TopKHingeLoss.__doc__.replace("\n    reduction : ", "\n    how : ")

    with pytest.raises(AssertionError, match="does not document reduction"):
        test_every_loss_documents_each_parameter_weight_and_reduction(Undocumented)
    notes = "Notes\n    -----\n"
    Undocumented.__doc__ = topk.TopKHingeLoss.__doc__.replace(notes, notes + "    Returns the batch mean.\n")
    with pytest.raises(AssertionError, match="Notes name one reduction"):
        test_every_loss_documents_each_parameter_weight_and_reduction(Undocumented)
    assert set(documented_parameters(inspect.getdoc(topk.FocalLoss))) == {"gamma", "weight", "reduction"}
