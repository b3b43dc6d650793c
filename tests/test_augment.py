"""Batch augmentations and their targets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT, run_in_process
from topk.data.augment import Mixup, NoAugment
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


def test_no_augment_and_bad_alpha():
    x, y = torch.randn(2, 2), torch.tensor([0, 1])
    assert NoAugment()(x, y) == (x, y)
    with pytest.raises(ConfigError, match="augment.alpha must be > 0, got 0"):
        Mixup(num_classes=3, alpha=0)


@pytest.mark.parametrize("loss", sorted(path.stem for path in (ROOT / "conf" / "loss").glob("*.yaml")))
def test_training_with_mixup_runs_for_every_loss(tmp_path, loss):
    overrides = [f"loss={loss}", "augment=mixup", "trainer.batch_size=256"]
    if loss in ("ldam", "noised_imbal"):
        overrides.append("model.head=cosine")  # these losses carry the scale of a cosine head
    record, _ = run_in_process(tmp_path, overrides)
    assert record["status"] == "completed"


def test_image_augmentation_crops_then_normalises_then_cuts_out():
    from topk.data.augment import Augmentation
    from topk.data.transforms import Normalize

    torch.manual_seed(0)
    images = torch.randint(1, 256, (4, 3, 8, 8), dtype=torch.uint8)
    normalize = Normalize(mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2))
    augmentation = Augmentation(num_classes=3, crop_padding=0, flip=False, cutout_size=2)
    out = augmentation.train_transform((3, 8, 8), normalize)(images)
    zeroed = out == 0
    assert zeroed.any() and (zeroed.all(dim=1) == zeroed.any(dim=1)).all()  # whole pixels
    torch.testing.assert_close(out[~zeroed], normalize(images)[~zeroed])  # zero = the mean colour
    assert Augmentation(num_classes=3).train_transform((2,), None) is None


def test_image_augmentation_on_vectors_is_a_clear_error():
    from topk.data.augment import Augmentation

    with pytest.raises(ConfigError, match=r"crops, flips or cuts out images, but the inputs have shape \(2,\)"):
        Augmentation(num_classes=6, crop_padding=4, flip=True).train_transform((2,))
