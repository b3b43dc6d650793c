"""Models. Every builder takes ``num_classes`` and ``input_shape`` from the data."""

from topk.models.small import LinearClassifier, MLPClassifier

__all__ = ["LinearClassifier", "MLPClassifier"]
