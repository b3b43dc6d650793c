"""Training throughput of the engine (``topk.engine.fit``) against a bare PyTorch loop.

    python scripts/bench_train.py            # or: make bench-train
    python scripts/bench_train.py --quick

Two settings: S20's circles with the one-hidden-layer MLP (1,800 points, batch 64: tiny steps,
where per-batch bookkeeping shows most) and a DenseNet 40-12 on random CIFAR-shaped images with
the standard crop + flip (batch 64). The loops train copies of the same model from the same state
with the same batches (``TensorBatches``, the same per-batch transform), loss and optimiser.

- **bare loop**: forward, loss, ``optimizer.zero_grad(set_to_none=True)``, backward, step;
  nothing else. The target (engine >= 0.95x) is against this loop.
- **bare loop, gradients set to None**: the same with the gradients cleared by assignment, as
  the engine clears them (see ``topk.engine.gradient_clearer``); engine / this loop is the cost
  of everything else the engine does.
- **engine**: ``fit`` doing what a run does between evaluations: the loss check, the stop-signal
  check, the running loss, the learning-rate schedule, history and TensorBoard rows and
  checkpoints as the experiments write them (S20: every 500 epochs; image runs: every epoch).
  Evaluation is left out (``eval_every`` past the timed epochs), and so is the progress bar.

The loops take turns epoch by epoch: after each engine epoch, ``fit``'s end-of-epoch callback
runs one epoch of each bare loop (in alternating order), so that all three share the machine's
slow and fast moments (on this shared machine a 5 ms circles epoch drifts by ±15% over minutes).
Reported: the median images per second of each loop, and the median over epochs of the
engine's speed over each bare loop's in the epoch right after it (paired, which cancels most of
the drift). Writes
``outputs/bench/train.{json,md}``.
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


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)


class BareLoop:
    """The loop with nothing else: forward, loss, clear the gradients, backward, step. With
    ``gradients_to_none`` the gradients are cleared by assignment instead of ``zero_grad``."""

    def __init__(self, model, batches, gradients_to_none: bool):
        self.model, self.batches = model, batches
        self.optimizer = sgd(model)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.parameters = list(model.parameters())
        self.clear_gradients = self.set_gradients_to_none if gradients_to_none else self.optimizer.zero_grad
        self.seconds: list[float] = []

    def set_gradients_to_none(self) -> None:
        for parameter in self.parameters:
            parameter.grad = None

    def run_epoch(self, epoch: int) -> None:
        model, optimizer, loss_fn, clear_gradients = self.model, self.optimizer, self.loss_fn, self.clear_gradients
        self.batches.set_epoch(epoch)
        started = time.perf_counter()
        model.train()
        for inputs, labels in self.batches:
            loss = loss_fn(model(inputs), labels)
            clear_gradients()  # optimizer.zero_grad() sets them to None too (its default)
            loss.backward()
            optimizer.step()
        self.seconds.append(time.perf_counter() - started)


def compare(name, splits, model, transform, batch_size: int, epochs: int, checkpoint_every: int) -> dict:
    """``epochs`` engine epochs, each followed by one epoch of each bare loop."""
    def batches():
        return TensorBatches(splits.train, batch_size, shuffle=True, seed=0, transform=transform)

    bare = BareLoop(copy.deepcopy(model), batches(), gradients_to_none=False)
    bare_to_none = BareLoop(copy.deepcopy(model), batches(), gradients_to_none=True)
    engine_seconds, epoch_ended = [], [None]

    def after_engine_epoch(epoch: int, _row) -> None:
        if epoch_ended[0] is not None:  # the first epoch's interval includes fit's set-up
            engine_seconds.append(time.perf_counter() - epoch_ended[0])
        for loop in (bare, bare_to_none) if epoch % 2 else (bare_to_none, bare):
            loop.run_epoch(epoch)
        epoch_ended[0] = time.perf_counter()

    optimizer = sgd(model)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[])
    # one epoch more than timed: the last one evaluates (eval_every is past it, but fit always
    # evaluates its final epoch), so its interval is dropped
    settings = FitSettings(epochs=epochs + 2, eval_every=epochs + 3, checkpoint_every=checkpoint_every,
                           progress=False, tensorboard=True)
    with tempfile.TemporaryDirectory() as run_dir:
        fit(model, torch.nn.CrossEntropyLoss(), optimizer, scheduler, batches(),
            {"test": TensorBatches(splits.test, 256, transform=transform)}, splits.num_classes,
            Path(run_dir), settings, on_epoch_end=after_engine_epoch)
    engine_seconds = engine_seconds[:-1]  # epochs 2 .. epochs + 1
    images = len(splits.train)
    row = {"setting": name, "train_images": images, "batch_size": batch_size,
           "engine_images_per_s": images / statistics.median(engine_seconds), "epochs_timed": len(engine_seconds)}
    for key, loop_seconds in (("bare", bare.seconds), ("bare_to_none", bare_to_none.seconds)):
        loop_seconds = loop_seconds[1 : 1 + len(engine_seconds)]  # the epochs run right after the engine's
        row[f"{key}_images_per_s"] = images / statistics.median(loop_seconds)
        # engine speed over the loop's, epoch by epoch, then the median; and over the whole run
        row[f"{key}_ratio"] = statistics.median(loop / engine for loop, engine in zip(loop_seconds, engine_seconds))
        row[f"{key}_ratio_whole_run"] = sum(loop_seconds) / sum(engine_seconds)
    return row


LOOPS = {"bare": "bare loop", "bare_to_none": "bare loop, gradients set to None"}


def markdown(rows, threads: int) -> str:
    lines = [f"Training images per second, median over epochs, the loops taking turns epoch by epoch "
             f"({threads} torch threads, torch {torch.__version__}); evaluation excluded. Engine / loop: "
             "the median over epochs of the engine's speed over the loop's in the epoch right after "
             "it, and the same over the whole run (total times, checkpoints and flushes included).", "",
             "| setting | batch | loop | loop (img/s) | engine (img/s) | engine / loop | engine / loop, whole run | epochs |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for key, loop in LOOPS.items():
            lines.append(f"| {row['setting']} | {row['batch_size']} | {loop} | {row[f'{key}_images_per_s']:,.0f} | "
                         f"{row['engine_images_per_s']:,.0f} | {row[f'{key}_ratio']:.3f} | "
                         f"{row[f'{key}_ratio_whole_run']:.3f} | {row['epochs_timed']} |")
    lines.append("")
    lines.append("Target: the engine at least 0.95x the bare loop in both settings: "
                 + ("met." if all(row["bare_ratio"] >= 0.95 for row in rows) else "NOT met."))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer epochs, a smaller image set")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    # checkpoints as the experiments write them: S20's every 500 epochs, the image runs' every epoch
    rows = [compare(*circles_setting(), batch_size=64, epochs=200 if args.quick else 600,
                    checkpoint_every=500),
            compare(*densenet_setting(128 if args.quick else 256), batch_size=64,
                    epochs=3 if args.quick else 20, checkpoint_every=1)]
    text = markdown(rows, torch.get_num_threads())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "train.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "train.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
