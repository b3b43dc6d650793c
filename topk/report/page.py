"""The report page: every item of the README's "Paper results" table on one static HTML page
(``<outputs>/report/index.html``) that travels: the run records it cites are copied beside it;
``status.json`` beside it holds each item's status, source and verdict counts.

Per item, every sweep found (``<outputs>/sweeps/<id>/*``, then ``<smoke>/sweeps/<id>/*``) is
compared with the experiment's protocol (:mod:`topk.report.fidelity`) and the best one is shown
(:func:`topk.report.runs.sweep_rank`: full scale, faithful, most complete, newest records), the
others listed; ``--sweep-dir`` chooses one. Its status (:data:`STATUS`, in order of precedence):
*smoke scale*, *deviates from the protocol* (the differing keys listed), *protocol incomplete*,
then, for a complete protocol run, *reproduced* (every cell with a published number agrees and
every claim holds), *ran, differs*, *ran, undecided* or *ran* (nothing published to compare).

A job is counted once (:mod:`topk.report.runs`): the duplicates left out are listed with the
runs. The page copies only files that lie in their run directory: a record that is a link to a
file elsewhere is named, not copied. It is built into an empty folder or an earlier page's, never
into one holding other files (:func:`page_folder_problem`).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

import topk
from topk.cards import card_path, load
from topk.cards.render import card_html
from topk.report.fidelity import PROTOCOL_FREE_KEYS
from topk.report.figures import FIGURES, build_figure, write_figure
from topk.report.render import Table
from topk.report.runs import Sweep, column, display_path, find_sweeps, inside_run_dir, read_sweep
from topk.report.tables import TABLE_IDS, make_table
from topk.report.template import PAGE
from topk.report.verdicts import AGREES, DIFFERS, FAILS, HOLDS

# id -> (what it reproduces, data it needs, compute on the 2-core CPU of `make bench-epochs`; the
# DenseNet experiments' hours are 0.36 x those measured for the basic DenseNet, the DenseNet-BC's
# step time over the basic one's, docs/experiments.md#paper-results)
ITEMS = {
    "s20_exp1": ("S20 Fig. 2 (synthetic)", "none", "about 100 s"),
    "s20_exp2": ("S20 Fig. 3 (synthetic)", "none", "about 100 s"),
    "s20_exp3": ("S20 Fig. 4 (synthetic)", "none", "about 120 s"),
    "s20_cifar": ("S20 Table I, Fig. 6", "CIFAR-100", "12,400 h (160 runs)"),
    "b18_cifar_noise": ("B18 Table 1", "CIFAR-100", "6,800 h (36 runs)"),
    "b18_imagenet": ("B18 Table 2", "ImageNet", "13,900 h (10 runs)"),
    "b18_margin": ("B18 Tables 7, 8 (margin α)", "ImageNet", "14,100 h (4 runs)"),
    "b18_tau": ("B18 Table 6, Fig. 2a", "CIFAR-100", "270 h (14 runs)"),
    "b18_sparsity": ("B18 Fig. 2b (gradient sparsity)", "CIFAR-100",
                     "about 0.5 h (7 one-epoch runs)"),
    "b18_speed": ("B18 Tables 3–5", "none", "a few minutes"),
    "g22_epsilon": ("G22 Table 2", "CIFAR-100", "1,500 h (8 runs)"),
    "g22_samples": ("G22 Table 3", "CIFAR-100", "1,300 h (7 runs)"),
    "g22_sparsity": ("G22 Fig. 2 (gradient sparsity)", "CIFAR-100",
                     "about 5 h (8 one-epoch runs)"),
    "g22_time": ("G22 Fig. 3", "none (random CIFAR-shaped images)",
                 "about 6 minutes (45 runs; 16 measured with the basic DenseNet)"),
    "g22_cifar_noise": ("G22 Tables 4, 6", "CIFAR-100", "5,700 h (30 runs)"),
    "g22_plantnet": ("G22 Tables 5, 7", "Pl@ntNet-300K and ResNet-50 ImageNet weights",
                     "16,700 h (45 runs)"),
    "g22_imagenet_lt": ("G22 preprint §4.5.2, Table 6 (numbers lost from the text)",
                        "ImageNet and the ImageNet-LT lists", "17,600 h (48 runs)"),
    "g22_imagenet": ("G22 preprint App. D, Table 9 (numbers lost from the text)", "ImageNet",
                     "53,000 h (15 runs)"),
    "p22_cifar": ("P22 Tables 1, 4 (published numbers not on file)", "CIFAR-100",
                  "450 h (22 runs)"),
    "p22_imagenet": ("P22 Tables 2, 3, ImageNet-1K (published numbers not on file)",
                     "P22's ImageNet embeddings", "tens of hours (22 runs, not timed)"),
    "zoo_cifar100": ("every loss on CIFAR-100", "CIFAR-100", "11,100 h (28 runs)"),
    "zoo_plantnet": ("every loss on Pl@ntNet-300K", "Pl@ntNet-300K and ResNet-50 ImageNet weights",
                     "22,500 h (42 runs)")}
STATUS = {
    "reproduced": "reproduced", "differs": "ran, differs", "undecided": "ran, undecided",
    "ran": "ran (nothing published to compare)", "incomplete": "protocol incomplete",
    "deviates": "deviates from the protocol", "smoke": "smoke scale (wiring only)",
    "error": "could not be built", "none": "no runs yet"}
STATUS_MEANING = {
    "reproduced": "the experiment's protocol ran completely, every cell with a published number "
    "agrees and every paper claim holds",
    "differs": "the protocol ran completely; a cell differs from the paper or a claim does not hold",
    "undecided": "the protocol ran completely; no cell differs and no claim fails, but some have "
    "too few runs or an interval that decides nothing",
    "ran": "the protocol ran completely; the paper gives no number to compare (or speed on other "
    "hardware)",
    "incomplete": "the runs keep to the protocol, but some of its runs are missing, failed or "
    "unfinished",
    "deviates": "the runs differ from the protocol (keys listed) or the sweep was narrowed",
    "smoke": "`+scale=smoke`: one short epoch on tiny data; the wiring ran, the numbers mean "
    "nothing",
    "error": "its runs were found but building its tables or figures failed; the error is shown",
    "none": "no sweep found; the command to run is named"}
SMOKE_BENCH = ("Smoke scale (`make smoke`): the quick loss benchmark (n = 1000 only, short "
               "timings); `make bench-losses` runs the full one.")
RECORD_FILES = ("results.json", "history.csv")
PAGE_FILES = ("index.html", "status.json")  # what marks a folder as an earlier page's


def inline(line: str) -> str:
    """Escaped text with markdown's `code` spans as <code> and *emphasis* as <em>."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(line))
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"<em>\1</em>", text)


