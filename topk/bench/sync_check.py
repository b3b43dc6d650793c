"""Does a training step with each loss make the GPU wait for the host? (issue 13, item 4)

    python scripts/gpu_sync_check.py                   # CUDA: DenseNet 40-40, batch 64, every loss
    python scripts/gpu_sync_check.py --device cpu --model linear --batch-size 8 --losses ce  # dry run

For every loss in ``conf/loss/`` (or ``--losses``), built from the configs as ``train.py`` builds
it (``dataset=random_images``, so ``class_counts`` come from random CIFAR-shaped training data),
with the model of ``conf/model/<--model>.yaml`` and SGD (``conf/optim/sgd.yaml``): one warm-up
step, then ``--steps`` training steps (forward, loss, ``zero_grad``, backward, ``step``, as in
``topk.engine.train_one_epoch``, whose one read of the loss comes at the epoch's end) on batches
already on the device, under ``torch.cuda.set_sync_debug_mode("error")``. Each loss gets "no sync"
or the error, with the innermost line of this repository that caused it. On the CPU there is no
such mode and the steps just run (a dry run of the script). Writes ``sync_check.{json,md}`` to
``--out`` (default ``outputs/gpu``).
"""

from __future__ import annotations

import traceback
from pathlib import Path

import torch
from hydra import compose
from hydra.utils import instantiate

from topk.bench.common import conf_options, configs, loss_with_data, parser, write_outputs
from topk.data.transforms import Normalize
from topk.repository import ROOT


def build_setting(loss: str, model: str, device: torch.device):
    """Model, loss and optimiser from the configs, and the random data set they train on."""
    cfg = compose("train", overrides=[f"loss={loss}", f"model={model}", "dataset=random_images", "optim=sgd"])
    splits = instantiate(cfg.dataset, seed=0)
    network = instantiate(cfg.model, num_classes=splits.num_classes, input_shape=splits.input_shape).to(device)
    loss_fn = loss_with_data(cfg.loss, splits.class_counts, splits.num_classes).to(device)
    optimizer = instantiate(cfg.optim)(network.parameters())
    return network, loss_fn, optimizer, splits


def device_batches(splits, batch_size: int, count: int, device: torch.device) -> list:
    """``count`` normalised training batches, on the device before any step is checked."""
    normalize = Normalize(splits.mean, splits.std)
    batches = []
    for index in range(count):
        rows = slice(index * batch_size, (index + 1) * batch_size)
        batches.append((normalize(splits.train.x[rows].to(device)), splits.train.y[rows].to(device)))
    return batches


def train_step(network, loss_fn, optimizer, inputs, labels) -> torch.Tensor:
    loss = loss_fn(network(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


def repository_line(error: BaseException) -> str:
    """``path:line: code`` of the innermost traceback frame inside this repository."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if Path(frame.filename).resolve().is_relative_to(ROOT) and ".venv" not in frame.filename]
    if not frames:
        return "outside this repository"
    frame = frames[-1]
    return f"{Path(frame.filename).resolve().relative_to(ROOT)}:{frame.lineno}: {frame.line}"


def check_loss(loss: str, model: str, batch_size: int, steps: int, device: torch.device) -> dict:
    """Warm-up step, then ``steps`` steps under the sync debug mode "error" (on CUDA)."""
    network, loss_fn, optimizer, splits = build_setting(loss, model, device)
    network.train()
    batches = device_batches(splits, batch_size, steps + 1, device)
    train_step(network, loss_fn, optimizer, *batches[0])
    checked = device.type == "cuda"
    values = []
    try:
        if checked:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        for inputs, labels in batches[1:]:
            values.append(train_step(network, loss_fn, optimizer, inputs, labels))
    except RuntimeError as error:
        if not checked or "synchroniz" not in str(error):
            raise
        return {"loss": loss, "sync": True, "result": str(error).splitlines()[0],
                "where": repository_line(error)}
    finally:
        if checked:
            torch.cuda.set_sync_debug_mode(0)
    finite = all(bool(torch.isfinite(value)) for value in values)
    result = "no sync" if checked else "ran (CPU: no sync check)"
    return {"loss": loss, "sync": False if checked else None, "result": result if finite else result + ", non-finite loss",
            "where": None}


def markdown(rows, where: str, model: str, batch_size: int, steps: int) -> str:
    lines = [f"### Host-device synchronisations in a training step ({where}; {model}, batch {batch_size}, "
             f"{steps} step(s) per loss after a warm-up)", "",
             "| loss | result | first synchronising line |", "|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['loss']} | {row['result']} | {row['where'] or '–'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    command = parser(__doc__)
    command.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    command.add_argument("--model", default="densenet40_40", help="a conf/model option (linear for a quick dry run)")
    command.add_argument("--batch-size", type=int, default=64)
    command.add_argument("--steps", type=int, default=2, help="checked steps per loss (after one warm-up step)")
    command.add_argument("--losses", nargs="*", default=None, help="conf/loss options (default: all)")
    command.add_argument("--out", type=Path, default=ROOT / "outputs" / "gpu")
    args = command.parse_args(argv)
    device = torch.device(args.device)
    where = f"CUDA, {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "CPU, dry run"
    rows = []
    with configs():
        for loss in args.losses or conf_options("loss"):
            try:
                rows.append(check_loss(loss, args.model, args.batch_size, args.steps, device))
            except Exception as error:  # reported; the other losses are still checked
                rows.append({"loss": loss, "sync": None, "result": f"failed: {type(error).__name__}: {error}",
                             "where": repository_line(error)})
            print(f"{loss:>16}: {rows[-1]['result']}" + (f" at {rows[-1]['where']}" if rows[-1]["where"] else ""),
                  flush=True)
    result = {"device": where, "model": args.model, "batch_size": args.batch_size, "steps": args.steps,
              "torch": torch.__version__, "losses": rows}
    table = markdown(rows, where, args.model, args.batch_size, args.steps)
    write_outputs(args.out, "sync_check", result, table)
    print(table)
    return 1 if any(row["result"].startswith("failed") for row in rows) else 0
