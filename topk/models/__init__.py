"""Models. Every builder takes ``num_classes`` and ``input_shape`` from the data."""

from topk.models.densenet import CifarDenseNet
from topk.models.heads import CosineClassifier, make_head
from topk.models.resnet import torchvision_densenet121, torchvision_resnet
from topk.models.small import LinearClassifier, MLPClassifier

__all__ = [
    "CifarDenseNet", "CosineClassifier", "LinearClassifier", "MLPClassifier", "make_head",
    "torchvision_densenet121", "torchvision_resnet",
]