@dataclass
class Item:
    id: str
    source: Path | None = None  # the chosen sweep directory, or the benchmark file
    sweep: Sweep | None = None
    others: list[Sweep] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    smoke_bench: bool = False
    verdicts: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    not_copied: list[str] = field(default_factory=list)  # record files that link out of their run

    @property
    def status(self) -> str:
        if self.source is None:
            return "none"
        if self.errors:
            return "error"
        if self.sweep is None:  # the loss benchmark: speed on this hardware, no verdict
            return "smoke" if self.smoke_bench else "ran"
        fidelity = self.sweep.fidelity
        if fidelity.smoke:
            return "smoke"
        if not fidelity.faithful:
            return "deviates"
        if fidelity.completed_jobs(self.sweep.runs) < fidelity.expected:
            return "incomplete"
        if any(v in (DIFFERS, FAILS) for v in self.verdicts):
            return "differs"
        if not self.verdicts:
            return "ran"
        return "reproduced" if all(v in (AGREES, HOLDS) for v in self.verdicts) else "undecided"

    def command(self) -> str:
        run = "make bench-losses" if self.id == "b18_speed" else f"make sweep-{self.id}"
        build = [f"{kind}-{self.id}" for kind, ids in (("table", TABLE_IDS), ("figure", FIGURES))
                 if self.id in ids]
        return f"<code>{run}</code>, then <code>make {' '.join(build)}</code>"


def find_source(item: Item, outputs: Path, smoke: Path, chosen: dict[str, Path]) -> None:
    """The item's chosen sweep (``chosen``, else the best found) and the others found."""
    if item.id == "b18_speed":
        for root, is_smoke in ((outputs, False), (smoke, True)):
            if (root / "bench" / "losses.json").is_file():
                item.source, item.smoke_bench = root / "bench" / "losses.json", is_smoke
                return
        return
    sweeps, item.refused = find_sweeps([outputs, smoke], item.id)
    if item.id in chosen:
        picked = read_sweep(chosen[item.id], item.id)
        sweeps = [picked, *(s for s in sweeps if s.path.resolve() != picked.path.resolve())]
    if sweeps:
        item.sweep, item.others = sweeps[0], sweeps[1:]
        item.source = item.sweep.path


