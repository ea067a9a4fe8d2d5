"""Fixtures of the CLI tests: one small trained run per test module."""

from __future__ import annotations

import pytest
from cli_helpers import run


@pytest.fixture(scope="module")
def trained(tmp_path_factory, request):
    """A tiny Nations run (the module's FAST options): (run directory, printed output)."""
    out = tmp_path_factory.mktemp("cli-runs") / "run"
    res = run("pipeline", "--dataset", "nations", *request.module.FAST, "--output", out)
    assert res.exit_code == 0, res.output
    return out, res.output
