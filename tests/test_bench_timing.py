"""topk.bench.timing: the benchmarks' medians."""

from __future__ import annotations

import time

from topk.bench.timing import block_medians


def test_block_medians_time_each_step_in_blocks_after_an_untimed_call_taking_turns():
    calls = []
    steps = [lambda: calls.append("a"), lambda: (calls.append("b"), time.sleep(0.002))]
    fast, slow = block_medians(steps, budget=0.0, min_rounds=2, block=3)
    assert calls == (["a"] * 4 + ["b"] * 4) * 2
    assert slow >= 0.002 > fast
