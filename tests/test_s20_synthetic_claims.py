"""S20's claims about its synthetic experiments (``s20_synthetic_claims.csv``): every claim names
where S20 makes it and quotes S20's own sentence, the quote is S20's words (where the paper's
text is beside the repository), and the report shows the sentence beside each verdict."""

from __future__ import annotations

import re
import unicodedata

import pandas as pd
import pytest

from conftest import ROOT
from topk import paper_results
from topk.report.claims import s20_synthetic_claims

PAPER = ROOT.parent / "shared" / "papers" / "sawada2020_topk_transition.txt"  # developers' copy only
# The paper's LaTeX, written as the claims write it (σ < 20°, d ≥ 60°, m ≤ 4).
LATEX = {r"\sigma": "σ", r"^\circ": "°", r"\leq": "≤", r"\geq": "≥", r"\times": "×"}


def flat(text: str) -> str:
    """Text compared loosely (as tests/test_cards.py compares quotes): LaTeX symbols as the
    characters they print, math dollars and braces dropped, ligatures unfolded, case and spacing
    (also before a comma or full stop) ignored."""
    for command, symbol in LATEX.items():
        text = text.replace(command, symbol)
    text = unicodedata.normalize("NFKC", text).replace("−", "-").replace("’", "'")
    text = re.sub(r"\s+", " ", re.sub(r"[${}]", "", text).replace("\\", " "))
    return re.sub(r" ([,.;:])", r"\1", text).lower().strip()


@pytest.fixture(scope="module")
def claims() -> pd.DataFrame:
    return paper_results.load("s20_synthetic_claims")


def test_every_claim_has_its_location_and_quote(claims):
    assert {"location", "quote"} <= set(claims.columns)
    for row in claims.itertuples():
        assert re.fullmatch(r"S20 §(IV-[ABC]|V-B), Fig\. [2-6]", str(row.location)), row
        assert isinstance(row.quote, str) and len(row.quote.split()) >= 8, row


@pytest.mark.skipif(not PAPER.is_file(), reason="the paper's text is not beside the repository")
def test_every_quote_is_s20s_words(claims):
    text = flat(PAPER.read_text())
    wrong = []
    for row in claims.itertuples():
        at = 0
        for piece in [flat(piece) for piece in row.quote.split("…") if piece.strip()]:
            at = text.find(piece, at)
            if at < 0:
                wrong.append(f"{row.experiment} {row.setting}: not in S20: {piece!r}")
                break
    assert not wrong, "\n".join(wrong)


def test_the_report_shows_each_claims_sentence_and_location(claims):
    """The judged claims of s20_exp1 carry, in column "S20 says", the quoted sentence and where."""
    runs = pd.DataFrame({"params.dataset.sigma": [10.0, 10.0], "loss": ["ce", "topk_group"],
                         "seed": [0, 0], "status": ["completed", "completed"],
                         "test.top1": [90.0, 80.0], "test.top2": [99.0, 98.0]})
    mine = claims[claims["experiment"] == "s20_exp1"]
    judged = s20_synthetic_claims("s20_exp1", runs, "dataset.sigma", mine)
    assert list(judged.columns[:3]) == ["setting", "claim", "S20 says"]
    assert list(judged["S20 says"]) == [f"\"{q}\" ({where})"
                                        for q, where in zip(mine["quote"], mine["location"])]
    assert "S20 §IV-A, Fig. 2" in judged["S20 says"].iloc[0]
