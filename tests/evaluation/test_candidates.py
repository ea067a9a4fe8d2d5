"""kgeval.evaluate(..., candidates=...): OGB's given-negatives protocol, and kgeval.metrics.ogb_metrics
against OGB's _eval_mrr formula (reimplemented here from its documented definition, not imported)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kgeval
from kgeval.errors import InvalidInputError
from kgeval.evaluation.scorers import FunctionScorer
from kgeval.metrics import ogb_metrics
from kgeval.models import get_model

NE, NR, N, K = 40, 5, 30, 12


def _data(seed=0):
    rng = np.random.default_rng(seed)
    tri = np.stack([rng.integers(0, NE, N), rng.integers(0, NR, N), rng.integers(0, NE, N)], 1)
    negs = {}
    for key, col in (("head_neg", 0), ("tail_neg", 2)):
        arr = rng.integers(0, NE - 1, (N, K))
        negs[key] = arr + (arr >= tri[:, col:col + 1])  # never the true answer
    return tri, negs


def _ogb_reference(pos, neg):
    """OGB's _eval_mrr: ranking = 0.5 * (#neg > pos + #neg >= pos) + 1 in float32, then the list means."""
    pos = pos.astype(np.float32).reshape(-1, 1)
    neg = neg.astype(np.float32)
    ranking = 0.5 * ((neg > pos).sum(1) + (neg >= pos).sum(1)) + 1
    return {"mrr": float(np.mean(1.0 / ranking.astype(np.float32))),
            **{f"hits@{k}": float(np.mean(ranking <= k)) for k in (1, 3, 10)}}


def _score(fn_triples, tri, negs):
    """(pos, neg) score arrays of both sides, head rows first, via single-triple scoring."""
    pos, neg = [], []
    for key, col in (("head_neg", 0), ("tail_neg", 2)):
        pos.append(fn_triples(tri[:, 0], tri[:, 1], tri[:, 2]))
        rows = []
        for j in range(K):
            x = tri.copy()
            x[:, col] = negs[key][:, j]
            rows.append(fn_triples(x[:, 0], x[:, 1], x[:, 2]))
        neg.append(np.stack(rows, 1))
    return np.concatenate(pos), np.concatenate(neg)


def test_ties_follow_ogb_convention_with_a_candidate_scorer():
    tri, negs = _data()
    fn = lambda h, r, t: ((h * 7 + r * 3 + t * 5) % 4).float()  # noqa: E731 - many ties
    res = kgeval.evaluate(FunctionScorer(fn, NE, NR), tri, candidates=negs)
    pos, neg = _score(lambda h, r, t: fn(torch.as_tensor(h), torch.as_tensor(r), torch.as_tensor(t)).numpy(), tri, negs)
    ref = _ogb_reference(pos, neg)
    got = ogb_metrics(res)
    assert got.keys() == ref.keys()
    for key in ref:
        assert got[key] == pytest.approx(ref[key], rel=1e-6)
    assert res.value("both", "realistic", "inverse_harmonic_mean_rank") == pytest.approx(ref["mrr"], rel=1e-6)
    assert (res.rank_table.num_candidates == K + 1).all()
    assert res.rank_table.pessimistic.max() > res.rank_table.optimistic.min()  # ties really occur


def test_full_row_scorer_in_small_batches_equals_reference():
    tri, negs = _data(1)
    model = get_model("distmult", NE, NR, dim=8, seed=3)
    res = kgeval.evaluate(model, tri, candidates=negs, memory_budget=8 * NE * 4)  # 4 rows per batch
    pos, neg = _score(lambda h, r, t: model.score_triples(h, r, t).detach().numpy(), tri, negs)
    ranking = 0.5 * ((neg > pos[:, None]).sum(1) + (neg >= pos[:, None]).sum(1)) + 1
    np.testing.assert_array_equal(res.rank_table.ranks("realistic"), ranking)
    assert res.protocol["filtered"] is False and "given negatives" in res.protocol["candidates"]


def test_one_side_only():
    tri, negs = _data()
    res = kgeval.evaluate(get_model("distmult", NE, NR, dim=4, seed=0), tri, candidates={"tail_neg": negs["tail_neg"]})
    assert res.rank_table.sides == ["tail"] and len(res.rank_table) == N


@pytest.mark.parametrize("change, match", [
    (lambda n: {"tail_neg": np.where(np.arange(K) == 0, 999, n["tail_neg"])}, r"\[0, 0\] = 999 is out of range"),
    (lambda n: {"tail_neg": n["tail_neg"][:-1]}, "must have shape"),
    (lambda n: {"tail": n["tail_neg"], "tail_neg": n["tail_neg"]}, "twice"),
    (lambda n: {"middle": n["tail_neg"]}, "unknown candidates key"),
    (lambda n: {"tail_neg": n["tail_neg"].astype(float) + 0.5}, "candidates"),
])
def test_bad_candidates_are_named(change, match):
    tri, negs = _data()
    with pytest.raises(InvalidInputError, match=match):
        kgeval.evaluate(get_model("distmult", NE, NR, dim=4, seed=0), tri, candidates=change(negs))


def test_true_answer_among_negatives_and_filtering_are_refused():
    tri, negs = _data()
    bad = negs["head_neg"].copy()
    bad[5, 2] = tri[5, 0]
    model = get_model("distmult", NE, NR, dim=4, seed=0)
    with pytest.raises(InvalidInputError, match=r"\[5, 2\] is the true answer"):
        kgeval.evaluate(model, tri, candidates={"head_neg": bad})
    with pytest.raises(InvalidInputError, match="filter_triples must be empty"):
        kgeval.evaluate(model, tri, candidates=negs, filter_triples=tri)


