"""`kgeval breakdown RUN --by ...` and `kgeval compare A B --by ...` on a saved Nations run."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from cli_helpers import run

from kgeval.data import get_dataset
from kgeval.workflow.runs import load_run_results

FAST = ["--model", "distmult", "--epochs", "1", "--dim", "8"]


def test_breakdown_by_category_is_the_python_breakdown_of_the_run(trained):
    directory, _ = trained
    res = run("breakdown", directory, "--by", "category", "--side", "head", "--metric", "mrr", "--format", "json",
              "--resamples", "200")
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    _, results = load_run_results(directory)
    want = results.breakdown("category", dataset=get_dataset("nations"), metrics=["mrr"], sides=["head"],
                             num_resamples=200, seed=0)
    assert got["rule"] == want.rule and "Bordes" in got["rule"]
    assert [(r["group"], r["side"]) for r in got["rows"]] == [(r["group"], r["side"]) for r in want.rows]
    for g, w in zip(got["rows"], want.rows):
        for key in ("value", "expected", "adjusted", "z", "p_value", "ci_low", "ci_high"):
            assert g[key] == pytest.approx(w[key], nan_ok=True)
    table = run("breakdown", directory, "--no-intervals")
    assert table.exit_code == 0 and "rule: relation categories (Bordes et al., 2013)" in table.output
    assert "E[chance]" in table.output and "CI" not in table.output.splitlines()[3]


def test_breakdown_by_groups_frequency_and_relation(trained):
    directory, _ = trained
    ds = get_dataset("nations")
    names = ds.relation_labels[:2]
    res = run("breakdown", directory, "--group", f"mine={names[0]},{names[1]}", "--no-intervals", "--format", "csv",
              "--metric", "hits@10")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.output)))
    assert [r["group"] for r in rows] == ["mine", "other"]
    _, results = load_run_results(directory)
    table = results.rank_table
    mine = np.isin(table.relation, [0, 1])
    r = (table.optimistic[mine] + table.pessimistic[mine]) / 2
    assert float(rows[0]["value"]) == pytest.approx(np.mean(r <= 10))
    freq = run("breakdown", directory, "--by", "query-frequency", "--quantiles", "2", "--no-intervals", "--format",
               "json")
    assert freq.exit_code == 0, freq.output
    doc = json.loads(freq.output)
    assert doc["by"] == "query_frequency" and 1 <= len({r["group"] for r in doc["rows"]}) <= 2
    assert sum(r["num_tasks"] for r in doc["rows"] if r["metric"] == "hits_at_1") == len(table)
    rel = run("breakdown", directory, "--by", "relation", "--no-intervals", "--metric", "mrr")
    assert rel.exit_code == 0 and ds.relation_labels[int(table.relation[0])] in rel.output


def test_compare_by_category_has_a_group_column_and_verdicts(trained):
    directory, _ = trained
    res = run("compare", directory, directory, "--by", "category", "--metric", "mrr", "--resamples", "100")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].split()[0] == "group"
    assert "groups: relation categories" in res.output and "mrr: no significant difference on " in res.output
    js = run("compare", directory, directory, "--by", "category", "--metric", "mrr", "--resamples", "100", "--format",
             "json")
    rows = json.loads(js.output)
    assert {r["group"] for r in rows} <= {"1-1", "1-N", "N-1", "N-N"} and all(r["difference"] == 0 for r in rows)


@pytest.mark.parametrize("args, message", [
    (["breakdown", "{run}", "--group", "mine"], "NAME=REL"),
    (["breakdown", "{run}", "--by", "relation", "--group", "x=0"], "cannot be combined with --by relation"),
    (["breakdown", "{run}", "--by", "group"], "needs at least one --group"),
    (["breakdown", "{run}", "--group", "x=not_a_relation"], "unknown relation 'not_a_relation'"),
    (["breakdown", "{run}", "--threshold", "0"], "threshold must be a positive number"),
    (["breakdown", "{run}", "--resamples", "50"], "--resamples must be at least 200"),
    (["compare", "{run}", "{run}", "--threshold", "2"], "give one of those"),
])
def test_bad_options_are_refused_by_name(trained, args, message):
    directory, _ = trained
    res = run(*[str(directory) if a == "{run}" else a for a in args])
    assert res.exit_code == 2 and message in res.output, res.output
