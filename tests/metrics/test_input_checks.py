"""Bad input raises InvalidInputError naming the problem; the CLI turns it into `error:` + exit 2;
CI runs the README's test command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from kgeval import metrics
from kgeval.cli import main
from kgeval.errors import InvalidInputError, NoClosedFormError
from kgeval.metrics import HitsAtK
from kgeval.ranks import RankTable, read_rank_file

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("ranks", "c", "w", "match"),
    [
        ([], None, None, "empty"),
        ([1, float("nan")], None, None, r"non-finite value \(nan\) at position 1"),
        ([1, math.inf], None, None, r"non-finite value \(inf\) at position 1"),
        ([1, 0], None, None, r">= 1 .*position 1"),
        ([-2, 1], None, None, r">= 1 .*position 0"),
        ([1, 11], [10, 10], None, r"rank above its number of candidates at position 1"),
        ([1, 2, 3], [10, 10], None, r"length mismatch: 3 ranks but 2 num_candidates"),
        ([1, 2], None, [1.0], r"length mismatch: 2 ranks but 1 weights"),
        ([1, 2], None, [1.0, -0.5], r"non-negative"),
        ([1, 2], None, [0.0, 0.0], r"all zero"),
        ([1, 2], None, [1.0, float("nan")], r"NaN or infinite"),
        ([[1, 2]], None, None, r"one-dimensional"),
        (["a", "b"], None, None, r"numeric"),
        ([1, 2], [10, 0], None, r"whole numbers >= 1"),
        ([1, 2], [10, 2.5], None, r"whole numbers >= 1"),
    ],
)
def test_metric_bad_input(ranks, c, w, match):
    with pytest.raises(InvalidInputError, match=match):
        metrics.get("mrr")(ranks, c, w)


def test_hits_k_must_be_positive():
    with pytest.raises(InvalidInputError, match="k >= 1"):
        HitsAtK(0)
    with pytest.raises(InvalidInputError, match="k >= 1"):
        metrics.get("hits@0")
    with pytest.raises(InvalidInputError, match="k >= 1"):
        HitsAtK(-3)
    with pytest.raises(InvalidInputError, match="whole number"):
        HitsAtK(2.5)
    with pytest.raises(InvalidInputError, match="p != 0"):
        metrics.get("power_mean_rank", p=0)


@pytest.mark.parametrize("key", ["amri", "z_mrr", "adjusted_hits_at_3", "aigmr"])
def test_metric_needing_candidates_without_them(key):
    with pytest.raises(InvalidInputError, match="needs num_candidates"):
        metrics.get(key)([1, 2])


def test_null_moments_bad_input():
    mrr = metrics.get("mrr")
    with pytest.raises(InvalidInputError, match="empty"):
        mrr.expected_value([])
    with pytest.raises(InvalidInputError, match="whole numbers >= 1"):
        mrr.variance([3, 0])
    with pytest.raises(InvalidInputError, match="length mismatch"):
        mrr.expected_value([3, 4], [1.0])
    with pytest.raises(NoClosedFormError, match="num_samples"):
        metrics.get("std").expected_value([3, 4])
    with pytest.raises(InvalidInputError, match="num_samples must be at least 2"):
        mrr.monte_carlo([3, 4], num_samples=1)


def test_expected_under_ties_bad_input():
    mrr = metrics.get("mrr")
    with pytest.raises(InvalidInputError, match="pessimistic rank below optimistic"):
        mrr.expected_under_ties([3, 1], [2, 1], [5, 5])
    with pytest.raises(InvalidInputError, match="length mismatch"):
        mrr.expected_under_ties([1, 1], [2], [5, 5])
    with pytest.raises(InvalidInputError, match="rank above its number of candidates"):
        mrr.expected_under_ties([1, 1], [2, 6], [5, 5])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"optimistic": []}, "empty rank table"),
        ({"optimistic": [1, 2], "pessimistic": [1]}, r"length mismatch: 2 optimistic ranks but 1 pessimistic"),
        ({"optimistic": [2, 3], "pessimistic": [2, 1]}, r"pessimistic rank below optimistic rank at position 1 \(1 < 3\)"),
        ({"optimistic": [1, 0]}, r">= 1 .*position 1"),
        ({"optimistic": [1.0, float("nan")]}, r"non-finite"),
        ({"optimistic": [1.5, 2]}, r"whole numbers.*not realistic"),
        ({"optimistic": [1, 5], "num_candidates": [4, 4]}, r"rank above its number of candidates at position 1 "
                                                           r"\(pessimistic rank 5 > num_candidates 4\)"),
        ({"optimistic": [1, 2], "num_candidates": [4, 4, 4]}, r"length mismatch: 2 ranks but 3 num_candidates"),
        ({"optimistic": [1, 2], "weights": [1.0, -1.0]}, "non-negative"),
        ({"optimistic": [1, 2], "weights": [0.0, 0.0]}, "all zero"),
        ({"optimistic": [1, 2], "side": "middle"}, "unknown side"),
        ({}, "no ranks given"),
    ],
)
def test_rank_table_bad_input(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        RankTable.from_ranks(**kwargs)


# ---------------------------------------------------------------------------- rank files
@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("optimistic,pessimistic\n", "header but no rows"),
        ("num_candidates,side\n10,head\n", r"needs an 'optimistic'.*or a 'rank' column"),
        ("optimistic,pessimistic,colour\n1,2,red\n", r"unknown column\(s\) \['colour'\]"),
        ("optimistic,pessimistic\n1,2\n3,4,5\n", r"line 3: expected 2 fields, got 3"),
        ("optimistic\tpessimistic\n1\t2\n3\n", r"line 3: expected 2 fields, got 1"),
        ("optimistic,pessimistic\n1,2\nx,4\n", r"line 3: column 'optimistic' is not a number: 'x'"),
        ("optimistic,pessimistic,num_candidates\n1,2,10\n3,12,10\n", "rank above its number of candidates at position 1"),
        ("optimistic,pessimistic\n3,2\n", "pessimistic rank below optimistic"),
        ("rank,weight\n1,-1\n", "non-negative"),
    ],
)
@pytest.mark.parametrize("reader", ["load", "read_rank_file"])
def test_malformed_rank_files(tmp_path, content, match, reader):
    path = tmp_path / "ranks.csv"
    path.write_text(content)
    fn = RankTable.load if reader == "load" else read_rank_file
    with pytest.raises(InvalidInputError, match=match) as info:
        fn(path)
    assert str(path) in str(info.value)


def test_rank_file_missing_and_bad_npz(tmp_path):
    with pytest.raises(InvalidInputError, match="not found"):
        RankTable.load(tmp_path / "nope.tsv")
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InvalidInputError, match="not a readable rank table"):
        RankTable.load(bad)
    np.savez(tmp_path / "y.npz", pessimistic=np.array([1, 2]))
    with pytest.raises(InvalidInputError, match="no 'optimistic' column"):
        RankTable.load(tmp_path / "y.npz")
    with pytest.raises(InvalidInputError, match="unknown rank-table format"):
        RankTable.from_ranks([1]).save(tmp_path / "z.txt")


def test_rank_file_good_variants(tmp_path):
    """Whitespace, semicolons, aliases and a single rank column parse to the same table."""
    p1 = tmp_path / "a.txt"
    p1.write_text("# comment\nrank candidates side\n1 10 head\n4 10 tail\n")
    p2 = tmp_path / "b.csv"
    p2.write_text("optimistic;pessimistic;num_candidates;side\n1;1;10;head\n4;4;10;tail\n")
    a, b = read_rank_file(p1), read_rank_file(p2)
    for t in (a, b):
        np.testing.assert_array_equal(t.optimistic, [1, 4])
        np.testing.assert_array_equal(t.pessimistic, [1, 4])
        np.testing.assert_array_equal(t.num_candidates, [10, 10])
        np.testing.assert_array_equal(t.side, [0, 1])


# ---------------------------------------------------------------------------- CLI
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
    res = CliRunner().invoke(main, ["metrics", str(path), "--metric", "mrr", "-m", "tail.pessimistic.hits@10",
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


# ---------------------------------------------------------------------------- CI
def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text().splitlines()
    prefix = 'pip install torch==2.13.0 && pip install -e ".[test]"'
    commands = [ln.strip() for ln in readme if ln.strip().startswith(prefix)]
    assert len(commands) == 1, commands
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert commands[0] in [ln.strip() for ln in ci]
    assert commands[0].endswith("python -m pytest -q")


def test_candidates_beyond_int64_are_refused_not_wrapped():
    """expected_value([1e20]) returned -4.6e18 (the float wrapped around in int64)."""
    with pytest.raises(InvalidInputError, match="too large"):
        metrics.get("mr").expected_value([1e20])
    with pytest.raises(InvalidInputError, match="too large"):
        metrics.get("mrr")([1.0], [1e20])
