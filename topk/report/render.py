"""One renderer for every table: markdown, LaTeX and CSV files, HTML for the report page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
          "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
          "±": r"$\pm$", "−": "$-$", "–": "--", "✓": r"\checkmark{}", "✗": r"$\times$",
          "τ": r"$\tau$", "≠": r"$\neq$", "·": r"$\cdot$"}


def latex_escape(text) -> str:
    return "".join(_LATEX.get(char, char) for char in str(text))


def flat(frame: pd.DataFrame, index: bool = True) -> pd.DataFrame:
    """Multi-level column names joined by " · ", the index (if kept) as leading columns."""
    frame = frame.copy()
    if isinstance(frame.columns, pd.MultiIndex):
        frame.columns = [" · ".join(str(p) for p in key if p != "") for key in frame.columns]
    return frame.reset_index() if index else frame


def markdown_table(frame: pd.DataFrame, index: bool = True) -> str:
    return flat(frame, index).to_markdown(index=False, disable_numparse=True)


def latex_table(frame: pd.DataFrame, caption: str) -> str:
    def escape(key):
        return tuple(map(latex_escape, key)) if isinstance(key, tuple) else latex_escape(key)

    escaped = frame.map(latex_escape)
    escaped.index = frame.index.map(escape)
    escaped.index.names = [latex_escape(name) for name in frame.index.names]
    escaped.columns = frame.columns.map(escape)
    return escaped.to_latex(escape=False, multicolumn=True, multicolumn_format="c",
                            multirow=False, caption=latex_escape(caption), label=None)


def html_table(frame: pd.DataFrame, index: bool = True, floatfmt: str | None = None) -> str:
    """``frame`` as an HTML table; a one-level index's name goes in the header's last row."""
    if index and frame.index.nlevels == 1 and frame.index.name:
        frame = frame.rename_axis(None).rename_axis(
            columns=[None] * (frame.columns.nlevels - 1) + [frame.index.name])
    return frame.to_html(index=index, border=0, na_rep="", escape=True,
                         float_format=(lambda value: format(value, floatfmt)) if floatfmt else None)


@dataclass
class Table:
    """A built table: lines before it, its ``(caption, wide frame)`` sections, the tidy CSV."""

    id: str
    title: str
    preamble: list[str]
    sections: list[tuple[str, pd.DataFrame]]
    tidy: pd.DataFrame

    def markdown(self) -> str:
        parts = [f"# {self.title}", "", *[line for text in self.preamble for line in (text, "")]]
        for caption, frame in self.sections:
            parts += [f"### {caption}", ""] if caption else []
            parts += [markdown_table(frame), ""]
        return "\n".join(parts)

    def latex(self) -> str:
        parts = [f"% {self.title}"] + [f"% {line}" for line in self.preamble]
        parts += [latex_table(frame, f"{self.title}: {caption}" if caption else self.title)
                  for caption, frame in self.sections]
        return "\n".join(parts) + "\n"


def write_table(table: Table, out_dir: Path) -> dict[str, Path]:
    """Write ``<out>/<id>.md``, ``.csv`` (tidy) and ``.tex``; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {kind: out_dir / f"{table.id}.{kind}" for kind in ("md", "csv", "tex")}
    files["md"].write_text(table.markdown())
    table.tidy.to_csv(files["csv"], index=False)
    files["tex"].write_text(table.latex())
    return files


@dataclass
class Document:
    """A figure's text: paragraphs, then ``(caption, frame)`` tables (numbers formatted with
    pandas' ``floatfmt`` if given, else as they stand)."""

    title: str
    paragraphs: list[str]
    sections: list[tuple[str, pd.DataFrame]]
    floatfmt: str | None = None

    def markdown(self) -> str:
        parts = [f"# {self.title}", ""]
        for paragraph in self.paragraphs:
            parts += [paragraph, ""]
        for caption, frame in self.sections:
            table = (frame.to_markdown(index=False, floatfmt=self.floatfmt) if self.floatfmt
                     else markdown_table(frame, index=False))
            parts += [caption, "", table, ""]
        return "\n".join(parts)
