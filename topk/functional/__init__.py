"""The numerical cores of the losses, as plain functions on tensors."""

from topk.functional.esp import log_esp, log_esp_summation, topk_marginals
from topk.functional.perturbed import perturbed_topk

__all__ = ["log_esp", "log_esp_summation", "perturbed_topk", "topk_marginals"]
