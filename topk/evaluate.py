"""Evaluate a finished (or stopped) run's saved model again, without touching the run.

    python scripts/evaluate.py outputs/runs/<run>                     # best.pt on the run's test split
    python scripts/evaluate.py outputs/runs/<run> --split val --split test
    python scripts/evaluate.py outputs/runs/<run> --checkpoint last   # checkpoints/last.pt
    python scripts/evaluate.py outputs/runs/<run> dataset.root=/data/imagenet_v2 dataset.ten_crop=true
    python train.py +eval=outputs/runs/<run> +eval_split=val,test     # the same from train.py

The run's own configuration (``<run>/.hydra/config.yaml``) builds the data set, the model and
the loss, as ``train.py`` built them; ``key=value`` arguments change it (another data root, ten
crops, an evaluation batch size, a device). The selected model (``checkpoints/best.pt``, or
``last.pt`` with ``--checkpoint last``) is scored on each split asked for, ten-crop where the
data set's protocol says so, and the metrics go to ``<run>/eval.json`` (``--out`` elsewhere),
written whole or not at all. A file that exists is never overwritten, and nothing else in the run
directory changes. Missing runs, checkpoints or splits, unreadable files and folders that cannot
be written each stop with one sentence (``Error: ...``, exit status 1), before the evaluation
where they can be known before it.

The run's configuration is data, never code (docs/trust.md): it is composed against the schema
(:mod:`topk.schema.saved`), and each ``_target_`` in it may only name a callable that a config
file of ``conf/`` names, or of a folder added with ``hydra.searchpath=[file://DIR]`` (for a run
trained with option files of one's own); anything else stops with one sentence, and nothing of it
runs.
"""

from __future__ import annotations

import argparse
import datetime
import errno
import sys
from pathlib import Path

from topk.build import (
    CONF_DIR,
    build,
    build_augment,
    build_loss,
    build_model,
    eval_scores,
    make_batches,
    normalisation,
    seed_everything,
)
from topk.checkpoints import _unusable, load_checkpoint
from topk.data.batches import close_batches
from topk.distributed import resolve_device
from topk.engine import evaluate_splits
from topk.errors import CheckpointError, ConfigError, TopkError
from topk.metrics import clip_ks
from topk.precision import MixedPrecision
from topk.records import write_json_atomic
from topk.run_dir import unwritable_reason
from topk.schema.saved import saved_config
from topk.schema.store import offered, register, search_path, split_searchpath

register()  # the config's resolvers (if_null) and schemas

ELSEWHERE = "write elsewhere with --out PATH (+eval_out=PATH with train.py)"


def run_config(run_dir: Path, overrides: list[str]):
    """The run's saved configuration with ``overrides`` (``key=value``) applied, read as data:
    composed against the schema, its callables only those that the config files of ``conf/``
    and of the folders of a ``hydra.searchpath=[...]`` among ``overrides`` name."""
    added, overrides = split_searchpath(overrides)
    return saved_config(config_path(run_dir), overrides, offered(search_path(CONF_DIR, added)))


