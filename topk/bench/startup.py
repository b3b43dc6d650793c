"""How long the entry points take to start, against ``python -c "import torch"`` timed in the same run.

    python scripts/bench_startup.py               # or: make bench-startup
    python scripts/bench_startup.py --repeats 3   # fewer repeats, a rougher answer

Each command runs in a new process, ``--repeats`` times; the commands take turns, so a busy
machine slows all of them alike. The table gives each command's median wall time and its ratio
to the median of ``import torch``, beside the targets of issue 36: ``import topk`` at most 1.1×,
``python train.py --help`` at most 1.5×, a one-epoch default run (the circles, a linear model)
at most 2×. A run's lower bound is not ``import torch`` alone: every torch optimiser imports
``torch._dynamo`` as it is built (``Optimizer.add_param_group`` is wrapped by
``torch._disable_dynamo``, which imports it on the first call), whatever the framework around it;
the row ``import torch + an optimiser`` times that floor, and the table gives each command's ratio
to it too. Writes ``outputs/bench/startup.json`` and ``outputs/bench/startup.md``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from topk.bench.common import BENCH_OUT, parser, write_outputs
from topk.repository import ROOT

BASELINE = "import torch"
FLOOR = "import torch + an optimiser"  # what any training run pays: torch, and torch._dynamo
TARGETS = {"import topk": 1.1, "train.py --help": 1.5, "1-epoch default run": 2.0}


def commands(scratch: Path) -> dict[str, Callable[[int], list[str]]]:
    """Each timed command, given the repeat's number (a run writes a directory of its own)."""
    train = [sys.executable, str(ROOT / "train.py")]
    return {
        BASELINE: lambda i: [sys.executable, "-c", "import torch"],
        FLOOR: lambda i: [sys.executable, "-c", "import torch; torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)"],
        "import topk": lambda i: [sys.executable, "-c", "import topk"],
        "train.py --help": lambda i: [*train, "--help"],
        "1-epoch default run": lambda i: [*train, "trainer.epochs=1", "trainer.progress=false",
                                          f"hydra.run.dir={scratch / f'run{i}'}"],
    }


def time_commands(timed: dict[str, Callable[[int], list[str]]], repeats: int,
                  run: Callable[[list[str]], object] = None) -> dict[str, list[float]]:
    """The wall seconds of each command, ``repeats`` times, the commands taking turns."""
    run = run or (lambda argv: subprocess.run(argv, cwd=ROOT, capture_output=True, check=True))
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    for i in range(repeats):
        for name, argv in timed.items():
            start = time.perf_counter()
            run(argv(i))
            seconds[name].append(time.perf_counter() - start)
    return seconds


def startup_rows(seconds: dict[str, list[float]]) -> list[dict]:
    """A row per command: its median seconds, its ratio to ``import torch``'s and the target."""
    baseline = statistics.median(seconds[BASELINE])
    floor = statistics.median(seconds[FLOOR]) if FLOOR in seconds else None
    rows = []
    for name, times in seconds.items():
        median = statistics.median(times)
        target = TARGETS.get(name)
        rows.append({"command": name, "median_s": round(median, 3), "ratio": round(median / baseline, 2),
                     "ratio_to_floor": None if floor is None else round(median / floor, 2),
                     "target": target, "met": None if target is None else median / baseline <= target})
    return rows


def markdown(rows: list[dict], repeats: int) -> str:
    lines = [f"Start-up, median of {repeats} runs each (wall seconds), against `python -c \"import torch\"`.",
             "", "| command | median (s) | × import torch | × torch + optimiser | target | met |",
             "|---|---:|---:|---:|---:|---|"]
    for row in rows:
        target = "" if row["target"] is None else f"≤ {row['target']}×"
        met = "" if row["met"] is None else ("yes" if row["met"] else "no")
        floor = "" if row.get("ratio_to_floor") is None else f"{row['ratio_to_floor']:.2f}"
        lines.append(f"| {row['command']} | {row['median_s']:.2f} | {row['ratio']:.2f} | {floor} | {target} | {met} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    command = parser(__doc__)
    command.add_argument("--repeats", type=int, default=7)
    command.add_argument("--out", type=Path, default=BENCH_OUT)
    args = command.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        rows = startup_rows(time_commands(commands(Path(scratch)), args.repeats))
    table = markdown(rows, args.repeats)
    write_outputs(args.out, "startup", {"repeats": args.repeats, "rows": rows}, table)
    print(table, end="")
    print(f"wrote {args.out / 'startup.md'} and startup.json")
    return 0