def html_table(frame: pd.DataFrame, index: bool = True, floatfmt: str | None = None,
               grey: tuple[str, ...] = ()) -> str:
    """``frame`` as an HTML table; a one-level index's name goes in the header's last row;
    columns whose last header level is in ``grey`` are greyed out (smoke numbers)."""
    if index and frame.index.nlevels == 1 and frame.index.name:
        frame = frame.rename_axis(None).rename_axis(
            columns=[None] * (frame.columns.nlevels - 1) + [frame.index.name])
    formatter = ((lambda value: format(value, floatfmt) if isinstance(value, float) else value)
                 if floatfmt else None)
    greyed = [c for c in frame.columns if (c[-1] if isinstance(c, tuple) else c) in grey]
    if not greyed:
        return frame.to_html(index=index, border=0, na_rep="", escape=True, float_format=formatter)
    style = frame.style.set_properties(subset=greyed, **{"color": "#aaa"})
    style = style.format(formatter, na_rep="") if formatter else style.format(na_rep="")
    if not index:  # Styler.to_html has no index=False: the row labels are hidden instead
        style = style.hide(axis="index")
    return style.to_html(table_attributes='border="0"')


def link(path: Path, label: str, page_dir: Path) -> str:
    return f'<a href="{html.escape(os.path.relpath(path, page_dir))}">{html.escape(label)}</a>'


def sections_html(text: Table, smoke: bool) -> list[str]:
    """Paragraphs (the sweep's header line is shown once, above) and captioned tables; a smoke
    item's ours − paper and verdict columns are greyed out."""
    grey = ("ours − paper", "verdict") if smoke else ()
    parts = [f"<p>{inline(line)}</p>" for line in text.preamble if not line.startswith("Sweep `")]
    for caption, frame in text.sections:
        table = f'<div class="scroll">{html_table(frame, text.index, text.floatfmt, grey)}</div>'
        if len(frame) > 15:  # long tables fold away
            table = f"<details><summary>{len(frame)} rows</summary>{table}</details>"
        parts += [f"<h4>{inline(caption)}</h4>" if caption else "", table]
    return parts


def build_outputs(item: Item, page_dir: Path) -> None:
    """The item's tables and figures, written beside the page, as HTML parts of it; their
    verdicts are the item's."""
    smoke = item.status == "smoke"
    bench_file = item.source if item.sweep is None else None
    if item.id in TABLE_IDS:  # the sweep already read and compared with its protocol
        table, files = make_table(item.id, page_dir / "tables", sweep=item.sweep,
                                  bench_file=bench_file)
        formats = " · ".join(link(path, kind, page_dir) for kind, path in files.items())
        item.parts += [f"<h3>{html.escape(table.title)}</h3>", f'<p class="meta">{formats}</p>',
                       *sections_html(table, smoke)]
        item.verdicts += table.verdicts
    if item.id in FIGURES:
        built = build_figure(item.id, sweep=item.sweep)
        files, text = write_figure(built, page_dir / "figures"), built[1]
        formats = " · ".join(link(path, kind, page_dir) for kind, path in files.items())
        item.parts += [f"<h3>{html.escape(text.title)}</h3>",
                       f'<img src="{html.escape(os.path.relpath(files["png"], page_dir))}" '
                       f'alt="{html.escape(text.title)}">', f'<p class="meta">{formats}</p>',
                       *sections_html(text, smoke)]
        item.verdicts += text.verdicts


def copy_record_file(item: Item, source: Path, destination: Path) -> None:
    """``source`` copied to ``destination`` if it is a file of its own folder; a link out of it
    (to any file of the machine) is never followed into the page's folder, only named in
    ``item.not_copied``."""
    if not source.is_file():
        return
    if not inside_run_dir(source):
        item.not_copied.append(display_path(source))
        return
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)
    shutil.copystat(source, destination)


def copy_records(item: Item, page_dir: Path) -> Path:
    """The item's run records (and its sweep's ``multirun.yaml``) copied to
    ``<page>/runs/<item>/``, so that the page's links work wherever the folder goes."""
    target = page_dir / "runs" / item.id
    if item.sweep is None:
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(item.source, target / item.source.name)
        return target / item.source.name
    for run_dir in item.sweep.runs["run_dir"]:
        destination = target / Path(run_dir).relative_to(item.sweep.path)
        destination.mkdir(parents=True, exist_ok=True)
        for name in RECORD_FILES:
            copy_record_file(item, Path(run_dir) / name, destination / name)
    copy_record_file(item, item.sweep.path / "multirun.yaml", target / "multirun.yaml")
    return target


