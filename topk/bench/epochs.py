"""Compute each paper experiment needs, estimated from training steps timed on this machine.

    python scripts/bench_epochs.py            # 5 to 8 minutes on 2 idle CPU cores
    python scripts/bench_epochs.py --quick    # a rough pass in a couple of minutes
    python scripts/bench_epochs.py --experiments b18_tau g22_plantnet --no-share

Method. Every run of each experiment's sweep is composed from ``conf/train.yaml`` exactly as
``python train.py -m +experiment=<id>`` would (``+experiment=<id>`` plus one value per swept key;
the seed changes no cost, so each seed-free combination is composed once and counted once per
seed). Its model, loss and SGD optimiser are built with ``hydra.utils.instantiate`` from that
config (``model.pretrained=false``: weights cannot be downloaded here; the cost of a step is the
same), and a training step is what ``topk.engine.train_one_epoch`` does per batch: forward, loss,
clearing the gradients (``zero_grad`` here), backward, ``optimizer.step()``, on random float32 inputs of the run's shape
(3x32x32 for CIFAR-100, 3 x ``image_size`` squared for ImageNet, Pl@ntNet-300K and ImageNet-LT)
and batch size, with random labels (Mixup runs get two-label soft targets, which some losses
evaluate twice). Torch's default number of threads. One warm-up step, then the median of the
timed steps that fit in ``--budget`` seconds (at least 2, at most 5; ``--quick``: one step on a
batch of at most 16 images, scaled per image).

The loss is timed alone as well (forward + backward on standard-normal scores of the run's
[batch, classes] shape), for every loss configuration in every sweep. The noised losses' cost
grows with the number of columns within 16 epsilon of the K-th largest score: on these scores
every column for epsilon >= 0.1, few for epsilon = 0.01 (a cosine head's scores at
initialisation would involve them all; a few milliseconds either way). The full step is timed with the costliest loss of
the experiment on that network; when several experiments train the same network (model, input,
batch, classes: four experiments train DenseNet 40-40 on CIFAR-100) the network is timed once,
with the costliest loss of them all, and another experiment's step is that measurement minus
the difference of the two losses' own times (marked "†"; ``--no-share`` times each directly).
Each run's step is the network's step plus its own loss's time, so a sweep's total counts each
run at its own cost (the cosine and linear heads of the Pl@ntNet/ImageNet-LT losses count as one
network: they differ by one normalisation of the last layer).

From the step: seconds per epoch = ceil(training images / batch) x step seconds (CIFAR-100:
50,000 - ``dataset.val_size``; ImageNet: ``dataset.train_size`` or 1,281,167 - 1,000 x
``dataset.val_per_class``; Pl@ntNet-300K 243,916; ImageNet-LT 115,846); hours per run = epochs x
seconds per epoch / 3600; sweep CPU-hours = the sum over the sweep's runs, one after another on
this whole machine (core-hours: x the core count).

Limits. Training steps only: evaluation (every epoch by default), data loading and decoding,
augmentation and normalisation, checkpoints and logging are not included, so real runs take
longer (B18's ImageNet runs also evaluate ten crops of 100,000 images). Random inputs through an
untrained network cost what real ones do in dense float32 arithmetic. Other processes on the machine slow the steps:
the CPU use of each timing (process CPU seconds / (wall seconds x threads)) is recorded, and a
value well under 1 means the numbers are inflated. Nothing here measures a GPU: no GPU speed-up
is applied (a GPU is needed for every experiment listed); the only published GPU epoch time for
one of these set-ups (G22 Fig. 3, DenseNet 40-40 on CIFAR-100, GPU not named) is printed for
scale. Writes ``<out>/epochs.json`` and ``<out>/epochs.md``.
"""

from __future__ import annotations

import datetime
import gc
import itertools
import json
import math
import os
import statistics
import time
from functools import partial
from pathlib import Path

import torch
from hydra import compose
from hydra.utils import instantiate
from omegaconf import OmegaConf, open_dict

from topk.bench.common import BENCH_OUT, configs, loss_with_data, parser, write_outputs
from topk.bench.epochs_report import machine, method_notes, report_tables, scale_notes
from topk.hydra_callbacks import sweep_values

EXPERIMENTS = ("s20_cifar", "b18_cifar_noise", "b18_imagenet", "b18_margin", "b18_tau",
               "b18_sparsity", "g22_epsilon", "g22_samples", "g22_sparsity", "g22_cifar_noise",
               "g22_plantnet", "g22_imagenet_lt", "g22_imagenet", "p22_cifar", "zoo_cifar100",
               "zoo_plantnet")  # p22_imagenet: a linear head on embeddings
