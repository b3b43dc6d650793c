"""``make bench-train``'s comparison runs end to end (no timing is asserted: the machines are
shared; the numbers are the benchmark's, in outputs/bench/train.md)."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import bench_train  # noqa: E402


def test_engine_and_both_bare_loops_are_timed_on_the_same_epochs():
    row = bench_train.compare(*bench_train.circles_setting(), batch_size=64, epochs=4, checkpoint_every=500)
    assert row["epochs_timed"] == 4 and row["train_images"] == 1800
    for key in ("bare_images_per_s", "bare_to_none_images_per_s", "engine_images_per_s", "bare_ratio",
                "bare_to_none_ratio", "bare_ratio_whole_run", "bare_to_none_ratio_whole_run"):
        assert row[key] > 0
    text = bench_train.markdown([row], threads=2)
    assert "| circles, MLP (m = 8) | 64 | bare loop |" in text and "Target:" in text
