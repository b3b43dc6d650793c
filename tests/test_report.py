"""The report page (topk.report.page) and what it rests on: the protocol check
(topk.report.fidelity), the verdicts (topk.report.verdicts) and the claims
(topk.report.claims), on fabricated sweeps whose records hold the protocol's own configs."""

from __future__ import annotations

import json
import math
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from test_faults import run_main

from conftest import ROOT
from topk import paper_results
from topk.records import EMPTY_PROVENANCE, write_history, write_results
from topk.report.fidelity import _compose, _override_text, expand, protocol
from topk.report.page import ITEMS, STATUS, build_page
from topk.report.runs import best_sweep_dir, load_sweep, read_sweep
from topk.report.verdicts import (
    AGREES,
    DIFFERS,
    FAILS,
    HOLDS,
    TOO_FEW,
    UNDECIDED,
    beats,
    cell_verdict,
    not_beaten,
    t975,
)
from topk.run_dir import run_params


def provenance(ended="2026-01-01T00:10:00Z"):
    return {**EMPTY_PROVENANCE, "host": "lab-node-3", "device": "cuda:0", "gpu_name": "Test GPU",
            "gpu_count": 1, "world_size": 1, "git": "0123456789ab", "git_commit": "0123456789ab" * 3,
            "git_dirty": False, "started_utc": "2026-01-01T00:00:00Z", "ended_utc": ended}


def protocol_records(experiment, metrics, changes=None, seeds=None, ended="2026-01-01T00:10:00Z"):
    """One completed record per job of ``experiment``'s protocol (only ``seeds`` if given), its
    params the job's composed config updated with ``changes``, its test metrics
    ``metrics(job values)``."""
    proto, records = protocol(experiment), []
    for job in proto.jobs:
        values = dict(job)
        if seeds is not None and values["seed"] not in seeds:
            continue
        params = {**proto.params(job), **(changes or {})}
        test = metrics(values)
        records.append({
            "status": "completed", "error": None, "experiment": experiment, "dataset": "x",
            "model": "x", "loss": values.get("loss", "ce"), "augment": "none",
            "seed": int(values["seed"]), "params": params, "best_epoch": 1,
            "selection_metric": "last", "val": test, "test": test, "epoch_seconds": 1.0,
            "versions": {"topk": "0"}, "provenance": provenance(ended)})
    return records


def write_sweep(sweep_dir: Path, experiment: str, records: list[dict], command_line=(),
                sweeper=None) -> Path:
    """Job directories and a multirun.yaml as Hydra writes them: the sweep's params (the
    protocol's unless ``sweeper``) and its command line (``+experiment=...`` and ``command_line``)."""
    for job, record in enumerate(records):
        (sweep_dir / str(job)).mkdir(parents=True)
        write_results(sweep_dir / str(job), record)
        write_history(sweep_dir / str(job), [{"epoch": 1, "train/top5": 60.0}])
    params = sweeper if sweeper is not None else protocol(experiment).sweep
    lines = "".join(f"      {key}: {value}\n" for key, value in params.items())
    task = "".join(f"    - {line}\n" for line in [f"+experiment={experiment}", *command_line])
    (sweep_dir / "multirun.yaml").write_text(
        f"hydra:\n  sweeper:\n    params:\n{lines}  overrides:\n    task:\n{task}")
    return sweep_dir


PAPER_NOISE = paper_results.load("b18_table1_cifar100_noise").set_index(["noise", "loss"])


def noise_metrics(shift=0.0):
    """B18 Table 1's numbers, ± 0.1 by seed (within its reported spreads), ``shift`` added to
    smooth_svm's top-1 at p = 0.4."""
    def metrics(values):
        row = PAPER_NOISE.loc[(values["dataset.noise"], values["loss"])]
        wobble = 0.1 * (values["seed"] - 1)
        moved = shift if (values["dataset.noise"], values["loss"]) == (0.4, "smooth_svm") else 0.0
        return {"top1": row["top1"] + wobble + moved, "top5": row["top5"] + wobble}
    return metrics