# Rows shown besides each network's costliest run: g22_samples sweeps B up to 100, so B = 10
# (the value of every other G22 CIFAR-100 experiment) gets its own row.
EXTRA_ROWS = {"g22_samples": ({"loss.n_samples": 10},)}

CIFAR100_IMAGES = 50_000
IMAGENET_TRAIN_IMAGES = 1_281_167
# dataset config _target_ -> (name, classes)
DATASETS = {
    "topk.data.cifar.cifar100": ("CIFAR-100", 100),
    "topk.data.imagenet.imagenet": ("ImageNet", 1000),
    "topk.data.plantnet.plantnet": ("Pl@ntNet-300K", 1081),
    "topk.data.imagenet_lt.imagenet_lt": ("ImageNet-LT", 1000),
}
FIXED_TRAIN_IMAGES = {"Pl@ntNet-300K": 243_916, "ImageNet-LT": 115_846}


# --- the sweeps, from the composed configs ------------------------------------------------------

def override_text(value) -> str:
    return "null" if value is None else str(value)


def model_label(model: dict) -> str:
    target = model["_target_"].rsplit(".", 1)[-1]
    if target == "CifarDenseNet":
        label = f"DenseNet {model['depth']}-{model['growth_rate']}"
    elif target == "torchvision_resnet":
        label = "ResNet-" + model["name"].removeprefix("resnet")
    elif target == "torchvision_densenet121":
        label = "DenseNet-121"
    else:
        label = target
    return label + (" (cosine head)" if model.get("head") == "cosine" else "")


def loss_label(name: str, loss: dict, soft: bool) -> str:
    shown = {"k": "k", "tau": "τ", "epsilon": "ε", "n_samples": "B"}
    params = [f"{symbol}={loss[key]:g}" for key, symbol in shown.items() if key in loss]
    return name + (f" {' '.join(params)}" if params else "") + (" (Mixup targets)" if soft else "")


def describe_run(experiment: str, choices: dict, count: int) -> dict:
    """The composed config of one job, reduced to what its cost depends on."""
    overrides = [f"+experiment={experiment}", *(f"{k}={override_text(v)}" for k, v in choices.items())]
    cfg = compose("train", overrides=overrides, return_hydra_config=True)
    loss_name = cfg.hydra.runtime.choices.loss
    with open_dict(cfg):
        del cfg["hydra"]
    resolved = OmegaConf.to_container(cfg, resolve=True)
    dataset, classes = DATASETS[resolved["dataset"]["_target_"]]
    data = resolved["dataset"]
    if dataset == "CIFAR-100":
        input_shape, train_images = (3, 32, 32), CIFAR100_IMAGES - data["val_size"]
    else:
        side = data.get("image_size", resolved["image_size"])
        input_shape = (3, side, side)
        if dataset == "ImageNet":
            train_images = data["train_size"] or IMAGENET_TRAIN_IMAGES - classes * data["val_per_class"]
        else:
            train_images = FIXED_TRAIN_IMAGES[dataset]
    model = dict(resolved["model"])
    pretrained = bool(model.get("pretrained"))
    if "pretrained" in model:
        model["pretrained"] = False  # no download here; the cost of a step is the same
    batch = resolved["trainer"]["batch_size"]
    soft = resolved["augment"].get("mix") is not None  # Mixup hands the loss soft targets
    network = {k: v for k, v in model.items() if k not in ("head", "pretrained")}
    return {
        "choices": choices, "count": count, "dataset": dataset, "classes": classes,
        "input_shape": input_shape, "train_images": train_images, "batch_size": batch,
        "epochs": resolved["trainer"]["epochs"], "model": model, "pretrained": pretrained,
        "model_label": model_label(model), "optim": resolved["optim"], "loss": resolved["loss"],
        "loss_name": loss_name, "soft_targets": soft,
        "loss_label": loss_label(loss_name, resolved["loss"], soft),
        "network_key": json.dumps([network, input_shape, classes, batch], sort_keys=True),
        "loss_key": json.dumps([resolved["loss"], soft, classes, batch], sort_keys=True),
    }


def enumerate_runs(experiment: str) -> tuple[dict, list[dict]]:
    """The sweep's parameters and one description per seed-free job (``count`` = its seeds)."""
    params = sweep_values(compose("train", overrides=[f"+experiment={experiment}"],
                                  return_hydra_config=True).hydra.sweeper.params)
    seeds = len(params.get("seed", [0]))
    keys = [key for key in params if key != "seed"]
    runs = [describe_run(experiment, dict(zip(keys, values)), seeds)
            for values in itertools.product(*(params[key] for key in keys))]
    return params, runs


