"""The numerical cores of the losses, as plain functions on tensors, and every loss of
:mod:`topk.losses` as a function (``topk.functional.smooth_topk_svm(scores, labels, k=5)``, as
:func:`torch.nn.functional.cross_entropy` is :class:`torch.nn.CrossEntropyLoss`'s;
:mod:`topk.functional.losses`).

The loss functions are imported on first use (PEP 562's module ``__getattr__``): the loss
classes they build import this package's cores, so importing them here eagerly would be
circular.
"""

from topk.functional.esp import log_esp, log_esp_summation, topk_marginals
from topk.functional.perturbed import perturbed_topk

LOSS_FUNCTIONS = (
    "calibrated_topk_hinge", "convex_topk_hinge", "diffsort_topk_ce", "focal_loss", "ldam_loss",
    "noised_imbalanced_topk_hinge", "noised_topk_hinge", "smooth_topk_svm", "topk_entropy",
    "topk_grouping", "topk_hinge", "topk_transition", "truncated_topk_entropy",
)

__all__ = ["log_esp", "log_esp_summation", "perturbed_topk", "topk_marginals", *LOSS_FUNCTIONS]


def __getattr__(name: str):
    if name in LOSS_FUNCTIONS:
        from topk.functional import losses

        return getattr(losses, name)
    raise AttributeError(f"module 'topk.functional' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *LOSS_FUNCTIONS})
