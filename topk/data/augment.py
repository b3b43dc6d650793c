"""Training augmentations, in two separate parts (``conf/augment/*.yaml``, nodes ``images`` and ``mix``).

* :class:`ImageAugmentation` (``augment.images``): the per-image transforms of image data (random
  crop, flip, Cutout; :mod:`topk.data.transforms`), which ``train.py`` puts into the training data
  pipeline.
* the batch → target step (``augment.mix``): a callable ``(inputs, labels) -> (inputs, target)``
  applied to each training batch by :func:`topk.engine.train_one_epoch`; ``target`` is what the loss
  receives (int64 labels, or a probability matrix for :class:`Mixup`, as in the loss contract of
  docs/design.md §5). ``mix: null`` is :class:`NoMix`.
"""

from __future__ import annotations

import torch

from topk.data.transforms import Compose, Cutout, RandomCropFlip
from topk.errors import ConfigError


class NoMix:
    """Hand the batch to the loss unchanged (``augment.mix: null``)."""

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor):
        return inputs, labels

    def __repr__(self) -> str:
        return "NoMix()"


class Mixup:
    """Mixup (Zhang et al. 2018): train on convex combinations of pairs of examples.

    Each batch draws ``λ ~ Beta(alpha, alpha)`` and a permutation ``π`` of the batch, and returns
    inputs ``λ·x + (1-λ)·x_π`` with the probability target ``λ·e_y + (1-λ)·e_{y_π}`` ([B, n]).
    Cross-entropy and S20's losses use that target natively; losses defined on hard labels only
    evaluate ``Σ_i t_i L(s, i) = λ·L(s, y) + (1-λ)·L(s, y_π)``
    (:func:`topk.losses.targets.expected_over_targets`). Random draws use torch's global
    generator, whose state the checkpoints keep, so a resumed run mixes the same pairs.
    Our own rather than torchvision's ``transforms.v2.MixUp``, which accepts only 4-D image batches
    (and pairs neighbours by ``roll(1)``), whereas this one mixes inputs of any shape, such as the
    ``[B, d]`` vectors of the synthetic data sets.
    """

    def __init__(self, num_classes: int, alpha: float = 1.0):
        if alpha <= 0:
            raise ConfigError(f"augment.mix.alpha must be > 0, got {alpha}.")
        self.num_classes = num_classes
        self.alpha = alpha

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor):
        lam = float(torch.distributions.Beta(self.alpha, self.alpha).sample())
        permutation = torch.randperm(len(labels)).to(labels.device)
        mixed = lam * inputs + (1 - lam) * inputs[permutation]
        one_hot = torch.nn.functional.one_hot(labels, self.num_classes).to(mixed.dtype)
        target = lam * one_hot + (1 - lam) * one_hot[permutation]
        return mixed, target

    def __repr__(self) -> str:
        return f"Mixup(alpha={self.alpha})"


class ImageAugmentation:
    """The per-image transforms of a run's training images (``augment.images``).

    Applied to every training batch on the device: random crop with ``crop_padding`` pixels of zero
    padding and a horizontal ``flip`` (``standard``), then the data set's normalisation, then Cutout
    of ``cutout_size`` pixels (zeroed after normalisation, i.e. set to the mean colour, as DeVries &
    Taylor do). All off (the default) leaves only the normalisation; image options on non-image
    data stop with a clear error.
    """

    def __init__(
        self,
        crop_padding: int | None = None,
        flip: bool = False,
        cutout_size: int | None = None,
    ):
        self.crop = None
        if crop_padding is not None or flip:
            self.crop = RandomCropFlip(padding=crop_padding or 0, flip=flip)
        self.cutout = Cutout(cutout_size) if cutout_size is not None else None

    @property
    def needs_images(self) -> bool:
        return self.crop is not None or self.cutout is not None

    @property
    def random_crop(self) -> bool:
        """Whether training images get a random crop (``standard``, ``cutout``)."""
        return self.crop is not None and self.crop.padding > 0

    @property
    def flip(self) -> bool:
        return self.crop is not None and self.crop.flip

    def device_transform(self, normalize=None):
        """What runs on the device for images decoded and cropped per image by workers
        (:mod:`topk.data.images`): normalisation, then Cutout."""
        if normalize is None and self.cutout is None:
            return None
        return Compose(normalize, self.cutout)

    def train_transform(self, input_shape, normalize=None):
        """The per-batch input transform for training batches of ``input_shape`` inputs."""
        if self.needs_images and len(input_shape) != 3:
            raise ConfigError(
                f"this augmentation crops, flips or cuts out images, but the inputs have shape "
                f"{tuple(input_shape)}; use augment=none or augment=mixup for non-image data."
            )
        if not self.needs_images and normalize is None:
            return None
        return Compose(self.crop, normalize, self.cutout)

    def __repr__(self) -> str:
        parts = [repr(part) for part in (self.crop, self.cutout) if part is not None]
        return f"ImageAugmentation({', '.join(parts) or 'none'})"