def config_path(run_dir: Path) -> Path:
    """The run's saved configuration, ``.hydra/config.yaml``; one sentence if there is none."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} holds no run configuration ({path} is missing); give the directory of a "
                          "run that train.py wrote.")
    return path


def saved_model(run_dir: Path, which: str) -> tuple[dict, int | None]:
    """The weights of ``checkpoints/<which>.pt`` and the epoch they come from; one sentence
    if it is missing or unusable, pointing to the other checkpoint only where it exists."""
    folder = run_dir / "checkpoints"
    path, other = folder / f"{which}.pt", "best" if which == "last" else "last"
    has_other = (folder / f"{other}.pt").is_file()
    if not path.is_file() and not has_other:
        raise CheckpointError(f"{folder} holds neither best.pt nor last.pt (trainer.keep_checkpoints=none "
                              "dropped them, or the run stopped before its first epoch), so there is no saved "
                              "model to evaluate; train the run again with trainer.keep_checkpoints=best.")
    instead = (f"evaluate {other}.pt with --checkpoint {other} (+eval_checkpoint={other} with train.py)"
               if has_other else f"the run has no {other}.pt either, so train it again to evaluate it")
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist (the run ended before it was written, or "
                              f"trainer.keep_checkpoints dropped it); {instead}.")
    try:
        checkpoint = load_checkpoint(path)
    except CheckpointError as error:
        raise CheckpointError(f"{path} {_unusable(error)}, so it cannot be evaluated; {instead}.") from None
    return checkpoint["model"], checkpoint.get("epoch")


def evaluate_run(run_dir: Path, splits_asked: list[str], which: str, overrides: list[str]) -> dict:
    """Build the run's data, model and loss, load its saved weights and score ``splits_asked``."""
    cfg = run_config(run_dir, overrides)
    seed, trainer = int(cfg.seed), cfg.trainer
    device = resolve_device(trainer.device)
    seed_everything(seed)
    splits = build(cfg.dataset, "dataset", seed=seed)
    missing = [name for name in splits_asked if getattr(splits, name, None) is None]
    if missing:
        raise ConfigError(f"this run's data set has no {', '.join(missing)} split; evaluate "
                          f"{' or '.join(name for name in ('val', 'test') if getattr(splits, name) is not None)}.")
    model = build_model(cfg.model, splits)
    weights, epoch = saved_model(run_dir, which)
    model.load_state_dict(weights)
    model.to(device)
    loss_fn = build_loss(cfg.loss, splits).to(device)
    image_augment, _ = build_augment(cfg.augment, splits)  # evaluation batches take only its layout
    normalize = normalisation(splits)
    # The validation split sets average-k accuracy's threshold: scored whenever there is one.
    scored = [*splits_asked, *(["val"] if splits.val is not None and "val" not in splits_asked else [])]
    batches = {name: make_batches(splits, name, trainer, seed, device, image_augment, normalize)
               for name in scored}
    try:
        evaluations = evaluate_splits(model, loss_fn, batches, clip_ks([*trainer.ks, cfg.k], splits.num_classes),
                                      splits.num_classes, splits.class_groups, MixedPrecision(trainer.amp, device),
                                      scores_of=eval_scores(splits))
    finally:
        for split_batches in batches.values():
            close_batches(split_batches)
    return {"run": str(run_dir), "checkpoint": which, "epoch": epoch, "overrides": overrides,
            "device": str(device), "evaluated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            **{name: evaluations[name][0] for name in splits_asked}}


def check_output(out: Path) -> None:
    """Before evaluating, one sentence if ``out`` exists (it is never overwritten), its folder
    does not, or that folder cannot be written (a read-only run directory: found by trying)."""
    if out.exists():
        raise ConfigError(f"{out} already exists and is kept as it is; {ELSEWHERE}.")
    if not out.parent.is_dir():
        raise ConfigError(f"the folder {out.parent} does not exist; create it, or {ELSEWHERE}.")
    reason = unwritable_reason(out.parent)
    if reason is not None:
        raise ConfigError(f"{out} cannot be written in {out.parent} ({reason}); {ELSEWHERE}.")


def system_error_sentence(error: OSError) -> str:
    """An ``OSError`` (reading the data, writing ``eval.json``) as one sentence, without
    Python's ``[Errno N]``: what failed on which file, and what to do."""
    where = error.filename or "a file"
    if error.errno == errno.ENOSPC:
        return f"no space is left on the device holding {where}; free some and evaluate again (nothing was written)."
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{where} cannot be accessed ({error.strerror}); {ELSEWHERE}, or evaluate a copy of the run."
    return f"{where}: {error.strerror or type(error).__name__}; check that it exists and can be read."


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run directory train.py wrote")
    parser.add_argument("overrides", nargs="*", help="key=value changes to the run's configuration")
    parser.add_argument("--split", action="append", choices=["val", "test"], help="default: test")
    parser.add_argument("--checkpoint", choices=["best", "last"], default="best")
    parser.add_argument("--out", type=Path, default=None, help="default: <run_dir>/eval.json")
    args = parser.parse_intermixed_args(argv)
    out = args.out or args.run_dir / "eval.json"
    try:
        config_path(args.run_dir)
        check_output(out)
        result = evaluate_run(args.run_dir, args.split or ["test"], args.checkpoint, args.overrides)
        write_json_atomic(out, result)  # whole or not at all: no empty eval.json blocks the retry
    except TopkError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"Error: {system_error_sentence(error)}", file=sys.stderr)
        return 1
    for name in args.split or ["test"]:
        shown = {key: round(value, 2) for key, value in result[name].items() if key.startswith("top")}
        print(f"{name}: {shown}")
    print(f"wrote {out}")
    return 0
