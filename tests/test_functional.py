"""The functional forms of the losses (``topk.functional.smooth_topk_svm`` ...): one per public
loss class, exported, with the class's arguments and defaults, its values, gradients and
refusals, and a running example each."""

from __future__ import annotations

import doctest
import inspect

import pytest
import torch

import topk
import topk.functional
from topk.functional import losses as functional_losses

LOSS_CLASSES = {getattr(topk, name) for name in topk.__all__
                if inspect.isclass(getattr(topk, name)) and issubclass(getattr(topk, name), torch.nn.Module)}

# The arguments each check passes beside k (or instead of it, for the losses without one).
ARGUMENTS = {
    "diffsort_topk_ce": {"p_k": [0.6, 0.4], "sorter": "odd_even"},
    "focal_loss": {"gamma": 1.5},
    "ldam_loss": {"class_counts": [40, 20, 10, 5, 5, 2]},
    "noised_imbalanced_topk_hinge": {"k": 2, "class_counts": [40, 20, 10, 5, 5, 2], "epsilon": 0.1},
    "noised_topk_hinge": {"k": 2, "epsilon": 0.3, "n_samples": 4},
}


def arguments(name: str) -> dict:
    return ARGUMENTS.get(name, {"k": 2})


def test_every_loss_class_has_one_exported_function():
    assert set(functional_losses.CLASSES.values()) == LOSS_CLASSES
    assert set(functional_losses.CLASSES) == set(topk.functional.LOSS_FUNCTIONS)
    for name in topk.functional.LOSS_FUNCTIONS:
        assert name in topk.functional.__all__ and name in dir(topk.functional)
        assert getattr(topk.functional, name) is getattr(functional_losses, name)
    with pytest.raises(AttributeError, match="no attribute 'smooth_svm'"):
        topk.functional.smooth_svm  # noqa: B018


@pytest.mark.parametrize("name", sorted(functional_losses.CLASSES))
def test_the_function_takes_the_class_arguments_with_its_defaults(name):
    function, cls = getattr(topk.functional, name), functional_losses.CLASSES[name]
    function_parameters = list(inspect.signature(function).parameters.values())
    class_parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [p.name for p in function_parameters[:2]] == ["scores", "target"]
    assert [(p.name, p.default) for p in function_parameters[2:]] == [(p.name, p.default) for p in class_parameters]


@pytest.mark.parametrize("soft", [False, True], ids=["labels", "probabilities"])
@pytest.mark.parametrize("name", sorted(functional_losses.CLASSES))
def test_the_function_gives_the_class_values_and_gradients(name, soft):
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(5, 6, generator=generator, dtype=torch.float64)
    labels = torch.tensor([0, 2, 5, 1, 3])
    target = torch.softmax(torch.randn(5, 6, generator=generator, dtype=torch.float64), 1) if soft else labels
    weight = [1.0, 2.0, 0.5, 1.0, 3.0, 1.0]
    results = []
    for make_loss in (lambda s: getattr(topk.functional, name)(s, target, **arguments(name), weight=weight,
                                                                 reduction="none"),
                      lambda s: functional_losses.CLASSES[name](**arguments(name), weight=weight,
                                                                 reduction="none")(s, target)):
        leaf = scores.clone().requires_grad_()
        torch.manual_seed(1)  # the noised losses' noise
        value = make_loss(leaf)
        value.sum().backward()
        results.append((value.detach(), leaf.grad))
    (function_value, function_grad), (class_value, class_grad) = results
    assert function_value.shape == (5,)
    torch.testing.assert_close(function_value, class_value, rtol=0, atol=0)
    torch.testing.assert_close(function_grad, class_grad, rtol=0, atol=0)


def test_the_function_refuses_what_the_class_refuses():
    scores, labels = torch.randn(2, 4), torch.tensor([0, 3])
    with pytest.raises(ValueError, match="k must be a whole number of at least 1, got 0"):
        topk.functional.smooth_topk_svm(scores, labels, k=0)
    with pytest.raises(ValueError, match="reduction must be one of mean, sum, none"):
        topk.functional.topk_hinge(scores, labels, reduction="average")
    with pytest.raises(ValueError, match="NaN"):
        topk.functional.topk_entropy(torch.full((2, 4), float("nan")), labels, k=1)


def test_every_function_example_runs():
    tests = [test for test in doctest.DocTestFinder().find(functional_losses) if test.examples]
    assert {test.name.rsplit(".", 1)[-1] for test in tests} == set(functional_losses.CLASSES)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    state = torch.random.get_rng_state()
    try:
        for test in tests:
            runner.run(test)
    finally:
        torch.random.set_rng_state(state)
    assert runner.failures == 0, f"{runner.failures} of {runner.tries} examples failed (output above)"
