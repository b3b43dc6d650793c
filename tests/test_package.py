"""What a user who installs the package sees: the licence, the version in one place, the citation
file, the type marker, and every loss importable from ``topk`` (issue 26)."""

from __future__ import annotations

import doctest
import inspect
import subprocess
import sys

import torch
import yaml

import topk
import topk.losses
from conftest import ROOT


def test_the_package_docstring_example_runs():
    failures, tried = doctest.testmod(topk, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


def test_every_loss_class_is_one_import_away():
    classes = {name for name in topk.losses.__all__
               if inspect.isclass(getattr(topk.losses, name)) and issubclass(getattr(topk.losses, name), torch.nn.Module)}
    exported = classes - {"CrossEntropyLoss", "TopKLoss"}  # torch's own, and the base class
    assert exported <= set(topk.__all__)
    assert all(getattr(topk, name) is getattr(topk.losses, name) for name in exported)


def test_licence_version_and_citation_agree():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert (ROOT / "topk" / "py.typed").exists()
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "MIT"
    assert str(citation["version"]) == topk.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = {attr = "topk.__version__"}' in pyproject
    assert f"## {topk.__version__}" in (ROOT / "CHANGELOG.md").read_text()
    assert f"version = {{{topk.__version__}}}" in (ROOT / "docs" / "citing.md").read_text()


def test_the_losses_need_only_torch_and_numpy():
    """``pip install topk`` (no extra) gives torch and numpy: importing the losses and metrics
    must not reach for the training stack (Hydra, OmegaConf, pandas, torchvision, matplotlib)."""
    code = ("import sys, topk; from topk import SmoothTopKSVM, NoisedTopKHingeLoss, topk_accuracies; "
            "print(sorted({'hydra', 'omegaconf', 'pandas', 'torchvision', 'matplotlib', 'tensorboard', "
            "'torch._dynamo'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_train_py_starts_without_torchvision_and_torch_compile():
    """Both take 1.4 s to import, at every start of train.py and of each of its worker processes:
    only image data, image models and torch.compile import them."""
    code = "import sys, train; print(sorted({'torchvision', 'torch._dynamo'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_readme_loop_with_the_losses_alone_runs():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("```python\nimport torch\nfrom topk import SmoothTopKSVM")
    code = readme[start + len("```python\n"):readme.index("```", start + 3)]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    assert torch.isfinite(namespace["loss"])
