"""The loss contract at its edges (topk/losses/targets.py), the same for every loss of topk.losses.

torch's own CrossEntropyLoss (``loss=ce``) follows torch's rules and is left out.
"""

from __future__ import annotations

import pytest
import torch

from helpers import mixup_target
from topk.errors import ConfigError, NonFiniteLossError, TopkError
from topk.losses import (
    CalibratedTopKHingeLoss,
    ConvexTopKHingeLoss,
    DiffSortTopKCrossEntropyLoss,
    FocalLoss,
    LDAMLoss,
    NoisedImbalancedTopKHingeLoss,
    NoisedTopKHingeLoss,
    SmoothTopKSVM,
    TopKEntropyLoss,
    TopKGroupingLoss,
    TopKHingeLoss,
    TopKTransitionLoss,
    TruncatedTopKEntropyLoss,
)
from topk.losses.base import Loss
from topk.losses.targets import check_num_classes_for_k

N_CLASSES = 5
CLASS_COUNTS = [3, 5, 8, 13, 21]

LOSSES = {
    "cal_hinge": lambda: CalibratedTopKHingeLoss(2),
    "cvx_hinge": lambda: ConvexTopKHingeLoss(2),
    "hinge": lambda: TopKHingeLoss(2),
    "focal": lambda: FocalLoss(),
    "ldam": lambda: LDAMLoss(class_counts=CLASS_COUNTS),
    "noised_bal": lambda: NoisedTopKHingeLoss(2, epsilon=0.5, n_samples=4),
    "noised_imbal": lambda: NoisedImbalancedTopKHingeLoss(2, epsilon=0.5, n_samples=4, class_counts=CLASS_COUNTS),
    "smooth_svm": lambda: SmoothTopKSVM(2),
    "smooth_svm_hard": lambda: SmoothTopKSVM(2, tau=0.0),
    "topk_group": lambda: TopKGroupingLoss(2),
    "topk_transition": lambda: TopKTransitionLoss(2),
    "trunc_topk_entropy": lambda: TruncatedTopKEntropyLoss(2),
    "topk_entropy": lambda: TopKEntropyLoss(2),
    "diffsort_topk_ce": lambda: DiffSortTopKCrossEntropyLoss(p_k=[0.5, 0.0, 0.5]),
}

INTEGER_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
HALF_DTYPES = [torch.float16, torch.bfloat16]


@pytest.fixture(params=sorted(LOSSES))
def loss(request):
    return LOSSES[request.param]()


def scores_and_labels(batch=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, N_CLASSES, generator=generator)
    labels = torch.randint(0, N_CLASSES, (batch,), generator=generator)
    return scores, labels


def seeded(loss, scores, target):
    """``loss(scores, target)`` with torch's generator seeded, so the noised losses draw the same noise."""
    torch.manual_seed(0)
    return loss(scores, target)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_every_integer_label_dtype_gives_the_int64_value(loss, dtype):
    scores, labels = scores_and_labels()
    expected = seeded(loss, scores, labels)
    torch.testing.assert_close(seeded(loss, scores, labels.to(dtype)), expected, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(N_CLASSES,), (2, 3, N_CLASSES), ()])
def test_scores_that_are_not_a_matrix_are_refused(loss, shape):
    labels = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"scores must be a \[batch, classes\] matrix, got shape"):
        loss(torch.randn(shape), labels)


def test_an_empty_batch_is_refused(loss):
    with pytest.raises(ValueError, match="the batch is empty"):
        loss(torch.randn(0, N_CLASSES), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="the batch is empty"):
        loss(torch.randn(0, N_CLASSES), torch.zeros(0, N_CLASSES))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_scores_are_refused(loss, bad):
    scores, labels = scores_and_labels()
    scores[2, 3] = bad
    with pytest.raises(ValueError, match="scores contain NaN or infinite values") as refused:
        loss(scores, labels)
    assert isinstance(refused.value, NonFiniteLossError)  # training fails a diverged run alike
    with pytest.raises(ValueError, match="scores contain NaN or infinite values"):
        loss(scores.half(), labels)


