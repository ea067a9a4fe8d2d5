"""Groups of tasks (kgeval.breakdowns) against brute-force counts: relation categories from the raw dataset
files, entity degrees and quantile buckets by loops, and every task's group by its own triple."""

from __future__ import annotations

import itertools
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from kgeval import RankTable
from kgeval.breakdowns import (CATEGORIES, OTHER, UNSEEN, GroupingData, degree_buckets, entity_degrees, group_tasks,
                               grouping_data, relation_categories)
from kgeval.data import get_dataset
from kgeval.errors import InvalidInputError, UnknownNameError

SHARED = Path("/work/shared/datasets")


def raw_triples(path) -> list[tuple[str, str, str]]:
    """The labelled triples of a raw file, read with nothing but str.split."""
    text = path.read_text(encoding="utf-8")
    return [tuple(line.split("\t")) for line in text.splitlines() if line.strip()]


def brute_categories(triples, threshold=1.5) -> dict[str, str]:
    """{relation: category} by sets of Python tuples: tph = mean #distinct tails per (h, r), hpt likewise."""
    tails, heads = {}, {}
    for h, r, t in set(triples):
        tails.setdefault(r, {}).setdefault(h, set()).add(t)
        heads.setdefault(r, {}).setdefault(t, set()).add(h)
    out = {}
    for r in tails:
        tph = sum(len(s) for s in tails[r].values()) / len(tails[r])
        hpt = sum(len(s) for s in heads[r].values()) / len(heads[r])
        out[r] = ("1" if hpt < threshold else "N") + "-" + ("1" if tph < threshold else "N")
    return out


def check_against_files(ds, files: list[Path], threshold=1.5, splits=None):
    expected = brute_categories([t for f in files for t in raw_triples(f)], threshold)
    data = grouping_data(dataset=ds, splits=splits, threshold=threshold)
    cats = relation_categories(data.counted, num_relations=ds.num_relations, threshold=threshold)
    got = {label: str(cats.categories[i]) for i, label in enumerate(ds.relation_labels)}
    assert {r: c for r, c in got.items() if c != UNSEEN} == expected
    assert all(r not in expected for r, c in got.items() if c == UNSEEN)
    return got


@pytest.mark.parametrize("name", ["nations", "umls", "kinships"])
def test_categories_match_a_brute_force_count_of_the_shipped_files(name):
    root = resources.files("kgeval.data").joinpath("builtin", name)
    ds = get_dataset(name)
    got = check_against_files(ds, [root / "train.txt"])
    assert set(got.values()) <= set(CATEGORIES) | {UNSEEN}
    # the threshold and the splits are options: counted on training and validation, at threshold 3
    check_against_files(ds, [root / "train.txt", root / "valid.txt"], threshold=3.0, splits=("train", "valid"))


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "FB15k-237" / "train.txt").is_file(), reason="FB15k-237 is not in /work/shared")
def test_categories_of_fb15k237_match_a_brute_force_count():
    ds = get_dataset("fb15k237", data_dir=SHARED)
    got = check_against_files(ds, [SHARED / "FB15k-237" / "train.txt"])
    counts = {c: list(got.values()).count(c) for c in CATEGORIES}
    assert sum(counts.values()) == 237 and all(counts[c] > 0 for c in CATEGORIES)
    # counted on all three splits: the 17 / 26 / 81 / 113 relations that papers' category tables report
    files = [SHARED / "FB15k-237" / f"{s}.txt" for s in ("train", "valid", "test")]
    got = check_against_files(ds, files, splits=("train", "valid", "test"))
    assert [list(got.values()).count(c) for c in CATEGORIES] == [17, 26, 81, 113]


def test_categories_of_random_graphs_with_duplicates_and_exact_threshold():
    rng = np.random.default_rng(0)
    for _ in range(20):
        triples = np.column_stack([rng.integers(0, 6, 60), rng.integers(0, 5, 60), rng.integers(0, 6, 60)])
        triples = np.concatenate([triples, triples[:10]])  # a triple twice counts once
        for threshold in (1.5, 2.0, 1.0 + 1e-9):
            cats = relation_categories(triples, num_relations=7, threshold=threshold)
            expected = brute_categories([tuple(map(int, t)) for t in triples], threshold)
            got = {r: str(cats.categories[r]) for r in range(7)}
            assert {r: c for r, c in got.items() if c != UNSEEN} == expected
            assert got[5] == got[6] == UNSEEN
    # a mean of exactly 1.5 is N (a side is 1 only *below* the threshold): 3 tails over 2 heads
    cats = relation_categories(np.array([[0, 0, 1], [0, 0, 2], [3, 0, 4]]))
    assert cats.tph[0] == 1.5 and cats.category_of(0) == "1-N"


def test_entity_degrees_by_loops():
    rng = np.random.default_rng(1)
    triples = np.column_stack([rng.integers(0, 8, 50), rng.integers(0, 3, 50), rng.integers(0, 8, 50)])
    triples[:5, 2] = triples[:5, 0]  # self-loops: one triple, counted once
    expected = [sum(1 for h, _, t in triples if e in (h, t)) for e in range(10)]
    assert entity_degrees(triples, 10).tolist() == expected