# --- timing --------------------------------------------------------------------------------------

def make_target(batch: int, classes: int, soft: bool, generator: torch.Generator) -> torch.Tensor:
    labels = torch.randint(0, classes, (batch,), generator=generator)
    if not soft:
        return labels
    lam = float(torch.rand((), generator=generator))
    one_hot = torch.nn.functional.one_hot(labels, classes).float()
    return lam * one_hot + (1 - lam) * one_hot[torch.randperm(batch, generator=generator)]


def build_loss(run: dict) -> torch.nn.Module:
    """The run's loss; LDAM and the noised imbalanced loss get long-tailed class counts (their
    values change the margins, not the cost)."""
    weights = [1.0 / (index + 1) for index in range(run["classes"])]
    total = sum(weights)
    counts = [max(1, round(run["train_images"] * w / total)) for w in weights]
    return loss_with_data(run["loss"], counts, run["classes"])


def time_repeats(step, budget: float, min_repeats: int, max_repeats: int) -> dict:
    """One warm-up call, then timed calls while they fit in ``budget`` seconds."""
    begin = time.perf_counter()
    step()
    warmup = time.perf_counter() - begin
    walls, cpus = [], []
    while len(walls) < max_repeats and (
        len(walls) < min_repeats or sum(walls) + statistics.median(walls) <= budget
    ):
        wall, cpu = time.perf_counter(), time.process_time()
        step()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"median": statistics.median(walls), "seconds": walls, "warmup": warmup,
            "cpu_use": sum(cpus) / (sum(walls) * torch.get_num_threads()),
            "cpu_median": statistics.median(cpus) / torch.get_num_threads()}


def time_loss(run: dict, budget: float) -> dict:
    """Forward + backward of the loss alone on standard-normal scores [batch, classes]."""
    generator = torch.Generator().manual_seed(0)
    loss_fn = build_loss(run)
    scores = torch.randn(run["batch_size"], run["classes"], generator=generator, requires_grad=True)
    target = make_target(run["batch_size"], run["classes"], run["soft_targets"], generator)

    def step():
        scores.grad = None
        loss_fn(scores, target).backward()

    timing = time_repeats(step, budget, min_repeats=3, max_repeats=200)
    return {"loss": run["loss_label"], "seconds": timing["median"], "repeats": len(timing["seconds"]),
            "cpu_use": timing["cpu_use"]}


