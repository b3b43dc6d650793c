"""``make bench`` and ``make bench-train`` (:mod:`topk.bench.train`) end to end at a tiny size
(no timing is asserted: the machines are shared; the numbers are the benchmark's, in
outputs/bench/{sweeps,train}.md)."""

from __future__ import annotations

import torch
from hydra.core.global_hydra import GlobalHydra

from conftest import ROOT
from topk.bench import train as bench_train


def test_engine_and_bare_loop_are_timed_on_the_same_densenet_epochs():
    row = bench_train.compare(*bench_train.densenet_setting(32), batch_size=16, epochs=2)
    assert row["epochs_timed"] == 2 and row["train_images"] == 32
    for key in ("bare_images_per_s", "engine_images_per_s", "ratio", "ratio_whole_run"):
        assert row[key] > 0
    text = bench_train.densenet_markdown([row], threads=2)
    assert "| random CIFAR-shaped images, DenseNet 40-12 | 16 |" in text and "Target:" in text


def test_sweeps_baseline_is_the_same_bare_loop():
    threads = torch.get_num_threads()
    GlobalHydra.instance().clear()
    try:
        seconds = bench_train.bare_seconds_per_run("s20_exp1", 1)  # one thread, as the sweeps' jobs
    finally:
        torch.set_num_threads(threads)
    assert seconds > 0
    result = {"completed": 150, "runs": 150, "seconds": 100.0, "wall_seconds_per_run": 0.67,
              "bare_seconds_per_run": seconds, "overhead_factor": 1.34 / seconds}
    text = bench_train.sweeps_markdown({"s20_exp1": result}, 100.0)
    assert "| s20_exp1 | 150/150 | 100.0 | 0.67 |" in text and "| total | | 100.0 (target 600) |" in text


def test_scripts_are_thin_and_use_the_installed_package():
    """``make install`` installs ``topk`` (``pip install -e .``): no script, benchmark or test edits
    ``sys.path`` (pytest puts the repository's root there, ``pyproject.toml``), and each script
    only calls its module's ``main`` (the logic is in ``topk``)."""
    scripts = sorted((ROOT / "scripts").glob("*.py"))
    assert len(scripts) >= 12
    edits = ("sys.path." + "insert", "sys.path." + "append")  # not written whole: this file is read too
    for path in [*scripts, *sorted((ROOT / "topk").rglob("*.py")), *sorted((ROOT / "tests").glob("*.py")),
                 ROOT / "train.py"]:
        assert not any(edit in path.read_text() for edit in edits), path
    for path in scripts:
        assert "from topk." in path.read_text() and len(path.read_text().splitlines()) <= 12, path