def s20_metrics(group_wins_at_10=False):
    """CE ahead of both top-2 losses by 3 (top-1) and 0.5 (top-2) points at σ < 20, by 0.5 and
    0.1 beyond, seed-to-seed noise 0.05; or top-2 grouping 5 points ahead of CE at σ = 10."""
    def metrics(values):
        sigma, loss, seed = values["dataset.sigma"], values["loss"], values["seed"]
        noise = 0.05 * ((seed * 7) % 5 - 2)
        lead1, lead2 = (3.0, 0.5) if sigma < 20 else (0.5, 0.1)
        if loss == "ce":
            return {"top1": 90.0 + noise, "top2": 98.0 + noise}
        if group_wins_at_10 and sigma == 10 and loss == "topk_group":
            return {"top1": 95.0 + noise, "top2": 99.0 + noise}
        spread = 4.0 * ((seed % 3) - 1) if sigma == 15 else 0.0  # wide min-max at σ = 15
        return {"top1": 90.0 - lead1 + noise + spread, "top2": 98.0 - lead2 + noise}
    return metrics


class Page(HTMLParser):
    """The status class per section, image sources and links of a page."""

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
    """Every item once; every image and local link inside the page's own folder."""
    page = Page(path.read_text())
    assert list(page.status) == list(ITEMS) and len(ITEMS) == 22
    for src in page.images:
        assert (path.parent / src).is_file() and (path.parent / src).stat().st_size > 10_000, src
    local = [href for href in page.links if not href.startswith("#")]
    assert all((path.parent / href).exists() and not href.startswith("..") for href in local), local
    assert {href[1:] for href in page.links if href.startswith("#")} == set(ITEMS)
    return page


def section(text: str, item: str) -> str:
    start = text.index(f'<h2 id="{item}"')
    end = text.find("<h2 id=", start + 1)
    return text[start:end if end > 0 else len(text)]


# ------------------------------------------------------------------------ the protocol


def test_sweeps_expand_with_hydras_parser():
    jobs = expand({"loss": "ce,focal", "seed": "range(4)", "loss.p_k": "[1,0],[0,1]"})
    assert len(jobs) == 16 and jobs[0] == (("loss", "ce"), ("seed", 0), ("loss.p_k", [1, 0]))
    proto = protocol("s20_exp1")
    assert (len(proto.jobs), proto.seeds) == (150, 10)
    assert (len(protocol("s20_cifar").jobs), protocol("g22_time").seeds) == (160, 1)


@pytest.mark.parametrize("experiment", [name for name in ITEMS if name != "b18_speed"])
def test_no_config_value_interpolates_the_seed(experiment):
    """Protocol.params composes each setting once and sets the seed afterwards."""
    proto = protocol(experiment)
    setting = tuple((key, value) for key, value in proto.jobs[-1] if key != "seed")
    lines = [f"{key}={_override_text(value)}" for key, value in (*setting, ("seed", 7))]
    composed = run_params(_compose((f"+experiment={experiment}", *lines)))
    assert proto.params((*setting, ("seed", 7))) == composed


# ------------------------------------------------------------------------ verdicts


def test_verdict_rules():
    assert t975(1) == 12.706 and t975(9) == 2.262 and abs(t975(1000) - 1.962) < 1e-3
    half = 2.262 * 1.0 / math.sqrt(10)  # 10 seeds, std 1
    assert cell_verdict(75.0, 1.0, 10, 75.0 + half - 1e-9, math.nan) == AGREES
    assert cell_verdict(75.0, 1.0, 10, 75.0 + half + 0.01, math.nan) == DIFFERS
    assert cell_verdict(75.0, 1.0, 10, 75.0 + half + 0.3, 0.31) == AGREES  # widened by the paper's std
    assert cell_verdict(75.0, math.nan, 1, 75.5, 0.3) == AGREES  # one run: within 2 paper stds
    assert cell_verdict(75.0, math.nan, 1, 75.7, 0.3) == DIFFERS
    assert cell_verdict(75.0, math.nan, 1, 75.0, math.nan) == TOO_FEW
    assert cell_verdict(75.0, 1.0, 3, math.nan, math.nan) == ""  # nothing published
    seeds = pd.Index(range(5))
    a, b = pd.Series([3.0, 3.1, 2.9, 3.0, 3.2], seeds), pd.Series([1.0, 1.2, 0.8, 1.1, 0.9], seeds)
    assert (beats(a, b), beats(b, a), beats(a, a + [0.01, -0.01, 0.02, -0.02, 0.0])) == (HOLDS, FAILS, UNDECIDED)
    assert (not_beaten(a, b), not_beaten(b, a), not_beaten(a, a)) == (HOLDS, FAILS, HOLDS)
    assert beats(a[:1], b[:1]) == UNDECIDED  # one seed decides nothing


# ------------------------------------------------------------------------ statuses on the page


