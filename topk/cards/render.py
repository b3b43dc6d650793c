"""Protocol cards as people read them: a Markdown page per experiment for the documentation site
(``make cards`` writes ``docs/cards/``) and an HTML table for the report page.

Rows follow the card's sections (data, model, loss, augmentation, optimiser, schedule, training),
one per case; ``inferred`` and ``our choice`` rows are marked, so a reader sees at once which
values the paper does not give.
"""

from __future__ import annotations

import html
from pathlib import Path

from topk.cards import SOURCES, Card, Entry, experiments_with_cards, load

MARKED = {"inferred", "choice"}
INTRO = ("Every value of this experiment that changes what a run learns or reports, with its "
         "source: **cited** (the paper's words, quoted), **code** (the published code), "
         "**inferred** (reasoned from the paper) or **choice** (ours, with why). Values at a "
         "swept key list the sweep. A test composes every job of the sweep and fails when a key "
         "has no line here or a line's value is not the composed one.")


def evidence(entry: Entry) -> str:
    """The quote of a cited entry, else its reasoning."""
    return f"“{entry.quote}”" if entry.quote else entry.why


def rows(card: Card, facts: bool = False) -> list[dict[str, str]]:
    """One row per case of the card (or of its facts): key, value, when, source, where, evidence."""
    return [{"key": e.key, "value": e.shown_value if not facts else str(e.value or ""),
             "when": e.shown_when, "source": e.source, "where": e.ref,
             "evidence": evidence(e) + (f" ({e.why})" if e.quote and e.why else "")}
            for e in (card.facts if facts else card.entries)]


MARKDOWN_SPECIALS = "\\`*_[]<>|$"


def _cell(text: str) -> str:
    """Free text in a Markdown table cell, shown as written (``__dict__[name]()`` is no link)."""
    for special in MARKDOWN_SPECIALS:
        text = text.replace(special, "\\" + special)
    return text.replace("\n", " ")


def _code(text: str) -> str:
    """Text in a code span of a table cell: only the column separator is escaped."""
    return text.replace("|", "\\|").replace("\n", " ")


LABELS = {"cited": "cited", "code": "published code", "inferred": "inferred", "choice": "our choice"}
SECTION_TITLES = {"dataset": "Data", "model": "Model", "loss": "Loss", "k": "Loss",
                  "n_samples": "Loss", "augment": "Augmentation", "optim": "Optimiser",
                  "schedule": "Schedule", "trainer": "Training and selection"}


def markdown_items(table: list[dict[str, str]], sections: bool = True) -> list[str]:
    """One bullet per row, under a heading per config section: key = value (for which jobs) —
    source, where: the quote or the reasoning. Inferred and chosen rows are in bold."""
    lines, title = [], None
    for row in table:
        section = SECTION_TITLES.get(row["key"].split(".")[0], "Run")
        if sections and section != title:
            lines += ["", f"## {section}", ""] if lines or title is None else []
            title = section
        for_jobs = f" (for {_cell(row['when'])})" if row["when"] else ""
        source = f"**{LABELS[row['source']]}**" if row["source"] in MARKED else LABELS[row["source"]]
        where = f" ({_cell(row['where'])})" if row["where"] else ""
        lines.append(f"- `{row['key']}` = `{_code(row['value'])}`{for_jobs} — {source}{where}: "
                     f"{_cell(row['evidence'])}")
    return lines


def card_markdown(card: Card) -> str:
    """The documentation page of one card."""
    counts = {name: sum(e.source == name for e in card.entries) for name in SOURCES}
    lines = [f"# `{card.experiment}`: {card.reproduces}", "",
             f"`python train.py -m +experiment={card.experiment}` · card: "
             f"`topk/cards/{card.experiment}.yaml`", "", INTRO, "",
             "Values: " + ", ".join(f"{n} {SOURCES[name]}" for name, n in counts.items()) + ".",
             *markdown_items(rows(card))]
    if card.facts:
        lines += ["", "## Fixed in code", "", "Protocol facts that no config key sets.", "",
                  *markdown_items(rows(card, facts=True), sections=False)]
    return "\n".join(lines) + "\n"


def index_markdown(experiments: list[str]) -> str:
    lines = ["# Protocol cards", "", "One page per experiment: every value its runs use and where it "
             "comes from. They are generated from `topk/cards/*.yaml` by `make cards`.", "",
             "| experiment | reproduces | cited | code | inferred | our choice |", "|---|---|---|---|---|---|"]
    for experiment in experiments:
        card = load(experiment)
        counts = [str(sum(e.source == name for e in card.entries)) for name in SOURCES]
        lines.append(f"| [`{experiment}`]({experiment}.md) | {card.reproduces} | " + " | ".join(counts) + " |")
    lines += ["", "```{toctree}", ":hidden:", "", *experiments, "```"]
    return "\n".join(lines) + "\n"


def documentation_pages() -> dict[str, str]:
    """``docs/cards/<name>.md`` → text, for every card and the index."""
    experiments = experiments_with_cards()
    pages = {f"{experiment}.md": card_markdown(load(experiment)) for experiment in experiments}
    pages["index.md"] = index_markdown(experiments)
    return pages


def write_documentation(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in documentation_pages().items():
        (folder / name).write_text(text)
        written.append(folder / name)
    for stale in set(folder.glob("*.md")) - set(written):
        stale.unlink()
    return written


def card_html(card: Card) -> str:
    """The card as a collapsible table of the report page, inferred and chosen rows marked."""
    marked = sum(e.source in MARKED for e in card.entries)
    body = "".join(
        f'<tr class="{"marked" if row["source"] in MARKED else ""}"><td><code>{html.escape(row["key"])}'
        f"</code></td><td><code>{html.escape(row['value'])}</code></td><td>{html.escape(row['when'] or 'every job')}</td>"
        f"<td>{html.escape(LABELS[row['source']])}</td><td>{html.escape(row['where'])}</td>"
        f"<td>{html.escape(row['evidence'])}</td></tr>" for row in rows(card))
    return (f"<details><summary>Protocol card: {len(card.entries)} values, {marked} of them inferred "
            f"or our choice (marked)</summary><div class=\"scroll\"><table class=\"card\"><thead><tr><th>key</th>"
            f"<th>value</th><th>for</th><th>source</th><th>where</th><th>quote or reasoning</th>"
            f"</tr></thead><tbody>{body}</tbody></table></div></details>")
