"""The report page: every item of the README's "Paper results" table on one static HTML page
(``<outputs>/report/index.html``, relative links only), built from whatever runs exist.

An item's source is its newest full-scale sweep (``<outputs>/sweeps/<id>/<time>``; b18_speed:
``<outputs>/bench/losses.json``), else its newest smoke one (``<smoke>/sweeps/<id>/<time>``).
Status: *reproduced here* (a full-scale sweep whose every expected run completed), *runs found
but incomplete* (runs missing, failed or unfinished, or expected runs unknown), *smoke scale
only* (the wiring ran, the numbers mean nothing) or *no runs yet*.
"""

from __future__ import annotations

import html
import os
import platform
import re
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

import topk
from topk.records import latest_sweep_dir
from topk.report.figures import FIGURES, build_figure, write_figure
from topk.report.render import Table
from topk.report.runs import Sweep, display_path, load_sweep
from topk.report.tables import TABLE_IDS, make_table
from topk.report.template import PAGE

ITEMS = {  # the README's "Paper results" rows, s20_exp1–3 apart
    "s20_exp1": "S20 Fig. 2 (synthetic)", "s20_exp2": "S20 Fig. 3 (synthetic)",
    "s20_exp3": "S20 Fig. 4 (synthetic)", "s20_cifar": "S20 Table I, Fig. 6",
    "b18_cifar_noise": "B18 Table 1", "b18_imagenet": "B18 Table 2",
    "b18_tau": "B18 Table 6, Fig. 2a", "b18_speed": "B18 Tables 3–5",
    "g22_epsilon": "G22 Table 2", "g22_samples": "G22 Table 3", "g22_time": "G22 Fig. 3",
    "g22_cifar_noise": "G22 Tables 4, 6", "g22_plantnet": "G22 Tables 5, 7",
    "g22_imagenet_lt": "G22 preprint §4.5.2 (no published numbers)",
    "p22_cifar": "P22 Tables 1, 4 (published numbers not on file)",
    "p22_imagenet": "P22 Table 2 (published numbers not on file)",
    "zoo_cifar100": "every loss on CIFAR-100", "zoo_plantnet": "every loss on Pl@ntNet-300K"}
STATUS = {"reproduced": "reproduced here", "incomplete": "runs found but incomplete",
          "smoke": "runs found but incomplete: smoke scale only", "none": "no runs yet"}
SMOKE = ("Smoke scale (`make smoke`): one seed, one epoch of at most two batches on tiny data "
         "sets; it shows that every step from command to table runs, the numbers mean nothing.")
SMOKE_BENCH = ("Smoke scale (`make smoke`): the quick loss benchmark (n = 1000 only, short "
               "timings); `make bench-losses` runs the full one.")


def inline(line: str) -> str:
    """Escaped text with markdown's `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(line))


@dataclass
class Item:
    id: str
    source: Path | None = None
    smoke: bool = False
    sweep: Sweep | None = None
    parts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.source is None or (self.sweep is not None and not self.sweep.counts()["found"]):
            return "none"
        if self.smoke or self.sweep is None:  # a smoke sweep; the benchmark file
            return "smoke" if self.smoke else "reproduced"
        counts = self.sweep.counts()
        complete = counts["missing"] == 0 and counts["completed"] == counts["found"]
        return "reproduced" if complete else "incomplete"

    def command(self) -> str:
        run = "make bench-losses" if self.id == "b18_speed" else f"make sweep-{self.id}"
        build = [f"{kind}-{self.id}" for kind, ids in (("table", TABLE_IDS), ("figure", FIGURES))
                 if self.id in ids]
        return f"<code>{run}</code>, then <code>make {' '.join(build)}</code>"


def find_source(item: Item, outputs: Path, smoke: Path) -> None:
    """The item's newest full-scale source, else its newest smoke one."""
    for root, is_smoke in ((outputs, False), (smoke, True)):
        if item.id == "b18_speed" and (root / "bench" / "losses.json").is_file():
            item.source, item.smoke = root / "bench" / "losses.json", is_smoke
            return
        if item.id != "b18_speed" and (root / "sweeps" / item.id).is_dir():
            try:
                item.source, item.smoke = latest_sweep_dir(root, item.id), is_smoke
            except FileNotFoundError:  # an empty experiment folder
                continue
            item.sweep = load_sweep(item.source)
            return


