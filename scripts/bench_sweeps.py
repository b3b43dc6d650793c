"""Time the three S20 synthetic sweeps end to end (450 runs of 1,000 epochs).

    python scripts/bench_sweeps.py            # or: make bench
    python scripts/bench_sweeps.py --experiments s20_exp1 --bare-runs 6

For each sweep: wall time of ``python train.py -m +experiment=<id>`` (process start-up, Hydra,
data, training, per-epoch logging, evaluation, checkpoints and records included) and the number
of completed run records. As a baseline measured in the same run, a bare PyTorch loop trains the
same model with the same loss and optimiser for the same epochs with nothing else (no
evaluation, records or logging), one thread, on a sample of the sweep's runs. The ratio
``framework core-seconds per run / bare seconds per run`` is the framework's overhead factor.
Writes ``outputs/bench/sweeps.json`` and ``outputs/bench/sweeps.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402

from topk.records import find_results  # noqa: E402

EXPERIMENTS = ("s20_exp1", "s20_exp2", "s20_exp3")
SWEPT = {"s20_exp1": ("dataset.sigma", 20), "s20_exp2": ("dataset.d", 90), "s20_exp3": ("model.hidden", 8)}
LOSSES = ("ce", "topk_group", "topk_transition")


def time_sweep(experiment: str, sweep_dir: Path, jobs: int) -> dict:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", f"+experiment={experiment}",
         f"hydra.sweep.dir={sweep_dir}", f"hydra.launcher.n_jobs={jobs}"],
        cwd=ROOT, capture_output=True, text=True,
    )
    seconds = time.perf_counter() - started
    records = find_results(sweep_dir)
    completed = sum(record["status"] == "completed" for record in records)
    if result.returncode != 0:
        print(result.stderr[-2000:], file=sys.stderr)
    return {"seconds": seconds, "runs": len(records), "completed": completed, "n_jobs": jobs}


def bare_seconds_per_run(experiment: str, samples: int) -> float:
    """A bare loop (model, optimiser, loss, nothing else) over ``samples`` runs of the sweep."""
    parameter, value = SWEPT[experiment]
    torch.set_num_threads(1)
    total = 0.0
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for index in range(samples):
            loss_name = LOSSES[index % len(LOSSES)]
            cfg = compose("train", overrides=[f"+experiment={experiment}", f"loss={loss_name}",
                                              f"{parameter}={value}", f"seed={index}"])
            torch.manual_seed(index)
            splits = instantiate(cfg.dataset, seed=index)
            model = instantiate(cfg.model, num_classes=splits.num_classes, input_shape=splits.input_shape)
            loss_fn = instantiate(cfg.loss)
            optimizer = instantiate(cfg.optim)(model.parameters())
            inputs, labels = splits.train.x, splits.train.y
            started = time.perf_counter()
            for _ in range(cfg.trainer.epochs):
                loss = loss_fn(model(inputs), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            total += time.perf_counter() - started
    return total / samples


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS), choices=EXPERIMENTS)
    parser.add_argument("--jobs", type=int, default=2, help="parallel runs (hydra.launcher.n_jobs)")
    parser.add_argument("--bare-runs", type=int, default=9, help="runs timed for the bare baseline")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    results = {}
    for experiment in args.experiments:
        sweep = time_sweep(experiment, args.out / "sweeps" / experiment / stamp, args.jobs)
        bare = bare_seconds_per_run(experiment, args.bare_runs)
        per_run = sweep["seconds"] / max(sweep["runs"], 1)
        sweep.update(
            wall_seconds_per_run=per_run,
            bare_seconds_per_run=bare,
            overhead_factor=per_run * args.jobs / bare,
        )
        results[experiment] = sweep
        print(f"{experiment}: {sweep['completed']}/{sweep['runs']} runs completed in "
              f"{sweep['seconds']:.1f} s; bare loop {bare:.2f} s/run; overhead x{sweep['overhead_factor']:.2f}")
    total = sum(result["seconds"] for result in results.values())
    summary = {"total_seconds": total, "target_seconds": 600, "torch_threads_per_job": 1,
               "experiments": results, "machine_cpus": torch.get_num_threads()}
    (args.out / "sweeps.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = ["| sweep | runs completed | wall (s) | wall per run (s) | bare loop per run (s) | overhead factor |",
             "|---|---|---|---|---|---|"]
    for experiment, result in results.items():
        lines.append(f"| {experiment} | {result['completed']}/{result['runs']} | {result['seconds']:.1f} | "
                     f"{result['wall_seconds_per_run']:.2f} | {result['bare_seconds_per_run']:.2f} | "
                     f"{result['overhead_factor']:.2f} |")
    lines.append(f"| total | | {total:.1f} (target 600) | | | |")
    (args.out / "sweeps.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
