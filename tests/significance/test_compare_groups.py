"""Paired comparisons per group (compare_groups, kgeval.compare(by=...)) against compare on tables sliced by
hand, with one Holm correction over the rows of all groups computed here."""

from __future__ import annotations

import numpy as np
import pytest

import kgeval
from kgeval import RankTable, Results
from kgeval.breakdowns import GroupingData
from kgeval.errors import InvalidInputError
from kgeval.significance.align import TaskMismatchError
from kgeval.significance.compare import compare
from kgeval.significance.compare_groups import compare_groups, verdicts

#: relation 0 is 1-N, 1 is N-1, 2 is N-N (as in tests/breakdowns/test_statistics.py)
TRAIN = np.array([[0, 0, t] for t in range(1, 5)] + [[h, 1, 9] for h in range(1, 5)]
                 + [[h, 2, t] for h in range(3) for t in range(3, 6)])
CATEGORY = {0: "1-N", 1: "N-1", 2: "N-N"}


def _pair(seed=0, n=60):
    """A and B on the same tasks; A much better on relation 1 only; B's rows in another order."""
    rng = np.random.default_rng(seed)
    rel = np.tile(rng.integers(0, 3, n), 2)
    c = np.full(2 * n, 40)
    rb = rng.integers(1, 41, 2 * n)
    ra = np.where(rel == 1, np.maximum(1, rb // 8), np.clip(rb + rng.integers(-3, 4, 2 * n), 1, 40))
    cols = dict(num_candidates=c, side=np.repeat([0, 1], n), relation=rel, triple_index=np.tile(np.arange(n), 2))
    a = RankTable.from_ranks(ra, **cols)
    order = rng.permutation(2 * n)
    b = RankTable.from_ranks(rb[order], **{k: v[order] for k, v in cols.items()})
    return a, b


def _holm(p):
    p = np.asarray(p, float)
    order = np.argsort(p)
    out, running = np.empty_like(p), 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (len(p) - i) * p[j]))
        out[j] = running
    return out


def test_each_group_is_compare_on_the_tables_sliced_by_hand():
    a, b = _pair()
    got = compare_groups(("A", Results(a)), ("B", Results(b)), by="category", data=GroupingData(counted=TRAIN),
                         metrics=["mrr", "hits@10"], num_resamples=500, seed=3)
    assert list(got["group"].unique()) == ["1-N", "N-1", "N-N"]
    expected = []
    for rel, group in CATEGORY.items():
        sub_a, sub_b = a.subset(a.relation == rel), b.subset(b.relation == rel)
        rows = compare(("A", sub_a), ("B", sub_b), metrics=["mrr", "hits@10"], num_resamples=500, seed=3,
                       correction=None)
        expected += [{"group": group, **r} for r in rows.to_dict("records")]
    got_rows = got.to_dict("records")
    assert len(got_rows) == len(expected)
    for g, e in zip(got_rows, expected):
        for col in ("group", "metric", "value_a", "value_b", "difference", "ci_low", "ci_high", "p_value",
                    "effect_size", "num_units"):
            assert g[col] == pytest.approx(e[col], nan_ok=True) if isinstance(e[col], float) else g[col] == e[col], col
        # the value of a group is the metric on its tasks, by hand
        if g["metric"] == "mrr":
            rel = next(r for r, name in CATEGORY.items() if name == g["group"])
            mask = a.relation == rel
            assert g["value_a"] == pytest.approx(np.mean(1 / a.optimistic[mask]))
    assert got["p_corrected"].tolist() == pytest.approx(_holm([e["p_value"] for e in expected]).tolist())
    text = verdicts(got)
    assert text[0].startswith("mrr: A beats B on N-1 (p = ") and "no significant difference on 1-N" in text[0]


def test_kgeval_compare_by_names_groups_and_refuses_what_it_cannot_use():
    a, b = _pair(seed=1)
    table = kgeval.compare(a, b, by={"first": [0, 1]}, metrics=["mrr"], num_resamples=200, seed=0)
    assert list(table["group"]) == ["first", "other"]
    assert table.attrs["rule"].startswith("named relation groups")
    with pytest.raises(InvalidInputError, match="pass by="):
        kgeval.compare(a, b, train_triples=TRAIN, metrics=["mrr"], num_resamples=200)
    with pytest.raises(InvalidInputError, match="unknown option"):
        kgeval.compare(a, b, by="category", train_tripels=TRAIN, num_resamples=200)
    with pytest.raises(InvalidInputError, match="train_triples"):
        kgeval.compare(a, b, by="category", num_resamples=200)
    other = RankTable.from_ranks(b.optimistic, num_candidates=b.num_candidates, side=b.side,
                                 relation=(b.relation + 1) % 3, triple_index=b.triple_index)
    with pytest.raises(TaskMismatchError):
        kgeval.compare(a, other, by="category", train_triples=TRAIN, num_resamples=200)


def test_a_group_of_zero_weights_is_left_out_with_a_note():
    rel = np.repeat([0, 1], 20)
    w = np.where(rel == 1, 0.0, 1.0)
    a = RankTable.from_ranks(np.arange(1, 41) % 7 + 1, num_candidates=10, relation=rel, weights=w)
    b = RankTable.from_ranks(np.arange(1, 41) % 5 + 1, num_candidates=10, relation=rel, weights=w)
    rows = compare_groups(a, b, by="relation", data=GroupingData(), metrics=["mrr"], num_resamples=100, seed=0)
    assert list(rows["group"]) == ["0"] and rows.attrs["notes"] == ["every task has weight 0 in: 1 (not compared)"]
