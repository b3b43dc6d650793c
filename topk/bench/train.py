"""The engine against a bare PyTorch loop, on the paper workloads where its speed matters.

    python scripts/bench_train.py sweeps              # or: make bench (about 5 minutes on 2 idle cores)
    python scripts/bench_train.py sweeps --experiments s20_exp1 --bare-runs 6
    python scripts/bench_train.py densenet            # or: make bench-train (about 4 minutes)
    python scripts/bench_train.py densenet --quick

The bare loop (:func:`bare_epoch`) is forward, loss, ``optimizer.zero_grad(set_to_none=True)``,
backward, step, and nothing else: no evaluation, records, logging or checks.

- **sweeps** (``make bench``): the wall time of the three S20 synthetic sweeps (450 runs of 1,000
  full-batch epochs), each ``python train.py -m +experiment=<id>`` end to end (process start-up,
  Hydra, data, training, evaluation every 50 epochs, checkpoints, TensorBoard and records), and
  the number of completed records. Beside it, the bare loop trains the same model with the same
  loss and optimiser for the same epochs on a sample of the sweep's runs, one thread, as the
  sweep's jobs do; ``framework core-seconds per run / bare seconds per run`` is the framework's
  overhead factor on these tiny runs. Writes ``<out>/sweeps.{json,md}``.
- **densenet** (``make bench-train``): ``topk.engine.fit`` on a DenseNet 40-12 with random
  CIFAR-shaped images, the standard crop + flip and batch 64, doing what an image run does
  between evaluations (the loss check, the stop-signal check, the running loss, the schedule,
  history and TensorBoard rows, a checkpoint every epoch; evaluation is left out), against the
  bare loop on a copy of the same model from the same state, with the same batches
  (``TensorBatches``, the same per-batch transform) and optimiser. The two take turns epoch by
  epoch (``fit``'s end-of-epoch callback runs one bare epoch), so that both share the machine's
  slow and fast moments; reported are the median images per second of each and the median over
  epochs of the engine's speed over the bare loop's in the epoch right after it (paired, which
  cancels most of the drift). Writes ``<out>/train.{json,md}``.
"""

from __future__ import annotations

import copy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose
from hydra.utils import instantiate

from topk.bench.common import BENCH_OUT, configs, parser, write_outputs
from topk.data import TensorBatches
from topk.data.synthetic import random_images
from topk.data.transforms import Compose, Normalize, RandomCropFlip
from topk.engine import FitSettings, fit
from topk.models.densenet import CifarDenseNet
from topk.records import find_results
from topk.repository import ROOT

EXPERIMENTS = ("s20_exp1", "s20_exp2", "s20_exp3")
SWEPT = {"s20_exp1": ("dataset.sigma", 20), "s20_exp2": ("dataset.d", 90), "s20_exp3": ("model.hidden", 8)}
LOSSES = ("ce", "topk_group", "topk_transition")


def bare_epoch(model, loss_fn, optimizer, batches) -> float:
    """One epoch of the bare loop over ``batches``; returns its seconds."""
    started = time.perf_counter()
    model.train()
    for inputs, labels in batches:
        loss = loss_fn(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - started


# --- S20 sweeps (make bench) ----------------------------------------------------------------------

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
    """The bare loop's seconds per run over ``samples`` runs of the sweep (the losses in turn)."""
    parameter, value = SWEPT[experiment]
    torch.set_num_threads(1)
    total = 0.0
    with configs():
        for index in range(samples):
            cfg = compose("train", overrides=[f"+experiment={experiment}", f"loss={LOSSES[index % len(LOSSES)]}",
                                              f"{parameter}={value}", f"seed={index}"])
            torch.manual_seed(index)
            splits = instantiate(cfg.dataset, seed=index)
            model = instantiate(cfg.model, num_classes=splits.num_classes, input_shape=splits.input_shape)
            optimizer = instantiate(cfg.optim)(model.parameters())
            full_batch = [(splits.train.x, splits.train.y)]
            loss_fn = instantiate(cfg.loss)
            total += sum(bare_epoch(model, loss_fn, optimizer, full_batch) for _ in range(cfg.trainer.epochs))
    return total / samples


def sweeps_markdown(results: dict, total: float) -> str:
    lines = ["| sweep | runs completed | wall (s) | wall per run (s) | bare loop per run (s) | overhead factor |",
             "|---|---|---|---|---|---|"]
    for experiment, result in results.items():
        lines.append(f"| {experiment} | {result['completed']}/{result['runs']} | {result['seconds']:.1f} | "
                     f"{result['wall_seconds_per_run']:.2f} | {result['bare_seconds_per_run']:.2f} | "
                     f"{result['overhead_factor']:.2f} |")
    lines.append(f"| total | | {total:.1f} (target 600) | | | |")
    return "\n".join(lines) + "\n"


def bench_sweeps(args) -> None:
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    results = {}
    for experiment in args.experiments:
        sweep = time_sweep(experiment, args.out / "sweeps" / experiment / stamp, args.jobs)
        bare = bare_seconds_per_run(experiment, args.bare_runs)
        per_run = sweep["seconds"] / max(sweep["runs"], 1)
        sweep.update(wall_seconds_per_run=per_run, bare_seconds_per_run=bare,
                     overhead_factor=per_run * args.jobs / bare)
        results[experiment] = sweep
        print(f"{experiment}: {sweep['completed']}/{sweep['runs']} runs completed in "
              f"{sweep['seconds']:.1f} s; bare loop {bare:.2f} s/run; overhead x{sweep['overhead_factor']:.2f}")
    total = sum(result["seconds"] for result in results.values())
    summary = {"total_seconds": total, "target_seconds": 600, "torch_threads_per_job": 1,
               "experiments": results, "machine_cpus": torch.get_num_threads()}
    text = sweeps_markdown(results, total)
    write_outputs(args.out, "sweeps", summary, text)
    print(text)


# --- DenseNet on CIFAR-shaped images (make bench-train) -------------------------------------------

def densenet_setting(train_size: int):
    splits = random_images(seed=0, train_size=train_size, test_size=64)
    model = CifarDenseNet(splits.num_classes, splits.input_shape, depth=40, growth_rate=12)
    transform = Compose(RandomCropFlip(4, True), Normalize(splits.mean, splits.std))
    return "random CIFAR-shaped images, DenseNet 40-12", splits, model, transform


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)