def test_a_non_finite_probability_target_is_refused(loss):
    scores, _ = scores_and_labels()
    target = torch.full_like(scores, 1 / N_CLASSES)
    target[1, 2] = float("nan")
    with pytest.raises(ValueError, match="must sum to 1; one sums to nan"):
        loss(scores, target)


def test_scores_must_be_floating_and_labels_integer(loss):
    scores, labels = scores_and_labels()
    with pytest.raises(ValueError, match="scores must be floating point, got dtype torch.int64"):
        loss(labels[:, None].expand(-1, N_CLASSES), labels)
    with pytest.raises(ValueError, match="labels must be integers, got dtype torch.bool"):
        loss(scores, labels > 2)


@pytest.mark.parametrize("bad", [N_CLASSES, -1])
def test_labels_out_of_range_are_refused(loss, bad):
    """One sentence naming the label, whether :func:`~topk.losses.targets.loss_inputs` reads the
    range or the loss leaves it to its gather (the noised losses: ``label_scores``)."""
    scores, labels = scores_and_labels()
    labels[3] = bad
    message = rf"^labels must be class indices from 0 to {N_CLASSES - 1} \({N_CLASSES} classes\), got {bad}$"
    with pytest.raises(ValueError, match=message):
        loss(scores, labels)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_scores_are_computed_in_float32(loss, dtype):
    """The loss of half-precision scores is the float32 loss of the same (rounded) values, close
    to that of the unrounded scores, returned in float32; the gradient reaches the scores in
    their own dtype and matches the float32 one."""
    scores, labels = scores_and_labels()
    half = scores.to(dtype).requires_grad_(True)
    value = seeded(loss, half, labels)
    (grad,) = torch.autograd.grad(value, half)
    assert value.dtype == torch.float32 and torch.isfinite(value)
    assert grad.dtype == dtype and torch.isfinite(grad).all()

    upcast = half.detach().float().requires_grad_(True)
    upcast_value = seeded(loss, upcast, labels)
    (upcast_grad,) = torch.autograd.grad(upcast_value, upcast)
    torch.testing.assert_close(value, upcast_value, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, upcast_grad.to(dtype))
    tolerance = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(value, seeded(loss, scores, labels), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_probability_targets_are_accepted(loss, dtype):
    """Rounded to half precision, Mixup rows no longer sum to 1 within 1e-4; they are still accepted."""
    scores, _ = scores_and_labels()
    target = mixup_target(torch.Generator().manual_seed(1), len(scores), N_CLASSES)
    value = seeded(loss, scores, target.to(dtype))
    assert value.dtype == torch.float32
    tolerance = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(value, seeded(loss, scores, target.float()), rtol=tolerance, atol=tolerance)


def test_float64_scores_stay_float64(loss):
    scores, labels = scores_and_labels()
    assert seeded(loss, scores.double(), labels).dtype == torch.float64


def test_labels_on_another_device_are_refused(loss):
    scores, labels = scores_and_labels()
    with pytest.raises(ValueError, match=r"^labels must be on the scores' device cpu, got meta$"):
        loss(scores, labels.to("meta"))
    with pytest.raises(ValueError, match=r"^a probability target must be on the scores' device cpu, got meta$"):
        loss(scores, torch.full_like(scores, 1 / N_CLASSES, device="meta"))


# The losses whose constructor takes k, and the other arguments each constructor checks.
TOP_K_CLASSES = [CalibratedTopKHingeLoss, ConvexTopKHingeLoss, TopKHingeLoss, SmoothTopKSVM, TopKGroupingLoss,
                 TopKTransitionLoss, TruncatedTopKEntropyLoss, TopKEntropyLoss, NoisedTopKHingeLoss]


@pytest.mark.parametrize("bad", [0, -1, 2.5, 2.0, True, "3", None])
@pytest.mark.parametrize("loss_class", [*TOP_K_CLASSES, NoisedImbalancedTopKHingeLoss], ids=lambda c: c.__name__)
def test_k_must_be_a_whole_number_of_at_least_1(loss_class, bad):
    """Refused in one sentence naming the argument (not inside torch.topk at the first call), a
    plain ValueError, which topk.build.build wraps in a sentence naming the config group."""
    extra = {"class_counts": CLASS_COUNTS} if loss_class is NoisedImbalancedTopKHingeLoss else {}
    with pytest.raises(ValueError, match=rf"^k must be a whole number of at least 1, got {bad!r}$") as refused:
        loss_class(k=bad, **extra)
    assert not isinstance(refused.value, TopkError)


@pytest.mark.parametrize("arguments, message", [
    ({"alpha": -1}, r"^alpha must be a finite number >= 0, got -1$"),
    ({"alpha": float("nan")}, r"^alpha must be a finite number >= 0, got nan$"),
    ({"alpha": float("inf")}, r"^alpha must be a finite number >= 0, got inf$"),
    ({"alpha": "1"}, r"^alpha must be a finite number >= 0, got '1'$"),
    ({"reduction": "avg"}, r"^reduction must be one of mean, sum, none, got 'avg'$"),
])
def test_other_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message) as refused:
        if "reduction" in arguments:
            Loss(**arguments)
        else:
            TopKHingeLoss(2, **arguments)
    assert not isinstance(refused.value, TopkError)