def sweep_line(sweep: Sweep) -> str:
    """A sweep in a few words: where, status against the protocol, completed runs, when."""
    fidelity = sweep.fidelity
    kind = ("smoke scale" if fidelity.smoke else "deviates" if not fidelity.faithful
            else "faithful")
    first, last = sweep.written()
    return (f"<code>{html.escape(display_path(sweep.path))}</code>: {kind}, "
            f"{fidelity.completed_jobs(sweep.runs)}/{fidelity.expected} protocol runs completed, "
            f"records {html.escape(first or '?')} to {html.escape(last or '?')}")


def protocol_html(item: Item) -> str:
    """The protocol check: what the protocol asks, the sweep's command line, every deviation,
    runs outside the protocol, missing runs, keys only one side has, and the other sweeps; in a
    ``protocol`` block whose lines wrap anywhere (a command line's overrides are long words)."""
    fidelity, runs = item.sweep.fidelity, item.sweep.runs
    proto = fidelity.protocol
    sweep = ", ".join(f"<code>{html.escape(k)}={html.escape(v)}</code>" for k, v in proto.sweep.items())
    command = ("unknown (no readable multirun.yaml)" if fidelity.command_line is None else
               f"<code>python train.py -m +experiment={item.id} "
               f"{html.escape(' '.join(fidelity.command_line))}</code>")
    parts = [f"<p><strong>Protocol</strong> (<code>+experiment={item.id}</code>, no other "
             f"override): {fidelity.expected} runs, {proto.seeds} seed(s) per setting, sweeping "
             f"{sweep or 'nothing'}. This sweep ran {command}; "
             f"{fidelity.completed_jobs(runs)} of the protocol's runs completed.</p>"]
    if fidelity.deviations:
        rows = "".join(f"<tr><td><code>{html.escape(k)}</code></td><td>{html.escape(v)}</td></tr>"
                       for k, v in sorted(fidelity.deviations.items()))
        parts.append(f"<p><strong>Deviations from the protocol</strong> ({len(fidelity.deviations)} "
                     f"keys; keys that change only speed, place or verbosity are not compared: "
                     f"{', '.join(sorted(PROTOCOL_FREE_KEYS))}):</p><div class=\"scroll\"><table>"
                     f"<thead><tr><th>key</th><th>values</th></tr></thead><tbody>{rows}</tbody>"
                     "</table></div>")
    if fidelity.outside:
        parts.append(f"<p>{len(fidelity.outside)} run(s) lie outside the protocol's sweep "
                     "(swept values it does not ask for).</p>")
    missing = fidelity.missing_jobs()
    if missing:
        shown = "; ".join(missing[:5]) + (f"; … {len(missing) - 5} more" if len(missing) > 5 else "")
        parts.append(f"<p class=\"meta\">{len(missing)} protocol run(s) have no record: "
                     f"{html.escape(shown)}.</p>")
    if fidelity.unmatched_keys:
        keys = ", ".join(f"{k} ({v})" for k, v in sorted(fidelity.unmatched_keys.items()))
        parts.append(f"<p class=\"meta\">Keys not compared (one side lacks them: the config "
                     f"changed since these runs): {html.escape(keys)}.</p>")
    if item.others or item.refused:
        others = "".join(f"<li>{sweep_line(s)}</li>" for s in item.others)
        others += "".join(f"<li>not read: {inline(r)}</li>" for r in item.refused)
        parts.append(f"<details><summary>Other sweeps found ({len(item.others) + len(item.refused)})"
                     f"</summary><ul>{others}</ul></details>")
    return '<div class="protocol">' + "\n".join(parts) + "</div>"


