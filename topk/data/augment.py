"""Training augmentations, in two separate parts (``conf/augment/*.yaml``, nodes ``images`` and ``mix``).

* :class:`ImageAugmentation` (``augment.images``): the per-image transforms of image data (random
  crop, flip, RandAugment, Cutout, RandomErasing; :mod:`topk.data.transforms`), which
  ``topk.build`` puts into the training data pipeline.
* the batch → target step (``augment.mix``): a callable ``(inputs, labels) -> (inputs, target)``
  applied to each training batch by :func:`topk.engine.train_one_epoch`; ``target`` is what the loss
  receives (int64 labels, or a probability matrix for :class:`Mixup`, :class:`CutMix` and
  :class:`MixupOrCutMix`, as in the loss contract of docs/design.md §5). ``mix: null`` is
  :class:`NoMix`.

torchvision is imported where an option needs it, not with this module (with the torch._dynamo it
imports, 1.4 s at each start: :meth:`topk.data.images.ImageFileSplits.image_transform`).
"""

from __future__ import annotations

import torch

from topk.data.transforms import Compose, Cutout, EachImage, RandomCropFlip
from topk.errors import ConfigError

RANDAUGMENT_MAGNITUDES = 31  # torchvision's RandAugment(num_magnitude_bins=31): magnitudes 0 to 30


def check_alpha(alpha: float, key: str = "augment.mix.alpha") -> None:
    if alpha <= 0:
        raise ConfigError(f"{key} must be > 0, got {alpha}.")


def check_images(input_shape, what: str) -> None:
    """Refuse a mix step that needs images on inputs of another shape (``[B, d]`` vectors)."""
    if input_shape is not None and len(input_shape) != 3:
        raise ConfigError(
            f"augment.mix is {what}, which mixes images, but the inputs have shape "
            f"{tuple(input_shape)}; use augment=mixup (or augment.mix=null) for non-image data."
        )


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
        check_alpha(alpha)
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


class CutMix:
    """CutMix (Yun et al. 2019, "CutMix: Regularization Strategy to Train Strong Classifiers with
    Localizable Features", ICCV): each image gets a box pasted from its partner in the batch.

    torchvision's ``transforms.v2.CutMix`` called as it is on the batch, whose interface is this
    step's, ``(images, labels) -> (images, target)``: per batch, ``λ ~ Beta(alpha, alpha)`` and a
    box of ``sqrt(1-λ)`` times the image's sides centred uniformly (clipped at the border), the
    same box for every image, filled from the batch rolled by one (batches are shuffled, so the
    partner is random); the target is ``λ'·e_y + (1-λ')·e_{y_partner}`` where ``1-λ'`` is the box's
    share of the image after clipping (Yun et al.'s Algorithm A1). It runs on the normalised
    batch on the device, which is the same as pasting before normalising (a per-channel affine
    map). Every loss takes the soft target (docs/design.md §5). Draws use torch's global
    generator (kept by the checkpoints). Images only: refused in one sentence on vectors.
    """

    def __init__(self, num_classes: int, input_shape=None, alpha: float = 1.0):
        from torchvision.transforms import v2

        check_alpha(alpha)
        check_images(input_shape, "CutMix")
        self.num_classes, self.alpha = num_classes, alpha
        self.cutmix = v2.CutMix(alpha=alpha, num_classes=num_classes)

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor):
        return self.cutmix(inputs, labels)

    def __repr__(self) -> str:
        return f"CutMix(alpha={self.alpha})"


class MixupOrCutMix:
    """Mixup or CutMix, one of the two chosen at random for each batch with probability 1/2, as
    torchvision's classification reference does (references/classification/train.py:
    ``v2.RandomChoice([v2.MixUp(alpha=mixup_alpha), v2.CutMix(alpha=cutmix_alpha)])``, whose
    ResNet-50 recipe in references/classification/README.md sets ``--mixup-alpha 0.2
    --cutmix-alpha 1.0``, the defaults here), and as timm's ``Mixup`` does with ``switch_prob=0.5``. torchvision's own three transforms, called as they are; Mixup here is
    torchvision's (neighbours paired by ``roll(1)`` of the shuffled batch), like CutMix, since both
    need images. The target is a probability matrix (docs/design.md §5). Images only.
    """

    def __init__(self, num_classes: int, input_shape=None, mixup_alpha: float = 0.2, cutmix_alpha: float = 1.0):
        from torchvision.transforms import v2

        check_alpha(mixup_alpha, "augment.mix.mixup_alpha")
        check_alpha(cutmix_alpha, "augment.mix.cutmix_alpha")
        check_images(input_shape, "MixupOrCutMix")
        self.num_classes, self.mixup_alpha, self.cutmix_alpha = num_classes, mixup_alpha, cutmix_alpha
        self.choice = v2.RandomChoice([v2.MixUp(alpha=mixup_alpha, num_classes=num_classes),
                                       v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes)])

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor):
        return self.choice(inputs, labels)

    def __repr__(self) -> str:
        return f"MixupOrCutMix(mixup_alpha={self.mixup_alpha}, cutmix_alpha={self.cutmix_alpha})"


