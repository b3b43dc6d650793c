"""The published numbers of the three papers, one CSV per table or figure (see README.md here).

Shipped with the package so that tables can put the papers' numbers beside ours without any
file outside the install.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent


def available() -> list[str]:
    return sorted(path.stem for path in HERE.glob("*.csv"))


def load(name: str) -> pd.DataFrame:
    """The published table ``name`` (e.g. ``"s20_synthetic_claims"``) as a DataFrame."""
    path = HERE / f"{name}.csv"
    if not path.exists():
        raise FileNotFoundError(f"no published table {name!r}; available: {', '.join(available())}")
    return pd.read_csv(path)
