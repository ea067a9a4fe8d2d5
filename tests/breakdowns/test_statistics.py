"""Every number of a breakdown against plain numpy on the group's tasks, sliced by hand: the value, the null
expectation and variance over the group's own candidate counts, the adjusted index, the z-score, the exact
Poisson-binomial p-value of hits@k, a Monte Carlo of the null, and the interval of the hand-made sub-table."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import RankTable, Results
from kgeval.data import get_dataset
from kgeval.significance.bootstrap import confidence_intervals

#: training triples making relation 0 1-N (one head, many tails), 1 N-1 and 2 N-N
TRAIN = np.array([[0, 0, t] for t in range(1, 5)] + [[h, 1, 9] for h in range(1, 5)]
                 + [[h, 2, t] for h in range(3) for t in range(3, 6)])
CATEGORY = {0: "1-N", 1: "N-1", 2: "N-N"}


def _table(seed=0, n=90):
    """Head and tail tasks of n triples over relations 0-2, candidate counts of very different sizes per
    relation, ties, relation 2 ranked at random (near chance)."""
    rng = np.random.default_rng(seed)
    rel = rng.integers(0, 3, n)
    c = np.where(rel == 0, rng.integers(3, 12, n), np.where(rel == 1, rng.integers(40, 90, n), 500))
    c = np.tile(c, 2)
    rel2 = np.tile(rel, 2)
    opt = np.where(rel2 == 2, rng.integers(1, 501, 2 * n), np.minimum(rng.geometric(0.4, 2 * n), c))
    pes = np.minimum(opt + rng.integers(0, 3, 2 * n) * (rng.random(2 * n) < 0.3), c)
    return RankTable.from_ranks(opt, pes, num_candidates=c, side=np.repeat([0, 1], n), relation=rel2,
                                triple_index=np.tile(np.arange(n), 2))


def _by_hand(r, c, k=None):
    """(value, E, Var) of MRR (k None) or hits@k on realistic ranks r with candidate counts c."""
    c = c.astype(float)
    if k is None:
        h1 = np.array([np.sum(1 / np.arange(1, x + 1)) for x in c])
        h2 = np.array([np.sum(1 / np.arange(1, x + 1) ** 2) for x in c])
        per_mean, per_var = h1 / c, h2 / c - (h1 / c) ** 2
        value = np.mean(1 / r)
    else:
        per_mean = np.minimum(k, c) / c
        per_var = per_mean * (1 - per_mean)
        value = np.mean(r <= k)
    return value, per_mean.mean(), per_var.sum() / r.size ** 2


def _poisson_binomial_tail(p, s):
    """P(S >= s) for S a sum of independent Bernoulli(p_i), by the convolution recursion."""
    dist = np.array([1.0])
    for q in p:
        dist = np.convolve(dist, [1 - q, q])
    return dist[s:].sum()


def test_every_group_value_against_the_hand_sliced_sub_table():
    table = _table()
    b = Results(table).breakdown("category", train_triples=TRAIN, metrics=["mrr", "hits@10"], confidence=None)
    assert b.groups == ["1-N", "N-1", "N-N"]
    whole = {}
    for group_rel, group in CATEGORY.items():
        for side, code in (("head", [0]), ("tail", [1]), ("both", [0, 1])):
            sel = (table.relation == group_rel) & np.isin(table.side, code)  # sliced by hand, not by kgeval
            r = (table.optimistic[sel] + table.pessimistic[sel]) / 2
            c = table.num_candidates[sel]
            for name, k in (("mrr", None), ("hits@10", 10)):
                value, mean, var = _by_hand(r, c, k)
                row = b.row(group, name, side)
                opt = 1.0
                assert row["num_tasks"] == sel.sum()
                assert row["num_triples"] == np.unique(table.triple_index[sel]).size
                assert row["value"] == pytest.approx(value, rel=1e-12)
                assert row["expected"] == pytest.approx(mean, rel=1e-10)
                assert row["adjusted"] == pytest.approx((value - mean) / (opt - mean), rel=1e-9, abs=1e-12)
                assert row["z"] == pytest.approx((value - mean) / np.sqrt(var), rel=1e-9, abs=1e-12)
                if k is not None:  # hits@k: the exact one-sided p-value of at least this many hits
                    p = _poisson_binomial_tail(np.minimum(k, c) / c, int(np.sum(r <= k)))
                    assert row["p_value"] == pytest.approx(p, rel=1e-8)
                    assert row["p_method"].startswith("exact")
                whole[(group, side, name)] = mean
    # the groups' own candidate counts: an expectation over the whole table would be one number for all
    r_all = (table.optimistic + table.pessimistic) / 2
    _, mean_all, _ = _by_hand(r_all, table.num_candidates)
    assert len({round(whole[(g, "both", "mrr")], 8) for g in CATEGORY.values()}) == 3
    assert all(abs(whole[(g, "both", "mrr")] - mean_all) > 0.01 for g in CATEGORY.values())


def test_a_group_against_a_monte_carlo_of_the_null():
    """The random group (relation 2, 500 candidates): its MRR's expectation and variance, and its MR's exact
    p-value, against 200,000 draws of uniform ranks over the group's own candidate counts. (MRR's p-value is
    the normal approximation, which a group this size skews: it is marked as one in the text table.)"""
    table = _table(seed=1)
    b = Results(table).breakdown("category", train_triples=TRAIN, metrics=["mrr", "mr"], confidence=None,
                                 sides=["both"])
    sel = table.relation == 2
    c = table.num_candidates[sel]
    rng = np.random.default_rng(7)
    mrr, mr = np.empty(200_000), np.empty(200_000)
    for i in range(0, mrr.size, 10_000):
        ranks = rng.integers(1, c + 1, size=(10_000, c.size))
        mrr[i:i + 10_000], mr[i:i + 10_000] = np.mean(1.0 / ranks, axis=1), np.mean(ranks, axis=1)
    row = b.row("N-N", "mrr")
    assert abs(row["expected"] - mrr.mean()) < 4 * mrr.std() / np.sqrt(mrr.size)
    assert (row["value"] - row["expected"]) / row["z"] == pytest.approx(mrr.std(), rel=0.01)
    assert row["p_method"].startswith("normal") and "~" in str(b)
    row = b.row("N-N", "mr")
    assert abs(row["expected"] - mr.mean()) < 4 * mr.std() / np.sqrt(mr.size)
    assert (row["expected"] - row["value"]) / row["z"] == pytest.approx(mr.std(), rel=0.01)
    p_mc = np.mean(mr <= row["value"])
    assert 0.01 < p_mc < 0.99  # a group near chance: the p-value is informative, not a tail of 0
    assert row["p_method"].startswith("exact") and row["p_value"] == pytest.approx(p_mc, abs=0.01)


def test_the_interval_is_that_of_the_hand_sliced_sub_table():
    table = _table(seed=2)
    b = Results(table).breakdown("category", train_triples=TRAIN, metrics=["mrr", "hits@10"], num_resamples=2000,
                                 seed=3)
    for rel, group in CATEGORY.items():
        sub = Results(RankTable.from_ranks(table.optimistic[table.relation == rel],
                                           table.pessimistic[table.relation == rel],
                                           num_candidates=table.num_candidates[table.relation == rel],
                                           side=table.side[table.relation == rel],
                                           triple_index=table.triple_index[table.relation == rel]))
        for side in ("head", "both"):
            for name in ("mrr", "hits@10"):
                key = f"{side}.realistic.{name}"
                row = b.row(group, name, side)
                low, high = confidence_intervals(sub, [f"{side}.realistic.mrr", f"{side}.realistic.hits@10"],
                                                 num_resamples=2000, seed=3)[key]
                assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), rel=1e-12)
                assert row["ci_low"] <= row["value"] <= row["ci_high"]


def test_a_dataset_breakdown_by_frequency_and_named_groups():
    """Nations' test split as the tasks (ranks made up): the dataset gives the triples and the names."""
    ds = get_dataset("nations")
    test = ds.testing
    n = len(test)
    rng = np.random.default_rng(4)
    table = RankTable.from_ranks(rng.integers(1, 15, 2 * n), num_candidates=14, side=np.repeat([0, 1], n),
                                 relation=np.tile(test[:, 1], 2), triple_index=np.tile(np.arange(n), 2))
    results = Results(table)
    freq = results.breakdown("frequency", dataset=ds, quantiles=3, confidence=None, metrics=["hits@1"])
    assert sum(freq.row(g, "hits@1", "both")["num_tasks"] for g in freq.groups) == 2 * n
    degree = np.bincount(ds.training[:, [0, 2]].ravel(), minlength=ds.num_entities) \
        - np.bincount(ds.training[ds.training[:, 0] == ds.training[:, 2], 0], minlength=ds.num_entities)
    answer = np.where(table.side == 0, test[table.triple_index, 0], test[table.triple_index, 2])
    first = freq.groups[0]
    lo, _, hi = first.removeprefix("degree ").partition("-")
    in_first = (degree[answer] >= int(lo)) & (degree[answer] <= int(hi or lo))
    r = table.optimistic[in_first].astype(float)
    assert freq.row(first, "hits@1", "both")["value"] == pytest.approx(np.mean(r <= 1))
    name = ds.relation_labels[int(test[0, 1])]
    named = results.breakdown({"mine": [name]}, dataset=ds, confidence=None, metrics=["mrr"])
    assert named.groups == ["mine", "other"]
    mine = table.relation == test[0, 1]
    assert named.row("mine", "mrr")["value"] == pytest.approx(np.mean(1 / table.optimistic[mine]))
    text = str(named)
    assert "mine" in text and "other" in text and "E[chance]" in text
    assert named.to_dict()["members"]["mine"] == [int(test[0, 1])]
    df = named.to_df()
    assert list(df["group"].unique()) == ["mine", "other"] and df.attrs["rule"].startswith("named")


