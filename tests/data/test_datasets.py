"""Datasets: built-ins, directories, DataFrames, arrays, bad input, large benchmarks."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from kgeval.data import Dataset, dataset_available, dataset_names, get_dataset, map_triples
from kgeval.data.registry import DATASETS
from kgeval.errors import InvalidInputError, UnknownNameError

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"


@pytest.mark.parametrize("name", ["nations", "kinships", "umls"])
def test_builtin_sizes_match_published(name):
    ds = get_dataset(name)
    info = DATASETS[ds.name]
    assert (ds.num_entities, ds.num_relations) == (info.num_entities, info.num_relations)
    assert (len(ds.training), len(ds.validation), len(ds.testing)) == (
        info.num_training, info.num_validation, info.num_testing,
    )
    assert ds.hashes() == info.sha256
    for split in (ds.training, ds.validation, ds.testing):
        assert split.dtype == np.int64 and split.shape[1] == 3
        assert split[:, [0, 2]].max() < ds.num_entities and split[:, 1].max() < ds.num_relations


def test_ids_are_positions_in_sorted_labels():
    ds = get_dataset("nations")
    assert ds.entity_labels == sorted(ds.entity_labels)
    assert all(ds.entity_to_id[label] == i for i, label in enumerate(ds.entity_labels))
    assert ds.relation_labels == sorted(ds.relation_labels)
    # first training line of nations/train.txt
    h, r, t = ds.training[0]
    assert (ds.entity_labels[h], ds.relation_labels[r], ds.entity_labels[t]) == ("netherlands", "militaryalliance", "uk")


@pytest.mark.parametrize("spelling", ["Nations", "NATIONS", "na_tions", "nations"])
def test_names_case_and_separator_insensitive(spelling):
    assert get_dataset(spelling).name == "Nations"


def test_dataset_names_lists_all_registered():
    names = dataset_names()
    for n in ("nations", "kinships", "umls", "fb15k-237", "wn18rr", "wn18", "codex-s", "codex-m"):
        assert n in names


def test_unknown_name_suggests_closest():
    with pytest.raises(UnknownNameError, match="nations"):
        get_dataset("natoins")


def test_split_accessor():
    ds = get_dataset("nations")
    assert ds.split("test") is ds.testing and ds.split("validation") is ds.validation and ds.split("train") is ds.training
    with pytest.raises(InvalidInputError):
        ds.split("bogus")


def _write(path: Path, lines: list[str], gz: bool = False):
    data = "".join(line + "\n" for line in lines).encode()
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)


TRAIN = ["00012\tr1\t00345", "00345\tr2\t07", "07\tr1\t00012"]


def test_from_directory_gz_tsv_and_leading_zeros(tmp_path):
    _write(tmp_path / "train.txt.gz", TRAIN, gz=True)
    _write(tmp_path / "valid.tsv", ["00012\tr2\t07"])
    _write(tmp_path / "test.txt", ["07\tr2\t00345"])
    ds = Dataset.from_directory(tmp_path)
    assert ds.entity_labels == ["00012", "00345", "07"]  # strings, zeros kept, not 12/345/7
    assert ds.relation_labels == ["r1", "r2"]
    assert ds.training.tolist() == [[0, 0, 1], [1, 1, 2], [2, 0, 0]]
    assert ds.testing.tolist() == [[2, 1, 1]]
    # the hash is of the decompressed content, equal to hashing the plain file
    import hashlib

    assert ds.hashes()["training"] == hashlib.sha256("".join(l + "\n" for l in TRAIN).encode()).hexdigest()
    # loading by path through get_dataset works too
    assert get_dataset(str(tmp_path)).num_entities == 3


def test_malformed_line_reports_line_number(tmp_path):
    _write(tmp_path / "train.txt", TRAIN + ["only\ttwo"])
    _write(tmp_path / "valid.txt", TRAIN[:1])
    _write(tmp_path / "test.txt", TRAIN[:1])
    with pytest.raises(InvalidInputError, match=r"line 4.*got 2.*only\\ttwo"):
        Dataset.from_directory(tmp_path)


def test_missing_split_is_named(tmp_path):
    _write(tmp_path / "train.txt", TRAIN)
    _write(tmp_path / "test.txt", TRAIN)
    with pytest.raises(InvalidInputError, match="validation.*valid.txt"):
        Dataset.from_directory(tmp_path)


def test_missing_directory(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        get_dataset(str(tmp_path / "nope"))


def test_from_dataframes_and_arrays_agree():
    pd = pytest.importorskip("pandas")
    rows = [r.split("\t") for r in TRAIN]
    frames = [pd.DataFrame(rows[:2], columns=["head", "relation", "tail"]), pd.DataFrame(rows[2:]), None]
    a = Dataset.from_dataframes(*frames)
    b = Dataset.from_labeled_arrays(rows[:2], rows[2:])
    assert a.entity_labels == b.entity_labels == ["00012", "00345", "07"]
    assert np.array_equal(a.training, b.training) and np.array_equal(a.validation, b.validation)
    assert len(a.testing) == 0
    assert a.hashes() == b.hashes()


def test_from_dataframes_picks_label_columns_or_refuses():
    pd = pytest.importorskip("pandas")
    nations = get_dataset("nations")
    rows = nations.to_labels(nations.training)
    # PyKEEN's TriplesFactory.to_df layout: the first three columns are head_id, head_label, relation_id,
    # which gave 55 "entities" (the relation ids) and 14 "relations" (the head labels)
    ids = nations.training
    pykeen_like = pd.DataFrame({
        "head_id": ids[:, 0], "head_label": rows[:, 0], "relation_id": ids[:, 1],
        "relation_label": rows[:, 1], "tail_id": ids[:, 2], "tail_label": rows[:, 2]})
    ds = Dataset.from_dataframes(pykeen_like)
    assert (ds.num_entities, ds.num_relations) == (14, 55)
    np.testing.assert_array_equal(ds.training, nations.training)
    # a frame saved with its index and read back: the index column became the heads (1647 entities)
    indexed = pd.DataFrame(rows).reset_index()
    with pytest.raises(InvalidInputError, match=r"exactly 3 columns; got 4: \['index', '0', '1', '2'\]"):
        Dataset.from_dataframes(indexed)
    with pytest.raises(InvalidInputError, match="got 2"):
        Dataset.from_dataframes(pd.DataFrame(rows[:, :2]))


@pytest.mark.parametrize("columns", [["source", "target", "relation"], ["Tail", "Head", "Relation"],
                                     ["object", "subject", "predicate"]])
def test_from_dataframes_reads_named_columns_in_any_order(columns):
    pd = pytest.importorskip("pandas")
    rows = {"head": ["a", "b"], "relation": ["likes", "likes"], "tail": ["b", "c"]}
    role = {"source": "head", "target": "tail", "relation": "relation", "subject": "head", "object": "tail",
            "predicate": "relation"}
    frame = pd.DataFrame({c: rows[role.get(c, c.lower())] for c in columns})
    # networkx's edge list (source, target, relation) was read by position: 3 entities a, b, likes and
    # relations b, c
    ds = Dataset.from_dataframes(frame)
    assert ds.entity_labels == ["a", "b", "c"] and ds.relation_labels == ["likes"]
    assert ds.training.tolist() == [[0, 0, 1], [1, 0, 2]]


def test_from_labeled_arrays_rejects_bad_shape_and_empty_labels():
    with pytest.raises(InvalidInputError, match="shape"):
        Dataset.from_labeled_arrays([["a", "b"]])
    with pytest.raises(InvalidInputError, match="empty"):
        Dataset.from_labeled_arrays([["a", "", "c"]])


def test_drop_unseen_small():
    ds = Dataset.from_labeled_arrays(
        [["a", "r", "b"], ["b", "r", "c"]],
        [["a", "r", "z"], ["a", "q", "b"], ["a", "r", "c"]],
        [["y", "r", "z"], ["c", "r", "a"]],
        drop_unseen=True,
    )
    assert ds.entity_labels == ["a", "b", "c"] and ds.relation_labels == ["r"]
    assert len(ds.validation) == 1 and len(ds.testing) == 1
    s = ds.summary()
    assert s["dropped_unseen"]["validation"] == {"triples": 2, "entities": 1, "relations": 1}
    assert s["dropped_unseen"]["testing"] == {"triples": 1, "entities": 2, "relations": 0}
    full = Dataset.from_labeled_arrays([["a", "r", "b"]], None, [["y", "r", "z"]])
    assert full.num_entities == 4 and full.summary()["unseen_testing"] == {"triples": 1, "entities": 2, "relations": 0}


def test_map_triples_and_unknown_label():
    ds = get_dataset("nations")
    ids = map_triples(ds, [["netherlands", "militaryalliance", "uk"]])
    assert ids.tolist() == [ds.training[0].tolist()]
    with pytest.raises(InvalidInputError, match="atlantis"):
        map_triples(ds, [["atlantis", "militaryalliance", "uk"]])


def test_to_labels_checks_ids():
    ds = get_dataset("nations")
    last = ds.entity_labels[-1]
    # a valid id triple maps back to the labels it came from
    assert ds.to_labels(ds.testing[:2]).tolist() == [
        [ds.entity_labels[h], ds.relation_labels[r], ds.entity_labels[t]] for h, r, t in ds.testing[:2]]
    # -1 wrapped round to the last entity (ds.to_labels([[-1, 0, 0]]) gave its label), 1.7 was truncated to 1
    with pytest.raises(InvalidInputError, match=r"head id -1 of triple 0 .* out of range \[0, 14\)"):
        ds.to_labels([[-1, 0, 0]])
    assert last not in str(pytest.raises(InvalidInputError, ds.to_labels, [[0, 0, -1]]).value)
    with pytest.raises(InvalidInputError, match="integer ids, got dtype float64"):
        ds.to_labels([[1.7, 0, 2.2]])
    with pytest.raises(InvalidInputError, match=r"relation id 55 .* out of range \[0, 55\)"):
        ds.to_labels([[0, 55, 0]])
    assert ds.to_labels(np.empty((0, 3), dtype=np.int64)).shape == (0, 3)


def test_from_id_arrays_checks_range():
    ds = Dataset.from_id_arrays([[0, 0, 1]], [[1, 0, 0]], [[1, 0, 1]])
    assert ds.num_entities == 2 and ds.num_relations == 1
    with pytest.raises(InvalidInputError, match=r"tail id 5 of triple 0 .* out of range \[0, 3\)"):
        Dataset.from_id_arrays([[0, 0, 5]], num_entities=3)


def test_missing_large_dataset_says_where(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEVAL_DATA", str(tmp_path))
    assert not dataset_available("wn18rr")
    with pytest.raises(InvalidInputError) as exc:
        get_dataset("WN18RR")
    msg = str(exc.value)
    assert str(tmp_path / "WN18RR") in msg and "train.txt" in msg and "KGEVAL_DATA" in msg


def test_corrupt_large_dataset_hash_mismatch(tmp_path, monkeypatch):
    d = tmp_path / "CoDEx-S"
    d.mkdir()
    for stem in ("train", "valid", "test"):
        _write(d / f"{stem}.txt", TRAIN)
    monkeypatch.setenv("KGEVAL_DATA", f"{tmp_path / 'empty'}{os.pathsep}{tmp_path}")
    assert dataset_available("codex-s")
    with pytest.raises(InvalidInputError, match="sha256"):
        get_dataset("codex_s")


needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared benchmark datasets not present")


@needs_shared
@pytest.mark.parametrize("name", ["fb15k237", "WN18RR", "wn18", "codex-s", "codex-m"])
def test_large_datasets_published_sizes(name, monkeypatch):
    monkeypatch.setenv("KGEVAL_DATA", str(SHARED))
    ds = get_dataset(name)
    info = DATASETS[ds.name]
    assert (ds.num_entities, ds.num_relations, len(ds.training), len(ds.validation), len(ds.testing)) == (
        info.num_entities, info.num_relations, info.num_training, info.num_validation, info.num_testing,
    )


@needs_shared
def test_drop_unseen_counts_match_published(monkeypatch):
    monkeypatch.setenv("KGEVAL_DATA", str(SHARED))
    fb = get_dataset("fb15k-237", drop_unseen=True)
    assert fb.summary()["dropped_unseen"]["testing"] == {"triples": 28, "entities": 29, "relations": 0}
    assert len(fb.testing) == 20_466 - 28
    full = get_dataset("fb15k-237").summary()
    assert full["unseen_testing"]["triples"] == 28 and full["unseen_testing"]["entities"] == 29
    wn = get_dataset("wn18rr", drop_unseen=True)
    assert wn.summary()["dropped_unseen"]["testing"]["triples"] == 210
    assert wn.entity_labels[0].startswith("0")  # leading zeros preserved


def test_crlf_and_blank_lines_are_tolerated(tmp_path):
    (tmp_path / "train.txt").write_bytes(b"a\tr\tb\r\n\r\nb\tr\tc\r\n\n")
    (tmp_path / "valid.txt").write_bytes(b"a\tr\tc\n")
    (tmp_path / "test.txt").write_bytes(b"c\tr\ta")
    ds = Dataset.from_directory(tmp_path)
    assert ds.entity_labels == ["a", "b", "c"] and len(ds.training) == 2 and len(ds.testing) == 1
