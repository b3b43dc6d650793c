"""Fitting a library's ImageNet classifier to the data: the head, the input channels, the image size.

``model=torchvision`` (:mod:`topk.models.torchvision_models`) and ``model=timm``
(:mod:`topk.models.timm_models`) build a library's network as it is and then fit it here: the
last layer becomes a head of the data's class count (``linear`` or ``cosine``,
:mod:`topk.models.heads`), the first convolution takes the data's channels where they are not
three, and one forward pass of a blank image of the data's size (:func:`check_image_size`) says,
before anything trains, when the architecture cannot take that size (a ViT's fixed patch grid,
AlexNet's pooling below 63 pixels) and which size it needs.
"""

from __future__ import annotations

import difflib

import torch
from torch import nn

from topk.errors import ConfigError
from topk.models.heads import make_head


def close_names(name: str, names, n: int = 3) -> str:
    """``did you mean a, b? `` for the names of ``names`` closest to ``name`` (difflib), or ``""``."""
    close = difflib.get_close_matches(str(name), list(names), n=n, cutoff=0.6)
    return f"did you mean {', '.join(close)}? " if close else ""


def image_input(input_shape, what: str) -> tuple[int, int, int]:
    """``input_shape`` as ``(channels, height, width)``; one sentence for data that are not images
    (circles, embeddings)."""
    if len(input_shape) != 3:
        raise ConfigError(f"{what} takes images (channels, height, width), and this data set's inputs have shape "
                          f"{tuple(input_shape)}; choose an image data set or model=linear|mlp.")
    return tuple(int(side) for side in input_shape)


def replace_module(model: nn.Module, path: str, module: nn.Module) -> None:
    """Put ``module`` at the dotted ``path`` of ``model`` (``fc``, ``classifier.1``, ``heads.head``)."""
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, module)


def last_layer(model: nn.Module, width: int, what: str) -> tuple[str, nn.Module]:
    """The path and module of the classifier of ``model``: its last ``nn.Linear`` (or, as in
    SqueezeNet, 1x1 ``nn.Conv2d``) with ``width`` outputs, the library's class count."""
    found = [(path, module) for path, module in model.named_modules()
             if (isinstance(module, nn.Linear) and module.out_features == width)
             or (isinstance(module, nn.Conv2d) and module.out_channels == width and module.kernel_size == (1, 1))]
    if not found:
        raise ConfigError(f"{what} has no last layer of {width} outputs to replace with the data's classes; "
                          "choose another model.")
    return found[-1]


def new_head(layer: nn.Module, kind: str, num_classes: int, what: str) -> nn.Module:
    """The head that takes the place of the classifier ``layer``: ``linear`` (with a bias where the
    library's layer had one) or ``cosine``; a 1x1 convolution stays one (linear head only)."""
    if isinstance(layer, nn.Linear):
        return make_head(kind, layer.in_features, num_classes, bias=layer.bias is not None)
    if kind != "linear":
        raise ConfigError(f"model.head={kind} needs a last fully connected layer, and {what} ends in a 1x1 "
                          "convolution; use model.head=linear or another model.")
    return nn.Conv2d(layer.in_channels, num_classes, kernel_size=1, bias=layer.bias is not None)


def set_head(model: nn.Module, width: int, kind: str, num_classes: int, what: str) -> nn.Module:
    """``model`` with its classifier of ``width`` outputs replaced by a new ``kind`` head of
    ``num_classes`` (:func:`last_layer`, :func:`new_head`)."""
    path, layer = last_layer(model, width, what)
    replace_module(model, path, new_head(layer, kind, num_classes, what))
    return model


def set_input_channels(model: nn.Module, channels: int) -> nn.Module:
    """``model`` whose first convolution takes ``channels`` input channels: the same convolution,
    newly initialised (pretrained weights of that layer are lost), where it takes others."""
    path, conv = next(((p, m) for p, m in model.named_modules() if isinstance(m, nn.Conv2d)), (None, None))
    if conv is None or conv.in_channels == channels:
        return model
    replace_module(model, path, nn.Conv2d(
        channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
        conv.groups, conv.bias is not None, conv.padding_mode))
    return model


def check_image_size(model: nn.Module, input_shape, what: str, needs: str) -> None:
    """One forward pass of a blank image of ``input_shape`` in evaluation mode (no statistics
    change, no random numbers drawn); the architecture's refusal of that size becomes one
    sentence saying ``needs``, the size it takes."""
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, *input_shape))
    except (RuntimeError, ValueError, AssertionError, IndexError) as error:
        height, width = input_shape[1:]
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise ConfigError(f"{what} cannot score this data set's {height}x{width} images ({reason}); it needs "
                          f"{needs}: choose data of that size (image_size=..., dataset.image_size=...) or "
                          "another model.") from None
    finally:
        model.train(training)
