"""Sphinx configuration of the documentation site: ``make docs`` builds it into ``outputs/docs/``.

Pages are MyST markdown (``docs/*.md``); the API reference comes from the docstrings (autodoc,
numpy style through napoleon). MathJax is served from the site itself (sphinx-mathjax-offline),
so the formulas render from disk without a network. Warnings are errors (``make docs`` passes
``-W``): a broken cross-reference or include fails the build.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import topk  # noqa: E402 - after the repository is on the path

project = "topk"
author = "The topk authors"
copyright = "2026, The topk authors"
version = release = topk.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx-mathjax-offline",
]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 4
source_suffix = {".md": "markdown"}
exclude_patterns = ["figures/*.md"]  # the figures' data tables, linked as files

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = False

html_theme = "furo"
html_title = f"topk {release}"
html_static_path = ["_static"]
html_css_files = ["math.css"]  # wide equations scroll in their own box (docs/_static/math.css)
