"""``python train.py --help`` (conf/hydra/help/topk.yaml) and ``make help``: every option a user
chooses is listed under its group, the internal groups (protocol/*, schema/*) are not, and every
command shown composes."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import pytest

from conftest import CONF, ROOT
from topk.schema.validate import command_line_problem

# The groups the help lists, under the label it shows them by.
GROUPS = {"dataset": "dataset", "model": "model", "loss": "loss", "augment": "augment", "optim": "optim",
          "schedule": "schedule", "logger": "logger", "experiment": "+experiment", "scale": "+scale",
          "tune": "+tune"}
LAUNCHERS = ["basic", "joblib", "submitit_local", "slurm"]


@pytest.fixture(scope="module")
def help_text() -> str:
    result = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def listed_options(help_text: str) -> dict[str, list[str]]:
    """``{label: [options]}`` of the help's "Groups" section: a label starts a line, its options
    follow, comma-separated, on that line and on the indented lines that end with a comma."""
    section = help_text.split("== Groups")[1].split("== Top-level keys ==")[0].splitlines()[1:]
    options, label, open_list = {}, None, False
    for line in section:
        head = line[:16].strip()
        if head:
            label, open_list = head, True
            options[label] = []
        elif not open_list:
            continue
        options[label] += [name.strip() for name in line[16:].split(",") if name.strip()]
        open_list = line.rstrip().endswith(",")
    return options


def test_help_lists_every_option_of_every_user_group_and_no_internal_group(help_text):
    options = listed_options(help_text)
    for group, label in GROUPS.items():
        expected = sorted(path.stem for path in (CONF / group).glob("*.yaml"))
        assert sorted(options[label]) == expected, f"--help's {label} line is out of date with conf/{group}/"
        default_file = (CONF / "train.yaml").read_text()
        default = re.search(rf"^  - {group}: (\w+)$", default_file, re.M)
        if default:
            assert options[label][0] == default.group(1), f"the default {group} comes first"
    assert options["hydra/launcher"] == LAUNCHERS and options["hydra/sweeper"] == ["basic", "optuna", "tune"]
    assert "protocol/" not in help_text and "schema/" not in help_text
    assert "powered by Hydra" not in help_text


@pytest.mark.parametrize("choice", [f"hydra/launcher={name}" for name in LAUNCHERS] + ["hydra/sweeper=optuna", "hydra/sweeper=tune"])
def test_every_listed_launcher_and_sweeper_composes(choice):
    assert command_line_problem([choice], CONF, "train") is None


def test_every_common_command_composes_job_by_job(help_text, tmp_path):
    commands = help_text.split("== Common commands ==")[1].strip().splitlines()
    commands = [line.split("  ")[0].replace("<run>", str(tmp_path)) for line in commands if line.startswith("python ")]
    assert len(commands) == 5
    for command in commands:
        words = command.split()[2:]
        sweep = [word for word in words if word != "-m"]
        choices = [[f"{word.split('=')[0]}={value}" for value in word.split("=", 1)[1].split(",")] for word in sweep]
        for job in itertools.product(*choices):
            assert command_line_problem(list(job), CONF, "train") is None, (command, job)


def test_make_help_is_the_default_goal_and_lists_the_targets():
    """A bare ``make`` prints the targets, one line each, and installs nothing."""
    dry_run = subprocess.run(["make", "-n", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
    assert all(line.startswith("echo ") for line in dry_run.stdout.splitlines()), dry_run.stdout
    result = subprocess.run(["make", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for target in ("demo", "test", "docs", "smoke", "report", "bench-losses", "install-peers", "sweep-<id>",
                   "table-<id>", "figure-<id>"):
        assert re.search(rf"^  {re.escape(target)} +\S", result.stdout, re.M), target