class ImageAugmentation:
    """The per-image transforms of a run's training images (``augment.images``).

    In the order of torchvision's classification reference (references/classification/presets.py,
    ``ClassificationPresetTrain``): random crop with ``crop_padding`` pixels of zero padding and a
    horizontal ``flip`` (``standard``), then RandAugment (Cubuk et al. 2020, "RandAugment:
    Practical automated data augmentation with a reduced search space", CVPR Workshops;
    torchvision's ``v2.RandAugment(num_ops=randaugment_ops, magnitude=randaugment_magnitude)``, on
    the uint8 image), then the data set's normalisation, then Cutout of ``cutout_size`` pixels
    (zeroed after normalisation, i.e. set to the mean colour, as DeVries & Taylor do), then
    RandomErasing with probability ``random_erasing`` (Zhong et al. 2020, "Random Erasing Data
    Augmentation", AAAI; torchvision's ``v2.RandomErasing(p=random_erasing)`` with its defaults,
    after normalisation as in the reference). Images in memory are transformed per batch on the
    device, each image drawing its own RandAugment ops and erased box
    (:class:`topk.data.transforms.EachImage`); decoded image files get RandAugment per image in the
    decoding workers (:meth:`worker_transform`) and the rest per batch on the device. All off (the
    default) leaves only the normalisation; image options on non-image data stop with a clear
    error.
    """

    def __init__(
        self,
        crop_padding: int | None = None,
        flip: bool = False,
        cutout_size: int | None = None,
        randaugment_ops: int | None = None,
        randaugment_magnitude: int = 9,
        random_erasing: float = 0.0,
    ):
        settings = {"crop_padding": crop_padding, "flip": "true" if flip else None,
                    "randaugment_ops": randaugment_ops, "cutout_size": cutout_size,
                    "random_erasing": random_erasing or None}
        self.settings = {key: value for key, value in settings.items() if value is not None}
        self.crop = None
        if crop_padding is not None or flip:
            self.crop = RandomCropFlip(padding=crop_padding or 0, flip=flip)
        self.cutout = Cutout(cutout_size) if cutout_size is not None else None
        self.randaugment = randaugment(randaugment_ops, randaugment_magnitude)
        self.erasing = random_erasing_of(random_erasing)

    @property
    def needs_images(self) -> bool:
        return any(part is not None for part in (self.crop, self.randaugment, self.cutout, self.erasing))

    @property
    def random_crop(self) -> bool:
        """Whether training images get a random crop (``standard``, ``cutout``)."""
        return self.crop is not None and self.crop.padding > 0

    @property
    def flip(self) -> bool:
        return self.crop is not None and self.crop.flip

    def worker_transform(self, image_transform):
        """The per-image transform of decoded image files (:mod:`topk.data.images`, in the decoding
        workers): the data set's ``image_transform`` (decode, crop, flip), then RandAugment."""
        if self.randaugment is None:
            return image_transform
        from torchvision.transforms import v2

        return v2.Compose([image_transform, self.randaugment])

    def device_transform(self, normalize=None):
        """What runs on the device for images decoded and cropped per image by workers
        (:mod:`topk.data.images`): normalisation, then Cutout and RandomErasing."""
        if normalize is None and self.cutout is None and self.erasing is None:
            return None
        return Compose(normalize, self.cutout, each_image(self.erasing))

    def train_transform(self, input_shape, normalize=None):
        """The per-batch input transform for training batches of ``input_shape`` inputs."""
        if self.needs_images and len(input_shape) != 3:
            raise ConfigError(
                f"augment.images ({', '.join(f'{key}={value}' for key, value in self.settings.items())}) "
                f"transforms images, but the inputs have shape "
                f"{tuple(input_shape)}; use augment=none or augment=mixup for non-image data."
            )
        if not self.needs_images and normalize is None:
            return None
        return Compose(self.crop, each_image(self.randaugment), normalize, self.cutout, each_image(self.erasing))

    def __repr__(self) -> str:
        parts = [repr(self.crop)] if self.crop is not None else []
        if self.randaugment is not None:
            parts.append(f"RandAugment(num_ops={self.randaugment.num_ops}, magnitude={self.randaugment.magnitude})")
        if self.cutout is not None:
            parts.append(repr(self.cutout))
        if self.erasing is not None:
            parts.append(f"RandomErasing(p={self.erasing.p})")
        return f"ImageAugmentation({', '.join(parts) or 'none'})"


def each_image(transform):
    """``transform`` applied to each image of a batch on its own (``None`` stays ``None``)."""
    return None if transform is None else EachImage(transform)


def randaugment(num_ops: int | None, magnitude: int):
    """torchvision's ``v2.RandAugment`` (``None`` when ``num_ops`` is null)."""
    if num_ops is None:
        return None
    if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 1:
        raise ConfigError(f"augment.images.randaugment_ops must be a whole number of at least 1 or null "
                          f"(no RandAugment), got {num_ops}.")
    if isinstance(magnitude, bool) or not isinstance(magnitude, int) or not 0 <= magnitude < RANDAUGMENT_MAGNITUDES:
        raise ConfigError(f"augment.images.randaugment_magnitude must be a whole number from 0 to "
                          f"{RANDAUGMENT_MAGNITUDES - 1}, got {magnitude}.")
    from torchvision.transforms import v2

    return v2.RandAugment(num_ops=num_ops, magnitude=magnitude, num_magnitude_bins=RANDAUGMENT_MAGNITUDES)


def random_erasing_of(probability: float):
    """torchvision's ``v2.RandomErasing(p=probability)`` (``None`` for probability 0)."""
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 <= probability <= 1:
        raise ConfigError(f"augment.images.random_erasing must be a probability from 0 to 1, got {probability}.")
    if probability == 0:
        return None
    from torchvision.transforms import v2

    return v2.RandomErasing(p=float(probability))
