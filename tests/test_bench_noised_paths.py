"""make bench-noised-paths (topk/bench/noised_paths.py): every setting composes from conf/, each
path is timed in turn against the chosen one, and a setting filter that matches none is refused."""

from __future__ import annotations

import json

import pytest

from topk.bench import noised_paths
from topk.bench.common import configs
from topk.functional.perturbed import PATHS


def test_every_setting_composes_its_loss_and_batch_from_conf():
    with configs():
        for setting in noised_paths.SETTINGS:
            cfg = noised_paths.compose("train", overrides=[f"dataset={setting.dataset}", f"loss={setting.loss}",
                                                           f"k={setting.k}"])
            assert (cfg.trainer.batch_size is None) == (setting.full_batch is not None), setting
            assert cfg.loss.epsilon > 0 and cfg.loss.n_samples >= 1 and cfg.loss.k == setting.k


def test_a_run_times_each_path_against_the_chosen_one_on_spread_and_tight_scores(tmp_path, capsys):
    assert noised_paths.main(["--only", "zoo", "--budget", "0.01", "--out", str(tmp_path), "--device", "cpu"]) == 0
    rows = json.loads((tmp_path / "noised_paths.json").read_text())["rows"]
    assert [(row["setting"], row["scores"], row["n"], row["batch"], row["B"]) for row in rows] == [
        ("CIFAR-100 (zoo)", "spread", 100, 64, 5), ("CIFAR-100 (zoo)", "tight", 100, 64, 5)]
    assert all(list(row["selection_seconds"]) == list(PATHS) and row["chosen"] == "kthvalue" for row in rows)
    table = (tmp_path / "noised_paths.md").read_text().splitlines()
    assert table[2].endswith("| kthvalue | candidates | every column |")
    assert table[4].startswith("| CIFAR-100 (zoo) | noised_imbal | 100 | 64 | 5 | 5 | 0.01 | spread | kthvalue |")
    assert table[4].split(" | ")[-3] == "1.00"  # the chosen path's own ratio


def test_a_filter_that_matches_no_setting_lists_the_settings(capsys):
    with pytest.raises(SystemExit) as stopped:
        noised_paths.main(["--only", "MNIST"])
    assert stopped.value.code == 2
    assert "no setting's name contains 'MNIST'; the settings: CIFAR-100 (G22 §4.4), CIFAR-100 (zoo)," in capsys.readouterr().err
