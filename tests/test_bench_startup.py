"""scripts/bench_startup.py (topk.bench.startup): each command timed in turn, its ratio to `import torch` and the target."""

from __future__ import annotations

import subprocess

import pytest

from topk.bench import startup as bench_startup
from topk.repository import ROOT


def test_commands_take_turns_and_each_run_has_its_own_directory(tmp_path):
    ran = []
    seconds = bench_startup.time_commands(bench_startup.commands(tmp_path), 2, run=ran.append)
    assert [argv[-1] for argv in ran[:7]] == ["import torch", bench_startup.commands(tmp_path)[bench_startup.FLOOR](0)[-1],
                                              f"hydra.run.dir={tmp_path / 'bare0'}", f"hydra.run.dir={tmp_path / 'app0'}",
                                              "import topk", "--help", f"hydra.run.dir={tmp_path / 'run0'}"]
    assert "torch.optim.SGD" in ran[1][-1]
    assert ran[13][-1] == f"hydra.run.dir={tmp_path / 'run1'}"
    assert all(len(times) == 2 for times in seconds.values())


def test_rows_give_each_command_its_ratio_to_import_torch_and_say_whether_it_meets_its_target():
    seconds = {"import torch": [2.0, 1.0, 3.0], "import topk": [2.1, 2.0, 2.4], "train.py --help": [3.2, 3.0, 3.1],
               "1-epoch default run": [4.0, 3.9, 4.1]}
    rows = {row["command"]: row for row in bench_startup.startup_rows(seconds)}
    assert rows["1-epoch default run"]["ratio_to_floor"] is None  # no floor timed
    assert rows["import torch"]["ratio"] == 1.0 and rows["import torch"]["met"] is None
    assert (rows["import topk"]["ratio"], rows["import topk"]["met"]) == (1.05, True)
    assert (rows["train.py --help"]["ratio"], rows["train.py --help"]["met"]) == (1.55, False)
    assert (rows["1-epoch default run"]["ratio"], rows["1-epoch default run"]["met"]) == (2.0, True)
    table = bench_startup.markdown(list(rows.values()), 3)
    assert "| train.py --help | 3.10 | 1.55 |  |  | ≤ 1.5× | no |" in table


def test_the_floor_row_gives_each_command_its_ratio_to_torch_with_an_optimiser():
    seconds = {"import torch": [2.0], bench_startup.FLOOR: [3.0], "1-epoch default run": [4.5]}
    rows = {row["command"]: row for row in bench_startup.startup_rows(seconds)}
    assert rows["1-epoch default run"]["ratio_to_floor"] == 1.5 and rows["1-epoch default run"]["ratio"] == 2.25
    assert "| 1-epoch default run | 4.50 | 2.25 | 1.50 |  | ≤ 2.0× | no |" in bench_startup.markdown(list(rows.values()), 1)


def test_the_hydra_floor_row_gives_each_command_its_ratio_to_a_bare_hydra_app():
    seconds = {"import torch": [2.0], bench_startup.FLOOR: [3.0], bench_startup.HYDRA_FLOOR: [4.0],
               "1-epoch default run": [4.4]}
    rows = {row["command"]: row for row in bench_startup.startup_rows(seconds)}
    assert rows["1-epoch default run"]["ratio_to_hydra_floor"] == 1.1
    assert "| 1-epoch default run | 4.40 | 2.20 | 1.47 | 1.10 | ≤ 2.0× | no |" in bench_startup.markdown(list(rows.values()), 1)


@pytest.mark.parametrize("floor, folder", [(bench_startup.BARE_HYDRA, "bare0"), (bench_startup.HYDRA_FLOOR, "app0")])
def test_the_hydra_apps_compose_their_config_and_build_an_optimiser(tmp_path, floor, folder):
    argv = bench_startup.commands(tmp_path)[floor](0)
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)  # composed, run, exit status 0
    assert (tmp_path / folder).is_dir()