@pytest.mark.parametrize("node, message", [
    ({"_target_": "topk.losses.TopKHingeLoss", "k": 2.5},
     r"^loss cannot be built \(k must be a whole number of at least 1, got 2.5\); check the loss.\* values.$"),
    ({"_target_": "topk.losses.SmoothTopKSVM", "tau": -1},
     r"^loss cannot be built \(tau must be a finite number >= 0 \(0 is the non-smooth top-k SVM\), got -1\); "
     r"check the loss.\* values.$"),
    ({"_target_": "topk.losses.DiffSortTopKCrossEntropyLoss", "sorter": "quicksort"},
     r"^loss cannot be built \(sorter must be one of .*, got 'quicksort'\); check the loss.\* values.$"),
])
def test_train_names_the_config_group_around_the_argument(node, message):
    """The training script's one sentence: the constructor's, inside topk.build.build's naming loss.*."""
    from omegaconf import OmegaConf

    from topk import build as builder

    with pytest.raises(ConfigError, match=message):
        builder.build(OmegaConf.create(node), "loss")


def test_train_checks_the_class_count_with_config_keys():
    """Before training, train.py checks k (and diffsort's p_k and m) against the data set's class
    count with check_num_classes_for_k, whose sentence names the config keys; the loss's own
    check at a call names the Python argument."""
    with pytest.raises(ConfigError, match=r"^loss.k=5 must be between 1 and the number of classes minus one \(4\); "
                                          r"choose a smaller k.$"):
        check_num_classes_for_k(TopKHingeLoss(5), 5)
    with pytest.raises(ConfigError, match=r"^k=5 must be between 1 .*; choose a smaller k.$"):
        TopKHingeLoss(5)(*scores_and_labels())
    with pytest.raises(ConfigError, match=r"^loss.p_k has 5 entries but the scores have only 5 classes"):
        check_num_classes_for_k(DiffSortTopKCrossEntropyLoss(), 5)
    with pytest.raises(ConfigError, match=r"^loss.m=5 must be below the class count 5"):
        check_num_classes_for_k(DiffSortTopKCrossEntropyLoss(p_k=[1.0], m=5), 5)
    check_num_classes_for_k(DiffSortTopKCrossEntropyLoss(p_k=[1.0], m=4), 5)
    check_num_classes_for_k(FocalLoss(), 5)
