"""Sphinx configuration of kgeval's documentation site (build: see docs/README.md)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import kgeval  # noqa: E402

project = "kgeval"
author = "the kgeval developers"
release = kgeval.__version__ if hasattr(kgeval, "__version__") else "0.1.0"
version = release

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx_click",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "README.md"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
numpydoc_show_class_members = False
autosummary_generate = True
html_theme = "pydata_sphinx_theme"
html_title = "kgeval"
