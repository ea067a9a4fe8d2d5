"""RankTable and rank-file bad input (moved from tests/metrics/test_input_checks.py, R14)."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval.errors import InvalidInputError
from kgeval.ranks import RankTable, read_rank_file


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
        # a one-element list is a column, not a scalar: it was repeated for every task (the fuzz test found it)
        ({"optimistic": [1, 1], "num_candidates": [4]}, r"length mismatch: 2 ranks but 1 num_candidates"),
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
