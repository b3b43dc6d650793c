"""Each path of the noised losses' k-th largest selection forced in turn, at the settings the
papers' protocols give them, on the CPU or a GPU.

    python scripts/bench_noised_paths.py                      # or: make bench-noised-paths
    python scripts/bench_noised_paths.py --device cuda        # on a GPU
    python scripts/bench_noised_paths.py --only ImageNet      # the settings whose name has it

:func:`topk.functional.perturbed.perturbed_kth_largest` selects the k-th largest perturbed score
one of three ways (``PATHS``: ``kthvalue`` over every column, the ``candidates``, the rounds over
``every column``) and :func:`~topk.functional.perturbed.chosen_path` picks one from the input's
size and device. Each row is a setting as ``conf/`` composes it (``dataset=<d> loss=<l> k=<K>``:
the loss's ε, B and the data set's batch size; n the data set's classes) on *spread* scores
(4·N(0,1); cosine heads 0.25·N(0,1) clamped to ±1) and on *tight* ones, as at the start of
training (0.1·N(0,1); cosines 0.02·N(0,1)). It times the selection the loss makes (the scores
shifted by the label's, K + 1), once per path and with ``--compile`` also the compiled rounds,
and the whole loss's forward and backward on the chosen path, to show what share of it the
selection is, each in blocks of calls in a row, the blocks taken in turns
(:func:`topk.bench.timing.block_medians`: the paths allocate very different amounts, and a call
timed right after another path's is slowed by what that one left). The other parts of
the loss are the same on every path. Writes ``outputs/bench/noised_paths.{json,md}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
from hydra import compose

from topk.bench.common import (
    BENCH_OUT,
    configs,
    loss_with_data,
    made_up_class_counts,
    parser,
    write_outputs,
)
from topk.bench.losses import default_device, describe
from topk.bench.timing import block_medians, forward_backward, synchronizer
from topk.functional.perturbed import PATHS, chosen_path, perturbed_kth_largest


class Setting(NamedTuple):
    """A row's data set and loss: ``dataset=<dataset> loss=<loss> k=<k>`` on ``num_classes``
    classes; ``full_batch`` where the data set trains full-batch (``trainer.batch_size: null``)."""

    name: str
    dataset: str
    loss: str
    k: int
    num_classes: int
    full_batch: int | None = None


SETTINGS = (
    Setting("CIFAR-100 (G22 §4.4)", "cifar100", "noised_bal", 5, 100),
    Setting("CIFAR-100 (zoo)", "cifar100", "noised_imbal", 5, 100),
    Setting("circles (default)", "circles", "noised_bal", 5, 6, full_batch=1800),
    Setting("circles (default)", "circles", "noised_bal", 2, 6, full_batch=1800),
    *(Setting("Pl@ntNet-300K", "plantnet", loss, k, 1081) for loss in ("noised_bal", "noised_imbal") for k in (1, 5, 10)),
    *(Setting("ImageNet", "imagenet", "noised_bal", k, 1000) for k in (1, 5)),
    *(Setting("ImageNet-LT", "imagenet_lt", loss, 5, 1000) for loss in ("noised_bal", "noised_imbal")),
)
SCORES = ("spread", "tight")


def setting_scores(kind: str, cosine: bool, batch: int, num_classes: int, device: torch.device):
    """Scores ``[batch, n]`` and labels: ``spread`` or ``tight`` (the module's docstring), on ``device``."""
    generator = torch.Generator().manual_seed(0)
    spread = {("spread", False): 4.0, ("tight", False): 0.1, ("spread", True): 0.25, ("tight", True): 0.02}[kind, cosine]
    scores = spread * torch.randn(batch, num_classes, generator=generator)
    if cosine:
        scores = scores.clamp(-1.0, 1.0)
    labels = torch.randint(0, num_classes, (batch,), generator=generator)
    return scores.to(device), labels.to(device)


def bench_setting(setting: Setting, kind: str, device: torch.device, budget: float, compile: bool) -> dict:
    """One row: the composed loss's ε, B and batch, each path's selection time and the loss's."""
    cfg = compose("train", overrides=[f"dataset={setting.dataset}", f"loss={setting.loss}", f"k={setting.k}"])
    batch = cfg.trainer.batch_size or setting.full_batch
    loss_fn = loss_with_data(cfg.loss, made_up_class_counts(setting.num_classes), setting.num_classes).to(device)
    scores, labels = setting_scores(kind, cfg.model.get("head") == "cosine", batch, setting.num_classes, device)
    shifted = scores - scores.gather(1, labels.unsqueeze(1))  # what the hinge selects on
    k, epsilon, n_samples = setting.k + 1, cfg.loss.epsilon, cfg.loss.n_samples
    paths = [*PATHS, "every column, compiled"] if compile else list(PATHS)

    def selection(path):
        forced = path.removesuffix(", compiled")
        return lambda: perturbed_kth_largest(shifted, k, epsilon, n_samples, path=forced, compile=forced != path)

    steps = [selection(path) for path in paths] + [forward_backward(loss_fn, scores, labels)]
    seconds = block_medians(steps, budget, sync=synchronizer(device))
    return {"setting": setting.name, "loss": setting.loss, "n": setting.num_classes, "batch": batch, "K": setting.k,
            "B": n_samples, "epsilon": epsilon, "scores": kind, "chosen": chosen_path(shifted, n_samples),
            "selection_seconds": dict(zip(paths, seconds[:-1])), "loss_seconds": seconds[-1]}


def markdown(rows: list[dict], where: str) -> str:
    """The table: each path's selection time as a ratio to the chosen path's (> 1: slower)."""
    paths = list(rows[0]["selection_seconds"]) if rows else list(PATHS)
    lines = [f"Selection of the k-th largest perturbed score on each path ({where}), beside the whole loss's "
             "forward+backward on the chosen path; each path's time as a ratio to the chosen path's.", "",
             "| setting | loss | n | batch | K | B | ε | scores | chosen path | loss (ms) | selection (ms) | "
             + " | ".join(paths) + " |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|" + "---:|" * len(paths)]
    for row in rows:
        chosen = row["selection_seconds"][row["chosen"]]
        ratios = " | ".join(f"{seconds / chosen:.2f}" for seconds in row["selection_seconds"].values())
        lines.append(f"| {row['setting']} | {row['loss']} | {row['n']} | {row['batch']} | {row['K']} | {row['B']} | "
                     f"{row['epsilon']:g} | {row['scores']} | {row['chosen']} | {1e3 * row['loss_seconds']:.2f} | "
                     f"{1e3 * chosen:.2f} | {ratios} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    command = parser(__doc__)
    command.add_argument("--device", default=default_device(), help="cpu or cuda (default: cuda if available)")
    command.add_argument("--only", default="", help="only the settings whose name contains this text")
    command.add_argument("--budget", type=float, default=1.0, help="seconds of timing per row (default 1)")
    command.add_argument("--compile", action="store_true", help="also the compiled rounds (loss.compile=true)")
    command.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: steadier timings)")
    command.add_argument("--out", type=Path, default=BENCH_OUT)
    args = command.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    settings = [setting for setting in SETTINGS if args.only in setting.name]
    if not settings:
        command.error(f"no setting's name contains {args.only!r}; the settings: "
                      + ", ".join(sorted({setting.name for setting in SETTINGS})))
    rows = []
    with configs():
        for setting in settings:
            for kind in SCORES:
                rows.append(bench_setting(setting, kind, device, args.budget, args.compile))
                print(markdown(rows[-1:], describe(device)).splitlines()[-1], flush=True)
    table = markdown(rows, describe(device))
    write_outputs(args.out, "noised_paths", {"torch": torch.__version__, "device": describe(device), "rows": rows}, table)
    print(table, end="")
    print(f"wrote {args.out / 'noised_paths.md'} and noised_paths.json")
    return 0
