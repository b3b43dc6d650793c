"""Hydra's Optuna sweeper tunes a loss parameter: each job returns its selected model's
selection metric (topk.cli.selected_value); a sweep under Optuna that selects on nothing, or pushes
it the wrong way, is refused. The zoo's tuning: every loss's study (conf/tune/) and the tuned
table (topk/report/tuning.py), from records and from a study at smoke scale."""

from __future__ import annotations

import io
import json
import logging
import re
import shlex

import pandas as pd
import pytest
import yaml
from test_faults import run_main

from conftest import CONF, ROOT, compose_config, run_cli
from topk.data.fixtures import write_smoke_data
from topk.report import make_tables
from topk.report.tables import build_table
from topk.report.tuning import search_space

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="the tune extra (hydra-optuna-sweeper)")

TUNE = ["-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=maximize", "hydra.sweeper.sampler.seed=0",
        "loss=smooth_svm", "loss.k=2", "loss.tau=interval(0.1,2.0)", "trainer.epochs=5", "trainer.progress=false",
        "trainer.tensorboard=false"]


def test_selected_value_is_the_selection_metric_of_the_selected_model():
    from topk import cli

    assert cli.selected_value({"selection_metric": "val/top2", "val": {"top2": 61.5}}) == 61.5
    assert cli.selected_value({"selection_metric": "val/loss", "val": {"loss": 0.25}}) == 0.25
    assert cli.selected_value({"selection_metric": "last", "val": {"top2": 61.5}}) is None
    assert cli.selected_value({"selection_metric": "val/top2", "val": {}}) is None


def test_a_small_study_on_circles_finds_the_best_of_its_trials(tmp_path):
    sweep = tmp_path / "study"
    code, stderr = run_main([*TUNE, "hydra.sweeper.n_trials=3", "dataset.val_per_class=50",
                             "trainer.selection_metric=val/top2", f"hydra.sweep.dir={sweep}"], quick=False)
    assert code == 0, stderr
    records = [json.loads((sweep / str(job) / "results.json").read_text()) for job in range(3)]
    values = [record["val"]["top2"] for record in records]
    taus = [record["params"]["loss.tau"] for record in records]
    assert len(set(taus)) == 3 and all(0.1 <= tau <= 2.0 for tau in taus)
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == max(values)
    assert best["best_params"]["loss.tau"] == taus[values.index(max(values))]


def test_tuning_on_no_validation_metric_is_refused_in_one_sentence(tmp_path):
    code, stderr = run_main([*TUNE, "hydra.sweeper.n_trials=1", "trainer.selection_metric=last",
                             f"hydra.sweep.dir={tmp_path / 'study'}"], quick=False)
    assert code != 0
    assert stderr.strip().splitlines()[-1].startswith(
        "Error: hydra/sweeper=optuna tunes the selected model's trainer.selection_metric, and last is not a "
        "validation metric; set trainer.selection_metric=val/top5")
    assert stderr.strip().endswith("Nothing was run.") and not (tmp_path / "study").exists()


# --- the zoo's tuning: +tune=<loss> (conf/tune/), make tune-<zoo>, the <zoo>_tuned table ---

LOSSES = sorted(path.stem for path in (CONF / "loss").glob("*.yaml"))
RANGE = re.compile(r"interval\(\s*([-\d.e]+)\s*,\s*([-\d.e]+)\s*\)")


@pytest.mark.parametrize("loss", LOSSES)
def test_every_loss_has_a_study_over_its_own_parameters_whose_defaults_lie_in_the_ranges(loss):
    cfg = compose_config(["+experiment=zoo_cifar100", f"+tune={loss}"], return_hydra_config=True)
    space = search_space(loss)
    sweeper, params = cfg.hydra.sweeper, cfg.hydra.sweeper.params
    assert (params["loss"], params["seed"]) == (loss, "0") and cfg.hydra.runtime.choices.loss == "ce"
    assert cfg.hydra.sweep.dir.startswith(f"outputs/tuning/zoo_cifar100/{loss}/")
    if not space:  # nothing to tune: one run under the basic sweeper
        assert "BasicSweeper" in sweeper._target_
        return
    assert "optuna" in sweeper._target_ and sweeper.direction == "maximize" and sweeper.sampler.seed == 0
    assert sweeper.n_trials == 20 and sweeper.study_name == f"zoo_cifar100_{loss}"
    loss_cfg = compose_config(["+experiment=zoo_cifar100", f"loss={loss}"]).loss
    for key, searched in space.items():
        low, high = map(float, RANGE.search(searched).groups())
        assert low <= loss_cfg[key.removeprefix("loss.")] <= high, (key, searched)


