"""Evaluation triples with an entity or relation unseen in training are counted on every interface
and dropped on request (issue 31, class 8). Counts are checked against plain Python sets, and on the
real FB15k-237 / WN18RR files against PyKEEN's own filtering where PyKEEN is installed."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

import kgeval
from kgeval import InvalidInputError
from kgeval.data import Dataset, get_dataset
from kgeval.data.unseen import count_unseen, unicode_twins
from kgeval.models import get_model
from kgeval.protocol import EvaluationProtocol, Unseen

SHARED = Path("/work/shared/datasets")


def _oracle(train_rows, rows):
    """(triples, distinct entities, distinct relations) unseen, with plain Python sets."""
    ents = {h for h, _, _ in train_rows} | {t for _, _, t in train_rows}
    rels = {r for _, r, _ in train_rows}
    bad = [x for x in rows if x[0] not in ents or x[2] not in ents or x[1] not in rels]
    return (len(bad), len(({x[0] for x in bad} | {x[2] for x in bad}) - ents), len({x[1] for x in bad} - rels))


def test_count_unseen_equals_the_set_oracle_on_random_graphs():
    rng = np.random.default_rng(0)
    for _ in range(50):
        train = rng.integers(0, [12, 4, 12], size=(rng.integers(0, 30), 3))
        test = rng.integers(0, [15, 5, 15], size=(rng.integers(1, 20), 3))
        u = count_unseen(train, test)
        assert (u.triples, u.entities, u.relations) == _oracle(train.tolist(), test.tolist())


def _model_and_data():
    train = np.array([[0, 0, 1], [1, 1, 2], [2, 0, 3], [3, 1, 0]])
    test = np.array([[0, 0, 1], [0, 2, 1], [5, 0, 1], [1, 1, 2], [6, 0, 7]])
    return get_model("distmult", 8, 3, dim=4, seed=0).eval(), train, test


def test_evaluate_counts_unseen_when_it_knows_training_and_drops_on_request():
    model, train, test = _model_and_data()
    kept = kgeval.evaluate(model, test, filter_triples={"train": train}, progress=False)
    assert kept.protocol["unseen"] == {"policy": "kept", "triples": 3, "entities": 3, "relations": 1,
                                       "reference": "train", "twins": None}
    assert "unseen: 3 evaluation triple(s)" in kept.evaluation_protocol.describe()
    dropped = kgeval.evaluate(model, test, filter_triples={"train": train}, progress=False, drop_unseen=True)
    assert dropped.protocol["unseen"]["policy"] == "dropped" and dropped.protocol["num_triples"] == 2
    # the same ranks as evaluating the two seen triples alone, with the same filter
    alone = kgeval.evaluate(model, test[[0, 3]], filter_triples={"train": train}, progress=False)
    assert dropped["mrr"] == alone["mrr"]
    # an explicit train_triples=, under another filter-set name
    explicit = kgeval.evaluate(model, test, filter_triples={"known": train}, train_triples=train, progress=False)
    assert explicit.protocol["unseen"]["triples"] == 3 and explicit.protocol["unseen"]["reference"] == "train_triples"
    # without training triples: nothing is claimed, and dropping is refused by name
    assert "unseen" not in kgeval.evaluate(model, test, filter_triples=train, progress=False).protocol
    with pytest.raises(InvalidInputError, match="drop_unseen=True needs the training triples"):
        kgeval.evaluate(model, test, progress=False, drop_unseen=True)
    with pytest.raises(InvalidInputError, match="drops all 2 evaluation triples"):
        kgeval.evaluate(model, test[[1, 2]], train_triples=train, progress=False, drop_unseen=True)
    with pytest.raises(InvalidInputError, match="drop_unseen must be True or False"):
        kgeval.evaluate(model, test, train_triples=train, progress=False, drop_unseen="yes")


def test_the_record_survives_a_results_round_trip(tmp_path):
    model, train, test = _model_and_data()
    res = kgeval.evaluate(model, test, filter_triples={"train": train}, progress=False)
    res.save_json(tmp_path / "r.json")
    back = kgeval.Results.load_json(tmp_path / "r.json") if hasattr(kgeval.Results, "load_json") else None
    d = json.loads((tmp_path / "r.json").read_text())["protocol"]["unseen"]
    assert d["triples"] == 3
    p = EvaluationProtocol.from_dict(res.protocol)
    assert p.unseen == Unseen("kept", 3, 3, 1, "train") and p.to_dict() == res.protocol
    if back is not None:
        assert back.protocol["unseen"] == res.protocol["unseen"]


def test_unicode_twins_are_kept_distinct_and_reported():
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    assert unicode_twins([nfc, nfd, "tea", "\u212a", "K"]) == [("K", "\u212a"), (nfd, nfc)]
    ds = Dataset.from_labeled_arrays([(nfd, "r", "a"), ("a", "r", "b")], [], [(nfc, "r", "b"), ("a", "r", "b")])
    assert ds.num_entities == 4  # not normalised: the NFC label is a new, unseen entity
    u = ds.unseen("test")
    assert (u.policy, u.triples, u.entities, u.twins) == ("kept", 1, 1, 1)
    assert "Unicode normal form" in u.describe()


def _pipeline_dir(tmp_path) -> Path:
    d = tmp_path / "toy"
    d.mkdir()
    train = [f"e{i}\tr{i % 2}\te{(i + 1) % 6}" for i in range(6)]
    (d / "train.txt").write_text("\n".join(train) + "\n")
    (d / "valid.txt").write_text("e0\tr0\te1\n")
    (d / "test.txt").write_text("e1\tr1\te2\nnew\tr0\te1\ne2\tr9\te3\ne3\tr1\te4\n")
    return d


@pytest.mark.parametrize("drop", [False, True])
def test_pipeline_reports_and_honours_drop_unseen(tmp_path, drop):
    res = kgeval.pipeline(dataset=str(_pipeline_dir(tmp_path)), model="distmult", epochs=1, progress=False,
                          drop_unseen=drop, model_kwargs={"dim": 4})
    u = res.results.protocol["unseen"]
    assert (u["policy"], u["triples"], u["entities"], u["relations"]) == ("dropped" if drop else "kept", 2, 1, 1)
    assert res.results.protocol["num_triples"] == (2 if drop else 4)
    assert res.config.drop_unseen is drop


def test_cli_pipeline_and_evaluate_flags(tmp_path):
    from click.testing import CliRunner

    from kgeval.cli import main

    data = str(_pipeline_dir(tmp_path))
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["pipeline", "-d", data, "-m", "distmult", "--epochs", "1", "--dim", "4",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "unseen: 2 evaluation triple(s) with an entity or relation unseen in training (1 entities, 1 relations): " \
           "kept" in r.output
    r = CliRunner().invoke(main, ["evaluate", "--model-file", str(out), "--drop-unseen", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["protocol"]["unseen"]["policy"] == "dropped" and doc["protocol"]["num_triples"] == 2
    dropped = tmp_path / "dropped"
    r = CliRunner().invoke(main, ["pipeline", "-d", data, "-m", "distmult", "--epochs", "1", "--dim", "4",
                                  "--drop-unseen", "-o", str(dropped)])
    assert r.exit_code == 0, r.output
    assert "dropped before the evaluation" in r.output
    r = CliRunner().invoke(main, ["evaluate", "--model-file", str(dropped), "--keep-unseen"])
    assert r.exit_code != 0 and "no unseen triples left to keep" in r.output


REAL = {"fb15k-237": ("FB15k-237", {"valid": (9, 8), "test": (28, 29)}),
        "wn18rr": ("WN18RR", {"valid": (210, 198), "test": (210, 209)})}


@pytest.mark.slow  # the benchmark datasets themselves (~3-7 s each)
@pytest.mark.skipif(not SHARED.is_dir(), reason="needs /work/shared/datasets")
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_datasets_against_a_set_count(name, monkeypatch):
    """FB15k-237 / WN18RR: the record equals a plain-Python count of the files (and the values
    measured once: 28 / 210 test triples)."""
    monkeypatch.setenv("KGEVAL_DATA", str(SHARED))
    folder, expected = REAL[name]
    rows = {s: [ln.rstrip("\n").split("\t") for ln in (SHARED / folder / f"{s}.txt").read_text("utf-8").splitlines()
                if ln.strip()] for s in ("train", "valid", "test")}
    for drop in (False, True):
        ds = get_dataset(name, drop_unseen=drop)
        for split in ("valid", "test"):
            u = ds.unseen(split)
            oracle = _oracle(rows["train"], rows[split])
            assert (u.triples, u.entities, u.relations) == oracle
            assert (u.triples, u.entities) == expected[split]
            assert u.policy == ("dropped" if drop else "kept") and u.twins == 0
            if drop:
                assert len(ds.split(split)) == len(rows[split]) - oracle[0]


@pytest.mark.slow  # the benchmark datasets themselves
@pytest.mark.skipif(not SHARED.is_dir(), reason="needs /work/shared/datasets")
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_datasets_drop_what_pykeen_drops(name):
    """PyKEEN maps the test split with the training vocabulary and drops the same triples."""
    pytest.importorskip("pykeen")
    from pykeen.triples import TriplesFactory

    folder = SHARED / REAL[name][0]
    train = TriplesFactory.from_path(folder / "train.txt")
    test = TriplesFactory.from_path(folder / "test.txt", entity_to_id=train.entity_to_id,
                                    relation_to_id=train.relation_to_id)
    raw = sum(1 for ln in (folder / "test.txt").read_text("utf-8").splitlines() if ln.strip())
    assert raw - test.num_triples == REAL[name][1]["test"][0]
