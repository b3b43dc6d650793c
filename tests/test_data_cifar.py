"""CIFAR-100 reader, train/validation split and label noise on a tiny data set in the real format."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, write_tiny_cifar100
from topk.data.cifar import CIFAR100_MEAN, CIFAR100_STD, CifarSplits, cifar100
from topk.data.fixtures import official_coarse_mapping
from topk.errors import ConfigError, DataError

# The team's reference copy, beside the repository on its machines only: the comparison skips
# in a user's clone.
SHARED = ROOT.parent / "shared"

FINE_TO_COARSE = official_coarse_mapping()
COARSE_OF = torch.tensor(FINE_TO_COARSE)


def write_cifar100(root: Path, train_per_class: int, test_per_class: int) -> dict:
    """:func:`conftest.write_tiny_cifar100`'s files under ``root``; returns the ``train`` and
    ``test`` dicts as pickled, read back with :mod:`pickle` alone."""
    folder = write_tiny_cifar100(root, train_per_class, test_per_class) / "cifar-100-python"
    written = {}
    for name in ("train", "test"):
        with open(folder / name, "rb") as handle:
            written[name] = pickle.load(handle, encoding="bytes")
    return written


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    return root, write_cifar100(root, train_per_class=6, test_per_class=2)


@pytest.fixture(scope="module")
def larger(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar_larger")
    write_cifar100(root, train_per_class=60, test_per_class=1)
    return root


def test_shapes_dtypes_and_pixel_layout(tiny):
    root, written = tiny
    splits = cifar100(seed=0, root=root, val_size=100)
    assert isinstance(splits, CifarSplits) and splits.num_classes == 100
    assert splits.train.x.shape == (500, 3, 32, 32) and splits.train.x.dtype == torch.uint8
    assert splits.val.x.shape == (100, 3, 32, 32) and splits.test.x.shape == (200, 3, 32, 32)
    for part in (splits.train, splits.val, splits.test):
        assert part.y.dtype == torch.int64
    assert splits.mean == CIFAR100_MEAN and splits.std == CIFAR100_STD
    assert splits.mean[0] == pytest.approx(125.3 / 255) and splits.std[2] == pytest.approx(
        66.7 / 255
    )
    data, fine = written["test"][b"data"], written["test"][b"fine_labels"]
    for i in (0, 7, 199):  # the test set is the file, in order
        image = splits.test.x[i]
        assert image[0, 0].tolist() == data[i][:32].tolist()  # red, first row
        assert image[1, 0].tolist() == data[i][1024:1056].tolist()  # green, first row
        assert image[2, 31].tolist() == data[i][3072 - 32 :].tolist()  # blue, last row
    assert splits.test.y.tolist() == fine


def test_cifar10_normalisation_of_p22_and_unknown_name(tiny):
    root, _ = tiny
    splits = cifar100(seed=0, root=root, val_size=100, normalisation="cifar10")
    assert splits.mean == (0.4914, 0.4822, 0.4465) and splits.std == (0.2023, 0.1994, 0.2010)
    with pytest.raises(ConfigError, match="normalisation='imagenet' is unknown; choose one of cifar100, cifar10"):
        cifar100(seed=0, root=root, val_size=100, normalisation="imagenet")


def test_split_deterministic_balanced_disjoint_and_independent_of_run_seed(tiny):
    root, written = tiny
    fine = torch.tensor(written["train"][b"fine_labels"])
    a = cifar100(seed=0, root=root, val_size=200)
    b = cifar100(seed=5, root=root, val_size=200)
    c = cifar100(seed=0, root=root, val_size=200, split_seed=1)
    assert np.array_equal(a.val_indices, b.val_indices)
    assert not np.array_equal(a.val_indices, c.val_indices)
    assert torch.equal(a.val.x, b.val.x) and torch.equal(a.train.x, b.train.x)
    assert torch.bincount(a.val.y, minlength=100).tolist() == [2] * 100
    assert a.class_counts == [4] * 100
    val_idx = torch.as_tensor(a.val_indices)
    assert torch.equal(a.val.y, fine[val_idx])
    train_idx = torch.as_tensor(np.flatnonzero(a.train_labels_full >= 0))
    assert len(set(train_idx.tolist()) & set(val_idx.tolist())) == 0
    assert len(train_idx) + len(val_idx) == 600
    data = torch.from_numpy(written["train"][b"data"]).reshape(-1, 3, 32, 32)
    assert torch.equal(a.train.x, data[train_idx]) and torch.equal(a.val.x, data[val_idx])


def test_no_validation_and_train_labels_full(tiny):
    root, written = tiny
    fine = np.asarray(written["train"][b"fine_labels"])
    splits = cifar100(seed=0, root=root, val_size=0)
    assert splits.val is None and len(splits.train) == 600
    assert np.array_equal(splits.train_labels_full, fine) and splits.noise_rate == 0.0
    held = cifar100(seed=0, root=root, val_size=100, noise=0.5)
    full = held.train_labels_full
    assert full.dtype == np.int64 and full.shape == (600,)
    assert np.array_equal(np.flatnonzero(full == -1), held.val_indices)
    assert np.array_equal(full[full >= 0], held.train.y.numpy())


def test_noise_zero_leaves_labels_unchanged(tiny):
    root, written = tiny
    clean = cifar100(seed=0, root=root, val_size=100)
    zero = cifar100(seed=3, root=root, val_size=100, noise=0.0)
    assert torch.equal(clean.train.y, zero.train.y) and zero.noise_rate == 0.0
    fine = np.asarray(written["train"][b"fine_labels"])
    assert np.array_equal(clean.train.y.numpy(), fine[clean.train_labels_full >= 0])


def test_full_noise_stays_in_true_coarse_class_and_spreads(tiny):
    root, written = tiny
    fine = torch.tensor(written["train"][b"fine_labels"])
    clean = cifar100(seed=0, root=root, val_size=100)
    noisy = cifar100(seed=0, root=root, val_size=100, noise=1.0)
    assert torch.equal(COARSE_OF[noisy.train.y], COARSE_OF[clean.train.y])
    # every coarse class: the noisy labels cover several (typically all 5) of its fine labels
    for c in range(20):
        drawn = set(noisy.train.y[COARSE_OF[clean.train.y] == c].tolist())
        assert len(drawn) >= 3 and drawn <= set(torch.nonzero(COARSE_OF == c).flatten().tolist())
    assert 0.6 < noisy.noise_rate < 0.95
    # validation and test labels stay clean
    assert torch.equal(noisy.val.y, fine[torch.as_tensor(noisy.val_indices)])
    assert noisy.test.y.tolist() == written["test"][b"fine_labels"]


def test_published_code_grouping_leaves_the_coarse_class(tiny):
    root, _ = tiny
    clean = cifar100(seed=0, root=root, val_size=100)
    noisy = cifar100(seed=0, root=root, val_size=100, noise=1.0, noise_groups="published_code")
    y = noisy.train.y
    assert torch.equal(y - y % 5, clean.train.y - clean.train.y % 5)
    left = COARSE_OF[y] != COARSE_OF[clean.train.y]
    assert left.float().mean() > 0.3


def test_noise_depends_on_seed_only(tiny):
    root, _ = tiny
    a = cifar100(seed=1, root=root, val_size=100, noise=0.5)
    b = cifar100(seed=1, root=root, val_size=100, noise=0.5)
    c = cifar100(seed=2, root=root, val_size=100, noise=0.5)
    assert torch.equal(a.train.y, b.train.y) and a.noise_rate == b.noise_rate
    assert not torch.equal(a.train.y, c.train.y)
    # a sample's noisy label does not depend on which images are held out
    d = cifar100(seed=1, root=root, val_size=0, noise=0.5)
    kept = a.train_labels_full >= 0
    assert np.array_equal(a.train_labels_full[kept], d.train_labels_full[kept])


def test_realised_noise_rate(larger):
    for p in (0.2, 0.5):
        splits = cifar100(seed=0, root=larger, val_size=500, noise=p)
        assert splits.noise_rate == pytest.approx(p * 4 / 5, abs=0.03)


def test_missing_root_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="dataset.root.*cifar-100-python/.*dataset.download=true"):
        cifar100(seed=0, root=tmp_path / "nowhere")
    (tmp_path / "cifar-100-python").mkdir()
    (tmp_path / "cifar-100-python" / "meta").write_bytes(b"")
    with pytest.raises(ConfigError, match="train, test"):
        cifar100(seed=0, root=tmp_path)


# ----------------------------------------------------------------- broken files of the release


def with_broken_file(root: Path, name: str, breaks) -> Path:
    """A tiny release under ``root`` whose file ``name`` is replaced by ``breaks(its bytes)``;
    returns that file."""
    path = write_tiny_cifar100(root) / "cifar-100-python" / name
    path.write_bytes(breaks(path.read_bytes()))
    return path


def rewritten(change):
    """A breaker: unpickle the file, apply ``change`` to its dict, pickle it again."""
    return lambda content: pickle.dumps(change(pickle.loads(content, encoding="bytes")), protocol=2)


def without(key):
    return rewritten(lambda entry: {k: v for k, v in entry.items() if k != key})


def replacing(key, value):
    return rewritten(lambda entry: {**entry, key: value(entry[key]) if callable(value) else value})


def redownload(path: Path) -> str:
    folder = path.parent
    return (f"; download the official cifar-100-python archive again and unpack it into "
            f"{folder.parent}, or delete {folder} and set dataset.download=true.")


def test_random_bytes_name_the_file_and_say_to_download_again(tmp_path):
    path = with_broken_file(tmp_path, "train", lambda _: np.random.default_rng(0).bytes(5000))
    with pytest.raises(DataError) as broken:
        cifar100(seed=0, root=tmp_path)
    assert str(broken.value) == (f"{path} is not a readable CIFAR-100 python pickle "
                                 f"(UnpicklingError: invalid load key, '_'.){redownload(path)}")


BROKEN = {
    "train cut in half": ("train", lambda content: content[: len(content) // 2],
                          "is not a readable CIFAR-100 python pickle (UnpicklingError: pickle data "
                          "was truncated)"),
    "test cut short": ("test", lambda content: content[:100],
                       "is not a readable CIFAR-100 python pickle (UnpicklingError: pickle data "
                       "was truncated)"),
    "meta cut in half": ("meta", lambda content: content[: len(content) // 2],
                         "is not a readable CIFAR-100 python pickle (UnpicklingError: pickle data "
                         "was truncated)"),
    "empty meta": ("meta", lambda _: b"",
                   "is not a readable CIFAR-100 python pickle (EOFError: Ran out of input)"),
    "a list, not a dict": ("train", lambda _: pickle.dumps([1, 2]),
                           "holds a pickled list, not the dict of the CIFAR-100 python release"),
    "no fine labels": ("train", without(b"fine_labels"),
                       "has no 'fine_labels' entry, so it is not a file of the official CIFAR-100 "
                       "python release"),
    "images of 3000 bytes": ("test", replacing(b"data", lambda data: data[:, :3000]),
                             "holds data of shape (200, 3000), fine labels of shape (200,) and "
                             "coarse labels of shape (200,) instead of [N, 3072] images and N "
                             "labels of each kind"),
    "one label too few": ("train", replacing(b"fine_labels", lambda labels: labels[1:]),
                          "holds data of shape (600, 3072), fine labels of shape (599,)"),
    "labels of text": ("train", replacing(b"fine_labels", "abc"),
                       "has a 'fine_labels' entry that is not an array of int64 (ValueError: "),
    "coarse labels out of range": ("train", replacing(b"coarse_labels", [25] * 600),
                                   "has coarse labels outside 0..19, so it is not a file of the "
                                   "official CIFAR-100 python release"),
    "names not a list": ("meta", replacing(b"fine_label_names", 3),
                         "has a 'fine_label_names' entry of type int instead of a list of names"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_file_is_one_sentence_naming_it(tmp_path, case):
    name, breaks, reason = BROKEN[case]
    path = with_broken_file(tmp_path, name, breaks)
    with pytest.raises(DataError) as broken:
        cifar100(seed=0, root=tmp_path, val_size=100)
    message = str(broken.value)
    assert message.startswith(f"{path} {reason}") and message.endswith(redownload(path))
    assert "\n" not in message


def test_a_missing_meta_file_is_a_config_error_as_before(tmp_path):
    folder = write_tiny_cifar100(tmp_path) / "cifar-100-python"
    (folder / "meta").unlink()
    with pytest.raises(ConfigError) as missing:
        cifar100(seed=0, root=tmp_path)
    assert str(missing.value).startswith(f"CIFAR-100 folder {folder} lacks the file(s) meta; "
                                         "set dataset.root")


def test_train_py_reports_a_broken_file_in_one_line(tmp_path):
    path = with_broken_file(tmp_path / "data", "train", BROKEN["train cut in half"][1])
    from test_faults import run_main

    code, stderr = run_main(["dataset=cifar100", f"data_root={tmp_path / 'data'}", "model=mlp",
                             f"hydra.run.dir={tmp_path / 'run'}"], quick=False)  # train.py, in this process
    assert code == 1 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"Error: {path} is not a readable CIFAR-100 python pickle (UnpicklingError: pickle data "
        f"was truncated){redownload(path)}")


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_bad_noise_probability(tiny, p):
    root, _ = tiny
    with pytest.raises(ConfigError, match="dataset.noise"):
        cifar100(seed=0, root=root, noise=p)


def test_bad_noise_groups_and_val_size(tiny):
    root, _ = tiny
    with pytest.raises(ConfigError, match="coarse, published_code"):
        cifar100(seed=0, root=root, noise=0.1, noise_groups="consecutive")
    with pytest.raises(ConfigError, match="dataset.val_size"):
        cifar100(seed=0, root=root, val_size=600)


def test_download_uses_torchvision_and_reports_failure(tmp_path, monkeypatch):
    import torchvision.datasets

    calls = []

    def offline(root, train, download):
        calls.append((root, train, download))
        raise RuntimeError("no internet")

    monkeypatch.setattr(torchvision.datasets, "CIFAR100", offline)
    with pytest.raises(ConfigError, match="Could not download CIFAR-100.*no internet"):
        cifar100(seed=0, root=tmp_path, download=True)
    assert calls == [(str(tmp_path), True, True)]


def test_noise_follows_the_files_coarse_labels_whatever_the_mapping(tmp_path):
    """A fixture whose fine→coarse mapping is a random grouping (not the official one): every
    noisy label stays in its sample's coarse class, at the rate p·4/5."""
    grouping = np.random.default_rng(7).permutation(100) % 20  # five fine labels per coarse class
    root = write_tiny_cifar100(tmp_path, train_per_class=40, fine_to_coarse=grouping.tolist())
    clean = cifar100(seed=0, root=root, val_size=0, noise=0.0)
    noisy = cifar100(seed=0, root=root, val_size=0, noise=0.5)
    assert torch.equal(torch.as_tensor(grouping)[noisy.train.y], torch.as_tensor(grouping)[clean.train.y])
    changed = (noisy.train.y != clean.train.y).double().mean().item()
    assert abs(changed - 0.5 * 4 / 5) < 0.03 and noisy.noise_rate == pytest.approx(changed)


@pytest.mark.skipif(not (SHARED / "cifar100_fine_to_coarse.json").exists(), reason="shared/ is not beside the repo")
def test_shipped_mapping_is_the_shared_one():
    shared = json.loads((SHARED / "cifar100_fine_to_coarse.json").read_text())["fine_to_coarse"]
    assert official_coarse_mapping() == shared


def test_official_mapping_has_five_fine_labels_per_superclass():
    assert sorted(np.bincount(official_coarse_mapping()).tolist()) == [5] * 20

