"""``kgeval metrics FILE`` (moved from tests/metrics/test_input_checks.py, R14)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from kgeval.cli import main
from kgeval.errors import InvalidInputError


@pytest.fixture()
def rank_file(tmp_path):
    path = tmp_path / "ranks.tsv"
    rows = [(1, 1, 20, "head"), (3, 5, 20, "tail"), (2, 2, 30, "head"), (12, 15, 40, "tail")]
    path.write_text("optimistic\tpessimistic\tnum_candidates\tside\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))
    o = np.array([r[0] for r in rows], float)
    p = np.array([r[1] for r in rows], float)
    return path, 0.5 * (o + p)


def test_cli_table(rank_file):
    path, r = rank_file
    res = CliRunner().invoke(main, ["metrics", str(path)])
    assert res.exit_code == 0, res.output
    assert f"4 ranking tasks from {path}" in res.output
    row = next(ln for ln in res.output.splitlines() if ln.startswith("inverse_harmonic_mean_rank "))
    assert row.split()[-1] == f"{np.mean(1 / r):.4f}"  # the 'both' column
    assert "z_hits_at_10" in res.output and "geometric_mean_rank" in res.output


def test_cli_json(rank_file):
    path, r = rank_file
    res = CliRunner().invoke(main, ["metrics", str(path), "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["both.realistic.inverse_harmonic_mean_rank"] == pytest.approx(np.mean(1 / r), rel=1e-12)
    assert data["tail.pessimistic.hits_at_10"] == pytest.approx(0.5)  # pessimistic tail ranks 5, 15
    for key in ("head.optimistic.arithmetic_mean_rank", "both.expected.inverse_harmonic_mean_rank",
                "both.realistic.z_hits_at_3", "both.realistic.adjusted_arithmetic_mean_rank_index"):
        assert key in data


def test_cli_metric_selection(rank_file):
    path, r = rank_file
    res = CliRunner().invoke(main, ["metrics", str(path), "--metric", "mrr", "--metric", "tail.pessimistic.hits@10",
                                    "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert set(data) == {"mrr", "tail.pessimistic.hits@10"}
    assert data["mrr"] == pytest.approx(np.mean(1 / r), rel=1e-12)
    res = CliRunner().invoke(main, ["metrics", str(path), "--metric", "mrr"])
    assert res.exit_code == 0
    assert res.output.split() == ["mrr", f"{np.mean(1 / r):.6g}"]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("optimistic,pessimistic\n1,2\n3,4,5\n", "line 3: expected 2 fields"),
        ("optimistic,colour\n1,2\n", "unknown column"),
        ("", "empty"),
    ],
)
def test_cli_malformed_file(tmp_path, content, match):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    res = CliRunner().invoke(main, ["metrics", str(path)])
    assert res.exit_code == 2
    out = res.output + (res.stderr if hasattr(res, "stderr") else "")
    assert "error:" in out and match in out
    assert "Traceback" not in out
    assert not isinstance(res.exception, InvalidInputError)  # handled, not propagated


def test_cli_unknown_metric_and_missing_file(rank_file, tmp_path):
    path, _ = rank_file
    res = CliRunner().invoke(main, ["metrics", str(path), "--metric", "mrrr"])
    assert res.exit_code == 2 and "error:" in res.output and "Did you mean" in res.output
    res = CliRunner().invoke(main, ["metrics", str(tmp_path / "missing.tsv")])
    assert res.exit_code == 2 and "not found" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("spelling, column", [("best", 0), ("OPTIMISTIC", 0), ("worst", 1), ("avg", None)])
def test_rank_type_synonyms_select_the_table_view(rank_file, spelling, column):
    path, realistic = rank_file
    rows = [(1, 1), (3, 5), (2, 2), (12, 15)]
    r = realistic if column is None else np.array([row[column] for row in rows], float)
    res = CliRunner().invoke(main, ["metrics", str(path), "--rank-type", spelling])
    assert res.exit_code == 0, res.output
    row = next(ln for ln in res.output.splitlines() if ln.startswith("inverse_harmonic_mean_rank "))
    assert row.split()[-1] == f"{np.mean(1 / r):.4f}"


def test_rank_type_typo_names_close_matches(rank_file):
    path, _ = rank_file
    res = CliRunner().invoke(main, ["metrics", str(path), "--rank-type", "realistc"])
    assert res.exit_code == 2 and "Did you mean: realistic" in res.output


def test_rank_type_applies_to_metric_keys_without_one(rank_file):
    """--rank-type was ignored with --metric: ``--metric mrr --rank-type worst`` printed the realistic MRR."""
    path, _ = rank_file
    pessimistic = np.array([1, 5, 2, 15], float)
    optimistic = np.array([1, 3, 2, 12], float)
    res = CliRunner().invoke(main, ["metrics", str(path), "--metric", "mrr", "--metric", "best.mrr", "--metric", "tail.hits@3",
                                    "--rank-type", "worst", "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["mrr"] == pytest.approx(np.mean(1 / pessimistic), rel=1e-12)
    assert data["best.mrr"] == pytest.approx(np.mean(1 / optimistic), rel=1e-12)  # the key's own rank type wins
    assert data["tail.hits@3"] == 0.0  # pessimistic tail ranks 5, 15 (optimistic 3, 12: 0.5)


def test_file_and_example_together_are_refused(rank_file):
    """metrics FILE --example printed FILE's metrics and ignored --example."""
    path, _ = rank_file
    res = CliRunner().invoke(main, ["metrics", str(path), "--example"])
    assert res.exit_code == 2 and "not both" in res.output and "ranking tasks" not in res.output
