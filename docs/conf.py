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

# ---------------------------------------------------------------------------------- API reference
# One page per public package, generated at every build from the package's ``__all__`` (so a new public
# name appears without editing the docs); significance has no facade, so its modules are listed.
API_PACKAGES = {
    "kgeval": "The top-level package: evaluate, pipeline, compare, adjust and the core types.",
    "kgeval.metrics": "Every rank-based metric, its null moments, and the registry of names and synonyms.",
    "kgeval.evaluation": "Ranking a scorer's predictions: the evaluator, its options, scorers and filter index.",
    "kgeval.models": "The built-in models and embedding-based scorers.",
    "kgeval.data": "Datasets: the built-in ones, the registry of benchmark graphs, parsing.",
    "kgeval.results": "Metric values of a rank table: lookup by key, p-values, intervals, rendering.",
    "kgeval.breakdowns": "Groups of tasks for breakdowns: relation categories, entity degrees, relation groups.",
    "kgeval.tracking": "Experiment trackers: MLflow, Weights & Biases, TensorBoard, CSV.",
}
SIGNIFICANCE_MODULES = ["pvalues", "bootstrap", "compare", "compare_groups", "corrections", "adjust", "null_model"]


def _write_api_pages(root: Path) -> None:
    import importlib

    out = root / "api"
    out.mkdir(exist_ok=True)
    pages = []
    for name, blurb in API_PACKAGES.items():
        module = importlib.import_module(name)
        names = [n for n in module.__all__ if not n.startswith("_") and not isinstance(getattr(module, n), type(sys))]
        # a name the top-level package re-exports from a documented package is described there once
        # (two descriptions of one object are a Sphinx warning); here it is a link
        elsewhere = {n: p for p in API_PACKAGES if p != name and name == "kgeval"
                     for n in importlib.import_module(p).__all__ if n in names}
        body = "\n".join(f"   {n}" for n in names if n not in elsewhere)
        links = "".join(f"- {{py:obj}}`{n} <{p}.{n}>` (from `{p}`)\n" for n, p in elsewhere.items())
        text = (f"# `{name}`\n\n{blurb}\n\n```{{eval-rst}}\n.. automodule:: {name}\n   :no-members:\n\n"
                f".. autosummary::\n   :toctree: generated\n   :nosignatures:\n\n{body}\n```\n")
        if links:
            text += f"\nAlso importable from `{name}`:\n\n{links}"
        pages.append(name)
        _write_if_changed(out / f"{name}.md", text)
    sig = "\n\n".join(f".. automodule:: kgeval.significance.{m}\n   :members:" for m in SIGNIFICANCE_MODULES)
    _write_if_changed(out / "kgeval.significance.md",
                      "# `kgeval.significance`\n\nP-values, confidence intervals, comparisons of models, and "
                      f"adjusting published numbers.\n\n```{{eval-rst}}\n.. automodule:: kgeval.significance\n"
                      f"   :no-members:\n\n{sig}\n```\n")
    pages.insert(4, "kgeval.significance")
    toc = "\n".join(pages)
    _write_if_changed(out / "index.md", "# API reference\n\nEvery public name, from its docstring.\n\n"
                      f"```{{toctree}}\n:maxdepth: 1\n\n{toc}\n```\n")


def _write_if_changed(path: Path, text: str) -> None:
    # rewriting an unchanged page would make Sphinx rebuild it (and everything linking to it) every time
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


_write_api_pages(Path(__file__).resolve().parent)
