"""Class weights in a run (``loss.weight``): the weight vector, the weighted mean over labels and
probability targets, torch's own weighted cross-entropy, every loss config instantiating as it
is (Hydra's ``instantiate(cfg.loss)``), and a training run."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from hydra.utils import get_class, instantiate
from test_loss_edges import LOSSES, N_CLASSES, seeded

from conftest import CONF, compose_config
from helpers import mixup_target
from topk.errors import ConfigError
from topk.losses.weights import ClassWeighted, class_weight_vector

WEIGHTS = torch.tensor([0.5, 2.0, 1.0, 0.0, 3.0], dtype=torch.float64)


def batch(seed=0, soft=False):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(7, N_CLASSES, generator=generator, dtype=torch.float64)
    if soft:
        return scores, mixup_target(generator, 7, N_CLASSES)
    return scores, torch.randint(0, N_CLASSES, (7,), generator=generator)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("soft", [False, True])
def test_each_sample_is_weighted_by_its_labels_weight(name, soft):
    scores, target = batch(soft=soft)
    per_sample = LOSSES[name]()
    per_sample.reduction = "none"
    values = seeded(per_sample, scores, target)
    sample_weights = target @ WEIGHTS if soft else WEIGHTS[target]
    expected = (sample_weights * values).sum() / sample_weights.sum()
    weighted = seeded(ClassWeighted(LOSSES[name](), WEIGHTS), scores, target)
    torch.testing.assert_close(weighted, expected)
    # Equal weights give the unweighted loss.
    uniform = seeded(ClassWeighted(LOSSES[name](), torch.full((N_CLASSES,), 3.0, dtype=torch.float64)), scores, target)
    torch.testing.assert_close(uniform, seeded(LOSSES[name](), scores, target))


def test_weighted_cross_entropy_is_torchs_for_labels():
    scores, labels = batch(1)
    weighted = ClassWeighted(torch.nn.CrossEntropyLoss(), WEIGHTS)(scores, labels)
    torch.testing.assert_close(weighted, F.cross_entropy(scores, labels, weight=WEIGHTS))


def test_balanced_weights_give_every_class_the_same_total():
    weights = class_weight_vector("balanced", [10, 30, 60], 3)
    torch.testing.assert_close(weights * torch.tensor([10.0, 30.0, 60.0]), torch.full((3,), 100 / 3))
    assert class_weight_vector(None, [10, 30, 60], 3) is None
    assert class_weight_vector([1, 0, 2.5], None, 3).tolist() == [1.0, 0.0, 2.5]


@pytest.mark.parametrize("spec, counts, message", [
    ("balanced", [4, 0, 2], "needs a training sample of every class"),
    ("inverse", [4, 1, 2], "must be null, balanced or a list of 3 weights"),
    ([1.0, 2.0], None, "must hold 3 finite non-negative weights"),
    ([1.0, -2.0, 1.0], None, "must hold 3 finite non-negative weights"),
    ([0, 0, 0], None, "not all 0"),
    ([1.0, "a", 1.0], None, "must hold 3 finite"),
])
def test_bad_class_weights_are_refused_in_one_sentence(spec, counts, message):
    with pytest.raises(ConfigError, match=message):
        class_weight_vector(spec, counts, 3)


@pytest.mark.parametrize("name", sorted(path.stem for path in (CONF / "loss").glob("*.yaml")))
def test_every_loss_config_instantiates_as_it_is(name):
    """``hydra.utils.instantiate(cfg.loss)``, Hydra's own convention, gives a working loss (the
    data's class counts passed as Hydra passes any extra argument, where the loss takes them)."""
    node = compose_config([f"loss={name}", "k=2"]).loss
    assert node.weight is None
    takes_counts = "class_counts" in inspect.signature(get_class(node._target_)).parameters
    extra = {"class_counts": [3, 5, 8, 13, 21]} if takes_counts else {}
    loss = instantiate(node, **extra)
    scores, labels = batch(2)
    if name == "diffsort_topk_ce":
        scores = torch.randn(len(labels), 8, dtype=torch.float64)  # more classes than its p_k's five
    assert torch.isfinite(loss(scores, labels.clamp(max=scores.shape[1] - 1)))


def test_a_batch_whose_labels_all_weigh_zero_gives_zero():
    scores = torch.randn(4, N_CLASSES, dtype=torch.float64, requires_grad=True)
    value = ClassWeighted(torch.nn.CrossEntropyLoss(), WEIGHTS)(scores, torch.full((4,), 3))
    value.backward()
    assert value.item() == 0.0 and bool((scores.grad == 0).all())
