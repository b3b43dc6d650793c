"""Training throughput of the engine (``topk.engine.fit``) against a bare PyTorch loop.

    python scripts/bench_train.py            # or: make bench-train
    python scripts/bench_train.py --quick

Two settings: S20's circles with the one-hidden-layer MLP (1,800 points, batch 64: tiny steps,
where per-batch bookkeeping shows most) and a DenseNet 40-12 on random CIFAR-shaped images with
the standard crop + flip (batch 64). Both loops train the same model from the same state with the
same batches (``TensorBatches``, the same per-batch transform), loss and optimiser. The bare loop
does nothing else; the engine does what a run does between evaluations: the loss check, the
stop-signal check, the running loss, the learning-rate schedule, history and TensorBoard rows
and checkpoints as the experiments write them (S20: every 500 epochs; image runs: every epoch). Evaluation is left out of both (``eval_every`` past the timed
epochs). They are timed in turns, each turn a few epochs, and the medians of the per-epoch
images per second are compared. Writes ``outputs/bench/train.{json,md}``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from topk.data import TensorBatches  # noqa: E402
from topk.data.circles import circles  # noqa: E402
from topk.data.synthetic import random_images  # noqa: E402
from topk.data.transforms import Compose, Normalize, RandomCropFlip  # noqa: E402
from topk.engine import FitSettings, fit  # noqa: E402
from topk.models.densenet import CifarDenseNet  # noqa: E402
from topk.models.small import MLPClassifier  # noqa: E402


def circles_setting():
    splits = circles(seed=0)
    model = MLPClassifier(splits.num_classes, splits.input_shape, hidden=8)
    return "circles, MLP (m = 8)", splits, model, None


def densenet_setting(train_size: int):
    splits = random_images(seed=0, train_size=train_size, test_size=64)
    model = CifarDenseNet(splits.num_classes, splits.input_shape, depth=40, growth_rate=12)
    transform = Compose(RandomCropFlip(4, True), Normalize(splits.mean, splits.std))
    return "random CIFAR-shaped images, DenseNet 40-12", splits, model, transform


def bare_epoch_seconds(model, batches, epochs: int) -> list[float]:
    """The loop with nothing else: forward, loss, backward, step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    seconds = []
    for epoch in range(1, epochs + 1):
        batches.set_epoch(epoch)
        started = time.perf_counter()
        model.train()
        for inputs, labels in batches:
            loss = loss_fn(model(inputs), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        seconds.append(time.perf_counter() - started)
    return seconds


def engine_epoch_seconds(model, batches, eval_batches, num_classes: int, epochs: int,
                         checkpoint_every: int) -> list[float]:
    """``fit`` for ``epochs + 1`` epochs, evaluating only at the last; the wall time between the
    ends of consecutive epochs before it (training, history, TensorBoard, checkpoints)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[])
    settings = FitSettings(epochs=epochs + 1, eval_every=epochs + 2, checkpoint_every=checkpoint_every,
                           progress=False, tensorboard=True)
    ends = [time.perf_counter()]
    with tempfile.TemporaryDirectory() as run_dir:
        fit(model, torch.nn.CrossEntropyLoss(), optimizer, scheduler, batches, eval_batches,
            num_classes, Path(run_dir), settings, on_epoch_end=lambda *_: ends.append(time.perf_counter()))
    # the first interval includes fit's set-up, the last the final evaluation
    return [later - earlier for earlier, later in zip(ends[1:-2], ends[2:-1])]


def compare(name, splits, model, transform, batch_size: int, turns: int, epochs: int,
            checkpoint_every: int) -> dict:
    batches = TensorBatches(splits.train, batch_size, shuffle=True, seed=0, transform=transform)
    eval_batches = {"test": TensorBatches(splits.test, 256, transform=transform)}
    initial = copy.deepcopy(model.state_dict())
    bare, engine = [], []
    for _ in range(turns):
        model.load_state_dict(initial)
        bare += bare_epoch_seconds(model, batches, epochs)
        model.load_state_dict(initial)
        engine += engine_epoch_seconds(model, batches, eval_batches, splits.num_classes, epochs + 1,
                                       checkpoint_every)
    images = len(splits.train)
    bare_rate = images / statistics.median(bare)
    engine_rate = images / statistics.median(engine)
    return {"setting": name, "train_images": images, "batch_size": batch_size,
            "bare_images_per_s": bare_rate, "engine_images_per_s": engine_rate,
            "ratio": engine_rate / bare_rate, "epochs_timed": len(bare)}


def markdown(rows, threads: int) -> str:
    lines = [f"Training images per second, median over epochs timed in turns ({threads} torch "
             f"threads, torch {torch.__version__}); evaluation excluded from both.", "",
             "| setting | batch | bare loop (img/s) | engine (img/s) | engine / bare |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['setting']} | {row['batch_size']} | {row['bare_images_per_s']:,.0f} | "
                     f"{row['engine_images_per_s']:,.0f} | {row['ratio']:.3f} |")
    lines.append("")
    lines.append("Target: the engine at least 0.95x the bare loop in both settings: "
                 + ("met." if all(row["ratio"] >= 0.95 for row in rows) else "NOT met."))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer turns, a smaller image set")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    turns, epochs = (2, 2) if args.quick else (3, 2)
    # checkpoints as the experiments write them: S20's every 500 epochs, the image runs' every epoch
    # circles: many short turns, so that both loops share the machine's slow and fast moments
    # (its 5 ms epochs move by ±15% between turns on this shared machine)
    rows = [compare(*circles_setting(), batch_size=64, turns=6 * turns, epochs=8,
                    checkpoint_every=500),
            compare(*densenet_setting(128 if args.quick else 512), batch_size=64, turns=turns,
                    epochs=epochs, checkpoint_every=1)]
    text = markdown(rows, torch.get_num_threads())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "train.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "train.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
