"""Any timm model by name (``model=timm model.name=convnext_nano``), timm being an optional extra.

``timm.create_model(name, pretrained=..., num_classes=..., in_chans=...)`` builds the network with
a linear classifier of the data's classes and a first convolution of its channels (timm adapts
pretrained weights to them), https://huggingface.co/docs/timm/reference/models. ``name`` may carry
a pretrained tag (``resnet50.a1_in1k``; without one, timm's default weights of the architecture).
Pretrained weights come from the Hugging Face Hub; offline, from its local cache or a file given
as ``model.weights_file`` (timm's ``pretrained_cfg_overlay=dict(file=...)``). A model of fixed
input size (a ViT) is built for the data's image size where it takes timm's ``img_size`` (timm
resamples pretrained position embeddings to it); :func:`topk.models.adapt.check_image_size`
says before training when the data's size cannot be taken.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from torch import nn

from topk.errors import ConfigError
from topk.models.adapt import check_image_size, close_names, image_input, new_head, replace_module
from topk.models.resnet import _host_reachable

INSTALL = ("model=timm needs the timm package, which is not installed; install it with "
           "pip install 'topk[timm]' (in a checkout: pip install -e '.[timm]').")
LIST_COMMAND = 'python -c "import timm; print(timm.list_models())"'
HUB = "https://huggingface.co"
HUB_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm looks for in a Hub repository


def import_timm():
    """The timm module, or one sentence saying how to install it."""
    try:
        import timm
    except ImportError:
        raise ConfigError(INSTALL) from None
    return timm


def name_problem(key: str, name) -> str | None:
    """One sentence if ``name`` is not a timm architecture (the closest ones and the command that
    lists them all) or its ``.tag`` no pretrained weights of it, or if timm is not installed."""
    try:
        timm = import_timm()
    except ConfigError as error:
        return str(error)
    arch, _, tag = str(name).partition(".")
    if not timm.is_model(arch):
        names = timm.list_models()
        return (f"{key}={name!r} is not a timm model; {close_names(arch, names)}the {len(names)} models of "
                f"timm {timm.__version__} are listed by {LIST_COMMAND}.")
    tagged = timm.list_pretrained(f"{arch}.*")
    if tag and name not in tagged:
        choose = f"choose one of {', '.join(tagged)}, or" if tagged else "it has none; use"
        return f"{key}={name!r} names no pretrained weights of {arch}; {choose} {key}={arch}."
    return None


def local_weights(timm, name: str, weights_file: str | None) -> str | None:
    """The local file to load pretrained weights from: ``weights_file``; else, where the Hub cannot
    be reached, the copy in the Hugging Face or torch.hub cache; ``None`` to let timm download."""
    if weights_file is not None:
        if not os.path.isfile(weights_file):
            raise ConfigError(f"model.weights_file={weights_file} is not a file; give the path of the "
                              f"weights of {name}, or model.weights_file=null.")
        return weights_file
    cfg = timm.get_pretrained_cfg(name)
    hub_id, url = (cfg.hf_hub_id, cfg.url) if cfg is not None else (None, None)
    if _host_reachable(HUB if hub_id else (url or HUB)):
        return None
    if hub_id:
        from huggingface_hub import try_to_load_from_cache

        cached = [try_to_load_from_cache(hub_id, file) for file in HUB_FILES]
        if any(isinstance(path, str) for path in cached):
            return next(path for path in cached if isinstance(path, str))
    if url:
        import torch

        path = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(urlparse(url).path))
        if os.path.isfile(path):
            return path
    raise ConfigError(f"model.pretrained=true needs timm's weights of {name} from {hub_id or url}, which "
                      "cannot be reached (no network) and are not in the cache; download them where there "
                      "is network and give the file with model.weights_file=PATH.")


def create(timm, name: str, size: tuple[int, int], **arguments) -> nn.Module:
    """``timm.create_model``, for the data's image ``size`` where the model's input size is fixed
    and it takes ``img_size`` (a fixed-size model without it: :func:`check_image_size` says
    which size it needs)."""
    cfg = timm.get_pretrained_cfg(name)
    if cfg is not None and cfg.fixed_input_size and tuple(cfg.input_size[1:]) != size:
        try:
            return create_or_refuse(timm, name, img_size=size, **arguments)
        except TypeError:
            pass
    return create_or_refuse(timm, name, **arguments)


def create_or_refuse(timm, name: str, **arguments) -> nn.Module:
    """``timm.create_model(name, **arguments)``; pretrained weights that cannot be loaded (a
    download, a file of another model) are one sentence."""
    try:
        return timm.create_model(name, **arguments)
    except TypeError:
        raise
    except Exception as error:  # downloads and weights files fail in many ways
        if not arguments.get("pretrained"):
            raise
        reason = " ".join(str(error).split())[:200]
        raise ConfigError(f"model.name={name} could not load its pretrained weights ({reason}); check "
                          "model.weights_file or the network.") from None


def timm_model(
    num_classes: int, input_shape, name: str = "resnet18", pretrained: bool = False,
    weights_file: str | None = None, head: str = "linear",
) -> nn.Module:
    """timm's model ``name`` with a ``head`` of ``num_classes`` outputs.

    Parameters
    ----------
    num_classes, input_shape
        From the data; ``input_shape`` is ``(channels, height, width)``.
    name
        One of ``timm.list_models()``, with a pretrained tag where wanted (``resnet50.a1_in1k``).
    pretrained
        Load timm's pretrained weights of ``name`` (from the Hugging Face Hub or its cache).
    weights_file
        A local file of those weights (implies ``pretrained``), e.g. on a machine without network.
    head
        ``linear`` (timm's own classifier) or ``cosine`` in its place (:mod:`topk.models.heads`).
    """
    timm = import_timm()
    problem = name_problem("model.name", name)
    if problem:
        raise ConfigError(problem)
    channels, height, width = image_input(input_shape, f"model.name={name}")
    pretrained = pretrained or weights_file is not None
    arguments = {"pretrained": pretrained, "num_classes": num_classes, "in_chans": channels}
    if pretrained and (file := local_weights(timm, name, weights_file)) is not None:
        arguments["pretrained_cfg_overlay"] = {"file": file}
    model = create(timm, name, (height, width), **arguments)
    what = f"model.name={name}"
    if head != "linear":
        classifier = model.get_classifier()
        path = next((p for p, m in model.named_modules() if m is classifier), None)
        if path is None:
            raise ConfigError(f"model.head={head} needs a single last layer, and {what} has "
                              f"{type(classifier).__name__}; use model.head=linear or another model.")
        replace_module(model, path, new_head(classifier, head, num_classes, what))
    size = model.pretrained_cfg.get("input_size", (channels, 224, 224))
    needs = (f"{size[1]}x{size[2]} images" if model.pretrained_cfg.get("fixed_input_size")
             else f"larger images (timm's input_size for it is {size[1]}x{size[2]})")
    check_image_size(model, (channels, height, width), what, needs)
    return model