def compare(name, splits, model, transform, batch_size: int, epochs: int, checkpoint_every: int = 1) -> dict:
    """``epochs`` timed engine epochs, each followed by one epoch of the bare loop."""
    def batches():
        return TensorBatches(splits.train, batch_size, shuffle=True, seed=0, transform=transform)

    bare_model, bare_batches = copy.deepcopy(model), batches()
    bare_optimizer, loss_fn = sgd(bare_model), torch.nn.CrossEntropyLoss()
    bare_seconds, engine_seconds, epoch_ended = [], [], [None]

    def after_engine_epoch(epoch: int, _row) -> None:
        if epoch_ended[0] is not None:  # the first epoch's interval includes fit's set-up
            engine_seconds.append(time.perf_counter() - epoch_ended[0])
        bare_batches.set_epoch(epoch)
        bare_seconds.append(bare_epoch(bare_model, loss_fn, bare_optimizer, bare_batches))
        epoch_ended[0] = time.perf_counter()

    optimizer = sgd(model)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[])
    # two epochs more than timed: the first includes the set-up, the last evaluates (fit always
    # evaluates its final epoch), so their intervals are dropped
    settings = FitSettings(epochs=epochs + 2, eval_every=epochs + 3, checkpoint_every=checkpoint_every,
                           progress=False, tensorboard=True)
    with tempfile.TemporaryDirectory() as run_dir:
        fit(model, torch.nn.CrossEntropyLoss(), optimizer, scheduler, batches(),
            {"test": TensorBatches(splits.test, 256, transform=transform)}, splits.num_classes,
            Path(run_dir), settings, on_epoch_end=after_engine_epoch)
    engine_seconds = engine_seconds[:-1]  # epochs 2 .. epochs + 1
    bare_seconds = bare_seconds[1 : 1 + len(engine_seconds)]  # the epochs run right after the engine's
    images = len(splits.train)
    return {"setting": name, "train_images": images, "batch_size": batch_size, "epochs_timed": len(engine_seconds),
            "engine_images_per_s": images / statistics.median(engine_seconds),
            "bare_images_per_s": images / statistics.median(bare_seconds),
            # the engine's speed over the bare loop's, epoch by epoch, then the median; and over the whole run
            "ratio": statistics.median(bare / engine for bare, engine in zip(bare_seconds, engine_seconds)),
            "ratio_whole_run": sum(bare_seconds) / sum(engine_seconds)}


def densenet_markdown(rows, threads: int) -> str:
    lines = [f"Training images per second, median over epochs, the engine and the bare loop taking turns "
             f"epoch by epoch ({threads} torch threads, torch {torch.__version__}); evaluation excluded. "
             "Engine / bare loop: the median over epochs of the engine's speed over the bare loop's in "
             "the epoch right after it, and the same over the whole run (total times, checkpoints "
             "included).", "",
             "| setting | batch | bare loop (img/s) | engine (img/s) | engine / bare loop | "
             "engine / bare loop, whole run | epochs |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['setting']} | {row['batch_size']} | {row['bare_images_per_s']:,.1f} | "
                     f"{row['engine_images_per_s']:,.1f} | {row['ratio']:.3f} | {row['ratio_whole_run']:.3f} | "
                     f"{row['epochs_timed']} |")
    met = all(row["ratio"] >= 0.95 for row in rows)
    lines += ["", "Target: the engine at least 0.95x the bare loop: " + ("met." if met else "NOT met.")]
    return "\n".join(lines) + "\n"


def bench_densenet(args) -> None:
    torch.manual_seed(0)
    rows = [compare(*densenet_setting(128 if args.quick else 256), batch_size=64, epochs=3 if args.quick else 20)]
    text = densenet_markdown(rows, torch.get_num_threads())
    write_outputs(args.out, "train", rows, text)
    print(text)


def main(argv=None) -> int:
    command = parser(__doc__)
    workloads = command.add_subparsers(dest="workload", required=True)
    sweeps = workloads.add_parser("sweeps", help="the S20 sweeps' wall time against the bare loop (make bench)")
    sweeps.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS), choices=EXPERIMENTS)
    sweeps.add_argument("--jobs", type=int, default=2, help="parallel runs (hydra.launcher.n_jobs)")
    sweeps.add_argument("--bare-runs", type=int, default=9, help="runs timed for the bare baseline")
    densenet = workloads.add_parser("densenet", help="fit against the bare loop on DenseNet (make bench-train)")
    densenet.add_argument("--quick", action="store_true", help="fewer epochs, a smaller image set")
    for workload in (sweeps, densenet):
        workload.add_argument("--out", type=Path, default=BENCH_OUT)
    args = command.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (bench_sweeps if args.workload == "sweeps" else bench_densenet)(args)
    return 0
