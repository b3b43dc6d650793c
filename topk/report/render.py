"""One renderer for every table and figure text: markdown, LaTeX and CSV files."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from topk.run_dir import unwritable_reason

_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
          "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
          "±": r"$\pm$", "−": "$-$", "–": "--", "✓": r"\checkmark{}", "✗": r"$\times$",
          "τ": r"$\tau$", "≠": r"$\neq$", "·": r"$\cdot$"}


def latex_escape(text) -> str:
    return "".join(_LATEX.get(char, char) for char in str(text))


@dataclass
class Table:
    """A built table: lines before it, its ``(caption, wide frame)`` sections, the tidy CSV."""

    id: str
    title: str
    preamble: list[str]
    sections: list[tuple[str, pd.DataFrame]]
    tidy: pd.DataFrame
    floatfmt: str | None = None
    verdicts: list[str] = field(default_factory=list)  # its cells' and claims' verdicts
    sweep: object = None  # the topk.report.runs.Sweep it was built from (None: the benchmark)
    index = True  # print the frames' index (class attributes: a FigureText's differ)
    heading = "### "  # before each caption

    def markdown(self) -> str:
        """Frames with multi-level column names joined by " · " (text as it stands, or numbers
        formatted with ``floatfmt``)."""
        parts = [f"# {self.title}", "", *[line for text in self.preamble for line in (text, "")]]
        for caption, frame in self.sections:
            parts += [self.heading + caption, ""] if caption else []
            if isinstance(frame.columns, pd.MultiIndex):
                frame = frame.set_axis([" · ".join(str(part) for part in key if part != "")
                                        for key in frame.columns], axis=1)
            frame = frame.reset_index() if self.index else frame
            parts += [frame.to_markdown(index=False, disable_numparse=not self.floatfmt,
                                        floatfmt=self.floatfmt or "g"), ""]
        return "\n".join(parts)

    def latex(self) -> str:
        parts = [f"% {self.title}"] + [f"% {line}" for line in self.preamble]
        for caption, frame in self.sections:
            escaped = frame.map(latex_escape).rename(index=latex_escape, columns=latex_escape)
            escaped.index.names = [latex_escape(name) for name in frame.index.names]
            caption = latex_escape(f"{self.title}: {caption}" if caption else self.title)
            parts.append(escaped.to_latex(escape=False, multicolumn=True, multicolumn_format="c",
                                          multirow=False, caption=caption, label=None))
        return "\n".join(parts) + "\n"


class FigureText(Table):
    """A figure's markdown (``tidy``: the figure's data): its frames without index, each below
    its caption as a plain paragraph."""

    index = False
    heading = ""


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be created and written, found by trying (as root, ``os.access`` says
    yes even for ``/proc``) and leaving nothing behind: a probe file is written and removed, and
    so are the folders made for it; ``None`` if it can be."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return "it is a file, not a folder"
    missing = [path for path in (folder, *folder.parents) if not path.exists()]  # deepest first
    try:
        return unwritable_reason(folder)
    finally:
        for path in missing:
            with contextlib.suppress(OSError):  # not made, or no longer empty
                path.rmdir()


def out_problem(folder: Path, what: str) -> str | None:
    """One sentence if the output folder ``folder`` (``what`` it holds: "the tables' folder")
    cannot be written (:func:`folder_problem`), else ``None``: the scripts' ``--out``."""
    reason = folder_problem(folder)
    return None if reason is None else (f"{what} {folder} cannot be written ({reason}); choose "
                                        "another with --out.")


def refused(sentence: str) -> int:
    """A command's refusal: ``Error: <sentence>`` on stderr, and its exit status, 1."""
    print(f"Error: {sentence}", file=sys.stderr)
    return 1


def write_failure(error: OSError) -> str:
    """One sentence for a file that could not be written after all (a full disk)."""
    where = f" {error.filename}" if error.filename else ""
    return (f"could not write{where} ({error.strerror or error}); free some space, or choose "
            "another folder with --out.")


def write_table(table: Table, out_dir: Path) -> dict[str, Path]:
    """Write ``<out>/<id>.md``, ``.csv`` (tidy) and ``.tex``; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {kind: out_dir / f"{table.id}.{kind}" for kind in ("md", "csv", "tex")}
    files["md"].write_text(table.markdown())
    table.tidy.to_csv(files["csv"], index=False)
    files["tex"].write_text(table.latex())
    return files
