"""Dataset diagnostics against an independent count: plain Python sets over the raw TSV lines of each split
(not kgeval's loader), on the shipped datasets, the shared benchmark graphs and hand-made graphs."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from kgeval.data import Dataset
from kgeval.data.diagnostics import diagnose
from kgeval.errors import InvalidInputError, UnknownNameError

BUILTIN = Path(__file__).resolve().parents[2] / "src" / "kgeval" / "data" / "builtin"
SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared benchmark datasets not present")


def _read(path: Path) -> set[tuple[str, str, str]]:
    return {tuple(line.split("\t")) for line in path.read_text().splitlines() if line}


def _raw(directory: Path) -> dict[str, set]:
    return {s: _read(directory / f"{f}.txt") for s, f in (("training", "train"), ("validation", "valid"),
                                                            ("test", "test"))}


def _expected_split(split: set, train: set) -> dict:
    """Every per-split count, by brute force over Python sets."""
    seen = {h for h, _, _ in train} | {t for _, _, t in train}
    train_relations = {r for _, r, _ in train}
    reverse_pairs = {(t, h) for h, _, t in train}  # (h, t) of a split triple whose reverse (t, ., h) is in train
    relations_by_pair: dict = {}
    for h, r, t in train:
        relations_by_pair.setdefault((h, t), set()).add(r)
    entities = {h for h, _, _ in split} | {t for _, _, t in split}
    return {
        "num_triples": len(split),
        "unseen_entities": len(entities - seen),
        "triples_with_unseen_entity": sum(h not in seen or t not in seen for h, _, t in split),
        "unseen_relations": len({r for _, r, _ in split} - train_relations),
        "triples_with_unseen_relation": sum(r not in train_relations for _, r, _ in split),
        "in_training": len(split & train),
        "reverse_in_training": sum((h, t) in reverse_pairs for h, _, t in split),
        "duplicate_in_training": sum(bool(relations_by_pair.get((h, t), set()) - {r}) for h, r, t in split),
    }


def _expected_pairs(triples: set, threshold: float) -> set[tuple[str, str, str]]:
    """(kind, relation, relation) found by comparing every pair of relations' (head, tail) sets."""
    sets: dict = {}
    for h, r, t in triples:
        sets.setdefault(r, set()).add((h, t))
    found = set()

    def jaccard(a, b):
        return len(a & b) / len(a | b)

    for r in sets:
        if jaccard(sets[r], {(t, h) for h, t in sets[r]}) >= threshold:
            found.add(("symmetric", r, r))
    for a, b in combinations(sorted(sets), 2):
        if jaccard(sets[a], sets[b]) >= threshold:
            found.add(("duplicate", a, b))
        if jaccard(sets[a], {(t, h) for h, t in sets[b]}) >= threshold:
            found.add(("inverse", a, b))
    return found


def _expected_cartesian(triples: set, threshold: float) -> set[str]:
    by_relation: dict = {}
    for h, r, t in triples:
        by_relation.setdefault(r, set()).add((h, t))
    out = set()
    for r, pairs in by_relation.items():
        heads, tails = {h for h, _ in pairs}, {t for _, t in pairs}
        if len(pairs) >= 2 and len(pairs) / (len(heads) * len(tails)) >= threshold:
            out.add(r)
    return out


def _check(d, raw: dict, threshold: float = 0.97, cartesian: float = 0.8, on: str = "all") -> None:
    for split in ("validation", "test"):
        got = {k: v for k, v in vars(d.splits[split]).items() if k != "split"}
        assert got == _expected_split(raw[split], raw["training"]), split
    graph = raw["training"] if on == "training" else raw["training"] | raw["validation"] | raw["test"]
    got_pairs = {(p.kind, *sorted((p.first_label, p.second_label))) for p in d.relation_pairs}
    assert got_pairs == {(k, *sorted((a, b))) for k, a, b in _expected_pairs(graph, threshold)}
    assert {c.label for c in d.cartesian} == _expected_cartesian(graph, cartesian)
    assert d.num_training == len(raw["training"])


@pytest.mark.parametrize("name", ["nations", "kinships", "umls"])
@pytest.mark.parametrize("on", ["all", "training"])
def test_shipped_datasets_match_a_count_on_the_raw_files(name, on):
    raw = _raw(BUILTIN / name)
    # lower thresholds than the defaults so that these small graphs have pairs and products to find
    d = diagnose(name, threshold=0.5, cartesian_threshold=0.6, relations_on=on)
    _check(d, raw, threshold=0.5, cartesian=0.6, on=on)
    assert d.relation_pairs or d.cartesian  # the check compared something


