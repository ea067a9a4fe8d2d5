"""Every example on the documentation site runs as written (rules: tests/snippets.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from snippets import blocks, run_page  # noqa: E402

# ~40 s in all (trained models, reports, MLflow): with the slow tests, which .ci/run runs after the fast suite
pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts and p.name != "README.md")


def test_the_site_has_pages():
    assert len(PAGES) >= 12


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_every_example_on_the_page_runs(page, tmp_path, monkeypatch):
    run_page(page, tmp_path, monkeypatch)
    assert blocks(page) is not None
