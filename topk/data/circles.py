"""Synthetic data of Sawada et al. 2020 (S20), Section IV.

Six classes on the unit circle. Class ``c`` has its (major) mode at angle ``60°·c``; a point's
angle is drawn from a normal distribution around its mode and mapped to ``(cos θ, sin θ)``.

* ``circles`` (S20 Experiment 1): one mode per class, width ``sigma`` degrees.
* ``circles_multimodal`` (S20 Experiments 2 and 3): a major mode of width 10° at ``60°·c`` and a
  minor mode, "2 times less frequent" (so each point belongs to it with probability 1/3), of the
  same width at ``60°·c + d``.

300 points per class are sampled for training and again for testing (S20 §IV-A); every split is
drawn from a generator seeded with the run's seed, so a seed fixes the data.
"""

from __future__ import annotations

import math

import torch

from topk.data.splits import DataSplits, TensorSplit
from topk.errors import ConfigError

NUM_CLASSES = 6
CLASS_SPACING_DEGREES = 60.0


def sample_circle_points(
    points_per_class: int,
    sigma: float,
    generator: torch.Generator,
    minor_shift: float | None = None,
    minor_fraction: float = 1.0 / 3.0,
) -> TensorSplit:
    """Draw ``points_per_class`` points for each of the six classes.

    Parameters
    ----------
    sigma : float
        Width (standard deviation, degrees) of every mode.
    minor_shift : float or None
        Offset ``d`` (degrees) of the minor mode from the major one; ``None`` for one mode.
    minor_fraction : float
        Probability that a point comes from the minor mode (1/3: the minor mode is half as
        frequent as the major one, S20 §IV-B).
    """
    labels = torch.arange(NUM_CLASSES).repeat_interleave(points_per_class)
    centres = labels.double() * CLASS_SPACING_DEGREES
    if minor_shift is not None:
        from_minor = torch.rand(len(labels), generator=generator, dtype=torch.float64)
        centres = centres + minor_shift * (from_minor < minor_fraction).double()
    angles = centres + sigma * torch.randn(len(labels), generator=generator, dtype=torch.float64)
    radians = angles * (math.pi / 180.0)
    points = torch.stack([torch.cos(radians), torch.sin(radians)], dim=1).float()
    return TensorSplit(points, labels)


def _check_count(name: str, value: int, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"dataset.{name} must be a positive number of points, got {value}.")


def _make_splits(
    seed: int,
    sigma: float,
    minor_shift: float | None,
    train_per_class: int,
    test_per_class: int,
    val_per_class: int,
) -> DataSplits:
    if sigma < 0:
        raise ConfigError(
            f"dataset.sigma is the width of a class in degrees and must be >= 0, got {sigma}."
        )
    _check_count("train_per_class", train_per_class)
    _check_count("test_per_class", test_per_class)
    _check_count("val_per_class", val_per_class, allow_zero=True)
    generator = torch.Generator().manual_seed(seed)
    train = sample_circle_points(train_per_class, sigma, generator, minor_shift)
    test = sample_circle_points(test_per_class, sigma, generator, minor_shift)
    val = None
    if val_per_class > 0:
        val = sample_circle_points(val_per_class, sigma, generator, minor_shift)
    return DataSplits(train=train, val=val, test=test, num_classes=NUM_CLASSES)


def circles(
    seed: int,
    sigma: float = 20.0,
    train_per_class: int = 300,
    test_per_class: int = 300,
    val_per_class: int = 50,
) -> DataSplits:
    """S20 Experiment 1: six single-mode classes of width ``sigma`` degrees (50 validation points
    per class by default, drawn after train and test; S20's runs, ``s20_exp1``, take none)."""
    return _make_splits(seed, sigma, None, train_per_class, test_per_class, val_per_class)


def circles_multimodal(
    seed: int,
    d: float = 90.0,
    sigma: float = 10.0,
    train_per_class: int = 300,
    test_per_class: int = 300,
    val_per_class: int = 0,
) -> DataSplits:
    """S20 Experiments 2 and 3: a major mode at ``60°·c`` and a minor mode at ``60°·c + d``."""
    return _make_splits(seed, sigma, d, train_per_class, test_per_class, val_per_class)