@needs_shared
@pytest.mark.slow
@pytest.mark.parametrize("name, directory", [("wn18rr", "WN18RR"), ("fb15k-237", "FB15k-237"), ("wn18", "WN18")])
def test_shared_benchmarks_match_a_count_on_the_raw_files(name, directory):
    raw = _raw(SHARED / directory)
    d = diagnose(name, data_dir=str(SHARED))
    _check(d, raw)
    test = d.splits["test"]
    if name == "wn18rr":  # its test split has entities unseen in training (the shared README: 209 in 210 triples)
        assert (test.unseen_entities, test.triples_with_unseen_entity) == (209, 210)
        assert not d.pairs("inverse")  # WN18RR removed WN18's inverse relations, kept the symmetric ones
        assert d.pairs("symmetric")
    elif name == "fb15k-237":  # FB15k's inverse relations removed; 29 unseen entities in 28 test triples
        assert (test.unseen_entities, test.triples_with_unseen_entity) == (29, 28)
        assert not d.pairs("inverse") and not d.pairs("duplicate") and test.duplicate_in_training == 0
    else:  # WN18 has its inverse pairs, and nearly every test triple's reverse is in training
        assert len(d.pairs("inverse")) >= 5 and test.reverse_in_training > 0.9 * test.num_triples


def _toy(train, valid, test) -> Dataset:
    return Dataset.from_labeled_arrays(np.array(train), np.array(valid), np.array(test), name="toy")


def test_each_finding_on_a_hand_made_graph():
    train = [("a", "parent", "b"), ("c", "parent", "d"), ("b", "child", "a"), ("d", "child", "c"),
             ("a", "likes", "b"), ("x", "knows", "y"), ("y", "knows", "x"), ("e", "in", "f")]
    valid = [("a", "knows", "b")]
    test = [("e", "parent", "f"),   # duplicate leakage: (e, in, f) in training
            ("f", "child", "e"),    # reverse leakage: (e, in, f) is its reverse
            ("a", "parent", "b"),   # in training; duplicate: (a, likes, b); reverse: (b, child, a)
            ("z", "parent", "a")]   # unseen entity z
    d = diagnose(_toy(train, valid, test), threshold=0.5)  # child ~ reversed parent: 3/4; knows ~ itself: 2/4
    t = d.splits["test"]
    assert (t.num_triples, t.unseen_entities, t.triples_with_unseen_entity) == (4, 1, 1)
    assert (t.in_training, t.reverse_in_training, t.duplicate_in_training) == (1, 2, 2)
    kinds = {(p.kind, p.first_label, p.second_label) for p in d.relation_pairs}
    # on all splits, (z, parent, a) has no child twin: J(child reversed, parent) = 3 / 4
    assert ("inverse", "child", "parent") in kinds and ("symmetric", "knows", "knows") in kinds
    text = str(d)
    assert "reverse leakage: 2 of 4 (50.0%)" in text
    assert "1 of 4 (25.0%) triples contain an entity unseen in training (1 entity in all)" in text
    data = json.loads(json.dumps(d.to_dict()))
    assert data["splits"]["test"]["duplicate_in_training"] == 2 and len(data["verdicts"]) == len(d.verdicts())


def test_cartesian_product_relation():
    train = [(h, "near", t) for h in "abc" for t in "xyz" if (h, t) != ("c", "z")] + [("a", "other", "x")]
    d = diagnose(_toy(train, [("a", "other", "y")], [("b", "other", "z")]), cartesian_threshold=0.8)
    assert [(c.label, c.num_triples, c.num_heads, c.num_tails) for c in d.cartesian] == [("near", 8, 3, 3)]
    assert abs(d.cartesian[0].ratio - 8 / 9) < 1e-12
    # "other" holds 3 pairs (a, x), (a, y), (b, z) of 2 x 3: 50%, below both thresholds
    assert not diagnose(_toy(train, [("a", "other", "y")], [("b", "other", "z")]), cartesian_threshold=0.9).cartesian


def test_bad_options_are_named():
    with pytest.raises(InvalidInputError, match="threshold must be a number in \\(0, 1\\]"):
        diagnose("nations", threshold=1.5)
    with pytest.raises(InvalidInputError, match="cartesian_threshold"):
        diagnose("nations", cartesian_threshold=0)
    with pytest.raises(UnknownNameError, match="relations_on"):
        diagnose("nations", relations_on="test")
    with pytest.raises(UnknownNameError, match="nope"):
        diagnose("nope")


def test_cli_table_and_json():
    from click.testing import CliRunner

    from kgeval.cli import main

    out = CliRunner().invoke(main, ["diagnose", "kinships", "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    raw = _raw(BUILTIN / "kinships")
    assert data["splits"]["test"]["reverse_in_training"] == _expected_split(raw["test"], raw["training"])[
        "reverse_in_training"]
    out = CliRunner().invoke(main, ["diagnose", "kinships"])
    assert out.exit_code == 0 and "findings:" in out.output and "test: reverse leakage" in out.output
    out = CliRunner().invoke(main, ["diagnose", "kinships", "--threshold", "2"])
    assert out.exit_code == 2 and "--threshold" in out.output
