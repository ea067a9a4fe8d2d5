"""The tests sharing test_distributed's two gloo ranks (its ``reports`` fixture starts them as subprocesses) are
marked ``multiprocess`` at collection, before pyproject.toml's ``-m`` deselects them from the fast suite; the
module's single-process tests (named errors, fingerprints, shard loading) stay in it."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before the -m selection
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.parent == HERE and "reports" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.multiprocess)
