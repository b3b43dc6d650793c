"""The sampler of the zoo's tuning studies (``conf/hydra/sweeper/tune.yaml``): Optuna's TPE, which
also stops a study that cannot run.

Hydra's Optuna sweeper runs every trial it was asked for, and a study whose every trial fails
ends in Optuna's "No trials are completed yet" with a traceback. A study whose trials all fail
alike (missing data, a wrong path: the same error whatever the values tried) stops instead once
two trials have failed so, and a study that ends without a completed trial stops before asking
Optuna for its best one: either way with the basic sweeper's summary
(:meth:`topk.hydra_callbacks.CheckOutputDir.on_multirun_end`), one line counting the sweep's runs
by status and one ``Error: ...`` sentence, exit status 1. A diverged trial
(``NonFiniteLossError``) depends on the values tried: the study goes on past it.

Like :mod:`topk.hydra_callbacks`, this module runs under Hydra only (the sweeper instantiates it
in the launching process, where every trial is told).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from optuna.samplers import TPESampler
from optuna.trial import TrialState

from topk.hydra_callbacks import (
    release_sweep_locks,
    sweep_problems,
    sweep_statuses,
    take_refused_runs,
)

DIVERGED = "NonFiniteLossError:"  # the start of a diverged run's recorded error (train.train)
ALIKE_FAILURES = 2  # trials failing with one error, and none completed, that stop a study


def failed_errors(sweep_dir: Path) -> list[str | None]:
    """The recorded ``error`` of each failed run below ``sweep_dir``."""
    errors = []
    for path in Path(sweep_dir).rglob("results.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("status") == "failed":
            errors.append(record.get("error"))
    return errors


def stop_reason(states: list[TrialState], errors: list[str | None], n_trials: int) -> str | None:
    """Why the study stops after the trials told so far (``states``; ``errors``: the failed runs'
    recorded errors), or ``None`` while it may still find something."""
    if TrialState.COMPLETE in states:
        return None
    common = set(errors)
    alike = (len(states) >= ALIKE_FAILURES and len(errors) >= len(states) and len(common) == 1
             and not str(next(iter(common))).startswith(DIVERGED))
    if alike and len(states) < n_trials:
        return (f"every trial failed with the same error, whatever its values, so the study "
                f"stopped after {len(states)} of its {n_trials} trials")
    if len(states) >= n_trials:
        return "no trial of the study completed, so it has no best trial"
    return None


def remember_the_sweep(cfg, trial) -> None:
    """The sweeper's ``custom_search_space`` hook, called with the sweep's config as each trial is
    set up: the study keeps the sweep's folder and number of trials (its ``user_attrs``) for
    :class:`StoppingTPESampler`, which Optuna does not give them."""
    if "sweep_dir" not in trial.study.user_attrs:
        trial.study.set_user_attr("sweep_dir", str(cfg.hydra.sweep.dir))
        trial.study.set_user_attr("n_trials", int(cfg.hydra.sweeper.n_trials))


class StoppingTPESampler(TPESampler):
    """Optuna's TPE sampler that stops a study which cannot run (module docstring): after each
    trial is told, it checks the study's trials and the run records in the sweep's folder (which
    :func:`remember_the_sweep` gave the study)."""

    def after_trial(self, study, trial, state, values) -> None:
        super().after_trial(study, trial, state, values)
        sweep = study.user_attrs
        if "sweep_dir" not in sweep:
            return
        told = [t.state for t in study.get_trials(deepcopy=False)
                if t.number != trial.number and t.state.is_finished()] + [state]
        reason = stop_reason(told, failed_errors(Path(sweep["sweep_dir"])), sweep["n_trials"])
        if reason is not None:
            stop_study(Path(sweep["sweep_dir"]), reason)


def stop_study(sweep_dir: Path, reason: str) -> None:
    """The basic sweeper's summary of the sweep (:meth:`topk.hydra_callbacks.CheckOutputDir.on_multirun_end`: its runs
    by status, its refused jobs), ``reason`` added; its ``sweep.lock`` released; exit status 1."""
    refused = len(take_refused_runs(sweep_dir))
    statuses = sweep_statuses(sweep_dir)
    release_sweep_locks()
    counts = [f"{count} {status}" for status, count in sorted(statuses.items())]
    counts += [f"{refused} refused"] if refused else []
    print(f"Sweep {sweep_dir}: {', '.join(counts) or 'no runs'}.", file=sys.stderr)
    problems = sweep_problems(statuses["failed"], statuses["running"], refused, statuses["unreadable"])
    sys.exit(f"Error: {'; '.join([*problems, reason])}.")
