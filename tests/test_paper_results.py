"""The published numbers shipped in the package are the shared ones, byte for byte, with the
rows, columns and tables the package adds on purpose after them."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from conftest import ROOT
from topk import paper_results

# The team's reference copy, beside the repository on its machines only: the comparison skips
# in a user's clone.
SHARED = ROOT.parent / "shared"
# Rows the package appends on purpose to a table of the reference copy (which is read-only), by
# table: how many, after the reference's own rows. b18_table5_stability: B18 Appendix B.3.3,
# Table 5's "DC log (D)" row, stable at all six τ, which the reference copy lacks.
ADDED_ROWS = {"b18_table5_stability": 6}
# Tables the package adds: s20_cifar_claims, S20 §V-B's CIFAR-100 claims with their sentences.
ADDED_TABLES = {"s20_cifar_claims"}
# Columns the package appends on purpose to a table of the reference copy: s20_synthetic_claims,
# each claim's sentence in S20 and its section and figure. The reference's columns stay as they are.
ADDED_COLUMNS = {"s20_synthetic_claims": ["location", "quote"]}


def same_columns(name: str, packaged: list[bytes], reference: list[bytes]) -> bool:
    """Whether the packaged table holds the reference's rows, with ``ADDED_COLUMNS[name]`` after
    the reference's columns (compared cell by cell, the CSV read as text)."""
    ours = pd.read_csv(io.BytesIO(b"".join(packaged)), dtype=str, keep_default_na=False)
    theirs = pd.read_csv(io.BytesIO(b"".join(reference)), dtype=str, keep_default_na=False)
    if list(ours.columns) != [*theirs.columns, *ADDED_COLUMNS[name]]:
        return False
    return ours[list(theirs.columns)].equals(theirs)


@pytest.mark.skipif(not (SHARED / "paper_tables").is_dir(), reason="shared/ is not beside the repo")
def test_package_copy_matches_shared_tables():
    shared = sorted(path.stem for path in (SHARED / "paper_tables").glob("*.csv"))
    assert paper_results.available() == sorted({*shared, *ADDED_TABLES})
    for name in shared:
        packaged = (paper_results.HERE / f"{name}.csv").read_bytes().splitlines(keepends=True)
        reference = (SHARED / "paper_tables" / f"{name}.csv").read_bytes().splitlines(keepends=True)
        assert len(packaged) == len(reference) + ADDED_ROWS.get(name, 0), name
        if name in ADDED_COLUMNS:
            assert same_columns(name, packaged, reference), name
        else:
            assert packaged[:len(reference)] == reference, name


def test_b18_table5_has_every_algorithm_and_precision_at_every_tau():
    table = paper_results.load("b18_table5_stability")
    cells = table.groupby(["algorithm", "precision"])["tau"].nunique()
    assert cells.to_dict() == {(a, p): 6 for a in ("divide_conquer_log", "summation")
                               for p in ("float32", "float64")}
    assert table[table["algorithm"] == "divide_conquer_log"]["stable"].eq(1).all()  # "DC log" never overflows


def test_load_and_unknown_name():
    claims = paper_results.load("s20_synthetic_claims")
    assert set(claims["experiment"]) >= {"s20_exp1", "s20_exp2", "s20_exp3"}
    with pytest.raises(FileNotFoundError, match="available: b18_"):
        paper_results.load("nope")
