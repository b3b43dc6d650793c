"""The published numbers shipped in the package are the shared ones, byte for byte."""

from __future__ import annotations

import pytest

from conftest import ROOT
from topk import paper_results

# The team's reference copy, beside the repository on its machines only: the comparison skips
# in a user's clone.
SHARED = ROOT.parent / "shared"


@pytest.mark.skipif(not (SHARED / "paper_tables").is_dir(), reason="shared/ is not beside the repo")
def test_package_copy_matches_shared_tables():
    shared = sorted(path.stem for path in (SHARED / "paper_tables").glob("*.csv"))
    assert paper_results.available() == shared
    for name in shared:
        packaged = (paper_results.HERE / f"{name}.csv").read_bytes()
        assert packaged == (SHARED / "paper_tables" / f"{name}.csv").read_bytes(), name


def test_load_and_unknown_name():
    claims = paper_results.load("s20_synthetic_claims")
    assert set(claims["experiment"]) >= {"s20_exp1", "s20_exp2", "s20_exp3"}
    with pytest.raises(FileNotFoundError, match="available: b18_"):
        paper_results.load("nope")