def test_quantile_buckets_by_the_counting_rule():
    rng = np.random.default_rng(2)
    for n, q in itertools.product((1, 7, 40, 101), (1, 2, 3, 4, 10)):
        d = rng.integers(0, 12, n)
        codes, labels = degree_buckets(d, q)
        # c_i: the smallest degree with at least i/q of the tasks at or below it (counted, not interpolated)
        cuts = sorted({min(x for x in range(13) if q * sum(d <= x) >= i * n) for i in range(1, q + 1)})
        for j, x in enumerate(d):
            b = next(k for k, c in enumerate(cuts) if x <= c)
            assert codes[j] == b
        assert len(labels) == len(cuts) and len(set(labels)) == len(labels)
        for k, label in enumerate(labels):
            members = d[codes == k]
            lo, hi = members.min(), members.max()
            assert label == (f"degree {lo}" if lo == hi else f"degree {lo}-{hi}")


def _table(rng, n, num_relations, *, sides=True):
    rel = rng.integers(0, num_relations, n)
    return RankTable.from_ranks(np.ones(2 * n, dtype=int), num_candidates=5, side=np.repeat([0, 1], n) if sides else None,
                                relation=np.tile(rel, 2), triple_index=np.tile(np.arange(n), 2)), rel


def test_every_task_is_in_the_group_of_its_own_triple():
    rng = np.random.default_rng(3)
    train = np.column_stack([rng.integers(0, 9, 80), rng.integers(0, 4, 80), rng.integers(0, 9, 80)])
    test = np.column_stack([rng.integers(0, 9, 30), rng.integers(0, 5, 30), rng.integers(0, 9, 30)])
    table = RankTable.from_ranks(np.ones(60, dtype=int), num_candidates=9, side=np.repeat([0, 1], 30),
                                 relation=np.tile(test[:, 1], 2), triple_index=np.tile(np.arange(30), 2))
    data = GroupingData(counted=train, evaluated=test, quantiles=3)
    cats = brute_categories([tuple(map(int, t)) for t in train])
    g = group_tasks(table, "category", data)
    for i in range(60):
        assert g.labels[g.codes[i]] == cats.get(int(table.relation[i]), UNSEEN)
    assert UNSEEN in g.labels if 4 in test[:, 1] else UNSEEN not in g.labels
    degree = {e: sum(1 for h, _, t in train if e in (h, t)) for e in range(9)}
    for by, answer in (("frequency", True), ("query_frequency", False)):
        g = group_tasks(table, by, data)
        for i in range(60):
            h, _, t = test[table.triple_index[i]]
            entity = (h if table.side[i] == 0 else t) if answer else (t if table.side[i] == 0 else h)
            lo, _, hi = g.labels[g.codes[i]].removeprefix("degree ").partition("-")
            assert int(lo) <= degree[int(entity)] <= int(hi or lo)
    g = group_tasks(table, "relation", GroupingData(relation_labels=("a", "b", "c", "d", "e")))
    assert [g.labels[c] for c in g.codes] == ["abcde"[r] for r in table.relation]
    g = group_tasks(table, {"x": ["a", 2], "y": "b"}, GroupingData(relation_labels=("a", "b", "c", "d", "e")))
    want = {0: "x", 2: "x", 1: "y"}
    assert [g.labels[c] for c in g.codes] == [want.get(int(r), OTHER) for r in table.relation]
    assert g.members["x"] == (0, 2) and set(g.members[OTHER]) == set(np.unique(test[:, 1])) - {0, 1, 2}


def test_bad_groupings_are_refused_by_name():
    rng = np.random.default_rng(4)
    table, _ = _table(rng, 10, 3)
    labels = GroupingData(relation_labels=("born_in", "lives_in", "works_for"))
    with pytest.raises(UnknownNameError, match="category"):
        group_tasks(table, "categroy")
    with pytest.raises(UnknownNameError, match="lives_in"):
        group_tasks(table, {"a": ["lives_inn"]}, labels)
    with pytest.raises(InvalidInputError, match="in two groups"):
        group_tasks(table, {"a": ["born_in"], "b": [0]}, labels)
    with pytest.raises(InvalidInputError, match="reserved"):
        group_tasks(table, {OTHER: [0]}, labels)
    with pytest.raises(InvalidInputError, match="out of range"):
        group_tasks(table, {"a": [7]}, labels)
    with pytest.raises(InvalidInputError, match="train_triples"):
        group_tasks(table, "category")
    with pytest.raises(InvalidInputError, match="eval_triples"):
        group_tasks(table, "frequency", GroupingData(counted=np.array([[0, 0, 1]])))
    wrong = np.column_stack([np.zeros(10, int), (table.relation[:10] + 1) % 3, np.ones(10, int)])
    with pytest.raises(InvalidInputError, match="not the evaluated split"):
        group_tasks(table, "frequency", GroupingData(counted=wrong, evaluated=wrong))
    no_side, _ = _table(rng, 10, 3, sides=False)
    ok = np.column_stack([np.zeros(10, int), no_side.relation[:10], np.ones(10, int)])
    with pytest.raises(InvalidInputError, match="side"):
        group_tasks(no_side, "frequency", GroupingData(counted=ok, evaluated=ok))
    with pytest.raises(InvalidInputError, match="relation"):
        group_tasks(RankTable.from_ranks([1, 2]), "relation")
    with pytest.raises(InvalidInputError, match="threshold"):
        grouping_data(train_triples=[[0, 0, 1]], threshold=0)
    with pytest.raises(InvalidInputError, match="dataset"):
        grouping_data(splits=("train",))