def test_a_full_protocol_sweep_that_agrees_is_reproduced_and_one_that_differs_is_not(tmp_path):
    out = tmp_path / "outputs"
    write_sweep(out / "sweeps" / "b18_cifar_noise" / "a", "b18_cifar_noise",
                protocol_records("b18_cifar_noise", noise_metrics()))
    path, errors = build_page(out)
    assert errors == []
    page, text = check_page(path), path.read_text()
    assert page.status["b18_cifar_noise"] == "reproduced"
    part = section(text, "b18_cifar_noise")
    assert "<td>agrees</td>" in part and "<td>differs</td>" not in part and "Test GPU (36)" in part
    assert "lab-node-3 (36)" in part and "0123456789ab (36)" in part  # where and with which code

    shutil.rmtree(out / "sweeps")
    write_sweep(out / "sweeps" / "b18_cifar_noise" / "b", "b18_cifar_noise",
                protocol_records("b18_cifar_noise", noise_metrics(shift=20.0)))
    path, _ = build_page(out)
    assert Page(path.read_text()).status["b18_cifar_noise"] == "differs"
    table = pd.read_csv(out / "report" / "tables" / "b18_cifar_noise.csv")
    moved = table[(table["noise"] == 0.4) & (table["loss"] == "smooth_svm")].set_index("metric")
    assert moved.at["top1", "verdict"] == DIFFERS and moved.at["top5", "verdict"] == AGREES
    assert moved.at["top1", "ci_low"] < moved.at["top1", "mean"] < moved.at["top1", "ci_high"]


def test_s20_cifar_is_160_shared_runs_and_a_run_of_the_old_sweep_deviates(tmp_path):
    """s20_cifar's protocol: one run per (model, augment, loss, seed) selecting on val/top1 and
    keeping the val/top5 model (trainer.also_select_on); a run of the sweep that trained each
    selection apart (selection_metric=val/top5, nothing kept beside it) deviates."""
    proto, test = protocol("s20_cifar"), {"top1": 70.0, "top5": 90.0}
    jobs = [dict(job) for job in proto.jobs if dict(job)["seed"] == 0 and dict(job)["augment"] == "mixup"
            and dict(job)["model"] == "resnet18"]  # composing every setting takes seconds each
    records = [{"status": "completed", "error": None, "experiment": "s20_cifar", "dataset": "cifar100",
                "model": "resnet18", "augment": "mixup", "loss": job["loss"], "seed": 0,
                "params": proto.params(tuple(job.items())), "best_epoch": 1, "selection_metric": "val/top1",
                "val": test, "test": test, "epoch_seconds": 1.0, "versions": {"topk": "0"},
                "provenance": provenance("2026-01-01T00:10:00Z")} for job in jobs]
    fidelity = read_sweep(write_sweep(tmp_path / "shared", "s20_cifar", records), "s20_cifar").fidelity
    assert (fidelity.expected, len(fidelity.job_runs), fidelity.faithful) == (160, 4, True)
    old = {**records[0], "params": {**records[0]["params"], "trainer.selection_metric": "val/top5",
                                    "trainer.also_select_on": []}}
    fidelity = read_sweep(write_sweep(tmp_path / "old", "s20_cifar", [old]), "s20_cifar").fidelity
    assert set(fidelity.deviations) == {"trainer.selection_metric", "trainer.also_select_on"}


def test_a_cut_down_sweep_deviates_and_names_the_keys(tmp_path):
    """`-m +experiment=s20_exp1 trainer.epochs=3 seed=0`: every run completed, but it is not the
    protocol: 3 epochs and one seed of ten, both listed; the expected runs are the protocol's."""
    out = tmp_path / "outputs"
    sweep = write_sweep(out / "sweeps" / "s20_exp1" / "cut", "s20_exp1",
                        protocol_records("s20_exp1", s20_metrics(), {"trainer.epochs": 3}, seeds={0}),
                        command_line=["trainer.epochs=3", "seed=0"])
    fidelity = read_sweep(sweep, "s20_exp1").fidelity
    assert not fidelity.faithful and set(fidelity.deviations) == {"trainer.epochs", "seed"}
    assert "ran 3; protocol 1000" in fidelity.deviations["trainer.epochs"]
    assert (fidelity.expected, fidelity.completed_jobs(load_sweep(sweep).runs)) == (150, 15)
    path, _ = build_page(out)
    text = path.read_text()
    assert Page(text).status["s20_exp1"] == "deviates"
    part = section(text, "s20_exp1")
    assert "<code>trainer.epochs</code>" in part and "<code>seed</code>" in part
    assert "python train.py -m +experiment=s20_exp1 trainer.epochs=3 seed=0" in part
    assert "135 protocol run(s) have no record" in part


