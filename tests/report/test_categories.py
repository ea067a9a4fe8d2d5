"""Each run's relation-category table in a report: the numbers of Results.breakdown on the run, the rule with it."""

from __future__ import annotations

import json

import pytest

from kgeval.data import get_dataset
from kgeval.report import build_report, write_report
from kgeval.workflow.runs import load_run_results


def test_the_category_table_is_the_breakdown_of_the_run(runs, tmp_path):
    report = build_report(runs, num_resamples=300, seed=0)
    nations = get_dataset("nations")
    for run, directory in zip(report.runs, runs):
        _, results = load_run_results(directory)
        want = results.breakdown("category", dataset=nations, metrics=["mrr"], num_resamples=300, seed=0)
        got = run.categories
        assert "counted on the training split" in got["rule"] and got["rule"] == want.rule
        assert [(r["group"], r["side"]) for r in got["rows"]] == [(r["group"], r["side"]) for r in want.rows]
        for g, w in zip(got["rows"], want.rows):
            assert (g["value"], g["expected"], g["z"], g["ci_low"]) == pytest.approx(
                (w["value"], w["expected"], w["z"], w["ci_low"]), nan_ok=True)
    path = write_report(report, tmp_path / "r.json", format="json")
    doc = json.loads(path.read_text())
    assert doc["runs"][0]["categories"]["rows"][0]["group"] in ("1-1", "1-N", "N-1", "N-N")
    md = write_report(report, tmp_path / "r.md", format="md").read_text()
    assert md.count("### MRR per relation category") == len(runs) and "| category | side | tasks | value | 95% CI |" in md
    page = write_report(report, tmp_path / "r.html", format="html").read_text()
    assert page.count("<table class='categories'>") == len(runs) and "Bordes et al., 2013" in page