def test_a_group_of_one_triple_has_no_interval_and_says_so():
    table = RankTable.from_ranks([1, 2, 3, 1, 5, 2], num_candidates=10, side=[0, 0, 0, 1, 1, 1],
                                 relation=[0, 1, 1, 0, 1, 1], triple_index=[0, 1, 2, 0, 1, 2])
    b = Results(table).breakdown("relation", metrics=["mrr"], num_resamples=200)
    assert b.row("0", "mrr")["ci_low"] is None and b.row("1", "mrr")["ci_low"] is not None
    assert any("one evaluation triple: 0" in n for n in b.notes)


def test_a_refused_interval_leaves_only_its_own_cell_empty():
    """At 400 resamples a BCa tail of one metric falls beyond the resamples: that cell is empty and a note
    says why; the other metrics of the group keep theirs."""
    table = _table(seed=2)
    b = Results(table).breakdown("category", train_triples=TRAIN, metrics=["mrr", "hits@10"], num_resamples=400,
                                 seed=3)
    empty = [r for r in b.rows if r["ci_low"] is None]
    assert empty and len(empty) < len(b.rows)
    assert all(any(f"{r['group']}, {r['side']}.realistic.{r['metric']}: no interval" in n and "resamples" in n
                   for n in b.notes) for r in empty)


def test_weighted_groups_and_a_group_of_zero_weights():
    """Macro weights travel with the sub-table (the group's value is its weighted mean); a group whose tasks
    all weigh 0 has no weighted mean: a note, not a crash."""
    table = RankTable.from_ranks([1, 2, 4, 3, 5], num_candidates=10, relation=[0, 0, 0, 1, 1],
                                 weights=[1.0, 3.0, 0.5, 0.0, 0.0])
    b = Results(table).breakdown("relation", metrics=["mrr"], confidence=None)
    assert b.groups == ["0"]
    assert b.row("0", "mrr")["value"] == pytest.approx((1 + 3 / 2 + 0.5 / 4) / 4.5)
    assert b.notes == ["every task has weight 0 in: 1 (no weighted mean)"]
