"""Protocol cards (topk/cards/): every result-affecting key of every job of every experiment has a
card entry with its value and source, the card's value is the composed one, and each quote is the
paper's own words (where the papers' texts are beside the repository)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

import topk.cards as cards
from conftest import CONF, ROOT

EXPERIMENTS = sorted(path.stem for path in (CONF / "experiment").glob("*.yaml"))
PAPERS = ROOT.parent / "shared" / "papers"  # the developers' copy; a user's clone has none
PAPER_FILES = {"B18": "berrada2018_smooth_svm.txt", "G22": "garcin2022_noised_topk.md",
               "G22 preprint": "garcin2022_noised_topk_preprint_with_imagenet_lt.txt",
               "S20": "sawada2020_topk_transition.txt", "P22": "petersen2022_difftopk_notes.md"}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_job_of_every_experiment_is_on_its_card(experiment):
    found = cards.problems(experiment)
    assert not found, f"{experiment}'s card disagrees with its jobs:\n" + "\n".join(found)


def test_every_card_is_an_experiments():
    assert set(cards.experiments_with_cards()) <= set(EXPERIMENTS)


def test_every_experiment_names_its_card_in_its_header():
    for experiment in EXPERIMENTS:
        text = (CONF / "experiment" / f"{experiment}.yaml").read_text()
        assert f"protocol_card: topk/cards/{experiment}.yaml" in text, experiment


# --- the check itself fails where it should --------------------------------------------------------

@pytest.fixture
def card_dir(tmp_path, monkeypatch):
    """A copy of the cards in a folder of its own, to break one at a time."""
    for path in [*cards.CARDS.glob("*.yaml"), *cards.CARDS.glob("common/*.yaml")]:
        target = tmp_path / path.relative_to(cards.CARDS)
        target.parent.mkdir(exist_ok=True)
        target.write_text(path.read_text())
    monkeypatch.setattr(cards, "CARDS", tmp_path)
    cards.load.cache_clear()
    yield tmp_path
    cards.load.cache_clear()


def rewrite(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_a_value_that_differs_from_the_composed_one_is_found(card_dir):
    rewrite(card_dir / "b18_cifar_noise.yaml", "value: 1.0\n    source: cited\n    ref: B18 §5.1\n"
            "    quote: The temperature", "value: 0.5\n    source: cited\n    ref: B18 §5.1\n"
            "    quote: The temperature")
    assert any(p.startswith("loss.tau: the card says 0.5") for p in cards.problems("b18_cifar_noise"))


def test_a_key_without_an_entry_is_found(card_dir):
    rewrite(card_dir / "common" / "cifar100_b18.yaml", "  model.drop_rate:", "  model.drop_rate_gone:")
    found = cards.problems("b18_cifar_noise")
    assert any(p.startswith("model.drop_rate: no card entries apply") for p in found)
    assert any(p.startswith("model.drop_rate_gone: no job of the sweep uses") for p in found)


def test_swept_values_must_be_the_sweeps(card_dir):
    rewrite(card_dir / "b18_cifar_noise.yaml", "swept: [0, 1, 2]", "swept: [0, 1]")
    assert any(p.startswith("seed is swept over 0, 1, 2") for p in cards.problems("b18_cifar_noise"))


def test_a_fragments_cases_for_values_the_card_does_not_sweep_are_left_out(card_dir):
    (card_dir / "common" / "shared_losses.yaml").write_text(
        "keys:\n  loss.gamma:\n"
        "    - {when: {loss: focal}, value: 2.0, source: choice, why: another experiment's loss}\n"
        "    - {when: {loss: [ce, focal]}, value: 1.0, source: choice, why: narrowed to ce}\n")
    rewrite(card_dir / "b18_cifar_noise.yaml", "uses: [framework, cifar100_b18]",
            "uses: [framework, cifar100_b18, shared_losses]")
    (case,) = cards.load("b18_cifar_noise").cases("loss.gamma")
    assert (case.value, case.when) == (1.0, (("loss", ("ce",)),))


@pytest.mark.parametrize("old,new,sentence", [
    ("source: choice", "source: guess", "source must be one of cited, code, inferred, choice"),
    ("    quote: The temperature parameter is fixed to one.\n", "", "is cited and needs quote"),
])
def test_an_entry_without_its_source_is_refused_in_one_sentence(card_dir, old, new, sentence):
    path = card_dir / ("b18_cifar_noise.yaml" if "temperature" in old else "common/framework.yaml")
    rewrite(path, old, new)
    with pytest.raises(cards.CardError, match=sentence):
        cards.load("b18_cifar_noise")


def test_a_fragments_facts_reach_the_cards_that_use_it(card_dir):
    """circles_multimodal_s20's facts are s20_exp2's and not s20_exp1's; a card's own fact of the
    same name replaces the fragment's."""
    assert "minor-mode side" in {fact.key for fact in cards.load("s20_exp2").facts}
    assert "minor-mode side" not in {fact.key for fact in cards.load("s20_exp1").facts}
    rewrite(card_dir / "s20_exp2.yaml", "keys:\n", "facts:\n  minor-mode side:\n    value: clockwise\n"
            "    source: choice\n    why: a test.\nkeys:\n")
    cards.load.cache_clear()
    side = [fact for fact in cards.load("s20_exp2").facts if fact.key == "minor-mode side"]
    assert [fact.value for fact in side] == ["clockwise"]


# --- the quotes are the papers' words ---------------------------------------------------------------

def flat(text: str) -> str:
    """Text compared loosely: ligatures unfolded, LaTeX dollars and braces, case and spacing ignored."""
    text = unicodedata.normalize("NFKC", text).replace("−", "-").replace("’", "'")
    return re.sub(r"\s+", " ", re.sub(r"[${}\\]", " ", text)).lower().strip()


def paper_of(ref: str) -> str | None:
    for name in sorted(PAPER_FILES, key=len, reverse=True):
        if ref.startswith(name):
            return name
    return None


def quoted_entries():
    for experiment in cards.experiments_with_cards():
        card = cards.load(experiment)
        for entry in (*card.entries, *card.facts):
            if entry.source == "cited":
                yield experiment, entry


@pytest.mark.skipif(not PAPERS.is_dir(), reason="the papers' texts are not beside the repository")
def test_every_quote_is_in_the_paper_it_cites():
    texts = {name: flat((PAPERS / file).read_text()) for name, file in PAPER_FILES.items()}
    wrong = []
    for experiment, entry in quoted_entries():
        paper = paper_of(entry.ref)
        if paper is None:  # another paper (Lin et al., Cao et al. ...): its text is not on file
            continue
        pieces = [flat(piece) for piece in entry.quote.split("…") if piece.strip()]
        at = 0
        for piece in pieces:
            at = texts[paper].find(piece, at)
            if at < 0:
                wrong.append(f"{experiment} {entry.key}: not in {paper}: {piece!r}")
                break
    assert not wrong, "\n".join(wrong)


def test_the_documentation_pages_are_those_of_the_cards():
    from topk.cards.render import documentation_pages

    folder = ROOT / "docs" / "cards"
    pages = documentation_pages()
    stale = [name for name, text in pages.items()
             if not (folder / name).is_file() or (folder / name).read_text() != text]
    extra = sorted(p.name for p in folder.glob("*.md") if p.name not in pages)
    assert not stale and not extra, f"run `make cards`: out of date {stale}, left over {extra}"
