"""S20's synthetic data sets (§IV)."""

from __future__ import annotations

import math

import pytest
import torch

from topk.data import TensorBatches
from topk.data.circles import circles, circles_multimodal
from topk.errors import ConfigError


def angles_degrees(points):
    return torch.rad2deg(torch.atan2(points[:, 1].double(), points[:, 0].double()))


def wrapped_offset(points, labels):
    """Angle of each point relative to its class centre 60°·c, wrapped to (-180, 180]."""
    offset = angles_degrees(points) - 60.0 * labels.double()
    return (offset + 180.0) % 360.0 - 180.0


def test_circles_protocol():
    splits = circles(seed=0, sigma=15.0)
    assert splits.num_classes == 6 and splits.val.x.shape == (300, 2)  # 50 validation points per class
    assert splits.train.x.shape == (1800, 2) and splits.test.x.shape == (1800, 2)
    without = circles(seed=0, sigma=15.0, val_per_class=0)  # S20's runs: the same train and test points
    assert without.val is None and torch.equal(without.train.x, splits.train.x) and torch.equal(without.test.x, splits.test.x)
    assert splits.class_counts == [300] * 6
    assert torch.allclose(splits.train.x.norm(dim=1), torch.ones(1800), atol=1e-6)
    offsets = wrapped_offset(splits.train.x, splits.train.y)
    assert abs(offsets.mean().item()) < 1.5
    assert offsets.std().item() == pytest.approx(15.0, rel=0.08)


def test_same_seed_same_data_other_seed_other_data():
    a, b, c = circles(seed=3), circles(seed=3), circles(seed=4)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.x, b.test.x)
    assert not torch.equal(a.train.x, c.train.x)
    assert not torch.equal(a.train.x, a.test.x)


def test_multimodal_minor_mode_is_half_as_frequent():
    splits = circles_multimodal(seed=0, d=90.0, train_per_class=3000, test_per_class=10)
    offsets = wrapped_offset(splits.train.x, splits.train.y)
    minor = (offsets - 90.0).abs() < 45.0  # 4.5 sigma either side: the modes do not overlap
    major = offsets.abs() < 45.0
    assert (minor | major).all()
    assert minor.double().mean().item() == pytest.approx(1 / 3, abs=0.02)
    assert offsets[major].std().item() == pytest.approx(10.0, rel=0.08)


def test_validation_split_is_optional_and_drawn_apart():
    splits = circles(seed=0, val_per_class=50)
    assert len(splits.val) == 300
    assert not torch.equal(splits.val.x[:10], splits.test.x[:10])


def test_bad_values_stop_with_one_sentence():
    with pytest.raises(ConfigError, match=r"dataset.sigma .* must be >= 0, got -5"):
        circles(seed=0, sigma=-5)
    with pytest.raises(ConfigError, match="dataset.train_per_class must be a positive number"):
        circles(seed=0, train_per_class=0)


def test_batches_cover_the_split_once_and_reshuffle_per_epoch():
    splits = circles(seed=0, train_per_class=10)
    batches = TensorBatches(splits.train, batch_size=16, shuffle=True, seed=1)
    assert len(batches) == math.ceil(60 / 16)
    batches.set_epoch(1)
    first = torch.cat([y for _, y in batches])
    assert sorted(first.tolist()) == sorted(splits.train.y.tolist())
    again = torch.cat([y for _, y in batches])
    assert torch.equal(first, again)
    batches.set_epoch(2)
    assert not torch.equal(first, torch.cat([y for _, y in batches]))
    full = TensorBatches(splits.train, batch_size=None)
    assert [len(y) for _, y in full] == [60]


def test_batches_apply_the_transform_to_inputs_only():
    splits = circles(seed=0, train_per_class=5)
    batches = TensorBatches(splits.train, batch_size=7, transform=lambda x: 2 * x)
    inputs, labels = next(iter(batches))
    assert torch.equal(inputs, 2 * splits.train.x[:7]) and torch.equal(labels, splits.train.y[:7])
