"""Triple files are parsed without changing data: a byte-order mark, line endings and trailing
whitespace never become part of a label; anything ambiguous is a clear error naming file and line."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from kgeval.data import Dataset, canonical_split, get_dataset, map_triples
from kgeval.data.io import normalize_split, parse_triples
from kgeval.errors import InvalidInputError

TRAIN = b"a\tr1\tb\nb\tr2\tc\nc\tr1\ta\n"


def _dir(tmp_path, train: bytes, test: bytes = b"a\tr1\tc\n", name: str = "train.txt"):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / name).write_bytes(train)
    (tmp_path / "valid.txt").write_bytes(b"a\tr2\tb\n")
    (tmp_path / "test.txt").write_bytes(test)
    return tmp_path


def _same(a: Dataset, b: Dataset):
    assert a.entity_labels == b.entity_labels and a.relation_labels == b.relation_labels
    for split in ("training", "validation", "testing"):
        np.testing.assert_array_equal(getattr(a, split), getattr(b, split))


@pytest.mark.parametrize(
    "variant",
    [
        b"\xef\xbb\xbf" + TRAIN,  # UTF-8 byte-order mark: was part of the first label (4 entities, not 3)
        TRAIN.replace(b"\n", b"\r\n"),
        TRAIN.replace(b"\n", b"\r"),
        b"\n\n" + TRAIN.replace(b"\n", b"\n  \n") + b"\n\n",
        TRAIN.replace(b"\n", b" \t \n"),  # trailing whitespace, a trailing tab included
        TRAIN.rstrip(b"\n"),  # no final newline
    ],
)
def test_variants_parse_as_the_plain_file(tmp_path, variant):
    plain = Dataset.from_directory(_dir(tmp_path / "plain", TRAIN))
    other = Dataset.from_directory(_dir(tmp_path / "variant", variant))
    _same(plain, other)
    assert other.num_entities == 3 and "a" in other.entity_to_id


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"a\tr\tb\na\tr\n", r"<f>, line 2: expected 3 non-empty tab-separated fields.*got 2"),
        (b"a\tr\tb\tc\n", r"line 1: .*got 4"),
        (b"\ta\tr\tb\n", r"line 1: .*got 4"),  # a leading tab is an empty head, never a shifted row
        (b"a\t \tb\n", r"line 1: expected 3 non-empty"),
        (b"a r b\n", r"got 1"),
        (b"a\tr\tb\n\xe9\tr\tb\n", r"<f>, line 2, column 1: byte 0xe9 is not UTF-8"),
        (b"\xff\xfea\x00", r"UTF-16"),
        (b"a\tr\tb\n\xef\xbb\xbfc\tr\tb\n", r"line 2: a byte-order mark \(U\+FEFF\) inside the file"),
    ],
)
def test_malformed_triple_files_are_refused(data, match):
    with pytest.raises(InvalidInputError, match=match):
        parse_triples(data, source="<f>")


def test_empty_training_file_is_refused_but_empty_test_is_an_empty_split(tmp_path):
    with pytest.raises(InvalidInputError, match=r"train.txt: no triples"):
        Dataset.from_directory(_dir(tmp_path, b"\n \n"))
    ds = Dataset.from_directory(_dir(tmp_path, TRAIN, test=b""))
    assert ds.testing.shape == (0, 3)


def test_corrupt_gzip_is_a_clear_error(tmp_path):
    data = gzip.compress(TRAIN)
    _dir(tmp_path, data[:12] + b"\x00" * 8 + data[20:], name="train.txt.gz")
    with pytest.raises(InvalidInputError, match="cannot read triple file"):
        Dataset.from_directory(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"training": [[0.5, 0, 1]]}, "integer ids"),
        ({"training": [[0, 0, 1]], "num_entities": True}, "num_entities must be a non-negative integer"),
        ({"training": [[0, 0, 1]], "num_relations": 1.5}, "num_relations must be a non-negative integer"),
        ({"training": np.array([[2**63, 0, 1]], dtype=np.uint64)}, "too large"),
        ({"training": [[0, 0, -1]]}, r"tail id -1 of triple 0"),
        # one label string per id: these were a bare MemoryError (after minutes), or an exhausted machine
        ({"training": [[0, 0, 2**62]]}, r"4611686018427387905 entities \(ids must be dense"),
        ({"training": [[0, 2**40, 1]]}, r"1099511627777 relations"),
        ({"training": [[0, 0, 1]], "num_entities": 2**40}, r"1099511627776 entities"),
    ],
)
def test_from_id_arrays_refuses_silent_conversion(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        Dataset.from_id_arrays(**kwargs)


def test_reference_is_set_at_construction(tmp_path):
    assert get_dataset("nations").reference == "Nations"
    ds = Dataset.from_directory(_dir(tmp_path, TRAIN))
    assert ds.reference == str(tmp_path.absolute())
    assert get_dataset(ds.reference).hashes() == ds.hashes()
    assert Dataset.from_labeled_arrays([["a", "r", "b"]]).reference is None
    assert Dataset.from_labeled_arrays([["a", "r", "b"]], reference="x").reference == "x"


@pytest.mark.parametrize(
    ("spellings", "canonical", "attribute"),
    [
        (["train", "training", " Train "], "train", "training"),
        (["valid", "validation", "dev", "val", "VALID"], "valid", "validation"),
        (["test", "testing", "Test"], "test", "testing"),
    ],
)
def test_one_split_vocabulary(spellings, canonical, attribute):
    ds = get_dataset("nations")
    for s in spellings:
        assert canonical_split(s) == canonical and normalize_split(s) == attribute
        assert ds.split(s) is getattr(ds, attribute)


@pytest.mark.parametrize("bad", ["tests", "", None, 3])
def test_unknown_split_is_named(bad):
    with pytest.raises(InvalidInputError, match="unknown split"):
        canonical_split(bad)


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([[b"a", "r", "b"]], r"labels must be text, got bytes b'a'"),  # str(b"a") would be the label "b'a'"
        ([["a\tb", "r", "c"]], r"triple 0 has a label with '\\t'"),
        ([["a", "r", "c"], ["a", "r\nx", "c"]], r"triple 1 has a label with '\\n'"),
        ([["\udc80", "r", "c"]], r"a label with '\\udc80'"),  # hashes() could not encode it
        ([["a", "r", "c\x00"]], r"a label with '\\x00'"),
    ],
)
def test_in_memory_labels_a_triple_file_cannot_hold_are_refused(rows, match):
    with pytest.raises(InvalidInputError, match=match):
        Dataset.from_labeled_arrays(rows)


def test_duplicate_labels_in_the_constructor_are_refused():
    with pytest.raises(InvalidInputError, match="entity label 'a' appears twice"):
        Dataset(name="x", training=[[0, 0, 1]], validation=[], testing=[],
                entity_labels=["a", "b", "a"], relation_labels=["r"])
    with pytest.raises(InvalidInputError, match="relation label 'r' appears twice"):
        Dataset(name="x", training=[[0, 0, 1]], validation=[], testing=[],
                entity_labels=["a", "b"], relation_labels=["r", "r"])


def test_two_different_files_for_one_split_are_refused(tmp_path):
    _dir(tmp_path, TRAIN)
    (tmp_path / "train.txt.gz").write_bytes(gzip.compress(TRAIN))  # same triples: fine
    assert Dataset.from_directory(tmp_path).num_entities == 3
    (tmp_path / "training.tsv").write_bytes(TRAIN + b"c\tr2\td\n")  # different: which one did the user mean?
    with pytest.raises(InvalidInputError, match="train.txt and training.tsv both hold the train split but differ"):
        Dataset.from_directory(tmp_path)


def test_a_file_given_as_dataset_directory_is_named_as_such(tmp_path):
    (tmp_path / "train.txt").write_bytes(TRAIN)
    with pytest.raises(InvalidInputError, match="is a file, not a directory"):
        get_dataset(str(tmp_path / "train.txt"))


@pytest.mark.parametrize("data", [b"a\tr\tb\nc\x00\tr\tb\n", "a\tr\tb\nc\tr\tb\n".encode("utf-16-le")])
def test_nul_bytes_are_refused(data):  # binary files and UTF-16 without a byte-order mark decode as "UTF-8"
    with pytest.raises(InvalidInputError, match=r"<f>, line \d: a NUL byte"):
        parse_triples(data, source="<f>")


def test_arrays_read_labels_like_files(tmp_path):
    """Surrounding whitespace is no part of a label in a file, nor in an array: the same labelled triples
    give the same dataset either way (an array's "a " was a fourth entity, and with drop_unseen=True the
    test triple was dropped as unseen)."""
    train = [("a", "r1", "b"), ("b", "r2", "c"), ("c", "r1", "a")]
    test = [("a ", " r1", "c\u00a0")]
    lines = lambda rows: "".join("\t".join(r) + "\n" for r in rows).encode("utf-8")  # noqa: E731
    from_file = Dataset.from_directory(_dir(tmp_path, lines(train), test=lines(test)))
    from_arrays = Dataset.from_labeled_arrays(train, [("a", "r2", "b")], test)
    _same(from_file, from_arrays)
    assert from_arrays.num_entities == 3 and from_arrays.testing.tolist() == [[0, 0, 2]]
    kept = Dataset.from_labeled_arrays(train, None, test, drop_unseen=True)
    assert kept.testing.tolist() == [[0, 0, 2]] and kept.dropped["testing"]["triples"] == 0
    np.testing.assert_array_equal(map_triples(from_file, [(" b", "r2 ", "\tc")]), [[1, 1, 2]])


@pytest.mark.parametrize("missing", [float("nan"), np.float32("nan"), pd.NA, pd.NaT])
def test_missing_values_in_label_arrays_are_refused(missing):
    # str(nan) made an entity "nan" (str(pd.NA) "<NA>"): from_labeled_arrays([[a, r, nan], [a, r, b]])
    # had 3 entities; a DataFrame with the same gap was already refused
    rows = [["a", "r", "b"], ["a", "r", missing]]
    with pytest.raises(InvalidInputError, match=r"training: triple 1 has a missing label"):
        Dataset.from_labeled_arrays(rows)
    with pytest.raises(InvalidInputError, match=r"triples: triple 0 has a missing label"):
        map_triples(Dataset.from_labeled_arrays(rows[:1]), rows[1:])
    assert Dataset.from_labeled_arrays([["a", "r", 7]]).entity_labels == ["7", "a"]  # numbers are labels


@pytest.mark.parametrize("header", [b"head\trelation\ttail", b"\xef\xbb\xbf\nHead\tRelation\tTail \r", b"subject\tpredicate\tobject",
                                    b"head_label\trelation_label\ttail_label"])
def test_a_header_line_is_refused(tmp_path, header):
    # it was read as a triple: the Nations-sized toy file below had 5 entities and 3 relations, not 3 and 2
    with pytest.raises(InvalidInputError, match=r"train.txt, line \d: .* is a column header"):
        Dataset.from_directory(_dir(tmp_path, header + b"\n" + TRAIN))
    # the words are labels like any other past the first line
    ds = Dataset.from_directory(_dir(tmp_path, TRAIN + b"head\trelation\ttail\n"))
    assert ds.num_entities == 5 and "relation" in ds.relation_to_id


def test_a_header_row_in_arrays_and_frames_is_refused():
    # pd.read_csv(..., header=None) or np.loadtxt(dtype=str) of a file with a header: it was triple 0
    rows = [["head", "relation", "tail"], ["a", "r1", "b"]]
    with pytest.raises(InvalidInputError, match=r"training: triple 0 .* is a column header"):
        Dataset.from_labeled_arrays(rows)
    with pytest.raises(InvalidInputError, match=r"testing: triple 0 .* is a column header"):
        Dataset.from_dataframes(pd.DataFrame(rows[1:]), None, pd.DataFrame(rows))
    assert Dataset.from_labeled_arrays(rows[::-1]).num_entities == 4  # not first: labels like any other


def test_an_empty_dataset_name_is_refused_and_dot_is_named(tmp_path, monkeypatch):
    # Path("") is ".": get_dataset("") loaded the working directory, as a dataset called ""
    _dir(tmp_path / "mykg", TRAIN)
    monkeypatch.chdir(tmp_path / "mykg")
    for empty in ("", "  "):
        with pytest.raises(InvalidInputError, match="dataset name is empty"):
            get_dataset(empty)
    assert get_dataset(".").name == "mykg"
    (tmp_path / "mykg" / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "mykg" / "sub")
    assert get_dataset("..").name == "mykg"