def time_training_step(run: dict, budget: float, min_steps: int, max_batch: int | None) -> dict:
    """Median wall time of one training step of ``run`` (scaled per image if ``max_batch`` cuts
    the batch, in ``--quick``)."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    batch = run["batch_size"] if max_batch is None else min(run["batch_size"], max_batch)
    model = instantiate(run["model"], num_classes=run["classes"], input_shape=list(run["input_shape"]))
    model.train()
    loss_fn = build_loss(run)
    optimizer = instantiate(run["optim"])(model.parameters())
    inputs = torch.randn(batch, *run["input_shape"], generator=generator)
    target = make_target(batch, run["classes"], run["soft_targets"], generator)
    finite = []

    def step():
        loss = loss_fn(model(inputs), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        finite.append(bool(torch.isfinite(loss)))

    timing = time_repeats(step, budget, min_repeats=min_steps, max_repeats=5)
    scale = run["batch_size"] / batch
    return {
        "model": run["model_label"], "loss": run["loss_label"], "timed_batch": batch,
        "step_seconds": timing["median"] * scale, "timed_step_seconds": timing["seconds"],
        "warmup_seconds": timing["warmup"], "cpu_use": timing["cpu_use"],
        "cpu_seconds_per_thread": timing["cpu_median"] * scale,
        "scaled_from_batch": batch if scale != 1 else None, "loss_finite": all(finite),
    }


# --- the estimate --------------------------------------------------------------------------------

def run_hours(run: dict, step_seconds: float) -> float:
    return run["epochs"] * math.ceil(run["train_images"] / run["batch_size"]) * step_seconds / 3600


def select_rows(experiment: str, runs: list[dict], loss_seconds: dict) -> list[dict]:
    """Per network: its costliest run (largest training set among equals), plus EXTRA_ROWS."""
    rows = []
    for network in dict.fromkeys(run["network_key"] for run in runs):
        mine = [run for run in runs if run["network_key"] == network]
        rows.append(max(mine, key=lambda run: (loss_seconds[run["loss_key"]], run["train_images"])))
        for choices in EXTRA_ROWS.get(experiment, ()):
            matching = [run for run in mine if all(run["choices"].get(k) == v for k, v in choices.items())]
            if matching:
                extra = max(matching, key=lambda run: (loss_seconds[run["loss_key"]], run["train_images"]))
                if extra is not rows[-1]:
                    rows.append(extra)
    return rows


def parse_args(argv=None):
    command = parser(__doc__)
    command.add_argument("--quick", action="store_true",
                        help="batches cut to 16 images (times scaled per image), 1 timed step: rough")
    command.add_argument("--out", type=Path, default=BENCH_OUT, help="output folder")
    command.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    command.add_argument("--budget", type=float, default=None,
                        help="seconds of timed steps per network after the warm-up (default 60; quick 3)")
    command.add_argument("--no-share", action="store_true",
                        help="time every row's step directly instead of once per network")
    args = command.parse_args(argv)
    args.budget = args.budget if args.budget is not None else (3.0 if args.quick else 60.0)
    args.min_steps, args.max_batch = (1, 16) if args.quick else (2, None)
    args.loss_budget = 0.05 if args.quick else 0.3
    return args


def enumerate_sweeps(experiments) -> dict:
    """1. Every run of every sweep, from the composed configs."""
    sweeps = {}
    with configs():
        for experiment in experiments:
            params, runs = enumerate_runs(experiment)
            sweeps[experiment] = {"params": params, "runs": runs}
            print(f"{experiment}: {sum(run['count'] for run in runs)} runs", flush=True)
    return sweeps


def time_losses(sweeps: dict, budget: float) -> tuple[dict, dict, float]:
    """2. Each distinct loss alone: its seconds and timing by loss key, and the median CPU use."""
    loss_seconds, loss_timings = {}, {}
    for sweep in sweeps.values():
        for run in sweep["runs"]:
            if run["loss_key"] not in loss_seconds:
                timing = time_loss(run, budget)
                loss_seconds[run["loss_key"]] = timing["seconds"]
                loss_timings[run["loss_key"]] = {**timing, "batch": run["batch_size"], "classes": run["classes"]}
    loss_cpu_use = statistics.median(timing["cpu_use"] for timing in loss_timings.values())
    print(f"timed {len(loss_seconds)} loss configurations alone (median CPU use {loss_cpu_use:.2f})", flush=True)
    return loss_seconds, loss_timings, loss_cpu_use


def timing_key(row: dict, no_share: bool):
    """The network's key (its step timed once for all its rows), or with ``--no-share`` the row's."""
    return row["network_key"] if not no_share else (row["network_key"], row["loss_key"])


def time_networks(sweeps: dict, loss_seconds: dict, args) -> dict:
    """3. The rows, and the runs whose full step is timed: per network (or per row, --no-share),
    the costliest loss of all the rows that train it. Returns the step timings by timing key."""
    for experiment, sweep in sweeps.items():
        sweep["rows"] = select_rows(experiment, sweep["runs"], loss_seconds)
    timed = {}
    for sweep in sweeps.values():
        for row in sweep["rows"]:
            key = timing_key(row, args.no_share)
            if key not in timed or loss_seconds[row["loss_key"]] > loss_seconds[timed[key]["loss_key"]]:
                timed[key] = row
    steps = {}
    for key, run in timed.items():
        gc.collect()  # the previous network's activations and optimiser state
        print(f"timing {run['model_label']} {run['input_shape']} batch {run['batch_size']}, "
              f"{run['loss_label']} ...", end=" ", flush=True)
        steps[key] = time_training_step(run, args.budget, args.min_steps, args.max_batch)
        steps[key]["loss_key"] = run["loss_key"]
        print(f"{steps[key]['step_seconds']:.2f} s/step (CPU use {steps[key]['cpu_use']:.2f})", flush=True)
    return steps


def network_step(run: dict, row: dict, steps: dict, loss_seconds: dict, no_share: bool) -> tuple[float, dict]:
    """``run``'s step: the network step timed for ``row`` (a row of ``run``'s network), with the
    timed loss's own time replaced by ``run``'s loss's."""
    measurement = steps[timing_key(row, no_share)]
    seconds = measurement["step_seconds"] - loss_seconds[measurement["loss_key"]] + loss_seconds[run["loss_key"]]
    return seconds, measurement


