"""Two tiny Nations runs (DistMult and ComplEx, 2 epochs) shared by the report tests."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kgeval.cli import main

FAST = ["--dataset", "nations", "--epochs", "2", "--dim", "8"]


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report-runs")
    out = []
    for model in ("distmult", "complex"):
        res = CliRunner().invoke(main, ["pipeline", *FAST, "--model", model, "--output", str(root / model)])
        assert res.exit_code == 0, res.output
        out.append(root / model)
    return out
