"""Augmentations: Mixup, CutMix and their targets (augment.mix), the per-image transforms
(augment.images: crop, flip, RandAugment, Cutout, RandomErasing)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT, run_in_process
from topk.data.augment import CutMix, ImageAugmentation, Mixup, MixupOrCutMix, NoMix
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


@pytest.mark.parametrize("settings,named", [
    ({"crop_padding": 4, "flip": True}, "crop_padding=4, flip=true"),
    ({"randaugment_ops": 2}, "randaugment_ops=2"),
    ({"random_erasing": 0.25}, "random_erasing=0.25"),
])
def test_image_augmentation_on_vectors_is_a_clear_error(settings, named):
    with pytest.raises(ConfigError, match=rf"^augment.images \({named}\) transforms images, but the inputs have "
                                          r"shape \(2,\); use augment=none or augment=mixup for non-image data\.$"):
        ImageAugmentation(**settings).train_transform((2,))


# ---- CutMix, and Mixup or CutMix at random (torchvision's v2 transforms) -----------------------------

def constant_images(batch: int = 6, size: int = 16) -> torch.Tensor:
    """Image i is the constant i + 1 in every pixel and channel, so a pixel says whose it is."""
    return (torch.arange(batch, dtype=torch.float32) + 1).view(batch, 1, 1, 1).expand(batch, 3, size, size).clone()


def test_cutmix_pastes_one_box_and_the_targets_mass_is_the_boxs_share():
    images, labels = constant_images(), torch.tensor([0, 1, 2, 3, 4, 0])
    partner = labels.roll(1)  # torchvision pairs each image with the one before it (batches are shuffled)
    pasted_any = False
    for seed in range(5):
        torch.manual_seed(seed)
        mixed, target = CutMix(num_classes=5, input_shape=(3, 16, 16))(images, labels)
        assert mixed.shape == images.shape and target.shape == (6, 5)
        torch.testing.assert_close(target.sum(dim=1), torch.ones(6))
        pasted = mixed != images  # where each image holds its partner's pixels
        assert (mixed[pasted] == images.roll(1, 0)[pasted]).all()
        box = pasted[0, 0]
        assert (pasted == box).all()  # one box, the same in every image and channel
        rows, cols = box.any(dim=1).nonzero(), box.any(dim=0).nonzero()
        if len(rows):  # a rectangle: every pixel between its first and last row and column
            assert box[rows.min():rows.max() + 1, cols.min():cols.max() + 1].all()
        share = box.float().mean()
        pasted_any |= bool(share > 0)
        for i in range(6):
            if partner[i] != labels[i]:
                torch.testing.assert_close(target[i, partner[i]], share)
                torch.testing.assert_close(target[i, labels[i]], 1 - share)
            else:  # mixed with its own class: all of the mass on it
                torch.testing.assert_close(target[i, labels[i]], torch.tensor(1.0))
    assert pasted_any


def test_cutmix_and_the_random_choice_are_deterministic_under_a_seed():
    images, labels = torch.rand(8, 3, 12, 12), torch.randint(0, 4, (8,))
    for mix in (CutMix(num_classes=4, alpha=0.7), MixupOrCutMix(num_classes=4)):
        outputs = []
        for seed in (3, 3, 4):
            torch.manual_seed(seed)
            outputs.append([mix(images, labels) for _ in range(3)])
        for (a, ta), (b, tb) in zip(outputs[0], outputs[1]):
            assert torch.equal(a, b) and torch.equal(ta, tb)
        assert any(not torch.equal(ta, tc) for (_, ta), (_, tc) in zip(outputs[0], outputs[2]))


def test_mixup_or_cutmix_chooses_either_per_batch():
    images, labels = constant_images(), torch.tensor([0, 1, 2, 3, 4, 0])
    mix = MixupOrCutMix(num_classes=5, mixup_alpha=0.2, cutmix_alpha=1.0)
    torch.manual_seed(0)
    kinds = set()
    for _ in range(20):
        mixed, target = mix(images, labels)
        torch.testing.assert_close(target.sum(dim=1), torch.ones(6))
        integral = (mixed == mixed.round()).all()  # CutMix copies pixels, Mixup blends them
        kinds.add("cutmix" if integral else "mixup")
    assert kinds == {"cutmix", "mixup"}


def test_cutmix_options_on_vectors_and_bad_alphas_are_one_sentence():
    from conftest import compose_config
    from topk import build as builder
    from topk.data.circles import circles

    splits = circles(seed=0, train_per_class=7)
    for option, name in (("cutmix", "CutMix"), ("mixup_cutmix", "MixupOrCutMix")):
        with pytest.raises(ConfigError, match=rf"^augment.mix is {name}, which mixes images, but the inputs have shape "
                                              r"\(2,\); use augment=mixup \(or augment.mix=null\) for non-image data\.$"):
            builder.build_augment(compose_config([f"augment={option}", "augment.images.crop_padding=null",
                                                  "augment.images.flip=false"]).augment, splits)
    with pytest.raises(ConfigError, match=r"^augment\.mix\.alpha must be > 0, got 0"):
        CutMix(num_classes=3, alpha=0)
    with pytest.raises(ConfigError, match=r"^augment\.mix\.cutmix_alpha must be > 0, got -1"):
        MixupOrCutMix(num_classes=3, cutmix_alpha=-1)


# ---- RandAugment and RandomErasing (torchvision's v2 transforms, per image) --------------------------

def test_randaugment_changes_each_image_on_its_own_and_keeps_uint8_images():
    from topk.data.transforms import EachImage

    torch.manual_seed(0)
    images = torch.randint(0, 256, (16, 3, 12, 12), dtype=torch.uint8)
    augmentation = ImageAugmentation(randaugment_ops=2, randaugment_magnitude=15)
    out = EachImage(augmentation.randaugment)(images)
    assert out.shape == images.shape and out.dtype == torch.uint8  # hence in 0..255
    changed = (out != images).flatten(1).any(dim=1)
    assert changed.sum() >= 12  # a few ops (Identity, or a draw of no effect) may leave one as it was
    # each image draws its own ops: the same image repeated comes out in several ways
    same = EachImage(augmentation.randaugment)(images[:1].expand(16, -1, -1, -1))
    assert len({tuple(image.flatten().tolist()) for image in same}) > 3


def test_image_augmentation_order_is_torchvisions_and_erasing_boxes_differ_per_image():
    from topk.data.transforms import Normalize

    torch.manual_seed(0)
    images = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    normalize = Normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    transform = ImageAugmentation(randaugment_ops=1, random_erasing=1.0).train_transform((3, 16, 16), normalize)
    out = transform(images)
    assert out.shape == images.shape and out.dtype == torch.float32
    assert out.min() >= -2 and out.max() <= 2  # normalised 0..255: RandAugment ran before, on uint8
    erased = (out == 0).all(dim=1)  # RandomErasing writes 0 after normalisation, in every channel
    assert erased.flatten(1).any(dim=1).all()  # p=1: every image has its box
    assert len({tuple(box.flatten().tolist()) for box in erased}) > 1  # not one box for the batch
    untouched = ImageAugmentation(random_erasing=1.0).train_transform((3, 16, 16), normalize)(images)
    kept = ~(untouched == 0).all(dim=1, keepdim=True).expand_as(untouched)
    torch.testing.assert_close(untouched[kept], normalize(images)[kept])  # outside the boxes: normalised input
    assert ImageAugmentation(random_erasing=0.0).erasing is None


@pytest.mark.parametrize("settings,message", [
    ({"randaugment_ops": 0}, r"augment.images.randaugment_ops must be a whole number of at least 1 or null"),
    ({"randaugment_ops": 2, "randaugment_magnitude": 31}, r"randaugment_magnitude must be a whole number from 0 to 30"),
    ({"random_erasing": 1.5}, r"augment.images.random_erasing must be a probability from 0 to 1, got 1.5\.$"),
])
def test_bad_randaugment_or_erasing_values_are_one_sentence(settings, message):
    with pytest.raises(ConfigError, match=message):
        ImageAugmentation(**settings)


def test_image_files_get_randaugment_in_the_workers_and_erasing_on_the_device(data_roots):
    from conftest import compose_config
    from topk import build as builder
    from topk.data.transforms import Normalize

    cfg = compose_config(["dataset=plantnet", *data_roots["plantnet"], "trainer.batch_size=4", "trainer.num_workers=0"])
    splits = instantiate_dataset(cfg)
    normalize = Normalize(splits.mean, splits.std)

    def first_batch(augmentation):
        batches = builder.make_batches(splits, "train", cfg.trainer, 0, "cpu", augmentation, normalize)
        return next(iter(batches))[0]

    plain = first_batch(ImageAugmentation())
    randaugmented = first_batch(ImageAugmentation(randaugment_ops=2, randaugment_magnitude=30))
    assert randaugmented.shape == plain.shape and randaugmented.dtype == plain.dtype
    assert not torch.equal(randaugmented, plain)
    assert torch.equal(first_batch(ImageAugmentation(randaugment_ops=2, randaugment_magnitude=30)), randaugmented)
    erased = first_batch(ImageAugmentation(random_erasing=1.0))
    assert ((erased == 0).all(dim=1).flatten(1).any(dim=1)).all()


def instantiate_dataset(cfg):
    from hydra.utils import instantiate

    return instantiate(cfg.dataset, seed=0)


def test_training_with_cutmix_randaugment_and_erasing_on_images(tmp_path):
    record, cfg = run_in_process(tmp_path, [
        "dataset=random_images", "dataset.num_classes=10", "dataset.image_size=8", "dataset.train_size=64",
        "dataset.test_size=16", "model=linear", "k=5", "augment=cutmix", "augment.images.randaugment_ops=2",
        "augment.images.random_erasing=0.5", "trainer.epochs=1", "trainer.batch_size=32",
        "trainer.tensorboard=false",
    ])
    assert record["status"] == "completed"
    assert cfg.augment.mix._target_ == "topk.data.augment.CutMix"
    assert record["params"]["augment.images.randaugment_ops"] == 2


@pytest.mark.parametrize("option,schema", [("mixup_cutmix", "MixupOrCutMixSchema"), ("cutmix", "MixupSchema")])
def test_a_saved_config_reads_back_onto_its_mix_options_schema(option, schema):
    """``+eval`` types a run's saved ``augment.mix`` by the schema of the option file naming its
    ``_target_`` (topk.schema.saved), as Hydra typed it for the run."""
    from omegaconf import OmegaConf

    from conftest import CONF, compose_config
    from topk.schema import config_problem
    from topk.schema.saved import typed
    from topk.schema.targets import file_offers

    plain = OmegaConf.to_container(compose_config([f"augment={option}"]), resolve=True)
    cfg = typed(plain, file_offers(CONF), CONF / "saved.yaml")
    assert OmegaConf.get_type(cfg.augment.mix).__name__ == schema and config_problem(cfg) is None
    plain["augment"]["mix"]["alpha" if option == "mixup_cutmix" else "cutmix_alpha"] = 1.0
    with pytest.raises(ConfigError, match=r"saved.yaml does not fit this version's schema: augment.mix.\w+ is not a setting"):
        typed(plain, file_offers(CONF), CONF / "saved.yaml")
