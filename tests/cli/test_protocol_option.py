"""``--protocol`` on ``kgeval pipeline`` and ``kgeval evaluate``: the preset is recorded, named in the header,
its rank type shown in the table, and a typo gets a suggestion."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run

from kgeval import Results

FAST = ("--model", "distmult", "--epochs", "1", "--dim", "8", "--protocol", "LibKGE")


def test_pipeline_records_the_preset(trained):
    out, printed = trained
    results = Results.load_json(out / "results.json")
    assert results.protocol["preset"] == "libkge" and results.protocol["tie_rtol"] == 1e-4
    assert results.rank_type == "rounded_mean"
    assert "protocol preset: libkge" in printed and "table: rounded_mean ranks" in printed
    config = json.loads((out / "config.json").read_text())["configuration"]
    assert config["evaluation"]["options"]["protocol"] == "libkge"
    assert config["evaluation"]["options"]["nan_policy"] == "minus_inf"


def test_evaluate_with_another_preset(trained):
    out, _ = trained
    res = run("evaluate", "--model-file", out, "--protocol", "torchkge", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["protocol"]["preset"] == "torchkge" and doc["protocol"]["tie_tolerance"] == 0.0
    assert "both.pessimistic.inverse_harmonic_mean_rank" in doc["metrics"]
    assert "both.realistic.inverse_harmonic_mean_rank" in doc["metrics"]


@pytest.mark.parametrize("args", [("pipeline", "--dataset", "nations", "--model", "distmult"),
                                  ("evaluate", "--dataset", "nations")])
def test_unknown_preset_is_named(args):
    res = run(*args, "--protocol", "libkg")
    assert res.exit_code != 0 and "libkge" in res.output
