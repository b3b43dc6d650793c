"""Protocol cards as people read them: a Markdown page per experiment for the documentation site
(``make cards`` writes ``docs/cards/``) and an HTML table for the report page.

Rows keep the card's order (fragments first, then the experiment's own keys), one row per case;
``inferred`` and ``our choice`` rows are marked, so a reader sees at once which values the paper
does not give.
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
         "has no row here or a row's value is not the composed one.")


def evidence(entry: Entry) -> str:
    """The quote of a cited entry, else its reasoning."""
    return f"“{entry.quote}”" if entry.quote else entry.why


def rows(card: Card, facts: bool = False) -> list[dict[str, str]]:
    """One row per case of the card (or of its facts): key, value, when, source, where, evidence."""
    return [{"key": e.key, "value": e.shown_value if not facts else str(e.value or ""),
             "when": e.shown_when, "source": e.source, "where": e.ref,
             "evidence": evidence(e) + (f" ({e.why})" if e.quote and e.why else "")}
            for e in (card.facts if facts else card.entries)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: list[dict[str, str]]) -> list[str]:
    lines = ["| key | value | for | source | where | quote or reasoning |", "|---|---|---|---|---|---|"]
    for row in table:
        source = f"**{row['source']}**" if row["source"] in MARKED else row["source"]
        lines.append("| " + " | ".join([f"`{row['key']}`", f"`{_cell(row['value'])}`",
                                        _cell(row["when"]) or "every job", source,
                                        _cell(row["where"]), _cell(row["evidence"])]) + " |")
    return lines


def card_markdown(card: Card) -> str:
    """The documentation page of one card."""
    counts = {name: sum(e.source == name for e in card.entries) for name in SOURCES}
    lines = [f"# `{card.experiment}`: {card.reproduces}", "",
             f"`python train.py -m +experiment={card.experiment}` · card: "
             f"`topk/cards/{card.experiment}.yaml`", "", INTRO, "",
             "Rows: " + ", ".join(f"{n} {SOURCES[name]}" for name, n in counts.items()) + ".", "",
             *markdown_table(rows(card))]
    if card.facts:
        lines += ["", "## Fixed in code", "", "Protocol facts that no config key sets.", "",
                  *markdown_table(rows(card, facts=True))]
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
        f"</code></td><td><code>{html.escape(row['value'])}</code></td><td>{html.escape(row['when'])}</td>"
        f"<td>{html.escape(SOURCES[row['source']])}</td><td>{html.escape(row['where'])}</td>"
        f"<td>{html.escape(row['evidence'])}</td></tr>" for row in rows(card))
    return (f"<details><summary>Protocol card: {len(card.entries)} values, {marked} of them inferred "
            f"or our choice (marked)</summary><div class=\"scroll\"><table><thead><tr><th>key</th>"
            f"<th>value</th><th>for</th><th>source</th><th>where</th><th>quote or reasoning</th>"
            f"</tr></thead><tbody>{body}</tbody></table></div></details>")