def test_a_smoke_sweep_in_the_full_scale_folder_is_smoke(tmp_path):
    """... and its section reads well: the protocol line wraps even with an override longer
    than the page is wide, σ (a whole number) prints without decimals, and the greyed claims
    table has no index column."""
    out = tmp_path / "outputs"
    long_dir = "hydra.sweep.dir=" + "outputs/sweeps/s20_exp1/a_very_long_folder_name" * 8
    write_sweep(out / "sweeps" / "s20_exp1" / "2026-01-01_00-00-00", "s20_exp1",
                protocol_records("s20_exp1", s20_metrics(), seeds={0}),
                command_line=["+scale=smoke", long_dir],
                sweeper={**protocol("s20_exp1").sweep, "seed": "0"})
    path, _ = build_page(out)
    text = path.read_text()
    assert Page(text).status["s20_exp1"] == "smoke"
    part = section(text, "s20_exp1")
    assert "color: #aaa" in part  # its claims' verdicts greyed out
    protocol_block = part[part.index('<div class="protocol">'):]
    assert protocol_block.index("<strong>Protocol</strong>") < protocol_block.index(long_dir)
    assert protocol_block.index(long_dir) < protocol_block.index("</div>")
    assert ".protocol p, .protocol li { overflow-wrap: anywhere; }" in text
    assert "<td>10</td>" in part and "<td>10.00</td>" not in part  # σ = 10, not 10.00
    claims = part[part.index("What S20 claims"):]
    claims = claims[:claims.index("</table>")]
    assert "<th" in claims and "row_heading" not in claims and ">0</th>" not in claims


def test_the_best_sweep_is_chosen_by_completeness_and_record_times_not_names(tmp_path):
    out = tmp_path / "outputs"
    root = out / "sweeps" / "b18_cifar_noise"
    write_sweep(root / "2026-01-01_00-00-00", "b18_cifar_noise",
                protocol_records("b18_cifar_noise", noise_metrics(), ended="2026-06-01T00:00:00Z"))
    write_sweep(root / "old_backup", "b18_cifar_noise",
                protocol_records("b18_cifar_noise", noise_metrics(), ended="2025-01-01T00:00:00Z"))
    write_sweep(root / "zz_partial", "b18_cifar_noise",
                protocol_records("b18_cifar_noise", noise_metrics(), seeds={0},
                                 ended="2027-01-01T00:00:00Z"))
    assert best_sweep_dir(out, "b18_cifar_noise").name == "2026-01-01_00-00-00"
    path, _ = build_page(out)
    part = section(path.read_text(), "b18_cifar_noise")
    assert "Other sweeps found (2)" in part and "old_backup" in part and "zz_partial" in part
    path, _ = build_page(out, sweep_dirs=[root / "zz_partial"])  # --sweep-dir chooses
    assert Page(path.read_text()).status["b18_cifar_noise"] == "incomplete"


def test_claims_get_verdicts_that_decide_the_status(tmp_path):
    out = tmp_path / "outputs"
    write_sweep(out / "sweeps" / "s20_exp1" / "a", "s20_exp1", protocol_records("s20_exp1", s20_metrics()))
    path, _ = build_page(out)
    assert Page(path.read_text()).status["s20_exp1"] == "reproduced"
    claims = (out / "report" / "figures" / "s20_exp1.md").read_text()
    assert claims.count("| holds ") == 3 and "all 20 comparisons hold" in claims

    shutil.rmtree(out / "sweeps")
    write_sweep(out / "sweeps" / "s20_exp1" / "b", "s20_exp1",
                protocol_records("s20_exp1", s20_metrics(group_wins_at_10=True)))
    path, _ = build_page(out)
    assert Page(path.read_text()).status["s20_exp1"] == "differs"
    claims = (out / "report" / "figures" / "s20_exp1.md").read_text()
    assert "| does not hold " in claims and "σ = 10 top1: ce − topk_group = -5.00" in claims


def test_a_table_without_index_shows_none_even_with_greyed_columns():
    """A claims table (index=False) of a smoke item, whose verdicts are greyed out through
    pandas' Styler, has no column of row numbers; with index=True the named index stays."""
    from topk.report.page import html_table

    claims = pd.DataFrame({"setting": ["a", "b"], "claim": ["x", "y"], "verdict": ["holds", "undecided"]})
    for grey in ((), ("verdict",)):
        table = html_table(claims, index=False, grey=grey)
        assert re.findall(r"<th[^>]*>([^<]*)</th>", table) == ["setting", "claim", "verdict"]
    named = html_table(claims.set_index("setting"), grey=("verdict",))
    assert ">a</th>" in named and ">0</th>" not in named