@pytest.mark.parametrize("direction,metric,wanted", [("minimize", "val/top2", "maximize"),
                                                      ("maximize", "val/loss", "minimize")])
def test_tuning_in_the_wrong_direction_is_refused_in_one_sentence(direction, metric, wanted):
    from topk.hydra_callbacks import tuning_problem

    overrides = ["hydra/sweeper=optuna", f"hydra.sweeper.direction={direction}", f"trainer.selection_metric={metric}"]
    better = "high" if wanted == "maximize" else "low"
    assert tuning_problem(compose_config(overrides, return_hydra_config=True)) == (
        f"the Optuna sweeper would {direction} {metric}, which is better {better}; set "
        f"hydra.sweeper.direction={wanted}. Nothing was run.")
    assert tuning_problem(compose_config([*overrides[:1], f"hydra.sweeper.direction={wanted}",
                                          f"trainer.selection_metric={metric}"], return_hydra_config=True)) is None


def write_study(folder, trials, smoke=False):
    """A study folder of completed trials ``[(val top5, test top5, tau)]`` as train.py writes them."""
    for job, (val, test, tau) in enumerate(trials):
        run = folder / str(job)
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
            [f"loss.tau={tau}", "+experiment=zoo_cifar100", "+tune=smooth_svm", *(["+scale=smoke"] * smoke)]))
        record = {"status": "completed", "experiment": "zoo_cifar100", "loss": "smooth_svm", "seed": 0,
                  "selection_metric": "val/top5", "val": {"top5": val},
                  "test": {"top1": test / 2, "top5": test, "macro_top5": test, "avg5": test},
                  "params": {"loss.tau": tau, "loss.alpha": 1.0}}
        (run / "results.json").write_text(json.dumps(record))


def test_the_tuned_table_takes_the_best_validation_trial_of_the_newest_full_scale_study(tmp_path):
    tuning = tmp_path / "tuning" / "zoo_cifar100"
    write_study(tuning / "smooth_svm" / "2026-01-01_00-00-00", [(50.0, 40.0, 0.5), (60.0, 30.0, 2.0)])
    write_study(tuning / "smooth_svm" / "2026-02-01_00-00-00", [(99.0, 99.0, 9.0)], smoke=True)
    table = build_table("zoo_cifar100_tuned", outputs=tmp_path, sweep_dir=tuning)
    row = table.tidy.set_index("loss").loc["smooth_svm"]
    # the best validation trial (60), not the best test one (40); the newer smoke study is passed over
    assert (row["val"], row["top5"], row["best"], row["completed"]) == (60.0, 30.0, "tau=2, alpha=1", 2)
    assert not row["smoke"] and row["study"].endswith("2026-01-01_00-00-00")
    assert table.tidy.set_index("loss").loc["ce", "trials"] == 0
    markdown = table.markdown()
    assert "| smooth_svm" in markdown and "no study" in markdown and "no sweep of zoo_cifar100" in markdown


