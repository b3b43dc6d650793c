"""Augmentations: Mixup and its targets (augment.mix), the per-image transforms (augment.images)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT, run_in_process
from topk.data.augment import ImageAugmentation, Mixup, NoMix
from topk.errors import ConfigError


def test_mixup_mixes_inputs_and_targets_with_the_same_lambda():
    torch.manual_seed(0)
    inputs = torch.randn(16, 3)
    labels = torch.randint(0, 5, (16,))
    state = torch.get_rng_state()
    mixed, target = Mixup(num_classes=5, alpha=0.4)(inputs, labels)
    assert target.shape == (16, 5)
    torch.testing.assert_close(target.sum(dim=1), torch.ones(16))
    torch.set_rng_state(state)  # replay the draws
    lam = float(torch.distributions.Beta(0.4, 0.4).sample())
    permutation = torch.randperm(16)
    torch.testing.assert_close(mixed, lam * inputs + (1 - lam) * inputs[permutation])
    expected = lam * F.one_hot(labels, 5) + (1 - lam) * F.one_hot(labels[permutation], 5)
    torch.testing.assert_close(target, expected.float())


def test_no_mix_and_bad_alpha():
    x, y = torch.randn(2, 2), torch.tensor([0, 1])
    assert NoMix()(x, y) == (x, y)
    with pytest.raises(ConfigError, match=r"augment\.mix\.alpha must be > 0, got 0"):
        Mixup(num_classes=3, alpha=0)


@pytest.mark.parametrize("loss", sorted(path.stem for path in (ROOT / "conf" / "loss").glob("*.yaml")))
def test_training_with_mixup_runs_for_every_loss(tmp_path, loss):
    overrides = [f"loss={loss}", "augment=mixup", "trainer.batch_size=256"]
    if loss in ("ldam", "noised_imbal"):
        overrides.append("model.head=cosine")  # these losses carry the scale of a cosine head
    record, _ = run_in_process(tmp_path, overrides)
    assert record["status"] == "completed"


def test_torchvision_mixup_takes_only_image_batches():
    """Why Mixup is our own: torchvision's refuses the [B, d] vectors of the synthetic data sets."""
    from torchvision.transforms import v2

    with pytest.raises(ValueError, match="Expected a batched input with 4 dims"):
        v2.MixUp(num_classes=3)(torch.randn(8, 2), torch.randint(0, 3, (8,)))
    mixed, target = Mixup(num_classes=3)(torch.randn(8, 2), torch.randint(0, 3, (8,)))
    assert mixed.shape == (8, 2) and target.shape == (8, 3)


def test_mixup_option_builds_both_parts_and_the_others_no_mix():
    from conftest import compose_config
    from topk import build as builder
    from topk.data.circles import circles

    splits = circles(seed=0, train_per_class=7)
    images, mix = builder.build_augment(compose_config(["augment=mixup"]).augment, splits)
    assert isinstance(images, ImageAugmentation) and not images.needs_images
    assert isinstance(mix, Mixup) and (mix.num_classes, mix.alpha) == (6, 1.0)
    for option in ("none", "standard", "cutout"):
        images, mix = builder.build_augment(compose_config([f"augment={option}"]).augment, splits)
        assert isinstance(images, ImageAugmentation) and mix is None
    images, mix = builder.build_augment(compose_config(["augment=mixup", "augment.mix.alpha=0.4"]).augment, splits)
    assert mix.alpha == 0.4
    with pytest.raises(ConfigError, match=r"augment\.mix\.alpha must be > 0, got 0"):
        builder.build_augment(compose_config(["augment=mixup", "augment.mix.alpha=0"]).augment, splits)


def test_image_augmentation_crops_then_normalises_then_cuts_out():
    from topk.data.transforms import Normalize

    torch.manual_seed(0)
    images = torch.randint(1, 256, (4, 3, 8, 8), dtype=torch.uint8)
    normalize = Normalize(mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2))
    augmentation = ImageAugmentation(crop_padding=0, flip=False, cutout_size=2)
    out = augmentation.train_transform((3, 8, 8), normalize)(images)
    zeroed = out == 0
    assert zeroed.any() and (zeroed.all(dim=1) == zeroed.any(dim=1)).all()  # whole pixels
    torch.testing.assert_close(out[~zeroed], normalize(images)[~zeroed])  # zero = the mean colour
    assert ImageAugmentation().train_transform((2,), None) is None


def test_image_augmentation_on_vectors_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"crops, flips or cuts out images, but the inputs have shape \(2,\)"):
        ImageAugmentation(crop_padding=4, flip=True).train_transform((2,))