def test_page_travels_and_lists_runs_in_job_order(tmp_path):
    out = tmp_path / "outputs"
    write_sweep(out / "sweeps" / "b18_cifar_noise" / "a", "b18_cifar_noise",
                protocol_records("b18_cifar_noise", noise_metrics()))
    build_page(out)
    moved = tmp_path / "elsewhere"
    shutil.copytree(out / "report", moved)  # the page's folder alone
    shutil.rmtree(out)
    page = check_page(moved / "index.html")
    records = [href for href in page.links if href.endswith("results.json")]
    assert records[:3] == [f"runs/b18_cifar_noise/{job}/results.json" for job in (0, 1, 2)]
    assert records.index("runs/b18_cifar_noise/2/results.json") < records.index(
        "runs/b18_cifar_noise/10/results.json")
    copied = json.loads((moved / records[0]).read_text())
    assert copied["provenance"]["host"] == "lab-node-3"


def test_page_of_nothing_says_no_runs_yet_and_explains_every_status(tmp_path):
    path, errors = build_page(tmp_path / "outputs")
    page, text = Page(path.read_text()), path.read_text()
    assert errors == [] and page.status == {item: "none" for item in ITEMS}
    assert all(label in text for label in STATUS.values())
    assert "make sweep-g22_plantnet</code>, then <code>make table-g22_plantnet" in text
    assert "Pl@ntNet-300K and ResNet-50 ImageNet weights" in text and "12,400 h (160 runs)" in text


def test_items_are_the_readmes_paper_results_rows():
    readme = (ROOT / "README.md").read_text().split("## Paper results")[1].split("\n### ")[0]
    rows = re.findall(r"^\| `(\w+)`(?:–`(\d)`)? \|", readme, re.M)
    ids = [f"{name[:-1]}{i}" for name, last in rows if last
           for i in range(int(name[-1]), int(last) + 1)] + [name for name, last in rows if not last]
    assert sorted(ids) == sorted(ITEMS)


def test_a_corrupt_record_is_counted_not_fatal(tmp_path):
    sweep = write_sweep(tmp_path / "s", "b18_cifar_noise",
                        protocol_records("b18_cifar_noise", noise_metrics(), seeds={0}))
    (sweep / "99").mkdir()
    (sweep / "99" / "results.json").write_text("[1, 2]")  # valid JSON, not a record
    loaded = load_sweep(sweep, "b18_cifar_noise")
    assert len(loaded.unreadable) == 1 and len(loaded.runs) == 12


def test_readme_figures_come_only_from_complete_full_scale_sweeps(tmp_path, capsys):
    from topk.report import make_report as script

    out, figures = tmp_path / "outputs", tmp_path / "figures"
    write_sweep(out / "sweeps" / "s20_exp1" / "a", "s20_exp1", protocol_records("s20_exp1", s20_metrics()))
    assert script.main(["--outputs", str(out), "--readme-figures", str(figures)]) == 1
    error = capsys.readouterr().err
    assert "s20_exp2 (none), s20_exp3 (none) lack one; run `make sweeps` first." in error
    assert not figures.exists()


def test_each_item_shows_its_protocol_card_with_the_inferred_and_chosen_rows_marked(tmp_path):
    from topk.cards import experiments_with_cards, load

    path, _ = build_page(tmp_path / "outputs")
    text = path.read_text()
    for experiment in experiments_with_cards():
        card = load(experiment)
        section = text[text.index(f'<h2 id="{experiment}">'):]
        marked = sum(entry.source in ("inferred", "choice") for entry in card.entries)
        assert (f"Protocol card: {len(card.entries)} values, {marked} of them inferred or our choice"
                in section.split("<h2")[1])
    assert text.count('<tr class="marked">') == sum(
        entry.source in ("inferred", "choice") for e in experiments_with_cards() for entry in load(e).entries)


# ------------------------------------------------------------------------ issue 35: what a report reads


def tree_hashes(root: Path) -> dict[str, str]:
    """Every file below ``root`` (links as they read) by its path: its SHA-256."""
    import hashlib

    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(Path(root).rglob("*")) if path.is_file()}