def estimate_rows(experiment: str, sweep: dict, step_of, loss_seconds: dict) -> tuple[list[dict], dict]:
    """4a. The report's rows of one experiment, and the row each run counts with (its network's
    row nearest in loss cost); ``step_of(run, row)`` is :func:`network_step` bound to the timings."""
    rows = sweep["rows"]
    row_runs, row_of = {id(row): [] for row in rows}, {}
    for run in sweep["runs"]:
        mine = [row for row in rows if row["network_key"] == run["network_key"]]
        nearest = min(mine, key=lambda row: abs(loss_seconds[row["loss_key"]] - loss_seconds[run["loss_key"]]))
        row_runs[id(nearest)].append(run)
        row_of[id(run)] = nearest
    out_rows = []
    for row in rows:
        step, measurement = step_of(row, row)
        covered = row_runs[id(row)]
        out_rows.append({
            "experiment": experiment, "model": row["model_label"], "dataset": row["dataset"],
            "input": "x".join(map(str, row["input_shape"])), "batch": row["batch_size"],
            "classes": row["classes"], "loss": row["loss_label"],
            "pretrained_in_config": row["pretrained"],
            "measured": measurement["loss_key"] == row["loss_key"],
            "step_seconds": step, "loss_seconds": loss_seconds[row["loss_key"]],
            "train_images": row["train_images"], "steps_per_epoch": math.ceil(row["train_images"] / row["batch_size"]),
            "epoch_seconds": math.ceil(row["train_images"] / row["batch_size"]) * step, "epochs": row["epochs"],
            "runs": sum(run["count"] for run in covered), "hours_per_run": run_hours(row, step),
            "sweep_cpu_hours": sum(run["count"] * run_hours(run, step_of(run, row)[0]) for run in covered),
            "sweep_cpu_hours_at_timed_loss": sum(run["count"] * run_hours(run, step) for run in covered),
            "cpu_use": measurement["cpu_use"],
        })
    return out_rows, row_of


def estimate(sweeps: dict, step_of, loss_seconds: dict) -> tuple[dict, list[dict]]:
    """4. Per run, per row, per experiment: the results by experiment and all rows."""
    results, lines = {}, []
    for experiment, sweep in sweeps.items():
        out_rows, row_of = estimate_rows(experiment, sweep, step_of, loss_seconds)
        by_size = {}
        for run in sweep["runs"]:
            by_size.setdefault(run["train_images"], []).append(run_hours(run, step_of(run, row_of[id(run)])[0]))
        configs = {json.dumps({"model": run["model_label"], "batch": run["batch_size"], "epochs": run["epochs"],
                               "input": run["input_shape"], "train_images": run["train_images"]})
                   for run in sweep["runs"]}
        results[experiment] = {
            "sweep": {k: [override_text(v) for v in values] for k, values in sweep["params"].items()},
            "runs": sum(run["count"] for run in sweep["runs"]),
            "configs": [json.loads(text) for text in sorted(configs)],
            "hours_per_run_by_train_images": {size: max(hours) for size, hours in sorted(by_size.items())},
            "rows": out_rows,
            "sweep_cpu_hours": sum(row["sweep_cpu_hours"] for row in out_rows),
            "sweep_cpu_hours_at_timed_loss": sum(row["sweep_cpu_hours_at_timed_loss"] for row in out_rows),
        }
        lines.extend(out_rows)
    return results, lines


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    info = machine()
    header = (f"Measured {datetime.date.today().isoformat()} on {info['cpu']}, {info['cores']} cores, "
              f"torch {info['torch']}, {info['threads']} threads, float32"
              + (" (--quick: batches of 16 scaled per image, rough)" if args.quick else ""))
    print(header, flush=True)
    sweeps = enumerate_sweeps(args.experiments)
    loss_seconds, loss_timings, loss_cpu_use = time_losses(sweeps, args.loss_budget)
    steps = time_networks(sweeps, loss_seconds, args)
    step_of = partial(network_step, steps=steps, loss_seconds=loss_seconds, no_share=args.no_share)
    results, lines = estimate(sweeps, step_of, loss_seconds)
    info["load_average_end"] = list(os.getloadavg())
    notes = [*method_notes(lines, steps, loss_cpu_use, info, args.budget), *scale_notes(results, lines, loss_seconds)]
    seconds = time.perf_counter() - started
    notes.append(f"- This benchmark took {seconds / 60:.1f} minutes.")
    markdown = "\n".join([f"# Epoch times and compute per experiment\n\n{header}.\n",
                          *report_tables(results, lines), "", *notes]) + "\n"
    print()
    print(markdown)
    record = {
        "machine": info, "header": header, "quick": args.quick, "budget_seconds": args.budget,
        "shared_network_timings": not args.no_share, "seconds": seconds,
        "experiments": results,
        "step_timings": [{k: v for k, v in m.items() if k != "loss_key"} for m in steps.values()],
        "loss_timings": list(loss_timings.values()),
    }
    write_outputs(args.out, "epochs", record, markdown)
    print(f"wrote {args.out / 'epochs.json'} and {args.out / 'epochs.md'}")
    return 0