def test_no_study_at_all_is_one_sentence(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no study of zoo_plantnet under .*; run `make tune-zoo_plantnet`"):
        build_table("zoo_plantnet_tuned", outputs=tmp_path)


def test_a_tuned_zoo_at_smoke_scale_runs_every_trial_and_gives_its_table(tmp_path, monkeypatch):
    data = write_smoke_data(tmp_path / "data")
    tuning = tmp_path / "tuning"
    monkeypatch.setenv("TOPK_TUNE_TRIALS", "2")
    for loss in ("smooth_svm", "ce"):
        code, stderr = run_main(["-m", "+experiment=zoo_cifar100", "+scale=smoke", f"data_root={data}", f"+tune={loss}",
                                 f"hydra.sweep.dir={tuning / loss / '2026-11-26_00-00-00'}", "hydra.launcher.n_jobs=1"],
                                quick=False)
        assert code == 0, stderr[-3000:]
    records = [json.loads((tuning / "smooth_svm" / "2026-11-26_00-00-00" / str(job) / "results.json").read_text())
               for job in range(2)]
    assert len({record["params"]["loss.tau"] for record in records}) == 2
    best = max(records, key=lambda record: record["val"]["top5"])
    out = tmp_path / "out"
    assert make_tables.main(["zoo_cifar100_tuned", "--sweep-dir", str(tuning), "--out", str(out)]) == 0
    rows = pd.read_csv(out / "zoo_cifar100_tuned.csv").set_index("loss")
    assert rows.loc["smooth_svm", "completed"] == 2 and rows.loc["ce", "completed"] == 1
    assert rows.loc["smooth_svm", "top5"] == best["test"]["top5"] and rows.loc["smooth_svm", "smoke"]
    assert "(smoke)" in (out / "zoo_cifar100_tuned.md").read_text()


# --- issue 35: a study keeps its own folder; a study that cannot run stops in one sentence ---


@pytest.mark.parametrize("loss", ["smooth_svm", "ce"])
def test_a_study_keeps_its_own_folder_before_or_after_smoke_scale(loss):
    """`+tune=<loss> +scale=smoke` once put the trials in the smoke sweeps' folder (the later file's
    hydra.sweep.dir won), where the zoo table averaged them as seeds."""
    folders = [compose_config(["+experiment=zoo_cifar100", *order], return_hydra_config=True).hydra.sweep.dir
               for order in ([f"+tune={loss}", "+scale=smoke"], ["+scale=smoke", f"+tune={loss}"], [f"+tune={loss}"])]
    assert all(folder.startswith(f"outputs/tuning/zoo_cifar100/{loss}/") for folder in folders), folders
    smoke = compose_config(["+experiment=zoo_cifar100", "+scale=smoke"], return_hydra_config=True).hydra.sweep.dir
    assert smoke.startswith("outputs/smoke/sweeps/zoo_cifar100/")
    assert compose_config(["+scale=smoke"], return_hydra_config=True).hydra.sweep.dir.startswith(
        "outputs/smoke/sweeps/multirun/")


def test_a_study_stops_when_its_trials_fail_alike_or_none_completes():
    from optuna.trial import TrialState

    from topk.tune_sampler import stop_reason

    failed, done = TrialState.FAIL, TrialState.COMPLETE
    missing = "DataError: no CIFAR-100 folder"
    assert stop_reason([failed], [missing], 20) is None  # one failure tells nothing yet
    assert stop_reason([failed, failed], [missing, missing], 20) == (
        "every trial failed with the same error, whatever its values, so the study stopped after 2 of its 20 trials")
    assert stop_reason([failed, failed], [missing, "DataError: another"], 20) is None
    assert stop_reason([done, failed, failed], [missing, missing], 20) is None  # one trial ran: values matter
    diverged = "NonFiniteLossError: the training loss became nan at epoch 1; lower optim.lr"
    assert stop_reason([failed, failed], [diverged, diverged], 20) is None  # the values tried did it
    assert stop_reason([failed, failed], [missing], 20) is None  # a trial without a record: unknown
    assert stop_reason([failed], [missing], 1) == "no trial of the study completed, so it has no best trial"
    assert stop_reason([failed] * 3, [diverged] * 3, 3) == "no trial of the study completed, so it has no best trial"


def test_a_study_that_cannot_run_stops_early_in_one_sentence(tmp_path, monkeypatch):
    """Issue 35: with its data missing, every trial of an Optuna study failed alike, and the study
    ran all 20 before ending in Optuna's "No trials are completed yet" traceback. It stops after
    two, with the basic sweeper's summary; the data folder is left as it was."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "README").write_text("CIFAR-100 goes here\n")
    before = (data / "README").read_bytes()
    study = tmp_path / "study"
    monkeypatch.setenv("TOPK_TUNE_TRIALS", "20")
    code, stderr = run_main(["-m", "+experiment=zoo_cifar100", "+tune=smooth_svm", "+scale=smoke", f"data_root={data}",
                             f"hydra.sweep.dir={study}", "hydra.launcher.n_jobs=1"], quick=False)
    assert code == 1, stderr[-3000:]
    assert "Traceback" not in stderr and "No trials are completed" not in stderr
    lines = stderr.strip().splitlines()
    assert lines[-2:] == [f"Sweep {study}: 2 failed.",
                          "Error: 2 runs of the sweep failed; their results.json and train.log say why; every "
                          "trial failed with the same error, whatever its values, so the study stopped after 2 "
                          "of its 20 trials."]
    assert sum(line.startswith(f"Error in {study}") for line in lines) == 2 and len(lines) <= 6
    records = sorted(study.rglob("results.json"))
    assert len(records) == 2 and all(json.loads(path.read_text())["status"] == "failed" for path in records)
    assert sorted(path.name for path in data.iterdir()) == ["README"] and (data / "README").read_bytes() == before


# --- issue 37: the same command, the same trials; a sweep's log in plain lines ---


def readme_study_command(n_trials: int) -> list[str]:
    """The README's Optuna command after ``python train.py``, with ``n_trials`` trials."""
    line = next(line for line in (ROOT / "README.md").read_text().splitlines() if "# tune τ with Optuna" in line)
    words = shlex.split(line.split("   # ")[0])
    assert words[:2] == ["python", "train.py"] and "hydra.sweeper.n_trials=20" in words
    return [word if not word.startswith("hydra.sweeper.n_trials=") else f"hydra.sweeper.n_trials={n_trials}"
            for word in words[2:]]


def trial_values(sweep) -> list[dict]:
    """Each trial's tuned values, in trial order, from its run record."""
    records = sorted(sweep.glob("*/results.json"), key=lambda path: int(path.parent.name))
    return [json.loads(path.read_text())["params"] for path in records]


def test_the_readme_study_proposes_the_same_trials_again_and_logs_plain_lines(tmp_path):
    """Issue 37: the README's study, run twice, tried other values each time (Hydra's Optuna
    sampler is unseeded), and its log held alembic's seven `setup plugin ...` lines and Optuna's
    line in ANSI colour codes. Its first run here is a process of its own, as a user's is (both
    come from imports, once per process); the second runs in this one."""
    command = [*readme_study_command(2), "trainer.epochs=1", "trainer.progress=false", "trainer.tensorboard=false"]
    first = run_cli([*command, f"hydra.sweep.dir={tmp_path / 'first'}"])
    assert first.returncode == 0, first.stderr[-3000:]
    output = first.stdout + first.stderr
    assert "\x1b[" not in output and "setup plugin" not in output, output[:2000]
    assert "][HYDRA] A new study created in memory" in output  # Optuna's line kept, in Hydra's format
    code, stderr = run_main([*command, f"hydra.sweep.dir={tmp_path / 'again'}"], quick=False)
    assert code == 0, stderr[-3000:]
    first_trials = trial_values(tmp_path / "first")
    assert len(first_trials) == 2 and first_trials[0] != first_trials[1]
    assert trial_values(tmp_path / "again") == first_trials
    sampler = compose_config(["hydra/sweeper=tune"], return_hydra_config=True).hydra.sweeper.sampler
    assert sampler.seed == 0 and compose_config(["hydra/sweeper=tune", "seed=3"], return_hydra_config=True).hydra.sweeper.sampler.seed == 3


def test_a_sweep_under_optuna_hands_its_lines_to_hydras_logging_without_colour():
    import optuna

    from topk.sweep_logging import PlainSweepLogs

    record = logging.LogRecord("optuna.study", logging.INFO, __file__, 1, "A new study created", None, None)
    assert "\x1b[" in optuna.logging.create_default_formatter().format(record)  # Optuna's own handler's line
    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    root, alembic = logging.getLogger(), logging.getLogger("alembic")
    saved = root.level, alembic.level, optuna.logging.get_verbosity()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        PlainSweepLogs().on_multirun_start(config=compose_config(["hydra/sweeper=tune"], return_hydra_config=True))
        optuna.logging.set_verbosity(optuna.logging.INFO)
        optuna.logging.get_logger("optuna.study").info("A new study created")
        logging.getLogger("alembic.runtime.plugins").info("setup plugin alembic.autogenerate.schemas")
        assert captured.getvalue() == "[optuna.study] A new study created\n"
        assert not logging.getLogger("optuna").handlers and logging.getLogger("optuna").propagate
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        alembic.setLevel(saved[1])
        optuna.logging.set_verbosity(saved[2])
        optuna.logging.disable_propagation()
        optuna.logging.enable_default_handler()