def load_script(name: str):
    """The module of ``scripts/<name>.py``'s command line."""
    import importlib

    return importlib.import_module(f"topk.cards.{name}" if name == "make_cards" else f"topk.report.{name}")


def tau_metrics(values):
    return {"top1": 60.0, "top5": 90.0 + values["loss.tau"] / 100}


def tau_records(seeds=None):
    """b18_tau's protocol records (the smooth top-5 SVM at each tau), test top-5 90 + tau / 100."""
    return [{**record, "loss": "smooth_svm"} for record in protocol_records("b18_tau", tau_metrics, seeds=seeds)]


def b18_tau_sweep_with_duplicates(sweep: Path) -> Path:
    """Seed 0 of b18_tau (7 jobs); the job of tau = 1.0 (job 4) run again as job 7, as a sweep
    resumed with a widened grid does (its job numbers shift), a month later; job 0's folder copied
    by hand to ``0 copy``."""
    records = tau_records(seeds={0})
    write_sweep(sweep, "b18_tau", records)
    again = {**records[4], "provenance": provenance("2026-02-01T00:00:00Z")}
    (sweep / "7").mkdir()
    write_results(sweep / "7", again)
    write_history(sweep / "7", [{"epoch": 1, "train/top5": 60.0}])
    shutil.copytree(sweep / "0", sweep / "0 copy")
    return sweep