def html_table(frame: pd.DataFrame, index: bool = True, floatfmt: str | None = None) -> str:
    """``frame`` as an HTML table; a one-level index's name goes in the header's last row."""
    if index and frame.index.nlevels == 1 and frame.index.name:
        frame = frame.rename_axis(None).rename_axis(
            columns=[None] * (frame.columns.nlevels - 1) + [frame.index.name])
    return frame.to_html(index=index, border=0, na_rep="", escape=True,
                         float_format=(lambda value: format(value, floatfmt)) if floatfmt else None)


def link(path: Path, label: str, page_dir: Path) -> str:
    return f'<a href="{html.escape(os.path.relpath(path, page_dir))}">{html.escape(label)}</a>'


def sections_html(text: Table) -> list[str]:
    """Paragraphs (the sweep's header line is shown once, above) and captioned tables."""
    parts = [f"<p>{inline(line)}</p>" for line in text.preamble if not line.startswith("Sweep `")]
    for caption, frame in text.sections:
        table = f'<div class="scroll">{html_table(frame, text.index, text.floatfmt)}</div>'
        if len(frame) > 15:  # long tables fold away
            table = f"<details><summary>{len(frame)} rows</summary>{table}</details>"
        parts += [f"<h4>{inline(caption)}</h4>" if caption else "", table]
    return parts


def build_outputs(item: Item, page_dir: Path) -> None:
    """The item's tables and figures, written beside the page, as HTML parts of it."""
    sweep_dir = item.source if item.sweep is not None else None
    bench_file = item.source if item.sweep is None else None
    if item.id in TABLE_IDS:
        table, files = make_table(item.id, page_dir / "tables", sweep_dir=sweep_dir,
                                  bench_file=bench_file)
        formats = " · ".join(link(path, kind, page_dir) for kind, path in files.items())
        item.parts += [f"<h3>{html.escape(table.title)}</h3>", f'<p class="meta">{formats}</p>',
                       *sections_html(table)]
    if item.id in FIGURES:
        built = build_figure(item.id, sweep_dir)
        files, text = write_figure(built, page_dir / "figures"), built[1]
        formats = " · ".join(link(path, kind, page_dir) for kind, path in files.items())
        item.parts += [f"<h3>{html.escape(text.title)}</h3>",
                       f'<img src="{html.escape(os.path.relpath(files["png"], page_dir))}" '
                       f'alt="{html.escape(text.title)}">', f'<p class="meta">{formats}</p>',
                       *sections_html(text)]


def counts_html(item: Item, page_dir: Path) -> str:
    """Source, run counts, seeds per setting (completed / expected) and each run's record."""
    if item.sweep is None:
        return f'<p class="meta">Source: {link(item.source, display_path(item.source), page_dir)}</p>'
    runs, c = item.sweep.runs, item.sweep.counts()
    settings = runs[[n for n in runs.columns if n.startswith("params.") and n != "params.seed"]]
    done = runs["status"] == "completed"
    setting = pd.Series([repr(tuple(row)) for row in settings.itertuples(index=False)], index=runs.index)
    seeds = runs["seed"][done].groupby(setting[done]).nunique()
    seeds = ("none" if seeds.empty else str(seeds.min()) if seeds.min() == seeds.max()
             else f"{seeds.min()}–{seeds.max()}")
    listing = "".join(f"<li>{link(Path(d) / 'results.json', Path(d).name, page_dir)}: "
                      + html.escape(f"{loss}, seed {seed}, {status}") + "</li>" for d, loss, seed,
                      status in zip(runs["run_dir"], runs["loss"], runs["seed"], runs["status"]))
    return (f'<p class="meta">Source: {link(item.source, display_path(item.source), page_dir)}'
            f" · runs: {c['found']} found, {c['completed']} completed, {c['failed']} failed, "
            f"{c['interrupted'] + c['running']} unfinished, {c['unreadable']} unreadable, "
            f"{'unknown' if c['missing'] is None else c['missing']} missing · seeds per setting: "
            f"{seeds} completed ({item.sweep.seeds or 'unknown'} expected)</p>"
            f"<details><summary>Run records ({len(runs)})</summary><ul>{listing}</ul></details>")


