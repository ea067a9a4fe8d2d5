"""`kgeval explain A B` on run directories, results files and preset names."""

from __future__ import annotations

import json

import numpy as np
from cli_helpers import run

from kgeval.results import Results

FAST = ["-m", "distmult", "--epochs", "2", "--dim", "8"]


def test_explain_run_against_other_filter_sets_and_presets(trained, tmp_path):
    directory, _ = trained
    other = tmp_path / "b.json"
    res = run("evaluate", "--model-file", directory, "--no-filter-validation", "-o", other)
    assert res.exit_code == 0, res.output
    res = run("explain", directory, other, "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["comparable"] is True
    (d,) = data["differences"]
    assert d["facet"] == "filter" and d["b"].endswith("training")
    # the effect of the filter sets, measured by evaluating the run's model again, is the whole difference
    a = Results.load_json(directory / "results.json")
    b = Results.load_json(other)
    assert np.isclose(d["effect"]["mrr"], b["mrr"] - a["mrr"], rtol=0, atol=1e-12)
    assert abs(data["effects"]["unexplained"]["mrr"]) < 1e-12

    res = run("explain", directory, "libkge")
    assert res.exit_code == 0, res.output
    assert "rank type  realistic vs rounded_mean" in res.output.replace("   ", "  ")
    assert "not measured: ties" in res.output

    res = run("explain", directory, "nosuchpreset")
    assert res.exit_code == 2 and "error:" in res.output
