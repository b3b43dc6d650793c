"""``make bench-losses``' head-to-head with the published codes (:mod:`topk.bench.peers`), its
speed rows (:mod:`topk.bench.losses`) and ``scripts/gpu_sync_check.py``'s CPU dry run
(:mod:`topk.bench.sync_check`), at tiny sizes (no timing is asserted: the machines are shared;
the numbers are the benchmark's, in outputs/bench/losses.md)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from conftest import CONF
from topk.bench import losses, peers, sync_check
from topk.bench.common import compose_loss

# difftopk instantiates its autograd Function, which torch deprecates
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:difftopk.*")


def tiny_head_to_head(installed):
    """n = 10, k = 2, batch 8, one timed repeat of each loss against its published code."""
    threads = torch.get_num_threads()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return peers.bench_head_to_head([10], [2], 0.0, installed, min_repeats=1,
                                            batches_for=lambda n, device: [8])
    finally:
        torch.set_num_threads(threads)


def test_without_the_published_codes_one_sentence_says_how_to_add_them(monkeypatch):
    monkeypatch.setitem(sys.modules, "pytopk", None)  # import pytopk raises ImportError
    monkeypatch.setitem(sys.modules, "difftopk", None)
    installed = peers.load_peers()
    assert installed == {}
    assert tiny_head_to_head(installed) == []
    text = peers.head_to_head_markdown([], peers.peer_versions(installed), "CPU, 1 thread")
    assert "difftopk, pytopk not installed: pip install -e '.[peers]' to include the published codes." in text
    assert "| loss |" not in text


def test_head_to_head_rows_agree_with_the_published_codes():
    installed = peers.load_peers()
    if set(installed) != {"pytopk", "difftopk"}:
        pytest.skip("the published codes are not installed (pip install -e '.[peers]')")
    rows = tiny_head_to_head(installed)
    assert [(row["loss"], row["published"]) for row in rows] == [
        ("smooth_svm", "difftopk.SmoothHardTopKLoss"), ("noised_bal", "pytopk.BalNoisedTopK"),
        ("noised_imbal", "pytopk.ImbalNoisedTopK")] + [
        (f"diffsort_topk_ce, sorter={sorter}", "difftopk.TopKCrossEntropyLoss")
        for sorter in ("odd_even", "neuralsort", "softsort")]
    for row in rows:
        assert (row["n"], row["k"], row["batch"]) == (10, None if row["loss"].startswith("diffsort") else 2, 8)
        assert min(row["ce_seconds"], row["ours_seconds"], row["theirs_seconds"]) > 0
        assert row["speedup"] == pytest.approx(row["theirs_seconds"] / row["ours_seconds"])
        # same scores (and, for the noised losses, the same noise): same values and gradients
        assert row["abs_value_difference"] <= 1e-5 * max(1.0, abs(row["ours_value"])), row
        assert row["max_abs_grad_difference"] <= 1e-5, row
    json.dumps(rows)  # the rows go to losses.json as they are
    text = peers.head_to_head_markdown(rows, peers.peer_versions(installed), "CPU, 1 thread")
    lines = text.splitlines()
    assert lines[0] == "### Ours against the published codes (forward+backward, float32, CPU, 1 thread)"
    header = next(line for line in lines if line.startswith("| loss |"))
    assert header.count("|") == 13 and "ours / theirs speed-up" in header
    column = [cell.strip() for cell in header.split("|")].index("ours / theirs speed-up")  # read first, not scrolled to
    assert column == 6
    table_rows = [line for line in lines if line.startswith(("| noised", "| smooth", "| diffsort"))]
    for line in table_rows:
        row = next(row for row in rows if line.startswith(f"| {row['loss']} |"))
        digits = 2 if row["speedup"] < 10 else 1
        assert line.split("|")[column].strip() == f"{row['speedup']:.{digits}f}×"
    assert sum(line.startswith(("| noised", "| smooth", "| diffsort")) for line in lines) == 6
    assert "pytopk 0.1.0" in text and "difftopk 0.2.0" in text


def test_gpu_sync_check_dry_run_on_the_cpu(tmp_path):
    GlobalHydra.instance().clear()
    code = sync_check.main(["--device", "cpu", "--model", "linear", "--batch-size", "8", "--steps", "1",
                           "--losses", "noised_imbal", "--out", str(tmp_path)])
    assert code == 0
    result = json.loads((tmp_path / "sync_check.json").read_text())
    assert result["device"] == "CPU, dry run"
    assert result["losses"] == [{"loss": "noised_imbal", "sync": None, "result": "ran (CPU: no sync check)",
                                 "where": None}]
    assert "| noised_imbal | ran (CPU: no sync check) | – |" in (tmp_path / "sync_check.md").read_text()


def test_small_class_counts_are_timed_at_two_batches_and_diffsort_only_there():
    cpu = torch.device("cpu")
    assert [peers.head_to_head_batches(n, cpu) for n in (10, 100, 1000, 100_000)] == [[64, 256], [64, 256], [256], [32]]
    assert peers.head_to_head_batches(100_000, torch.device("cuda")) == [256]
    assert [k for _, k, _ in peers.peer_cases("noised_bal", [1, 5, 20], 10)] == [1, 5]
    assert len(peers.peer_cases("diffsort_topk_ce", [1, 5, 20], 100)) == 3
    assert peers.peer_cases("diffsort_topk_ce", [1, 5, 20], 1000) == []


def test_cpu_description_names_the_thread_count_that_timed_it():
    threads = torch.get_num_threads()
    try:
        for count, text in ((1, "CPU, 1 thread"), (2, "CPU, 2 threads")):
            torch.set_num_threads(count)
            assert losses.describe(torch.device("cpu")) == text
    finally:
        torch.set_num_threads(threads)


def test_speed_table_times_the_noised_losses_also_compiled():
    """The speed rows: every loss as configured, at each k below n (once if it has no k), and
    the noised losses also with loss.compile=true, which builds a loss that compiles."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cases = list(losses.speed_cases([2, 20], 10))
        compiled = compose_loss("noised_bal", 2, 10, ["loss.compile=true"])
    assert ("noised_bal, compile=true", "noised_bal", ["loss.compile=true"], 2) in cases
    assert ("noised_imbal, compile=true", "noised_imbal", ["loss.compile=true"], 2) in cases
    assert ("ce", "ce", [], None) in cases and ("smooth_svm", "smooth_svm", [], 2) in cases
    assert not any(k == 20 for *_, k in cases)  # k ≥ n is skipped
    assert sum("compile=true" in row for row, *_ in cases) == 2
    assert compiled.compile and compiled.k == 2