def test_empty_filter_arrays_are_no_filter():
    """An empty filter set (no known triples: np.zeros((0, 3)), an empty tensor, {"train": empty}) was
    refused with 'filter_triples must be empty'; only an empty tuple / list / dict passed."""
    tri, negs = _data()
    model = get_model("distmult", NE, NR, dim=4, seed=0)
    want = kgeval.evaluate(model, tri, candidates=negs).rank_table
    empty = np.zeros((0, 3), dtype=np.int64)
    for known in (empty, torch.as_tensor(empty), {"train": empty}, [empty, empty]):
        got = kgeval.evaluate(model, tri, candidates=negs, filter_triples=known).rank_table
        assert np.array_equal(got.optimistic, want.optimistic) and np.array_equal(got.pessimistic, want.pessimistic)
    with pytest.raises(InvalidInputError, match="filter_triples must be empty"):
        kgeval.evaluate(model, tri, candidates=negs, filter_triples={"train": empty, "valid": tri[:1]})


@pytest.mark.parametrize("option, match", [
    ({"restrict_entities": list(range(20))}, "restrict_entities"),
    ({"restrict_relations": [0, 1]}, "restrict_relations"),
    ({"macro": True}, "macro"),
    ({"query_metrics_k": (1,)}, "query_metrics_k"),
    ({"num_negatives": 3}, "num_negatives"),
    ({"sides": "head"}, r"sides=\['head'\] but candidates are given for \['head', 'tail'\]"),
])
def test_options_the_candidates_mode_cannot_honour_are_refused_not_ignored(option, match):
    tri, negs = _data()
    with pytest.raises(InvalidInputError, match=match):
        kgeval.evaluate(get_model("distmult", NE, NR, dim=4, seed=0), tri, candidates=negs, **option)


def test_sides_equal_to_the_given_arrays_are_accepted():
    tri, negs = _data()
    model = get_model("distmult", NE, NR, dim=4, seed=0)
    res = kgeval.evaluate(model, tri, candidates={"tail_neg": negs["tail_neg"]}, sides="tail")
    ref = kgeval.evaluate(model, tri, candidates={"tail_neg": negs["tail_neg"]})
    np.testing.assert_array_equal(res.rank_table.ranks("realistic"), ref.rank_table.ranks("realistic"))


def test_nan_policy_worst_ranks_nan_last():
    tri, negs = _data()
    nan_heads = {3, 7}

    def fn(h, r, t):  # NaN whenever the head is 3 or 7, a tie-free score otherwise
        s = (h * 13 + r * 5 + t * 7).float() % 97 + 0.001 * h.float()
        return torch.where(torch.isin(h, torch.tensor(sorted(nan_heads))), torch.nan, s)

    scorer = FunctionScorer(fn, NE, NR)
    with pytest.raises(InvalidInputError, match="NaN"):
        kgeval.evaluate(scorer, tri, candidates=negs)
    res = kgeval.evaluate(scorer, tri, candidates=negs, nan_policy="worst")
    pos, neg = _score(lambda h, r, t: fn(torch.as_tensor(h), torch.as_tensor(r), torch.as_tensor(t)).numpy(), tri, negs)
    # brute force: NaN negatives never beat a true score, a NaN true score is beaten by all K
    better = np.where(np.isnan(pos), K, (np.nan_to_num(neg, nan=-np.inf) > pos[:, None]).sum(1))
    np.testing.assert_array_equal(res.rank_table.optimistic, better + 1)
    assert np.isnan(pos).any() and np.isnan(neg).any()  # both NaN cases really occur


def test_tie_tolerance_below_one_float32_spacing():
    """tol = 1e-6 and scores near 20 (float32 spacing 1.9e-6): the negative one spacing above the
    true score is better, as in the full ranking (float64 thresholds; float32 ones tied it)."""
    s = np.float32(20.0)
    row = torch.tensor([s, np.nextafter(s, np.float32(30)), np.nextafter(s, np.float32(10)), s, 25.0, 17.0])

    class Rows:
        num_entities = 6

        def score_tails(self, h, r):
            return row.expand(h.shape[0], -1).clone()

        score_heads = score_tails

    res = kgeval.evaluate(Rows(), np.array([[1, 0, 0]]), candidates={"tail_neg": np.array([[1, 2, 3, 4, 5]])},
                          tie_tolerance=1e-6)
    t = res.rank_table
    assert (int(t.optimistic[0]), int(t.pessimistic[0])) == (3, 4)


def test_batch_size_is_honoured_not_ignored():
    """batch_size sets the rows per scorer call here too (it was silently replaced by the budget's)."""
    tri, negs = _data(2)
    model = get_model("distmult", NE, NR, dim=8, seed=3)
    calls = []

    class Counting:
        num_entities, num_relations = NE, NR

        def score_tails(self, h, r):
            calls.append(h.shape[0])
            return model.score_tails(h, r)

        def score_heads(self, r, t):
            calls.append(r.shape[0])
            return model.score_heads(r, t)

    res = kgeval.evaluate(Counting(), tri, candidates=negs, batch_size=7, progress=False)
    assert calls == [7, 7, 7, 7, 2] * 2
    ref = kgeval.evaluate(model, tri, candidates=negs, progress=False)
    np.testing.assert_array_equal(res.rank_table.ranks("realistic"), ref.rank_table.ranks("realistic"))