def item_html(item: Item, page_dir: Path) -> str:
    head = (f'<h2 id="{item.id}">{item.id} — {html.escape(ITEMS[item.id])} '
            f'<span class="status {item.status}">{STATUS[item.status]}</span></h2>')
    body = [f"<p>Produced by {item.command()}.</p>"]
    if item.status == "none":
        return head + "".join(body)
    note = SMOKE if item.sweep is not None else SMOKE_BENCH
    body += [f"<p><em>{inline(note)}</em></p>"] if item.smoke else []
    body += [counts_html(item, page_dir), *item.parts]
    body += [f'<p class="error">Could not build: {html.escape(e)}</p>' for e in item.errors]
    return head + "\n".join(body)


def overview(items: list[Item], page_dir: Path) -> str:
    """One row per item: what it reproduces, status, runs, source and the command to run."""
    def cells(i: Item) -> list[str]:
        runs = "" if i.sweep is None else "{completed}/{found}".format(**i.sweep.counts())
        scale = "smoke" if i.smoke else "full scale"
        source = "" if i.source is None else link(i.source, f"{scale}: {i.source.name}", page_dir)
        return [f'<a href="#{i.id}">{i.id}</a>', html.escape(ITEMS[i.id]),
                f'<span class="status {i.status}">{STATUS[i.status]}</span>', runs, source,
                i.command()]
    head = ("item", "reproduces", "status", "runs completed / found", "source", "produced by")
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in cells(i)) + "</tr>" for i in items)
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head)
            + f"</tr></thead><tbody>{rows}</tbody></table>")


def header(items: list[Item]) -> str:
    import torch

    sweeps = [i for i in items if i.sweep is not None]
    runs = sum(len(i.sweep.runs) for i in sweeps)
    stamps = [Path(d, "results.json").stat().st_mtime for i in sweeps for d in i.sweep.runs["run_dir"]]
    when = (" between " + " and ".join(time.strftime("%Y-%m-%d %H:%M", time.localtime(s))
                                       for s in (min(stamps), max(stamps)))) if stamps else ""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    full = sum(not i.smoke for i in sweeps)
    return (f"<h1>Top-k classification losses: reproduction report</h1><p class=\"meta\">Built "
            f"{time.strftime('%Y-%m-%d %H:%M %Z')} on {html.escape(socket.gethostname())} "
            f"({html.escape(platform.platform(terse=True))}, {os.cpu_count()} CPU cores, "
            f"{html.escape(device)}) with topk {topk.__version__}, torch {torch.__version__}."
            f"</p><p>What was run: {runs} runs in {len(sweeps)} sweeps ({full} full-scale, "
            f"{len(sweeps) - full} smoke-scale), records written{when}. Each paper item below "
            "shows its tables and figures with the published numbers beside ours, its status "
            "and the command that produces it.</p>")


def build_page(outputs: Path, smoke: Path | None = None,
               page_dir: Path | None = None) -> tuple[Path, list[str]]:
    """Write ``<page_dir>/index.html`` (default ``<outputs>/report``) with its tables and figures;
    returns its path and the errors of items that could not be built (the page says why)."""
    outputs = Path(outputs)
    smoke, page_dir = Path(smoke or outputs / "smoke"), Path(page_dir or outputs / "report")
    for folder in ("tables", "figures"):  # no file of an earlier build stays beside the page
        shutil.rmtree(page_dir / folder, ignore_errors=True)
    page_dir.mkdir(parents=True, exist_ok=True)
    items = [Item(item_id) for item_id in ITEMS]
    for item in items:
        find_source(item, outputs, smoke)
        if item.status != "none":
            try:
                build_outputs(item, page_dir)
            except Exception as error:  # noqa: BLE001 - one broken item must not lose the page
                item.errors.append(f"{type(error).__name__}: {error}")
    body = [header(items), overview(items, page_dir), *(item_html(item, page_dir) for item in items)]
    path = page_dir / "index.html"
    path.write_text(PAGE.format(title="Top-k losses: reproduction report", image_width=760,
                                body="\n".join(body)))
    return path, [f"{item.id}: {error}" for item in items for error in item.errors]