def test_a_job_run_again_or_copied_by_hand_counts_once_and_is_listed(tmp_path, capsys):
    """Issue 35: both copies of a job once read as two seeds ("2/2 seeds", an interval of width 0,
    a verdict). A job is its config and seed: the newest completed run counts, the others are
    listed as duplicates left out, by the table, the figure and the page; nothing is rewritten."""
    out = tmp_path / "outputs"
    sweep = b18_tau_sweep_with_duplicates(out / "sweeps" / "b18_tau" / "2026-01-01_00-00-00")
    before = tree_hashes(sweep)
    loaded = load_sweep(sweep, "b18_tau")
    assert len(loaded.runs) == 7 and loaded.duplicates == ((str(sweep / "4"), str(sweep / "7")),
                                                           (str(sweep / "0 copy"), str(sweep / "0")))
    assert loaded.counts()["found"] == 9 and loaded.fidelity.completed_jobs(loaded.runs) == 7

    assert load_script("make_tables").main(["b18_tau", "--sweep-dir", str(sweep), "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    markdown = (tmp_path / "t" / "b18_tau.md").read_text()
    assert ("runs 9 found, 7 completed, 0 failed, 0 interrupted, 0 running, 7 of the protocol's 14 runs "
            "missing; 2 duplicates left out, each the same job (config and seed) as a run counted in its "
            "place (the newest completed, else the newest): `4` (counted: `7`), `0 copy` (counted: `0`).") in markdown
    assert "2/2 seeds" not in markdown and markdown.count("(1/2 seeds, 1 missing)") == 14
    tidy = pd.read_csv(tmp_path / "t" / "b18_tau.csv")
    assert tidy["n"].max() == 1 and tidy["ci_low"].isna().all()  # one seed: no interval, no verdict from it

    assert load_script("make_figures").main(["b18_tau", "--sweep-dir", str(sweep), "--out", str(tmp_path / "f")]) == 0
    assert "2 duplicates left out" in (tmp_path / "f" / "b18_tau.md").read_text()

    path, errors = build_page(out)
    part = section(path.read_text(), "b18_tau")
    assert errors == [] and "Run records (7)" in part and "0 unreadable, 2 duplicate(s) left out;" in part
    assert "<code>4</code> (counted: <code>7</code>), <code>0 copy</code> (counted: <code>0</code>)" in part
    assert not (out / "report" / "runs" / "b18_tau" / "4").exists()  # a left-out record is not cited
    assert tree_hashes(sweep) == before


def test_a_sweep_resumed_with_a_widened_grid_counts_its_rerun_job_once(tmp_path, capsys):
    """Issue 35's case from the command line, at smoke scale: `loss.epsilon=0.0,1.0`, then
    `loss.epsilon=0.0,0.5,1.0 trainer.resume=true`; the job numbers shift, so epsilon = 1 runs again
    as job 2 (job 1, its first run, refuses epsilon = 0.5). The table counts it once."""
    from topk.data.fixtures import write_smoke_data

    data, sweep = write_smoke_data(tmp_path / "data"), tmp_path / "sweep"
    common = ["-m", "+experiment=g22_epsilon", "+scale=smoke", f"data_root={data}", f"hydra.sweep.dir={sweep}",
              "hydra.launcher.n_jobs=1"]
    assert run_main([*common, "loss.epsilon=0.0,1.0"], quick=False)[0] == 0
    run_main([*common, "loss.epsilon=0.0,0.5,1.0", "trainer.resume=true"], quick=False)
    epsilons = {job: json.loads((sweep / job / "results.json").read_text())["params"]["loss.epsilon"]
                for job in ("0", "1", "2")}
    assert epsilons == {"0": 0.0, "1": 1.0, "2": 1.0}
    before = tree_hashes(sweep)
    assert load_script("make_tables").main(["g22_epsilon", "--sweep-dir", str(sweep), "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    markdown = (tmp_path / "t" / "g22_epsilon.md").read_text()
    assert "runs 3 found, 2 completed" in markdown and "1 duplicate left out" in markdown
    assert "`1` (counted: `2`)" in markdown and markdown.count("(1/1 seeds)") == 2  # epsilon 0 and 1
    assert tree_hashes(sweep) == before


def test_the_newest_completed_run_of_a_job_counts_a_failed_rerun_does_not(tmp_path):
    records = tau_records(seeds={0})[:2]
    failed_later = {**records[1], "status": "failed", "error": "DataError: gone",
                    "provenance": provenance("2026-03-01T00:00:00Z")}
    newer = {**records[0], "test": {"top1": 61.0, "top5": 99.0}, "provenance": provenance("2026-02-01T00:00:00Z")}
    sweep = write_sweep(tmp_path / "s", "b18_tau", [records[0], records[1], failed_later, newer])
    loaded = load_sweep(sweep)
    assert list(loaded.runs["run_dir"]) == [str(sweep / "1"), str(sweep / "3")]
    assert loaded.runs.set_index("run_dir").at[str(sweep / "3"), "test.top5"] == 99.0
    assert loaded.duplicates == ((str(sweep / "0"), str(sweep / "3")), (str(sweep / "2"), str(sweep / "1")))
    # keys that change only speed, place or verbosity do not make another job; the seed does
    moved = {**records[0], "params": {**records[0]["params"], "data_root": "/elsewhere", "trainer.num_workers": 8}}
    reseeded = {**records[0], "seed": 1, "params": {**records[0]["params"], "seed": 1}}
    assert len(load_sweep(write_sweep(tmp_path / "t", "b18_tau", [records[0], moved, reseeded])).runs) == 2


def test_tuning_trials_in_a_sweeps_folder_are_no_seeds_of_the_experiment(tmp_path, capsys):
    """Issue 35: trials of an Optuna study (`+tune=...` before `+scale=smoke` once put them in the
    smoke sweeps' folder) were averaged as the zoo's seeds. A folder holding them is refused, in
    one sentence, by the tables and listed as not read by the page; nothing is written or changed."""
    out = tmp_path / "outputs"
    sweep = out / "sweeps" / "zoo_cifar100" / "2026-01-01_00-00-00"
    trials = protocol_records("zoo_cifar100", lambda values: {"top1": 50.0, "top5": 80.0}, seeds={0})[6:7] * 2
    trials = [{**trial, "params": {**trial["params"], "loss.tau": tau},
               "provenance": {**trial["provenance"], "command": f"python train.py +experiment=zoo_cifar100 "
                              f"+tune=smooth_svm +scale=smoke loss.tau={tau}"}}
              for trial, tau in zip(trials, (0.5, 2.0))]
    write_sweep(sweep, "zoo_cifar100", trials)
    before = tree_hashes(out / "sweeps")
    tables = load_script("make_tables")
    assert tables.main(["zoo_cifar100", "--sweep-dir", str(sweep), "--out", str(tmp_path / "t")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("Error: ") and error.count("\n") == 1 and "Traceback" not in error
    assert "holds 2 trial(s) of a tuning study (`+tune=smooth_svm` in their command" in error
    assert "move the study to outputs/tuning/zoo_cifar100/smooth_svm/" in error
    assert tables.main(["zoo_cifar100", "--outputs", str(out), "--out", str(tmp_path / "t")]) == 1
    assert "trial(s) of a tuning study" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
    path, errors = build_page(out)
    part = section(path.read_text(), "zoo_cifar100")
    assert errors == [] and Page(path.read_text()).status["zoo_cifar100"] == "none"
    assert "Folders found but not read as a sweep of zoo_cifar100" in part and "trial(s) of a tuning study" in part
    assert tree_hashes(out / "sweeps") == before


def test_the_page_never_follows_a_link_out_of_a_run_directory(tmp_path):
    """Issue 35: a history.csv linked to any file had that file copied into the page's folder,
    which is meant to be shared. A link out of its run directory is named, never followed; a
    results.json that is one is not read; the linked files are unchanged."""
    out = tmp_path / "outputs"
    secret = tmp_path / "private" / "key.txt"
    secret.parent.mkdir()
    secret.write_text("epoch,train/top5\n1,SECRET\n")
    sweep = write_sweep(out / "sweeps" / "b18_tau" / "a", "b18_tau", tau_records())
    (sweep / "3" / "history.csv").unlink()
    (sweep / "3" / "history.csv").symlink_to(secret)
    (sweep / "9" / "results.json").rename(tmp_path / "private" / "results.json")
    (sweep / "9" / "results.json").symlink_to(tmp_path / "private" / "results.json")
    (sweep / "5" / "history.csv").rename(sweep / "5" / "kept.csv")
    (sweep / "5" / "history.csv").symlink_to("kept.csv")  # a link inside its run: followed
    before = tree_hashes(tmp_path / "private")
    loaded = load_sweep(sweep, "b18_tau")
    assert len(loaded.runs) == 13 and "a link to a file outside its run directory" in loaded.unreadable[0]
    path, errors = build_page(out)
    copied = out / "report" / "runs" / "b18_tau"
    assert errors == [] and not (copied / "3" / "history.csv").exists() and (copied / "3" / "results.json").is_file()
    assert (copied / "5" / "history.csv").read_text() == (sweep / "5" / "kept.csv").read_text()
    assert not any("SECRET" in path.read_text(errors="replace") for path in (out / "report").rglob("*") if path.is_file())
    assert "Not copied beside the page: <code>" in section(path.read_text(), "b18_tau")
    assert tree_hashes(tmp_path / "private") == before


@pytest.mark.parametrize("script,args,what", [
    ("make_tables", ["b18_tau"], "the tables' folder"),
    ("make_figures", ["b18_tau"], "the figures' folder"),
    ("make_report", [], "the page folder"),
    ("make_cards", [], "the card pages' folder"),
])
def test_report_tools_refuse_an_unwritable_out_in_one_sentence(tmp_path, capsys, script, args, what):
    """Issue 35: an --out that cannot be written ended in a traceback. Each tool now says so in
    one sentence, exit status 1, before writing anything; the file in the way is unchanged."""
    out = tmp_path / "outputs"
    write_sweep(out / "sweeps" / "b18_tau" / "a", "b18_tau", tau_records(seeds={0}))
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder\n")
    before = tree_hashes(tmp_path)
    sweep_args = ["--outputs", str(out)] if script != "make_cards" else []
    for target, reason in ((blocker / "sub", "Not a directory"), (blocker, "it is a file, not a folder")):
        assert load_script(script).main([*args, *sweep_args, "--out", str(target)]) == 1
        error = capsys.readouterr().err
        assert error == (f"Error: {what} {target} cannot be written ({reason}); choose another with "
                         "--out.\n"), error
    assert tree_hashes(tmp_path) == before


def test_the_page_is_built_only_in_an_empty_folder_or_an_earlier_pages(tmp_path, capsys):
    """`--out outputs` would have replaced outputs/tables/ and outputs/figures/ with the page's."""
    out = tmp_path / "outputs"
    (out / "tables").mkdir(parents=True)
    (out / "tables" / "b18_tau.md").write_text("mine\n")
    before = tree_hashes(out)
    report = load_script("make_report")
    assert report.main(["--outputs", str(out), "--out", str(out)]) == 1
    error = capsys.readouterr().err
    assert error == (f"Error: the page folder {out} holds files that are no earlier report page's (tables), "
                     "which building the page could replace; choose an empty folder, or an earlier page's, "
                     "with --out.\n")
    assert tree_hashes(out) == before
    assert report.main(["--outputs", str(out), "--out", str(tmp_path / "page")]) == 0
    assert report.main(["--outputs", str(out), "--out", str(tmp_path / "page")]) == 0  # its own earlier page


def test_card_pages_are_written_only_where_no_other_page_would_be_removed(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# A guide\n")
    before = tree_hashes(docs)
    assert load_script("make_cards").main(["--out", str(docs)]) == 1
    assert capsys.readouterr().err == (
        f"Error: {docs} holds pages that are not protocol card pages (guide.md), which writing the cards "
        "would remove; choose an empty folder, or the card pages' own, with --out.\n")
    assert tree_hashes(docs) == before