def provenance_html(runs: pd.DataFrame) -> str:
    """Where, on what and with which code the runs ran: each distinct value with its count."""
    def values(name: str, missing="unknown") -> str:
        counts = Counter("–" if v is None else str(v) for v in column(runs, f"provenance.{name}"))
        return ", ".join(f"{html.escape(v if v != '–' else missing)} ({n})"
                         for v, n in counts.most_common())
    first = min((t for t in column(runs, "provenance.started_utc") if t), default="unknown")
    last = max((t for t in column(runs, "provenance.ended_utc") if t), default="unknown")
    return (f"<p class=\"meta\"><strong>Ran</strong> on host {values('host')} · device "
            f"{values('device')} · GPU {values('gpu_name', 'none')} · processes "
            f"{values('world_size')} · code {values('git', 'unknown (record without provenance)')}"
            f" · from {html.escape(first)} to {html.escape(last)} (UTC).</p>")


def runs_html(item: Item, records: Path, page_dir: Path) -> str:
    """Run counts and each run's copied record, in job order."""
    runs, c = item.sweep.runs, item.sweep.counts()
    listing = "".join(
        f"<li>{link(records / Path(d).relative_to(item.sweep.path) / 'results.json', Path(d).name, page_dir)}: "
        + html.escape(f"{loss}, seed {seed}, {status}") + "</li>"
        for d, loss, seed, status in zip(runs["run_dir"], runs["loss"], runs["seed"], runs["status"]))
    duplicates = (f'<p class="meta">{inline(item.sweep.duplicates_text())}.</p>'
                  if item.sweep.duplicates else "")
    return (f'<p class="meta">Runs: {c["found"]} found, {c["completed"]} completed, '
            f"{c['failed']} failed, {c['interrupted'] + c['running']} unfinished, "
            f"{c['unreadable']} unreadable{duplicates_count(c)}; {c['missing']} of the protocol's "
            f"{c['expected']} missing. Records copied to "
            f"{link(records, display_path(records.relative_to(page_dir)), page_dir)}.</p>{duplicates}"
            f"{not_copied_html(item)}"
            f"<details><summary>Run records ({len(runs)})</summary><ul>{listing}</ul></details>")


def duplicates_count(counts: dict) -> str:
    return f", {counts['duplicates']} duplicate(s) left out" if counts["duplicates"] else ""


def not_copied_html(item: Item) -> str:
    """The record files left behind for being links out of their run directory."""
    if not item.not_copied:
        return ""
    files = ", ".join(f"<code>{html.escape(path)}</code>" for path in item.not_copied)
    return (f'<p class="meta">Not copied beside the page: {files}, each a link to a file outside '
            "its run directory (the page never follows one).</p>")


def item_html(item: Item, page_dir: Path) -> str:
    reproduces, data, compute = ITEMS[item.id]
    head = (f'<h2 id="{item.id}">{item.id} — {html.escape(reproduces)} '
            f'<span class="status {item.status}">{STATUS[item.status]}</span></h2>')
    body = [f"<p>Produced by {item.command()}. Data: {html.escape(data)}. Compute: "
            f"{html.escape(compute)} on the 2-core CPU of <code>make bench-epochs</code>.</p>"]
    if card_path(item.id).is_file():
        body.append(card_html(load(item.id)))
    if item.status == "none":
        refused = "".join(f"<li>{inline(reason)}</li>" for reason in item.refused)
        return head + "".join(body) + (f"<p>Folders found but not read as a sweep of {item.id}:</p>"
                                       f"<ul>{refused}</ul>" if refused else "")
    body.append(f"<p><em>{inline(STATUS_MEANING[item.status])}.</em></p>")
    records = copy_records(item, page_dir)
    if item.sweep is None:
        note = f"<p><em>{inline(SMOKE_BENCH)}</em></p>" if item.smoke_bench else ""
        body += [note, f'<p class="meta">Source: {link(records, "losses.json", page_dir)} (from '
                       f"{html.escape(display_path(item.source))})</p>"]
    else:
        body += [protocol_html(item), provenance_html(item.sweep.runs),
                 runs_html(item, records, page_dir)]
    body += item.parts
    body += [f'<p class="error">Could not build: {html.escape(e)}</p>' for e in item.errors]
    return head + "\n".join(body)


def overview(items: list[Item]) -> str:
    """One row per item: what it reproduces, status, protocol runs, data and compute."""
    def cells(i: Item) -> list[str]:
        runs = "" if i.sweep is None else (f"{i.sweep.fidelity.completed_jobs(i.sweep.runs)}"
                                           f"/{i.sweep.fidelity.expected}")
        reproduces, data, compute = ITEMS[i.id]
        return [f'<a href="#{i.id}">{i.id}</a>', html.escape(reproduces),
                f'<span class="status {i.status}">{STATUS[i.status]}</span>', runs,
                html.escape(data), html.escape(compute), i.command()]
    head = ("item", "reproduces", "status", "protocol runs completed", "data", "compute (CPU)",
            "produced by")
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in cells(i)) + "</tr>" for i in items)
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head)
            + f"</tr></thead><tbody>{rows}</tbody></table>")


