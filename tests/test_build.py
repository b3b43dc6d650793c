"""topk.build: what train.py builds, built from a notebook or a script the same way."""

from __future__ import annotations

import torch

from topk.build import DataFacts, build, build_loss, build_model, compose, seed_everything
from topk.losses import NoisedImbalancedTopKHingeLoss
from topk.losses.margin import ldam_margins


def test_a_notebook_builds_and_trains_a_step_as_train_py_does():
    """The module docstring's recipe on the embedded default data (circles): the data, a loss with
    its data-derived arguments (the noised imbalanced loss's class counts), a model sized to the
    data, the optimiser; one step lowers nothing in particular but runs and gives finite values."""
    cfg = compose(["loss=noised_imbal", "model=mlp"])
    seed_everything(cfg.seed)
    splits = build(cfg.dataset, "dataset", seed=cfg.seed)
    loss = build_loss(cfg.loss, splits)
    model = build_model(cfg.model, splits)
    optimizer = build(cfg.optim, "optim", model.parameters())
    assert isinstance(loss, NoisedImbalancedTopKHingeLoss)
    assert torch.equal(loss.margins, ldam_margins(splits.class_counts, cfg.loss.max_margin))
    x, y = splits.train.x[:32], splits.train.y[:32]
    value = loss(model(x), y)
    value.backward()
    optimizer.step()
    assert torch.isfinite(value) and model(x).shape == (32, splits.num_classes)


def test_a_loss_is_built_without_a_data_set_from_data_facts():
    """Benchmarks build a loss from the class count and counts alone (DataFacts)."""
    cfg = compose(["loss=ldam"])
    loss = build_loss(cfg.loss, DataFacts(4, [40, 20, 10, 5]))
    assert loss(torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])).isfinite()


def test_the_readmes_notebook_block_runs(capsys):
    """README's ``topk.build`` block, as written, prints a finite loss."""
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    start = readme.index("```python\nfrom topk.build import")
    code = readme[start + len("```python\n"):readme.index("```", start + 3)]
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith("tensor(") and "nan" not in printed
