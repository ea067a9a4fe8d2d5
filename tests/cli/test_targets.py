"""The new evaluation targets on the command line: --sides relation, on kgeval pipeline
and on a re-evaluation with kgeval evaluate (which must reproduce the run's own ranks without a false alarm)."""

from __future__ import annotations

import json

from click.testing import CliRunner

import kgeval
from kgeval.cli import main
from kgeval.data import get_dataset


def _run(args):
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    return out.output


def test_pipeline_and_evaluate_with_relation_prediction(tmp_path):
    run = tmp_path / "run"
    text = _run(["pipeline", "-d", "nations", "-m", "distmult", "--epochs", "2", "--sides", "head,tail,relation",
                 "-o", str(run)])
    assert "relation candidates: all 55 relations" in text
    saved = json.loads((run / "results.json").read_text())
    again = _run(["evaluate", "--model-file", str(run), "--format", "json"])
    assert "warning" not in again.split("{", 1)[0]  # the run's own settings: its saved ranks, no false alarm
    data = json.loads(again[again.index("{"):])
    key = "relation.realistic.inverse_harmonic_mean_rank"
    assert data["metrics"][key] == saved["metrics"][key]
    # the same model evaluated in Python with the same settings gives the same numbers
    ds = get_dataset("nations")
    from kgeval.models import load_model

    model = load_model(run / "model.pt")
    res = kgeval.evaluate(model, ds.testing, filter_triples={"training": ds.training, "validation": ds.validation},
                          sides=["head", "tail", "relation"], progress=False)
    assert res.get_metric("both.realistic.mrr") == saved["metrics"]["both.realistic.inverse_harmonic_mean_rank"]
    assert res.get_metric(key) == saved["metrics"][key]


def test_a_bad_side_is_named(tmp_path):
    out = CliRunner().invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "--sides", "middle"])
    assert out.exit_code == 2 and "--sides" in out.output and "middle" in out.output