def header(items: list[Item]) -> str:
    sweeps = [i.sweep for i in items if i.sweep is not None]
    runs = sum(len(s.runs) for s in sweeps)
    meanings = "".join(f'<li><span class="status {key}">{STATUS[key]}</span>: '
                       f"{inline(text)}.</li>" for key, text in STATUS_MEANING.items())
    built = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return ("<h1>Top-k classification losses: reproduction report</h1>"
            f'<p class="meta">Page built {built} with topk {topk.__version__} from {runs} run '
            f"records in {len(sweeps)} sweep(s); where each ran is said per item.</p><p>Each item shows the sweep that keeps "
            "closest to its experiment's protocol, how it compares with that protocol, where and "
            "with which code its runs ran (their records' provenance), its tables and figures "
            "with the published numbers beside ours, a verdict per published number (a single "
            "run is judged too where the paper's number has a spread: its std, or the standard "
            "error it has from its test sample, e.g. an accuracy's binomial error) and per paper "
            "claim, and its status:</p>"
            f"<ul>{meanings}</ul>")


def build_page(outputs: Path, smoke: Path | None = None, page_dir: Path | None = None,
               sweep_dirs: list[Path] = ()) -> tuple[Path, list[str]]:
    """Write ``<page_dir>/index.html`` (default ``<outputs>/report``) with its tables, figures
    and copied run records; ``sweep_dirs`` choose an item's sweep (by the experiment of its
    records). Returns the page's path and the errors of items that could not be built."""
    outputs = Path(outputs)
    smoke, page_dir = Path(smoke or outputs / "smoke"), Path(page_dir or outputs / "report")
    problem = page_folder_problem(page_dir)
    if problem is not None:
        raise ValueError(problem)
    for folder in ("tables", "figures", "runs"):  # no file of an earlier build stays beside the page
        shutil.rmtree(page_dir / folder, ignore_errors=True)
    page_dir.mkdir(parents=True, exist_ok=True)
    chosen = {experiment_of(Path(d)): Path(d) for d in sweep_dirs}
    items = [Item(item_id) for item_id in ITEMS]
    for item in items:
        try:
            find_source(item, outputs, smoke, chosen)
            if item.status != "none":
                build_outputs(item, page_dir)
        except Exception as error:  # noqa: BLE001 - one broken item must not lose the page
            item.errors.append(f"{type(error).__name__}: {error}")
    body = [header(items), overview(items), *(item_html(item, page_dir) for item in items)]
    path = page_dir / "index.html"
    path.write_text(PAGE.format(title="Top-k losses: reproduction report", image_width=760,
                                body="\n".join(body)))
    (page_dir / "status.json").write_text(json.dumps(
        {item.id: {"status": item.status, "source": None if item.source is None else
                   str(item.source), "verdicts": dict(Counter(item.verdicts))} for item in items},
        indent=2) + "\n")
    return path, [f"{item.id}: {error}" for item in items for error in item.errors]


def page_folder_problem(page_dir: Path) -> str | None:
    """One sentence if ``page_dir`` holds files but no earlier page (its ``index.html`` and
    ``status.json``): building would replace its ``index.html`` and its ``tables/``, ``figures/``
    and ``runs/`` folders."""
    if not page_dir.is_dir() or all((page_dir / name).is_file() for name in PAGE_FILES):
        return None
    held = sorted(path.name for path in page_dir.iterdir())
    if not held:
        return None
    named = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
    return (f"the page folder {page_dir} holds files that are no earlier report page's ({named}), "
            "which building the page could replace; choose an empty folder, or an earlier page's, "
            "with --out.")


def experiment_of(sweep_dir: Path) -> str:
    """The experiment named by the records under ``sweep_dir`` (``ValueError`` if none)."""
    from topk.report.runs import load_sweep

    names = {str(name) for name in load_sweep(sweep_dir).runs["experiment"] if name is not None}
    if len(names) != 1 or next(iter(names)) not in ITEMS:
        raise ValueError(f"{sweep_dir} holds no runs of one paper experiment; give a sweep "
                         "directory of `python train.py -m +experiment=<id>`.")
    return next(iter(names))
