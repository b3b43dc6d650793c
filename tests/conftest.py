"""Shared fixtures: compose the real config tree and run ``train.py`` in-process or as a CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from topk.schema.store import register

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

register()  # the config groups' schemas, which conf/ names in its defaults lists


def compose_config(overrides=(), return_hydra_config=False):
    """Compose ``conf/train.yaml`` with ``overrides`` exactly as ``train.py`` would."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=return_hydra_config)


# Quick settings for end-to-end runs: few epochs, no progress bar.
QUICK = ["trainer.epochs=4", "trainer.progress=false", "trainer.num_threads=1"]


def run_in_process(run_dir: Path, overrides=(), on_epoch_end=None):
    """Compose, set Hydra's job context to ``run_dir`` and call ``train.train``.

    Returns ``(record, cfg)``; exceptions propagate after the record is written, as in a real run.
    """
    import train

    cfg = compose_config([*QUICK, *overrides], return_hydra_config=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return train.train(cfg, on_epoch_end=on_epoch_end), cfg


def run_cli(args, cwd=ROOT, timeout=300, env_extra=None):
    """Run ``python train.py ARGS`` in a subprocess; returns the CompletedProcess."""
    env = dict(os.environ)
    env.pop("HYDRA_FULL_ERROR", None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "run"


def write_tiny_cifar100(root: Path, train_per_class: int = 6, test_per_class: int = 2, seed: int = 0,
                        fine_to_coarse=None) -> Path:
    """A CIFAR-100 of random images in the official python-pickle format, under ``root``, with
    the official fine-to-coarse mapping unless ``fine_to_coarse`` is given."""
    from topk.data.fixtures import write_cifar100

    return write_cifar100(root, train_per_class, test_per_class, seed, fine_to_coarse)


@pytest.fixture(scope="session")
def tiny_cifar100(tmp_path_factory):
    return write_tiny_cifar100(tmp_path_factory.mktemp("cifar"))


@pytest.fixture(scope="session")
def tiny_embeddings(tmp_path_factory):
    from topk.data.fixtures import write_embeddings

    return write_embeddings(tmp_path_factory.mktemp("embeddings"), {"train": 40, "test": 12})


@pytest.fixture(scope="session")
def tiny_imagenet(tmp_path_factory):
    from image_data import write_imagenet

    return write_imagenet(tmp_path_factory.mktemp("imagenet"))


@pytest.fixture(scope="session")
def tiny_plantnet(tmp_path_factory):
    from image_data import write_plantnet

    return write_plantnet(tmp_path_factory.mktemp("plantnet"))


@pytest.fixture(scope="session")
def tiny_fashion_mnist(tmp_path_factory):
    from topk.data.fixtures import write_fashion_mnist

    return write_fashion_mnist(tmp_path_factory.mktemp("fashion_mnist"), train_per_class=4, test_per_class=2)


@pytest.fixture(scope="session")
def tiny_imagenet_lt(tmp_path_factory):
    from image_data import write_imagenet_lt

    return write_imagenet_lt(tmp_path_factory.mktemp("imagenet_lt"))


@pytest.fixture(scope="session")
def data_roots(tiny_cifar100, tiny_imagenet, tiny_plantnet, tiny_imagenet_lt, tiny_embeddings, tiny_fashion_mnist):
    """Overrides that point each file-based data set at its tiny fixture (small images)."""
    small = ["dataset.image_size=8", "dataset.resize_size=10"]
    return {
        "cifar100": [f"dataset.root={tiny_cifar100}", "dataset.val_size=100"],
        "imagenet": [f"dataset.root={tiny_imagenet[0]}", "dataset.val_per_class=2", *small],
        "plantnet": [f"dataset.root={tiny_plantnet[0]}", *small],
        "imagenet_lt": [f"dataset.root={tiny_imagenet_lt[0]}", *small],
        "embeddings": [f"dataset.root={tiny_embeddings}"],
        "image_folder": [f"dataset.root={tiny_plantnet[0] / 'images'}", *small],  # train/, val/, test/
        "torchvision": [f"dataset.root={tiny_fashion_mnist}", "dataset.name=FashionMNIST", *small],
    }


def pytest_runtest_logreport(report):
    """Name each failing test the moment it fails (``FAILED <test id>``), in every run and under
    pytest-xdist too: a suite stopped before pytest's summary (the GPU checks' time limit, a CI
    job's) still says which tests failed."""
    if report.failed and not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller says it, once
        print(f"\nFAILED {report.nodeid} ({report.when})", file=sys.stderr, flush=True)
