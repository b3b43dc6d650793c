"""How long the entry points take to start, against ``python -c "import torch"`` timed in the same run.

    python scripts/bench_startup.py               # or: make bench-startup
    python scripts/bench_startup.py --repeats 3   # fewer repeats, a rougher answer

Each command runs in a new process, ``--repeats`` times; the commands take turns, so a busy
machine slows all of them alike. The table gives each command's median wall time and its ratio
to the median of ``import torch``, beside the targets of issue 36: ``import topk`` at most 1.1×,
``python train.py --help`` at most 1.5×, a one-epoch default run (the circles, a linear model)
at most 2×. A run's lower bound is not ``import torch`` alone, and three floors are timed beside
it. Every torch optimiser imports ``torch._dynamo`` as it is built (``Optimizer.add_param_group``
is wrapped by ``torch._disable_dynamo``, which imports it on the first call), whatever the
framework around it: the row ``import torch + an optimiser``. A Hydra application also imports
Hydra and composes its config twice before its function runs (once to learn the run mode, once
to run): the row ``bare Hydra app + an optimiser`` is a ``@hydra.main`` on a one-key config whose
function builds one optimiser, the floor of any Hydra application that trains; the row ``Hydra
app on conf/ + an optimiser`` is the same on this repository's ``conf/train`` (schemas
registered, no callbacks), the floor of any run configured by ``conf/``. The table gives each
command's ratio to the first and the last of these floors.
Writes ``outputs/bench/startup.json`` and ``outputs/bench/startup.md``.
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
BARE_HYDRA = "bare Hydra app + an optimiser"  # what any Hydra application that trains pays
HYDRA_FLOOR = "Hydra app on conf/ + an optimiser"  # what any run configured by conf/ pays
TARGETS = {"import topk": 1.1, "train.py --help": 1.5, "1-epoch default run": 2.0}
HYDRA_APP = """import hydra, torch
from topk.schema.store import register

@hydra.main(version_base="1.3", config_path={config_path!r}, config_name={config_name!r})
def build_an_optimiser(cfg):
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)

register()
build_an_optimiser()
"""


def hydra_app(scratch: Path, name: str, config_path: Path, config_name: str) -> Path:
    """A bare Hydra application, ``scratch/<name>.py``, composing ``config_path/config_name``
    (with this package's schemas registered) and building one optimiser."""
    script = scratch / f"{name}.py"
    script.write_text(HYDRA_APP.format(config_path=str(config_path), config_name=config_name))
    return script


def commands(scratch: Path) -> dict[str, Callable[[int], list[str]]]:
    """Each timed command, given the repeat's number (a run writes a directory of its own)."""
    train = [sys.executable, str(ROOT / "train.py")]
    (scratch / "one_key").mkdir(exist_ok=True)
    (scratch / "one_key" / "config.yaml").write_text("key: 1\n")
    bare = hydra_app(scratch, "bare_hydra_app", scratch / "one_key", "config")
    on_conf = hydra_app(scratch, "hydra_app_on_conf", ROOT / "conf", "train")
    return {
        BASELINE: lambda i: [sys.executable, "-c", "import torch"],
        FLOOR: lambda i: [sys.executable, "-c", "import torch; torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)"],
        BARE_HYDRA: lambda i: [sys.executable, str(bare), f"hydra.run.dir={scratch / f'bare{i}'}"],
        HYDRA_FLOOR: lambda i: [sys.executable, str(on_conf), "hydra.callbacks={}",
                                f"hydra.run.dir={scratch / f'app{i}'}"],
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
    """A row per command: its median seconds, its ratios to ``import torch``'s and to each floor
    timed (``None`` for one not timed), and the target."""
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    baseline = medians[BASELINE]

    def ratio_to(floor, median):
        return None if floor not in medians else round(median / medians[floor], 2)

    rows = []
    for name, median in medians.items():
        target = TARGETS.get(name)
        rows.append({"command": name, "median_s": round(median, 3), "ratio": round(median / baseline, 2),
                     "ratio_to_floor": ratio_to(FLOOR, median), "ratio_to_hydra_floor": ratio_to(HYDRA_FLOOR, median),
                     "target": target, "met": None if target is None else median / baseline <= target})
    return rows


def markdown(rows: list[dict], repeats: int) -> str:
    lines = [f"Start-up, median of {repeats} runs each (wall seconds), against `python -c \"import torch\"`.",
             "", "| command | median (s) | × import torch | × torch + optimiser | × Hydra app on conf/ + optimiser | target | met |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        target = "" if row["target"] is None else f"≤ {row['target']}×"
        met = "" if row["met"] is None else ("yes" if row["met"] else "no")
        floors = " | ".join("" if row.get(key) is None else f"{row[key]:.2f}"
                            for key in ("ratio_to_floor", "ratio_to_hydra_floor"))
        lines.append(f"| {row['command']} | {row['median_s']:.2f} | {row['ratio']:.2f} | {floors} | {target} | {met} |")
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
