"""The report page (topk.report.page): every paper item with the right status, its images and
links present, built from whatever runs exist (fake sweeps here)."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import ROOT
from topk.records import write_history, write_results
from topk.report.page import ITEMS, STATUS, build_page
from topk.report.runs import expected_runs, load_sweep, sweep_size


def record(experiment, loss="ce", seed=0, status="completed", **params):
    done = status == "completed"
    metrics = {f"top{k}": 50.0 + k for k in (1, 2, 3, 5)} if done else {}
    return {"status": status, "error": None if done else "boom", "experiment": experiment,
            "dataset": "cifar100", "model": "resnet18", "loss": loss, "augment": "mixup",
            "seed": seed, "params": {"seed": seed, "loss.k": 5, **params}, "best_epoch": 1,
            "selection_metric": "val/top5", "val": metrics, "test": metrics,
            "epoch_seconds": 1.0, "versions": {"topk": "0", "torch": "x"}}


def write_sweep(root: Path, experiment: str, records: list[dict], sweep: dict) -> Path:
    """``root/<experiment>/2026-01-01_00-00-00``: one job directory per record (with a
    history) and a multirun.yaml asking for ``sweep``."""
    sweep_dir = root / "sweeps" / experiment / "2026-01-01_00-00-00"
    for job, rec in enumerate(records):
        (sweep_dir / str(job)).mkdir(parents=True)
        write_results(sweep_dir / str(job), rec)
        write_history(sweep_dir / str(job), [{"epoch": 1, "train/top5": 60.0}])
    params = "".join(f"      {key}: {value}\n" for key, value in sweep.items())
    (sweep_dir / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    params:\n" + params
        + f"  overrides:\n    task:\n    - +experiment={experiment}\n")
    return sweep_dir


def s20_sweep(root, experiment, parameter, skip_last=False):
    runs = [record(experiment, loss, seed, **{parameter: value}) for value in (10, 20)
            for loss in ("ce", "topk_group") for seed in (0, 1)]
    return write_sweep(root, experiment, runs[:-1] if skip_last else runs,
                       {parameter: "10,20", "loss": "ce,topk_group", "seed": "range(2)"})


class Page(HTMLParser):
    """The ids, status classes per section, image sources and links of a page."""

    def __init__(self, text):
        super().__init__()
        self.section, self.status, self.images, self.links = None, {}, [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "h2":
            self.section = attrs.get("id")
        classes = (attrs.get("class") or "").split()
        if tag == "span" and "status" in classes and self.section and self.section not in self.status:
            self.status[self.section] = next(c for c in classes if c != "status")
        if tag == "img":
            self.images.append(attrs["src"])
        if tag == "a":
            self.links.append(attrs["href"])


def check_page(path: Path) -> Page:
    page = Page(path.read_text())
    assert list(page.status) == list(ITEMS) and len(ITEMS) == 18  # 14 paper items, P22 and the zoo
    for src in page.images:
        assert (path.parent / src).is_file() and (path.parent / src).stat().st_size > 10_000, src
    local = [href for href in page.links if not href.startswith("#")]
    assert local and all((path.parent / href).exists() for href in local)
    anchors = {href[1:] for href in page.links if href.startswith("#")}
    assert anchors == set(ITEMS)
    return page


@pytest.fixture
def outputs(tmp_path):
    """Full-scale: the three S20 sweeps complete (after `make sweeps`), g22_epsilon with a failed
    run and a corrupt record, b18_cifar_noise short of its expected runs, the loss benchmark.
    Smoke scale: b18_tau and s20_exp1 (the full sweep wins)."""
    out = tmp_path / "outputs"
    for experiment, parameter in (("s20_exp1", "dataset.sigma"), ("s20_exp2", "dataset.d"),
                                  ("s20_exp3", "model.hidden")):
        s20_sweep(out, experiment, parameter)
    s20_sweep(out / "smoke", "s20_exp1", "dataset.sigma", skip_last=True)
    eps = write_sweep(out, "g22_epsilon", [
        record("g22_epsilon", "noised_bal", **{"loss.epsilon": 0.1}),
        record("g22_epsilon", "noised_bal", status="failed", **{"loss.epsilon": 1.0})],
        {"loss.epsilon": "0.1,1.0", "seed": 0})
    (eps / "9").mkdir()
    (eps / "9" / "results.json").write_text('{"status": "compl')
    write_sweep(out, "b18_cifar_noise", [record("b18_cifar_noise", "ce", **{"dataset.noise": 0.2})],
                {"dataset.noise": "0.0,0.2", "loss": "ce,smooth_svm", "seed": "range(3)"})
    write_sweep(out / "smoke", "b18_tau", [
        record("b18_tau", "smooth_svm", **{"loss.tau": tau}) for tau in (0.01, 1.0)],
        {"loss.tau": "0.01,1.0", "seed": "'0'"})
    (out / "bench").mkdir()
    (out / "bench" / "losses.json").write_text(json.dumps({
        "batch": 256, "threads": 1, "torch": "x", "log_esp_forward": [
            {"n": 1000, "divide_conquer_log_seconds": 0.002, "summation_seconds": 0.01,
             "summation_over_divide_conquer": 5.0}], "stability": []}))
    return out


def test_page_lists_every_item_with_its_status(outputs):
    path, errors = build_page(outputs)
    assert errors == [] and path == outputs / "report" / "index.html"
    page = check_page(path)
    expected = {item: "none" for item in ITEMS}
    expected.update(s20_exp1="reproduced", s20_exp2="reproduced", s20_exp3="reproduced",
                    b18_speed="reproduced", g22_epsilon="incomplete",
                    b18_cifar_noise="incomplete", b18_tau="smoke")
    assert page.status == expected
    text = path.read_text()
    for label in STATUS.values():
        assert label in text
    assert "make sweep-g22_plantnet</code>, then <code>make table-g22_plantnet" in text
    assert "make bench-losses" in text and "1 unreadable" in text
    assert "sweeps/s20_exp1/2026-01-01_00-00-00/0/results.json" in text  # a run's record
    assert (outputs / "report" / "figures" / "b18_tau.png").is_file()
    assert (outputs / "report" / "tables" / "g22_epsilon.tex").is_file()
    for item in ITEMS:  # the overview links every item to its section
        assert f'href="#{item}"' in text


def test_page_of_nothing_says_no_runs_yet(tmp_path):
    path, errors = build_page(tmp_path / "outputs")
    page = Page(path.read_text())
    assert errors == [] and page.status == {item: "none" for item in ITEMS}
    assert page.images == [] and all(href.startswith("#") for href in page.links)


def test_links_are_relative_so_the_page_opens_anywhere(outputs, tmp_path):
    path, _ = build_page(outputs)
    moved = tmp_path / "copy"
    os.rename(outputs, moved)  # the whole outputs folder, page and runs together
    check_page(moved / "report" / "index.html")


def test_items_are_the_readmes_paper_results_rows():
    readme = (ROOT / "README.md").read_text().split("## Paper results")[1].split("\n### ")[0]
    rows = re.findall(r"^\| `(\w+)`(?:–`(\d)`)? \|", readme, re.M)
    ids = [f"{name[:-1]}{i}" for name, last in rows if last
           for i in range(int(name[-1]), int(last) + 1)] + [name for name, last in rows if not last]
    assert sorted(ids) == sorted(ITEMS)


def test_expected_runs_from_multirun_yaml_without_hydra(tmp_path):
    assert [sweep_size(v) for v in ("0.0,0.2", "range(3)", "range(1,7,2)", "choice(a,b)",
                                    "[1,2],[3]", "'a,b'", 0, "interval(0,1)")] == \
        [2, 3, 3, 2, 2, 1, 1, None]
    sweep = write_sweep(tmp_path, "x", [record("x")], {"loss": "ce,focal", "seed": "range(4)"})
    assert expected_runs(sweep) == (8, 4)
    assert expected_runs(tmp_path) == (None, None)
    (sweep / "0" / "results.json").write_text("[1, 2]")  # valid JSON, not a record
    assert load_sweep(sweep).unreadable and load_sweep(sweep).runs.empty
