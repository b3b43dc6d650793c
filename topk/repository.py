"""Where the repository's folders are, for the commands that work in a checkout (``make ...``):
``conf/`` (Hydra's configs), ``outputs/`` (sweeps, tables, figures, the report), ``docs/``. The
package is installed from the checkout (``pip install -e .``), so its parent folder is the
repository's root."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
OUTPUTS = ROOT / "outputs"
DOCS = ROOT / "docs"
