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
data set's protocol says so, and the metrics go to ``<run>/eval.json`` (``--out`` elsewhere). A
file that exists is never overwritten, and nothing else in the run directory changes. Missing
runs, checkpoints or splits and unreadable files each stop with one sentence (``Error: ...``,
exit status 1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf  # noqa: E402
from omegaconf.errors import OmegaConfBaseException  # noqa: E402

import train  # noqa: E402
from topk.data.transforms import Normalize  # noqa: E402
from topk.engine import evaluate_splits, load_checkpoint, resolve_device  # noqa: E402
from topk.errors import CheckpointError, ConfigError, TopkError  # noqa: E402
from topk.metrics import clip_ks  # noqa: E402
from topk.precision import MixedPrecision  # noqa: E402
from topk.records import strict_json  # noqa: E402
from topk.schema.check import check_config  # noqa: E402
from topk.schema.store import register  # noqa: E402

register()  # the config's resolvers (if_null) and schemas


def run_config(run_dir: Path, overrides: list[str]):
    """The run's composed configuration with ``overrides`` (``key=value``) applied and checked."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} holds no run configuration ({path} is missing); give the directory of a "
                          "run that train.py wrote.")
    try:
        cfg = OmegaConf.merge(OmegaConf.load(path), OmegaConf.from_dotlist(overrides))
    except OmegaConfBaseException as error:
        raise ConfigError(f"the overrides {' '.join(overrides)} cannot be applied to {path} ({error}).") from None
    check_config(cfg)
    return cfg


def saved_model(run_dir: Path, which: str) -> tuple[dict, int | None]:
    """The weights of ``checkpoints/<which>.pt`` and the epoch they come from."""
    path = run_dir / "checkpoints" / f"{which}.pt"
    if not path.is_file():
        kept = "trainer.keep_checkpoints" if which == "last" else "trainer.keep_checkpoints=none"
        raise CheckpointError(f"{path} does not exist (the run ended before it, or {kept} dropped it); "
                              f"choose the other with --checkpoint {'best' if which == 'last' else 'last'} "
                              f"(+eval_checkpoint={'best' if which == 'last' else 'last'} with train.py).")
    checkpoint = load_checkpoint(path)
    return checkpoint["model"], checkpoint.get("epoch")


def evaluate_run(run_dir: Path, splits_asked: list[str], which: str, overrides: list[str]) -> dict:
    """Build the run's data, model and loss, load its saved weights and score ``splits_asked``."""
    cfg = run_config(run_dir, overrides)
    seed, trainer = int(cfg.seed), cfg.trainer
    device = resolve_device(trainer.device)
    train.seed_everything(seed)
    splits = train.build(cfg.dataset, "dataset", seed=seed)
    missing = [name for name in splits_asked if getattr(splits, name, None) is None]
    if missing:
        raise ConfigError(f"this run's data set has no {', '.join(missing)} split; evaluate "
                          f"{' or '.join(name for name in ('val', 'test') if getattr(splits, name) is not None)}.")
    model = train.build(cfg.model, "model", num_classes=splits.num_classes, input_shape=splits.input_shape)
    weights, epoch = saved_model(run_dir, which)
    model.load_state_dict(weights)
    model.to(device)
    loss_fn = train.build_loss(cfg.loss, splits).to(device)
    image_augment, _ = train.build_augment(cfg.augment, splits)  # evaluation batches take only its layout
    normalize = Normalize(splits.mean, splits.std) if splits.mean is not None else None
    # The validation split sets average-k accuracy's threshold: scored whenever there is one.
    scored = [*splits_asked, *(["val"] if splits.val is not None and "val" not in splits_asked else [])]
    batches = {name: train.make_batches(splits, name, trainer, seed, device, image_augment, normalize)
               for name in scored}
    try:
        evaluations = evaluate_splits(model, loss_fn, batches, clip_ks([*trainer.ks, cfg.k], splits.num_classes),
                                      splits.num_classes, splits.class_groups, MixedPrecision(trainer.amp, device),
                                      scores_of=train.eval_scores(splits))
    finally:
        for split_batches in batches.values():
            train.close_batches(split_batches)
    return {"run": str(run_dir), "checkpoint": which, "epoch": epoch, "overrides": overrides,
            "device": str(device), "evaluated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            **{name: evaluations[name][0] for name in splits_asked}}


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
        if out.exists():
            raise ConfigError(f"{out} already exists and is kept as it is; write elsewhere with --out PATH "
                              "(+eval_out=PATH with train.py).")
        result = evaluate_run(args.run_dir, args.split or ["test"], args.checkpoint, args.overrides)
        out.write_text(json.dumps(strict_json(result), indent=2) + "\n")
    except (TopkError, OSError) as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    for name in args.split or ["test"]:
        shown = {key: round(value, 2) for key, value in result[name].items() if key.startswith("top")}
        print(f"{name}: {shown}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
