"""Any torchvision classification model by name (``model=torchvision model.name=convnext_tiny``).

torchvision's model registry (``torchvision.models.list_models`` / ``get_model``) builds the
network, its weights API (``get_model_weights``, the ``weights`` enums, e.g. ``IMAGENET1K_V2`` or
``DEFAULT``) loads ImageNet weights from torch.hub's cache
(https://pytorch.org/vision/stable/models.html). The network is torchvision's as it is, stem
included (``model=resnet18`` is the one with a CIFAR stem); :mod:`topk.models.adapt` replaces
its classifier with a head of the data's classes, its first convolution where the data has other
than 3 channels, and says before training when it cannot take the data's image size. A Vision
Transformer without weights is built for the data's image size (torchvision's ``image_size``);
GoogLeNet and Inception v3 without weights are built without their auxiliary classifiers, which
torchvision also drops from the pretrained ones.
"""

from __future__ import annotations

import os

import torchvision
from torch import nn

from topk.errors import ConfigError
from topk.models.adapt import (
    check_image_size,
    close_names,
    image_input,
    set_head,
    set_input_channels,
)
from topk.models.resnet import _host_reachable, weights_path

# Builder arguments of a model without weights: no auxiliary classifiers (whose outputs training
# would receive as a tuple) and torchvision's own initialisation, as with weights.
WITHOUT_WEIGHTS = {
    "googlenet": {"aux_logits": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "init_weights": True},
}


def model_names() -> list[str]:
    """torchvision's classification models (``torchvision.models``, not its detection or video ones)."""
    return torchvision.models.list_models(module=torchvision.models)


def name_problem(key: str, name) -> str | None:
    """One sentence if ``name`` is not a torchvision classification model, listing them all."""
    names = model_names()
    if name in names:
        return None
    return (f"{key}={name!r} is not a torchvision classification model; {close_names(name, names)}"
            f"the {len(names)} models of torchvision {torchvision.__version__} are {', '.join(names)}.")


def chosen_weights(name: str, weights: str | None, pretrained: bool):
    """The weights enum member ``weights`` names for model ``name`` (``DEFAULT`` where it is null
    and ``pretrained``), or ``None`` for random initialisation."""
    if weights is None and not pretrained:
        return None
    members = torchvision.models.get_model_weights(name).__members__
    weights = "DEFAULT" if weights is None else str(weights)
    if weights not in members:
        raise ConfigError(f"model.weights={weights!r} is not a weights name of {name}; "
                          f"{close_names(weights, members)}choose one of {', '.join(members)}, "
                          "or model.weights=null for random initialisation.")
    return members[weights]


def load(name: str, weights, size: int) -> nn.Module:
    """``get_model(name, weights=weights)``; a weights file that is absent and cannot be downloaded,
    or cannot be read, is one sentence saying where torch.hub expects it."""
    if weights is None:
        arguments = WITHOUT_WEIGHTS.get(name, {"image_size": size} if name.startswith("vit_") else {})
        try:
            return torchvision.models.get_model(name, weights=None, **arguments)
        except AssertionError as error:  # ViT: an image size its patches do not divide
            raise ConfigError(f"model.name={name} cannot be built for {size}-pixel images ({error}); "
                              "choose an image size its patch size divides.") from None
    path, which = weights_path(weights), f"model.weights={weights.name} of {name}"
    if not os.path.exists(path) and not _host_reachable(weights.url):
        raise ConfigError(f"{which} needs the file {path}, which is absent and cannot be downloaded from "
                          f"{weights.url} (no network); copy the file there by hand.")
    try:
        return torchvision.models.get_model(name, weights=weights, progress=False)
    except Exception as error:  # download or unpickling failures of many kinds
        raise ConfigError(f"{which} could not be loaded from {path} ({error}); copy the file from "
                          f"{weights.url} there by hand.") from None


def torchvision_model(
    num_classes: int, input_shape, name: str = "resnet18", weights: str | None = None,
    pretrained: bool = False, head: str = "linear",
) -> nn.Module:
    """torchvision's classification model ``name`` with a ``head`` of ``num_classes`` outputs.

    Parameters
    ----------
    num_classes, input_shape
        From the data; ``input_shape`` is ``(channels, height, width)``.
    name
        One of ``torchvision.models.list_models(module=torchvision.models)``.
    weights
        A member of the model's weights enum (``IMAGENET1K_V1``, ``IMAGENET1K_V2``, ``DEFAULT``,
        ``torchvision.models.get_model_weights(name)``), loaded through torch.hub's cache; null:
        random initialisation, unless ``pretrained``.
    pretrained
        With ``weights`` null, load ``DEFAULT`` (so that ``model.pretrained=true`` means
        pretrained for every model).
    head
        ``linear`` or ``cosine`` (:mod:`topk.models.heads`), in place of the last linear layer,
        wherever the model holds it (``fc``, ``classifier[-1]``, ``heads.head``).
    """
    problem = name_problem("model.name", name)
    if problem:
        raise ConfigError(problem)
    channels, height, width = image_input(input_shape, f"model.name={name}")
    chosen = chosen_weights(name, weights, pretrained)
    model = load(name, chosen, width)
    outputs = len(chosen.meta["categories"]) if chosen is not None else 1000  # torchvision's default
    what = f"model.name={name}" + (f" with weights {chosen.name}" if chosen is not None else "")
    set_head(model, outputs, head, num_classes, what)
    set_input_channels(model, channels)
    reference = chosen or torchvision.models.get_model_weights(name).DEFAULT
    side = reference.meta["min_size"]
    fixed = chosen is not None and name.startswith(("vit_", "maxvit_"))
    needs = (f"{side[0]}x{side[1]} images" if fixed or name.startswith("maxvit_")
             else f"images of at least {side[0]}x{side[1]} pixels (torchvision's min_size)")
    check_image_size(model, (channels, height, width), what, needs)
    return model
