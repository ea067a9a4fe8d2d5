"""Rank files: what kgeval writes it reads back; text is decoded and split without changing data."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from click.testing import CliRunner

from kgeval.cli import main
from kgeval.errors import InvalidInputError
from kgeval.rankfile import parse_rank_bytes
from kgeval.ranks import RankTable, read_rank_file

OPTIONAL = ("num_candidates", "weight", "triple_index", "relation", "side")


def _full_table() -> RankTable:
    return RankTable.from_ranks(
        [1, 3, 2, 7], [1, 5, 2, 9], num_candidates=[10, 12, 2**53 + 1, 30], weights=[0.1, 1 / 3, 2.0, 1e-300],
        triple_index=[0, 0, 1, -1], relation=[4, 4, 0, -1], side=["head", "tail", "head", "tail"],
    )


def _assert_equal(a: RankTable, b: RankTable):
    for col in ("side", "optimistic", "pessimistic", "num_candidates", "weight", "triple_index", "relation"):
        x, y = getattr(a, col), getattr(b, col)
        assert (x is None) == (y is None), col
        if x is not None:
            assert x.dtype == y.dtype, col
            np.testing.assert_array_equal(x, y, err_msg=col)


SUBSETS = [s for k in range(len(OPTIONAL) + 1) for s in itertools.combinations(OPTIONAL, k)]


@pytest.mark.parametrize("suffix", [".npz", ".csv", ".tsv"])
def test_every_written_file_reads_back_equal(tmp_path, suffix):
    full = _full_table()
    for cols in SUBSETS:
        kept = {c: getattr(full, c) for c in cols}
        t = RankTable(optimistic=full.optimistic, pessimistic=full.pessimistic, **kept)
        path = t.save(tmp_path / f"t{len(cols)}{suffix}")
        _assert_equal(t, RankTable.load(path))
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # no leftovers of the atomic write


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".npz"])
def test_cli_reads_a_saved_table_without_sides(tmp_path, suffix):
    path = RankTable.from_ranks([1, 2, 4], num_candidates=[5, 5, 5]).save(tmp_path / f"t{suffix}")
    res = CliRunner().invoke(main, ["metrics", str(path), "-m", "mrr"])
    assert res.exit_code == 0, res.output
    assert float(res.output.split()[-1]) == pytest.approx(np.mean([1, 1 / 2, 1 / 4]))


def test_saved_file_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        path = RankTable.from_ranks([1]).save(tmp_path / "t.tsv")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640


def test_save_into_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidInputError, match="cannot write rank file"):
        RankTable.from_ranks([1]).save(tmp_path / "missing" / "t.tsv")


PLAIN = b"rank\tnum_candidates\tside\n1\t10\thead\n4\t10\ttail\n"


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + PLAIN,  # UTF-8 byte-order mark (Excel, Notepad)
        PLAIN.replace(b"\n", b"\r\n"),  # Windows line endings
        PLAIN.replace(b"\n", b"\r"),  # classic Mac line endings
        b'"rank","num_candidates","side"\r\n"1","10","head"\n"4",10,"tail"\n',  # CSV quoting
        b"\xef\xbb\xbfrank;candidates;side\n1;10;head\n4.0;10;tail\n",
        b"# comment\n\nranks  candidates side\n1 10 head\n\n4 10 tail\n",
        b'rank num_candidates side\n"1" 10 "head"\n4 "10" tail\n',
    ],
)
def test_variants_read_as_the_plain_file(data):
    _assert_equal(parse_rank_bytes(PLAIN), parse_rank_bytes(data))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"rank\trank\n1\t2\n", r"column 'rank' appears twice"),
        (b"weight,rank,weights\n1,1,2\n", r"column 'weight' appears twice in the header \('weight' and 'weights'\)"),
        (b"Rank,ranks\n1,1\n", r"column 'rank' appears twice"),
        (b"rank,optimistic\n1,1\n", r"both 'rank' and 'optimistic'/'pessimistic'"),
        (b"pessimistic\n1\n", r"needs an 'optimistic'"),
        (b"optimistic,pessimistic,\n1,1,\n", r"unknown column\(s\) \[''\]"),
        (b"rank\n1\n\xff2\n", r"<f>, line 3, column 1: byte 0xff is not UTF-8"),
        (b"\xff\xfer\x00a\x00", r"UTF-16"),
        (b"rank,side\n1,middle\n", r"line 2: unknown side 'middle'"),
        (b"rank,num_candidates\n1,9007199254740993.0\n", r"line 2: column 'num_candidates' is too large to be exact"),
        (b"rank\n2.5\n", r"line 2: column 'rank' is not a whole number: '2.5'"),
        (b"rank\n99999999999999999999\n", r"line 2: column 'rank' is out of the 64-bit integer range"),
        (b"rank,relation\n1,0.5\n", r"line 2: column 'relation' is not a whole number"),
        (b"rank,weight\n1,nan\n", r"NaN or infinite"),
        (b'rank,side\n1,"head\n', r"line 2: malformed CSV"),
        (b"rank\n", r"header but no rows"),
    ],
)
def test_malformed_rank_files_are_refused(data, match):
    with pytest.raises(InvalidInputError, match=match):
        parse_rank_bytes(data, source="<f>")


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "r.csv"
    path.write_bytes(b"rank\n1\n\xc3\n")
    with pytest.raises(InvalidInputError, match=rf"{path}, line 3"):
        read_rank_file(path)
    with pytest.raises(InvalidInputError, match="cannot read rank file"):
        read_rank_file(tmp_path)


def test_large_integers_stay_exact_in_text_files(tmp_path):
    n = 2**53 + 1  # float64 would read this as 2**53
    t = parse_rank_bytes(f"rank,num_candidates,triple_index\n{n},{n},{n}\n".encode())
    assert int(t.optimistic[0]) == int(t.num_candidates[0]) == int(t.triple_index[0]) == n


def test_npz_refuses_unknown_arrays_and_truncation(tmp_path):
    np.savez(tmp_path / "a.npz", optimistic=[1, 2], ranks=[1, 2])
    with pytest.raises(InvalidInputError, match=r"unknown array\(s\) \['ranks'\]"):
        RankTable.load(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", optimistic=[1, 2], relation=[0.5, 1.7])
    with pytest.raises(InvalidInputError, match="relation must hold whole numbers"):
        RankTable.load(tmp_path / "b.npz")


def test_save_onto_a_directory_is_a_clear_error(tmp_path):
    (tmp_path / "t.tsv").mkdir()
    with pytest.raises(InvalidInputError, match="cannot write rank file"):
        RankTable.from_ranks([1]).save(tmp_path / "t.tsv")
    assert [p.name for p in tmp_path.iterdir()] == ["t.tsv"]  # the temporary file is gone


def test_nul_byte_in_a_rank_file_is_refused():
    with pytest.raises(InvalidInputError, match=r"<f>, line 2: a NUL byte"):
        parse_rank_bytes(b"rank\n1\x00\n", source="<f>")


def test_columns_are_keyword_only():
    """RankTable([1, 0, 1]) once took the ranks as the side column and built a table without ranks."""
    with pytest.raises(TypeError, match="positional"):
        RankTable([1, 0, 1])
