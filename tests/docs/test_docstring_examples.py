"""The ``Examples`` of every public name's docstring run, with the standard library's doctest.

The public names are those the API reference lists (each package's ``__all__``, plus the modules of
``kgeval.significance``, as docs/conf.py builds it), so what a reader copies from the site works.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))
PACKAGES = ["kgeval", "kgeval.metrics", "kgeval.evaluation", "kgeval.models", "kgeval.data", "kgeval.results",
            "kgeval.tracking", "kgeval.breakdowns"]
SIGNIFICANCE = ["pvalues", "bootstrap", "compare", "compare_groups", "corrections", "adjust", "null_model"]


def _objects():
    seen, found = set(), []
    for name in PACKAGES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if not inspect.ismodule(obj) and id(obj) not in seen:
                seen.add(id(obj))
                found.append((f"{name}.{attr}", obj))
    for name in SIGNIFICANCE:
        found.append((f"kgeval.significance.{name}", importlib.import_module(f"kgeval.significance.{name}")))
    return found


def _tests():
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = {}
    for name, obj in _objects():
        try:
            found = finder.find(obj, name)
        except ValueError:  # an object without source (a constant): nothing to run
            continue
        for test in found:
            if test.examples:
                tests.setdefault(test.name, test)
    return list(tests.values())


TESTS = _tests()


def test_the_public_api_has_examples():
    assert len(TESTS) >= 30


@pytest.mark.parametrize("test", TESTS, ids=[t.name for t in TESTS])
def test_docstring_example_runs(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    test.globs = {**test.globs}
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, f"{test.name}: {runner.failures} of {runner.tries} examples failed:\n" + "".join(report)
