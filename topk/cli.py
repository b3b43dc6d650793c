"""What ``train.py``'s command line does around Hydra: ``--help`` without composing,
``+eval=<run dir>`` handed to :mod:`topk.evaluate`, the command line composed and checked
before ``@hydra.main`` writes anything, and a run's end said in one sentence (``Error: ...``,
exit 1 for a single run; a sweep goes on), with the value an Optuna sweeper optimises."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from topk import stopping
from topk.distributed import from_environment
from topk.errors import RunRefused, TopkError
from topk.hydra_callbacks import close_interrupted_sweep, interrupted_sweep_dir, note_refused_run
from topk.schema.validate import command_line_problem
from topk.trackers import run_name

log = logging.getLogger("train")


def exit_with_help_if_asked(argv: list[str], config_dir: Path) -> None:
    """``--help`` (``-h``): print ``conf/hydra/help/topk.yaml``'s help and exit. Hydra's own
    ``--help`` first lists the options of every config group for its ``$APP_CONFIG_GROUPS``
    (178 groups with ``protocol/*`` and ``schema/*``; its time is in docs/benchmarks.md, "Code
    choices and the timings behind them"), which this help, a fixed text, never shows. With another config (``--config-path``,
    ``--config-dir``, ``--config-name``) Hydra answers as usual."""
    flags = {arg.partition("=")[0] for arg in argv if arg.startswith("-")}
    if not flags & {"--help", "-h"} or flags & {"--config-path", "-cp", "--config-dir", "-cd", "--config-name", "-cn"}:
        return
    help_node = OmegaConf.create({"hydra": {"help": OmegaConf.load(config_dir / "hydra" / "help" / "topk.yaml")}})
    print(help_node.hydra.help.template)
    sys.exit(0)


EVAL_OPTIONS = {"+eval_split": "--split", "+eval_checkpoint": "--checkpoint", "+eval_out": "--out"}


def evaluation_argv(args: list[str]) -> list[str] | None:
    """``python train.py +eval=<run dir> [+eval_split=val,test] [+eval_checkpoint=last]
    [+eval_out=PATH] [key=value ...]`` as :func:`topk.evaluate.main`'s arguments (the ``key=value``
    change the evaluated run's own configuration); ``None`` without ``+eval=``. An evaluation is
    no training run: Hydra does not start, and no run directory is made."""
    run = [arg.split("=", 1)[1] for arg in args if arg.startswith("+eval=")]
    if not run:
        return None
    argv = [run[-1]]
    for arg in args:
        key, _, value = arg.partition("=")
        if key in EVAL_OPTIONS:
            argv += [item for part in value.split(",") for item in (EVAL_OPTIONS[key], part)]
        elif key != "+eval":
            argv.append(arg)
    return argv


def exit_on_composition_problem(argv: list[str], config_dir: Path) -> None:
    """Compose the command line's config before Hydra does: a mistyped key, a value of the wrong
    type, an unknown option, a config group set to null or a callable no config file names
    stops here with one sentence (:func:`topk.schema.validate.command_line_problem`), nothing
    written."""
    problem = command_line_problem(argv, config_dir, "train")
    if problem is not None:
        print(f"Error: {problem}", file=sys.stderr)
        sys.exit(1)


def warn_if_single_run_of_a_sweep(cfg: DictConfig) -> None:
    """``+experiment=...`` without ``-m`` trains one configuration of the sweep: say so."""
    params = HydraConfig.get().sweeper.get("params") or {}
    if cfg.get("experiment") and params:
        log.warning(
            "+experiment=%s is a sweep over %s; without -m only this one configuration trains "
            "(add -m for the whole sweep).", cfg.experiment, ", ".join(params),
        )


def selected_value(record: dict) -> float | None:
    """What a sweeper optimises: the selection metric of the selected model (``val/top5`` -> the
    record's ``val["top5"]``); ``None`` for ``last`` or a run without the value."""
    split, _, name = str(record.get("selection_metric", "last")).partition("/")
    value = record.get(split, {}).get(name) if name else None
    return float(value) if value is not None else None


def report_error(sentence: str, single_run: bool) -> None:
    """Print a run's error as one sentence: a single run exits 1, a sweep goes on."""
    if single_run:
        print(f"Error: {sentence}", file=sys.stderr)
        sys.exit(1)
    print(f"Error in {HydraConfig.get().runtime.output_dir}: {sentence}", file=sys.stderr)


def no_space_sentence(error: OSError) -> str:
    """A full disk in one sentence: what to free, and how to go on (a resume where the run left a
    record to continue, else the same command again)."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    where = error.filename or run_dir
    go_on = ("continue with trainer.resume=true" if (run_dir / "results.json").exists()
             else "run the same command again")
    return (f"no space is left on the device holding {where}; free some (checkpoints are the largest "
            f"files: trainer.keep_checkpoints=best or none keeps fewer) and {go_on}.")


def close_log_file() -> None:
    """Close the job's log file (Hydra's ``train.log`` handler) as the job ends, so that what the
    launcher logs next (the following job's line) does not land in this job's log, nor create a
    log in the folder of a refused job, whose file handler never opened."""
    root = logging.getLogger()
    for handler in [handler for handler in root.handlers if isinstance(handler, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()


@contextlib.contextmanager
def run_ending(single_run: bool) -> Iterator[None]:
    """How a job's end is said. One run prints its error as one sentence and exits 1 (130 when
    interrupted, with how to resume); in a sweep a failed run prints its sentence and the sweep
    goes on (the block's error is suppressed), while an interrupted one stops it: a
    :class:`~topk.stopping.RunInterrupted` is a ``KeyboardInterrupt``, which Hydra's launchers
    let through to ``train.cli``. A preempted submitit job is requeued here and exits. The job's
    log file is closed however it ends (:func:`close_log_file`)."""
    try:
        yield
    except stopping.RunInterrupted:
        stopping.stop_requests.requeue_if_preempted()  # a preempted submitit job: requeued, exits here
        if not single_run:
            raise  # stops the whole sweep: one line and exit 130 at train.cli
        if from_environment().is_main:
            run_dir = Path(HydraConfig.get().runtime.output_dir)
            print(f"Interrupted; its checkpoint and record are in {shown(run_dir)}; continue it with:\n"
                  f"  {resume_command(run_dir)}", file=sys.stderr)
        sys.exit(130)
    except TopkError as error:
        if isinstance(error, RunRefused) and not single_run:
            job = HydraConfig.get()
            note_refused_run(job.sweep.dir, job.job.num, Path(job.runtime.output_dir))
        report_error(str(error), single_run)
    except OSError as error:  # a full disk, wherever it struck; other system errors keep their traceback
        if error.errno != errno.ENOSPC:
            raise
        report_error(no_space_sentence(error), single_run)
    finally:
        close_log_file()


@contextlib.contextmanager
def stops_end_the_command() -> Iterator[None]:
    """Ctrl-C and SIGTERM (:class:`topk.stopping.StopRequests`) stop the whole command, a launcher
    waiting for its workers (joblib) too: one line and exit 130. Once a run or sweep has stopped
    (exit 130), further signals are ignored while the process ends: a second SIGTERM close behind
    the first (SLURM, ``timeout``) would otherwise kill it with 143 as its image-decoding workers
    shut down, although everything is already saved."""
    try:
        with stopping.stop_requests.installed():
            try:
                yield
            except KeyboardInterrupt:
                sweep_dir = interrupted_sweep_dir()
                close_interrupted_sweep()
                if sweep_dir is None:
                    print("Interrupted before the sweep started; nothing was run.", file=sys.stderr)
                else:
                    print(f"Interrupted: the records in {shown(sweep_dir)} say where each run stopped; "
                          f"continue the sweep with:\n  {resume_command(sweep_dir)}", file=sys.stderr)
                sys.exit(130)
    except SystemExit as end:
        if end.code == 130:
            for number in stopping.StopRequests.signals:
                signal.signal(number, signal.SIG_IGN)
        raise


def job_overrides() -> list[str]:
    """The job's command-line overrides (``["loss=smooth_svm", "loss.tau=0.5"]``); none outside Hydra."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def tracking_name(record: dict) -> str:
    """The run's name in TensorBoard, MLflow and W&B: its overrides (:func:`topk.trackers.run_name`),
    else its loss and seed."""
    return run_name(job_overrides(), fallback=f"{record['loss']},seed={record['seed']}")


def run_summary(cfg: DictConfig, splits, device, distributed, job_slot: dict | None = None) -> str:
    """One line saying what runs: data set, model, loss and its k (beside the study's K where
    they differ), epochs, device and processes, or the job slot of a joblib sweep running
    several jobs at once (:mod:`topk.job_share`)."""
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    processes = f", {distributed.world_size} processes" if distributed.enabled else ""
    if job_slot:
        processes = (f", job slot {job_slot['slot'] + 1} of {job_slot['jobs_at_once']} "
                     f"({job_slot['cores']} core{'s' if job_slot['cores'] != 1 else ''})")
    loss_k = cfg.loss.get("k") if OmegaConf.is_dict(cfg.loss) else None
    k = f"k={cfg.k}" if loss_k in (None, cfg.k) else f"loss.k={loss_k} (study K={cfg.k})"
    epochs = int(cfg.trainer.epochs)
    return (f"dataset={choices.get('dataset', '?')} ({splits.num_classes} classes), "
            f"model={choices.get('model', '?')}, loss={choices.get('loss', '?')}, {k}, "
            f"{epochs} epoch{'s' if epochs != 1 else ''}, seed {cfg.seed}, device {device}{processes}")


RESUME_DIRS = ("hydra.run.dir", "hydra.sweep.dir")
BOOLEAN_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "1", "0"}  # OmegaConf's booleans


def resume_argv(argv: list[str]) -> list[str]:
    """``trainer.resume=<folder>`` read as ``trainer.resume=true hydra.run.dir=<folder>`` (with
    ``-m``, ``hydra.sweep.dir=<folder>``): the folder of the run or sweep to continue, as the line
    an interrupted run prints gives it (:func:`resume_command`). Other arguments are kept."""
    folder_key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(argv) else "hydra.run.dir"
    read = []
    for arg in argv:
        key, given, value = arg.partition("=")
        if key.lstrip("+") == "trainer.resume" and given and value.lower() not in BOOLEAN_WORDS:
            read += ["trainer.resume=true", f"{folder_key}={value}"]
        else:
            read.append(arg)
    return read


def resume_command(folder: Path) -> str:
    """The command that continues the run or sweep in ``folder``: this process's command line with
    ``trainer.resume=<folder>`` in place of its ``trainer.resume`` and output folder, quoted for a
    POSIX shell (a ``torchrun`` or ``srun`` prefix is not seen by the process, so not shown)."""
    kept = [arg for arg in sys.argv[1:]
            if arg.partition("=")[0].lstrip("+") not in ("trainer.resume", *RESUME_DIRS)]
    return shlex.join(["python", shown(Path(sys.argv[0])), *kept, f"trainer.resume={shown(folder)}"])


def shown(path: Path) -> str:
    """``path`` relative to the working folder where it lies below it, else as it is."""
    relative = os.path.relpath(path) if Path(path).is_absolute() else str(path)
    return str(path) if relative.startswith("..") else relative
