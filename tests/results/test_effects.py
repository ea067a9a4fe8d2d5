"""Effects of protocol differences measured on rank tables, against effects computed by hand in numpy."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import RankTable
from kgeval.errors import InvalidInputError
from kgeval.results.effects import (State, Step, drop_rows, headline_values, measure_effects, replace_ranks,
                                    select_sides, set_rank_type)


def _table(rng, n=60, with_weights=False):
    c = rng.integers(5, 30, n)
    lo = rng.integers(1, 6, n)
    hi = np.minimum(lo + rng.integers(0, 5, n), c)  # many ties, some of even and odd size
    ti = np.repeat(np.arange(n // 2), 2)
    side = np.tile([0, 1], n // 2)
    w = rng.uniform(0.1, 2, n) if with_weights else None
    return RankTable(optimistic=lo, pessimistic=hi, num_candidates=c, side=side, triple_index=ti, weight=w)


def _by_hand(lo, hi, rank_type, w=None):
    """mrr, mr, hits@1/3/10 of one rank type, in plain numpy."""
    lo, hi = lo.astype(float), hi.astype(float)
    r = {"optimistic": lo, "pessimistic": hi, "realistic": (lo + hi) / 2,
         "rounded_mean": lo + np.floor((hi - lo + 1) / 2)}[rank_type]
    w = np.ones_like(r) if w is None else w
    w = w / w.sum()
    return {"mrr": float(w @ (1 / r)), "mr": float(w @ r), "hits@1": float(w @ (r <= 1)),
            "hits@3": float(w @ (r <= 3)), "hits@10": float(w @ (r <= 10))}


@pytest.mark.parametrize("rank_type", ["optimistic", "pessimistic", "realistic", "rounded_mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_headline_values_match_numpy(rank_type, weighted):
    t = _table(np.random.default_rng(1), with_weights=weighted)
    got = headline_values(t, rank_type)
    want = _by_hand(t.optimistic, t.pessimistic, rank_type, t.weight)
    assert got == pytest.approx(want, rel=1e-12)


def test_rounded_mean_is_libkges_rule():
    # LibKGE: rank (0-based) = #better + floor(#tied incl. the answer / 2); 1-based + 1
    better, tied = np.array([0, 0, 3, 3, 7]), np.array([1, 2, 3, 4, 10])  # tied counts include the answer
    t = RankTable.from_ranks(optimistic=better + 1, pessimistic=better + tied)
    got = headline_values(t, "rounded_mean", ["mr"])["mr"]
    assert got == pytest.approx(np.mean(better + tied // 2 + 1))


def test_expected_rank_type_is_the_tie_expectation():
    t = RankTable.from_ranks(optimistic=[1, 2], pessimistic=[4, 2], num_candidates=[10, 10])
    mrr = headline_values(t, "expected", ["mrr"])["mrr"]
    assert mrr == pytest.approx(np.mean([np.mean(1 / np.arange(1, 5)), 1 / 2]))


@pytest.mark.parametrize("seed", range(5))
def test_single_joint_interaction_by_hand(seed):
    rng = np.random.default_rng(seed)
    t = _table(rng)
    drop = rng.random(30) < 0.3
    steps = [Step("rank_type", set_rank_type("rounded_mean")), Step("sides", select_sides(["tail"])),
             Step("unseen", drop_rows(drop))]
    e = measure_effects(State(t, "realistic"), steps)
    base = _by_hand(t.optimistic, t.pessimistic, "realistic")
    keep_t = (t.side == 1)
    keep_u = ~drop[t.triple_index]
    singles = {"rank_type": _by_hand(t.optimistic, t.pessimistic, "rounded_mean"),
               "sides": _by_hand(t.optimistic[keep_t], t.pessimistic[keep_t], "realistic"),
               "unseen": _by_hand(t.optimistic[keep_u], t.pessimistic[keep_u], "realistic")}
    both = keep_t & keep_u
    joint = _by_hand(t.optimistic[both], t.pessimistic[both], "rounded_mean")
    for m in base:
        for f, v in singles.items():
            assert e.single[f][m] == pytest.approx(v[m] - base[m], abs=1e-12)
        assert e.joint[m] == pytest.approx(joint[m] - base[m], abs=1e-12)
        assert e.interaction[m] == pytest.approx(e.joint[m] - sum(e.single[f][m] for f in singles), abs=1e-12)
    # steps commute: the joint effect does not depend on their order
    assert measure_effects(State(t, "realistic"), steps[::-1]).joint == pytest.approx(e.joint)


def test_replace_ranks_joins_on_triple_and_side():
    rng = np.random.default_rng(3)
    t = _table(rng, n=20)
    other = _table(np.random.default_rng(4), n=20)
    perm = rng.permutation(20)
    shuffled = other.subset(perm)  # the same tasks in another order
    state = select_sides(["head"])(State(t, "pessimistic"))
    got = replace_ranks(shuffled)(state).table
    assert np.array_equal(got.pessimistic, other.pessimistic[other.side == 0])
    assert np.array_equal(got.triple_index, t.triple_index[t.side == 0])


def test_total_and_unexplained():
    t = RankTable.from_ranks(optimistic=[1, 1, 2], pessimistic=[2, 1, 5])
    e = measure_effects(State(t, "realistic"), [Step("rank_type", set_rank_type("pessimistic"))], ["mr"],
                        target={"mr": 3.0})
    assert e.total["mr"] == pytest.approx(3.0 - (1.5 + 1 + 3.5) / 3)
    assert e.unexplained["mr"] == pytest.approx(3.0 - (2 + 1 + 5) / 3)


def test_refusals_are_named():
    t = RankTable.from_ranks(optimistic=[1, 2], pessimistic=[1, 2])
    with pytest.raises(InvalidInputError, match="triple_index"):
        drop_rows(np.array([True]))(State(t, "realistic"))
    with pytest.raises(Exception, match="rank type"):
        set_rank_type("medium")
