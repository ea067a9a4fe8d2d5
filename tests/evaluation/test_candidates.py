"""kgeval.evaluate(..., candidates=...): OGB's given-negatives protocol, and kgeval.metrics.ogb_metrics
against OGB's _eval_mrr formula (reimplemented here from its documented definition, not imported)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import kgeval
from kgeval.errors import InvalidInputError, NaNScoresError
from kgeval.evaluation import evaluate_ranks
from kgeval.evaluation.scorers import FunctionScorer
from kgeval.metrics import ogb_metrics
from kgeval.models import get_model
from kgeval.ranks import Side

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

    # (the consistency check's single-triple calls would interleave; it has its own test below)
    res = kgeval.evaluate(Counting(), tri, candidates=negs, batch_size=7, progress=False, check_consistency=False)
    assert calls == [7, 7, 7, 7, 2] * 2
    ref = kgeval.evaluate(model, tri, candidates=negs, progress=False)
    np.testing.assert_array_equal(res.rank_table.ranks("realistic"), ref.rank_table.ranks("realistic"))


# ---------------------------------------------------------------- one driver for listed candidates
# Sampled negatives and given candidates rank through evaluation.listed.rank_listed, with full
# ranking's contract: checked scorer output, the counting and NaN rule, the OOM retry, the
# consistency check. Each test checks both modes against a loop over the listed candidates.

def _tie_scores(h, r, t):
    """Integer scores with many ties; NaN where (h + 2 t) % 9 == 4 (true scores and candidates)."""
    s = ((h * 7 + r * 3 + t * 5) % 5).double()
    return torch.where((h + 2 * t) % 9 == 4, torch.nan, s)


class _RowsOnly:
    """Whole score rows only (no candidates method, no entities=): the gathered path."""

    def __init__(self, fn):
        self.fn, self.num_entities, self.num_relations = fn, NE, NR

    def score_tails(self, h, r):
        return self.fn(h[:, None], r[:, None], torch.arange(NE)[None, :])

    def score_heads(self, r, t):
        return self.fn(torch.arange(NE)[None, :], r[:, None], t[:, None])


def _loop_counts(fn, tri, side, cand_rows):
    """``(optimistic, pessimistic)`` per task by a plain loop: one triple scored at a time."""
    col = 0 if side == "head" else 2
    one = lambda x: float(fn(*(torch.tensor([int(v)]) for v in x))[0])  # noqa: E731
    opt, pes = [], []
    for i, row in enumerate(cand_rows):
        s = one(tri[i])
        listed = [c for c in row if c >= 0]
        if np.isnan(s):
            opt.append(len(listed) + 1)
            pes.append(len(listed) + 1)
            continue
        scores = []
        for c in listed:
            x = tri[i].copy()
            x[col] = c
            scores.append(one(x))
        better = sum(1 for v in scores if v > s)  # NaN compares False: never better, never tied
        tied = sum(1 for v in scores if v == s)
        opt.append(1 + better)
        pes.append(1 + better + tied)
    return np.array(opt), np.array(pes)


@pytest.mark.parametrize("rows_only", [False, True])
@pytest.mark.parametrize("mode", ["given", "sampled", "sampled-filtered", "sampled-restricted"])
def test_listed_candidates_match_a_loop_over_them(mode, rows_only):
    tri, negs = _data(4)
    scorer = _RowsOnly(_tie_scores) if rows_only else FunctionScorer(_tie_scores, NE, NR)
    if mode == "given":
        res = kgeval.evaluate(scorer, tri, candidates=negs, nan_policy="worst", batch_size=8)
        table, lists = res.rank_table, {"head": negs["head_neg"], "tail": negs["tail_neg"]}
        keep = np.arange(N)
    else:
        extra = {}
        if mode == "sampled-restricted":
            extra = {"restrict_entities": list(range(0, NE, 2)) + [int(x) for x in tri[:, [0, 2]].ravel()],
                     "restrict_relations": [0, 2, 3]}
        out = evaluate_ranks(scorer, tri, filter_triples=tri[::3] + 0, num_negatives=9, seed=5,
                             filtered=mode == "sampled-filtered", nan_policy="worst", batch_size=8,
                             progress=False, **extra)
        table, lists = out.rank_table, out.sampled_negatives
        keep = np.arange(N) if mode != "sampled-restricted" else np.flatnonzero(np.isin(tri[:, 1], [0, 2, 3]))
        if mode == "sampled-restricted":
            assert len(keep) < N and all(set(lists[s].ravel()) - {-1} <= set(extra["restrict_entities"])
                                         for s in lists)
    seen_nan = False
    for side in ("head", "tail"):
        sel = table.side == Side.parse(side)
        np.testing.assert_array_equal(np.asarray(table.triple_index)[sel], keep)
        opt, pes = _loop_counts(_tie_scores, tri[keep], side, lists[side])
        np.testing.assert_array_equal(np.asarray(table.optimistic)[sel], opt)
        np.testing.assert_array_equal(np.asarray(table.pessimistic)[sel], pes)
        np.testing.assert_array_equal(np.asarray(table.num_candidates)[sel], 1 + (lists[side] >= 0).sum(1))
        seen_nan |= bool(np.isnan(_tie_scores(torch.as_tensor(tri[keep, 0]), torch.as_tensor(tri[keep, 1]),
                                              torch.as_tensor(tri[keep, 2])).numpy()).any())
    assert (np.asarray(table.pessimistic) > np.asarray(table.optimistic)).any()  # ties really occur
    if mode == "given":
        assert seen_nan  # a NaN true score really occurs


class _Broken:
    """A scorer whose outputs break the protocol one way (``how``), on every path."""

    def __init__(self, how):
        self.how, self.num_entities, self.num_relations = how, NE, NR

    def _out(self, x):
        if self.how == "shape":
            return x[:, :-1]
        if self.how == "dtype":
            return x.long()
        if self.how == "nan":
            return torch.full_like(x, torch.nan)
        return x.numpy()

    def score_tails(self, h, r):
        return self._out(torch.ones(h.shape[0], NE))

    def score_heads(self, r, t):
        return self._out(torch.ones(r.shape[0], NE))

    def score_tail_candidates(self, h, r, c):
        return self._out(torch.ones(c.shape, dtype=torch.float32))

    def score_head_candidates(self, r, t, c):
        return self._out(torch.ones(c.shape, dtype=torch.float32))


@pytest.mark.parametrize("how, error, match", [
    ("shape", InvalidInputError, "returned shape"),
    ("dtype", InvalidInputError, "must return floating-point scores"),
    ("numpy", InvalidInputError, "must return a torch.Tensor"),
    ("nan", NaNScoresError, "NaN scores for triple 0 of the batch"),
])
def test_a_broken_scorer_gets_full_rankings_named_error_in_both_listed_modes(how, error, match):
    tri, negs = _data()
    with pytest.raises(error, match=match):  # full ranking: the reference
        kgeval.evaluate(_Broken(how), tri)
    with pytest.raises(error, match=match):
        kgeval.evaluate(_Broken(how), tri, candidates=negs)
    with pytest.raises(error, match=match):
        kgeval.evaluate(_Broken(how), tri, num_negatives=5)


@pytest.mark.parametrize("mode", ["given", "sampled"])
def test_an_out_of_memory_batch_is_retried_in_both_listed_modes(mode):
    tri, negs = _data(3)
    model = get_model("distmult", NE, NR, dim=8, seed=1)
    sizes = []

    class FailsBig:
        num_entities, num_relations = NE, NR

        def score_tails(self, h, r):
            sizes.append(h.shape[0])
            if h.shape[0] > 5:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return model.score_tails(h, r)

        def score_heads(self, r, t):
            sizes.append(r.shape[0])
            if r.shape[0] > 5:
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GB")
            return model.score_heads(r, t)

        def score_triples(self, h, r, t):
            return model.score_triples(h, r, t)

    kw = {"candidates": negs} if mode == "given" else {"num_negatives": 6, "seed": 2}
    with pytest.warns(UserWarning, match="out of memory: retrying with batch size"):
        got = kgeval.evaluate(FailsBig(), tri, batch_size=16, **kw).rank_table
    want = kgeval.evaluate(model, tri, batch_size=16, **kw).rank_table
    np.testing.assert_array_equal(got.optimistic, want.optimistic)
    np.testing.assert_array_equal(got.pessimistic, want.pessimistic)
    assert {16, 8, 4} <= set(sizes)  # failed at 16 and 8, went on at 4 (each side starts at batch_size again)


def test_check_consistency_catches_a_batch_dependent_scorer_with_given_candidates():
    tri, negs = _data()
    model = get_model("distmult", NE, NR, dim=8, seed=0)

    class BatchDependent:  # the scores of a batch depend on its size (as dropout or batch norm would)
        num_entities, num_relations = NE, NR

        def score_tails(self, h, r):
            return model.score_tails(h, r) + 0.5 * h.shape[0]

        def score_heads(self, r, t):
            return model.score_heads(r, t) + 0.5 * r.shape[0]

        def score_triples(self, h, r, t):
            return model.score_triples(h, r, t)

    with pytest.warns(UserWarning, match="consistency check failed"):
        res = kgeval.evaluate(BatchDependent(), tri, candidates=negs, batch_size=10)
    assert res.protocol["consistency_check"]["mismatches"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a consistent scorer passes silently
        ok = kgeval.evaluate(model, tri, candidates=negs, batch_size=10)
    assert ok.protocol["consistency_check"]["mismatches"] == 0 and ok.protocol["consistency_check"]["checked"] > 0
    off = kgeval.evaluate(BatchDependent(), tri, candidates=negs, batch_size=10, check_consistency=False)
    assert off.protocol["consistency_check"] is None
