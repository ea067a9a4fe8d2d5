"""Evaluator vs. a plain-Python computation over sets, on small random graphs with
integer-valued scores (so ties are frequent and every score is exact)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from kgeval.errors import InvalidInputError
from kgeval.evaluation import FunctionScorer, evaluate_ranks, sample_negatives
from kgeval.filtering import FilterIndex, query_keys
from kgeval.ranks import SIDE_HEAD, SIDE_TAIL
from eval_graphs import table_graph

E, R = 17, 3


@pytest.fixture(autouse=True, params=["torch", "numba"])
def count_kernel(request, monkeypatch):
    """Every test here runs with both counting paths: torch, and the compiled kernel forced on
    (under "auto" these small graphs would never reach it, see kgeval.evaluation.count_kernel)."""
    monkeypatch.setenv("KGEVAL_COUNT_KERNEL", request.param)
    return request.param


def make_graph(seed: int):
    return table_graph(seed, E, R)


def table_scorer(table):
    return FunctionScorer(lambda h, r, t: table[h, r, t], E, num_relations=R)


def brute(table, test, known, *, filtered=True, ents=None, rels=None):
    """Per (side, triple index): (optimistic, pessimistic, num_candidates, weight-count)."""
    known = {tuple(map(int, x)) for x in known}
    ents = set(range(E)) if ents is None else set(ents)
    kept = [
        i
        for i, (h, r, t) in enumerate(test)
        if h in ents and t in ents and (rels is None or r in rels)
    ]
    out = {}
    for side in (SIDE_HEAD, SIDE_TAIL):
        queries = {}
        for i in kept:
            h, r, t = map(int, test[i])
            q = (h, r) if side == SIDE_TAIL else (r, t)
            queries[q] = queries.get(q, 0) + 1
        for i in kept:
            h, r, t = map(int, test[i])
            ans = t if side == SIDE_TAIL else h
            trip = (lambda e: (h, r, e)) if side == SIDE_TAIL else (lambda e: (e, r, t))
            true = float(table[trip(ans)])
            cands = [e for e in sorted(ents) if e != ans and not (filtered and trip(e) in known)]
            better = sum(float(table[trip(e)]) > true for e in cands)
            tied = sum(float(table[trip(e)]) == true for e in cands)
            q = (h, r) if side == SIDE_TAIL else (r, t)
            out[side, i] = (1 + better, 1 + better + tied, 1 + len(cands), queries[q])
    return out


def table_rows(tab):
    return {
        (int(s), int(i)): (int(o), int(p), int(n))
        for s, i, o, p, n in zip(tab.side, tab.triple_index, tab.optimistic, tab.pessimistic, tab.num_candidates)
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("filtered", [True, False])
@pytest.mark.parametrize("batch_size", [None, 1, 5])
def test_full_ranking_matches_brute_force(seed, filtered, batch_size):
    table, train, test = make_graph(seed)
    out = evaluate_ranks(table_scorer(table), test, filter_triples=[train], filtered=filtered,
                         batch_size=batch_size, progress=False)
    expected = brute(table, test, np.concatenate([train, test]), filtered=filtered)
    got = table_rows(out.rank_table)
    assert got == {k: v[:3] for k, v in expected.items()}
    assert out.rank_table.weight is None
    assert out.protocol["filtered"] is filtered


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("with_entities_arg", [True, False])
def test_restriction_matches_brute_force(seed, with_entities_arg):
    table, train, test = make_graph(seed)
    ents = set(np.random.default_rng(seed).choice(E, size=11, replace=False).tolist())
    rels = [0, 2]
    scorer = table_scorer(table)
    if not with_entities_arg:  # a scorer without the entities= keyword: rows are masked instead
        fs = scorer

        class Plain:
            num_entities = E
            num_relations = R

            def score_tails(self, h, r):
                return fs.score_tails(h, r)

            def score_heads(self, r, t):
                return fs.score_heads(r, t)

        scorer = Plain()
    restrict = torch.tensor(sorted(ents)) if with_entities_arg else ents
    out = evaluate_ranks(scorer, test, filter_triples=train, restrict_entities=restrict,
                         restrict_relations=np.array(rels), progress=False, batch_size=4)
    expected = brute(table, test, np.concatenate([train, test]), ents=ents, rels=set(rels))
    assert table_rows(out.rank_table) == {k: v[:3] for k, v in expected.items()}
    assert out.protocol["restriction"]["entities"] == len(ents)
    assert out.protocol["restriction"]["relations"] == 2


def test_macro_weights_match_brute_force():
    table, train, test = make_graph(5)
    out = evaluate_ranks(table_scorer(table), test, filter_triples=train, macro=True, progress=False, batch_size=3)
    expected = brute(table, test, np.concatenate([train, test]))
    tab = out.rank_table
    for s, i, w in zip(tab.side, tab.triple_index, tab.weight):
        assert w == pytest.approx(1.0 / expected[int(s), int(i)][3])
    assert out.protocol["averaging"] == "macro"


def test_batch_size_and_query_grouping_do_not_change_ranks():
    table, train, test = make_graph(6)
    ref = table_rows(evaluate_ranks(table_scorer(table), test, filter_triples=train, batch_size=1, progress=False).rank_table)
    for bs in (2, 3, 1000):
        assert table_rows(evaluate_ranks(table_scorer(table), test, filter_triples=train, batch_size=bs,
                                         progress=False).rank_table) == ref


@pytest.mark.parametrize("use_candidates", [True, False])
@pytest.mark.parametrize("filtered", [True, False])
def test_sampled_matches_brute_force_on_the_sampled_sets(use_candidates, filtered):
    table, train, test = make_graph(7)
    k = 6
    scorer = table_scorer(table)
    if not use_candidates:
        scorer.score_tail_candidates = None  # not callable: forces the full-row fallback
        scorer.score_head_candidates = None
    ents = list(range(1, E))  # restricted universe: entity 0 must never be sampled
    out = evaluate_ranks(scorer, test, filter_triples=train, num_negatives=k, seed=11, filtered=filtered,
                         restrict_entities=ents, progress=False, batch_size=4)
    known = {tuple(map(int, x)) for x in np.concatenate([train, test])}
    full = brute(table, test, np.concatenate([train, test]), filtered=filtered, ents=set(ents))
    tab = out.rank_table
    for side_name, negs in out.sampled_negatives.items():
        side = SIDE_TAIL if side_name == "tail" else SIDE_HEAD
        rows = np.flatnonzero(tab.side == side)
        kept = [i for i, (h, r, t) in enumerate(test) if h in ents and t in ents]
        assert negs.shape == (len(kept), k)
        for j, i in enumerate(kept):  # negatives are in task (= triple) order
            h, r, t = map(int, test[i])
            ans = t if side == SIDE_TAIL else h
            trip = (lambda e: (h, r, e)) if side == SIDE_TAIL else (lambda e: (e, r, t))
            ng = [int(x) for x in negs[j] if x >= 0]
            assert len(set(ng)) == len(ng), "sampled with replacement"
            assert 0 not in ng and ans not in ng
            if filtered:
                assert not any(trip(e) in known for e in ng), "a known true answer was sampled"
            true = float(table[trip(ans)])
            better = sum(float(table[trip(e)]) > true for e in ng)
            tied = sum(float(table[trip(e)]) == true for e in ng)
            row = rows[np.flatnonzero(tab.triple_index[rows] == i)[0]]
            assert (tab.optimistic[row], tab.pessimistic[row], tab.num_candidates[row]) == (1 + better, 1 + better + tied, 1 + len(ng))
            avail = full[side, i][2] - 1
            assert len(ng) == min(k, avail)
            assert tab.optimistic[row] <= full[side, i][0]
    assert out.protocol["sampling"]["num_negatives"] == k
    assert out.protocol["sampling"]["scoring"] == ("candidates method" if use_candidates else "full rows, gathered")


def test_sampling_is_seeded_and_batch_independent():
    table, train, test = make_graph(8)
    a = evaluate_ranks(table_scorer(table), test, filter_triples=train, num_negatives=5, seed=3, batch_size=2, progress=False)
    b = evaluate_ranks(table_scorer(table), test, filter_triples=train, num_negatives=5, seed=3, batch_size=50,
                       sides="tail", progress=False)
    c = evaluate_ranks(table_scorer(table), test, filter_triples=train, num_negatives=5, seed=4, progress=False)
    assert np.array_equal(a.sampled_negatives["tail"], b.sampled_negatives["tail"])
    assert not np.array_equal(a.sampled_negatives["tail"], c.sampled_negatives["tail"])


def test_sampling_caps_when_too_few_negatives():
    table, train, test = make_graph(9)
    with pytest.warns(UserWarning, match="fewer than num_negatives"):
        out = evaluate_ranks(table_scorer(table), test, filter_triples=train, num_negatives=E + 5, progress=False)
    full = evaluate_ranks(table_scorer(table), test, filter_triples=train, progress=False)
    # every available negative is used: identical to full ranking
    assert np.array_equal(out.rank_table.num_candidates, full.rank_table.num_candidates)
    assert np.array_equal(out.rank_table.optimistic, full.rank_table.optimistic)
    assert np.array_equal(out.rank_table.pessimistic, full.rank_table.pessimistic)
    assert out.protocol["sampling"]["capped_tasks"] == len(full.rank_table)


def test_sampler_mapping_skips_excluded_entities():
    # direct check of the position arithmetic: the universe minus exclusions, drawn completely
    table, train, test = make_graph(10)
    known = np.concatenate([train, test])
    index = FilterIndex(known, side=SIDE_TAIL, num_entities=E, num_relations=R)
    universe = np.arange(2, E)
    keys = query_keys(test, SIDE_TAIL, R)
    negs, counts = sample_negatives(keys, test[:, 2], num_negatives=E, seed=0, side=SIDE_TAIL,
                                    universe=universe, index=index)
    for j, (h, r, t) in enumerate(test):
        allowed = set(universe.tolist()) - {int(e) for hh, rr, e in known if hh == h and rr == r}
        assert set(negs[j, : counts[j]].tolist()) == allowed


def test_tie_tolerance():
    # scores 0, 0.05, 0.2, 1.0 ...: with tol 0.1, the true score 0 ties with 0.05
    vals = torch.tensor([0.0, 0.05, 0.2, -0.05, -0.3, float("inf"), float("-inf")])
    n = vals.numel()
    scorer = FunctionScorer(lambda h, r, t: vals[t] + 0 * h, n)
    tri = np.array([[0, 0, 0]])
    out = evaluate_ranks(scorer, tri, sides="tail", tie_tolerance=0.1, progress=False, query_metrics_k=())
    tab = out.rank_table
    # better: 0.2 and inf; tied: 0.05 and -0.05
    assert (tab.optimistic[0], tab.pessimistic[0], tab.num_candidates[0]) == (3, 5, n)
    exact = evaluate_ranks(scorer, tri, sides="tail", progress=False, query_metrics_k=()).rank_table
    assert (exact.optimistic[0], exact.pessimistic[0]) == (4, 4)  # 0.05, 0.2, inf better; -inf still a candidate


def test_nan_policy_worst():
    vals = torch.tensor([1.0, float("nan"), 2.0, 0.0, 1.0])
    scorer = FunctionScorer(lambda h, r, t: vals[t] + 0 * h, 5)
    tri = np.array([[0, 0, 0], [0, 0, 1]])
    out = evaluate_ranks(scorer, tri, sides="tail", filtered=False, nan_policy="worst", progress=False)
    tab = out.rank_table
    # triple 0 (score 1): NaN loses, 2.0 better, the other 1.0 ties
    assert (tab.optimistic[0], tab.pessimistic[0], tab.num_candidates[0]) == (2, 3, 5)
    # triple 1 (score NaN): worst rank
    assert (tab.optimistic[1], tab.pessimistic[1]) == (5, 5)


def test_consistency_check_warns_on_batch_dependent_scores():
    table, train, test = make_graph(11)

    class Drifting:
        num_entities = E

        def score_tails(self, h, r):
            return table[h, r] + 0.5 * (h.numel() > 1)  # scores depend on the batch size

        def score_heads(self, r, t):
            return table[:, r, t].T.contiguous()

    with pytest.warns(UserWarning, match=r"consistency check failed: triple \(\d+, \d+, \d+\)"):
        out = evaluate_ranks(Drifting(), test, filter_triples=train, progress=False, batch_size=8)
    assert out.protocol["consistency_check"]["mismatches"] > 0


def test_consistency_warning_names_overflow_not_dropout():
    """In-batch scores that overflow to inf (a finite score alone) are reported as overflow; the message
    used to blame dropout or batch norm, which such a scorer does not have."""
    table, train, test = make_graph(11)

    class Overflowing:
        num_entities = E

        def score_tails(self, h, r):
            s = table[h, r].clone()
            return s + float("inf") if h.numel() > 1 else s  # the batch product overflows, one row does not

        def score_heads(self, r, t):
            return table[:, r, t].T.contiguous()

    with pytest.warns(UserWarning, match=r"consistency check failed.*overflow the float range"):
        evaluate_ranks(Overflowing(), test, filter_triples=train, progress=False, batch_size=8)


@pytest.mark.parametrize("dtype, warns", [(torch.float16, False), (torch.float32, True)])
def test_consistency_tolerance_follows_the_score_precision(dtype, warns):
    """Half-precision scores legitimately differ by ~1e-3 between a batch and one row (a PyKEEN float16
    DistMult: 0.00191 vs 0.00189) and were reported as batch-dependent scoring; float32 keeps 1e-5."""
    table, train, test = make_graph(11)

    class Rounding:
        num_entities = E

        def score_tails(self, h, r):
            s = table[h, r].to(dtype)
            return s * (1 + 2e-3) if h.numel() > 1 else s  # a batch rounds ~2 float16 ulps apart

        def score_heads(self, r, t):
            return table[:, r, t].T.contiguous().to(dtype)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = evaluate_ranks(Rounding(), test, filter_triples=train, progress=False, batch_size=8)
    assert (out.protocol["consistency_check"]["mismatches"] > 0) == warns
    assert any("consistency check failed" in str(w.message) for w in caught) == warns


def test_oom_halves_batch_and_never_redoes_work():
    table, train, test = make_graph(12)
    calls = []

    class Fragile:
        num_entities = E
        num_relations = R

        def score_tails(self, h, r):
            calls.append(h.numel())
            if h.numel() > 4:
                raise RuntimeError("CUDA out of memory. Tried to allocate 1 GiB")
            return table[h, r]

        def score_heads(self, r, t):
            return table[:, r, t].T.contiguous()

    with pytest.warns(UserWarning, match="out of memory"):
        out = evaluate_ranks(Fragile(), test, filter_triples=train, sides="tail", batch_size=16,
                             progress=False, check_consistency=False)
    ref = evaluate_ranks(table_scorer(table), test, filter_triples=train, sides="tail", progress=False)
    assert table_rows(out.rank_table) == table_rows(ref.rank_table)
    ok = [c for c in calls if c <= 4]
    n_queries = len({(h, r) for h, r, _ in test.tolist()})
    assert sum(ok) == n_queries  # every query scored exactly once after the failures


# ---------------------------------------------------------------------------- entity chunks
class _NoEntities:
    """A scorer without the entities= keyword: it cannot be chunked."""

    num_entities = E
    num_relations = R

    def __init__(self, table):
        self.fs = table_scorer(table)

    def score_tails(self, h, r):
        return self.fs.score_tails(h, r)

    def score_heads(self, r, t):
        return self.fs.score_heads(r, t)


@pytest.mark.parametrize("chunk", [1, 3, 7])
@pytest.mark.parametrize("filtered", [True, False])
@pytest.mark.parametrize("batch_size", [None, 4])
def test_entity_chunks_match_brute_force(chunk, filtered, batch_size):
    table, train, test = make_graph(13)
    out = evaluate_ranks(table_scorer(table), test, filter_triples=[train], filtered=filtered,
                         entity_chunk_size=chunk, batch_size=batch_size, progress=False)
    expected = brute(table, test, np.concatenate([train, test]), filtered=filtered)
    assert table_rows(out.rank_table) == {k: v[:3] for k, v in expected.items()}
    unchunked = evaluate_ranks(table_scorer(table), test, filter_triples=[train], filtered=filtered,
                               batch_size=batch_size, progress=False)
    assert table_rows(out.rank_table) == table_rows(unchunked.rank_table)
    assert out.protocol["entity_chunk_size"] == chunk
    assert unchunked.protocol["entity_chunk_size"] is None


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_entity_chunks_with_restriction_match_brute_force(chunk):
    table, train, test = make_graph(14)
    ents = set(np.random.default_rng(14).choice(E, size=11, replace=False).tolist())
    out = evaluate_ranks(table_scorer(table), test, filter_triples=train, restrict_entities=ents,
                         restrict_relations=[0, 2], entity_chunk_size=chunk, batch_size=3, progress=False)
    expected = brute(table, test, np.concatenate([train, test]), ents=ents, rels={0, 2})
    assert table_rows(out.rank_table) == {k: v[:3] for k, v in expected.items()}


def test_entity_chunks_tie_tolerance_and_nan_worst():
    vals = torch.tensor([0.0, 0.05, 0.2, -0.05, -0.3, float("inf"), float("-inf"), float("nan"), 0.0])
    n = vals.numel()
    scorer = FunctionScorer(lambda h, r, t: vals[t] + 0 * h, n)
    tri = np.array([[0, 0, 0], [0, 0, 7], [0, 0, 2]])
    for tol in (0.0, 0.1):
        ref = evaluate_ranks(scorer, tri, sides="tail", tie_tolerance=tol, nan_policy="worst", filtered=False,
                             progress=False)
        for chunk in (1, 2, 4):
            got = evaluate_ranks(scorer, tri, sides="tail", tie_tolerance=tol, nan_policy="worst", filtered=False,
                                 entity_chunk_size=chunk, progress=False)
            assert table_rows(got.rank_table) == table_rows(ref.rank_table)
    from kgeval.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=r"NaN scores for triple"):
        evaluate_ranks(scorer, tri, sides="tail", entity_chunk_size=3, progress=False)


def test_automatic_entity_chunks_from_a_tiny_memory_budget():
    table, train, test = make_graph(15)
    ref = evaluate_ranks(table_scorer(table), test, filter_triples=train, progress=False)
    # 64 rows of 17 floats do not fit in 4 KiB: the evaluator must chunk the columns
    out = evaluate_ranks(table_scorer(table), test, filter_triples=train, memory_budget=4096, progress=False)
    assert out.protocol["entity_chunk_size"] is not None and out.protocol["entity_chunk_size"] < E
    assert table_rows(out.rank_table) == table_rows(ref.rank_table)


def test_entity_chunks_need_the_entities_keyword_and_whole_rows_for_query_metrics():
    table, train, test = make_graph(16)
    ref = evaluate_ranks(table_scorer(table), test, filter_triples=train, progress=False)
    with pytest.warns(UserWarning, match="entity chunking is impossible"):
        out = evaluate_ranks(_NoEntities(table), test, filter_triples=train, entity_chunk_size=3, progress=False)
    assert table_rows(out.rank_table) == table_rows(ref.rank_table)
    assert out.protocol["entity_chunk_size"] is None
    from kgeval.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="query_metrics_k"):
        evaluate_ranks(table_scorer(table), test, filter_triples=train, entity_chunk_size=3, query_metrics_k=(1,),
                       progress=False)
    with pytest.raises(InvalidInputError, match="entity_chunk_size"):
        evaluate_ranks(table_scorer(table), test, filter_triples=train, entity_chunk_size=0, progress=False)


def test_entity_chunk_true_scores_come_from_the_chunk_calls():
    # scores that depend on the chunk call's shape (like a BLAS kernel might): every call adds
    # 1e-3 * (number of columns) to its scores. Reading the true score from a 1-column call
    # would misplace it; reading it from the chunk that holds it keeps chunk-internal ranks.
    table, train, test = make_graph(17)

    class ShapeDependent(FunctionScorer):
        def score_tails(self, heads, relations, entities=None):
            out = super().score_tails(heads, relations, entities)
            return out + 1e-3 * out.shape[1]

    chunk = 4
    sc = ShapeDependent(lambda h, r, t: table[h, r, t], E, num_relations=R)
    out = evaluate_ranks(sc, test, filter_triples=train, sides="tail", entity_chunk_size=chunk,
                         check_consistency=False, progress=False)
    tab = out.rank_table
    # the true answer always ties with itself: with filtering it is masked, so tied >= 0 and
    # optimistic <= pessimistic; unfiltered, the answer must be found tying with itself
    unf = evaluate_ranks(sc, test, filter_triples=train, sides="tail", entity_chunk_size=chunk, filtered=False,
                         check_consistency=False, progress=False).rank_table
    assert np.all(unf.pessimistic >= unf.optimistic)
    assert np.all(tab.pessimistic >= tab.optimistic)


def test_thread_count_is_restored_after_evaluation_and_errors():
    table, train, test = make_graph(18)
    before = torch.get_num_threads()
    seen = []

    class Recording(FunctionScorer):
        def score_tails(self, heads, relations, entities=None):
            seen.append(torch.get_num_threads())  # the scorer runs with the caller's setting
            return super().score_tails(heads, relations, entities)

    evaluate_ranks(Recording(lambda h, r, t: table[h, r, t], E, num_relations=R), test, filter_triples=train,
                   sides="tail", progress=False)
    assert torch.get_num_threads() == before
    assert seen and all(n == before for n in seen)
    nan_table = table.clone()
    nan_table[:, :, 0] = float("nan")
    from kgeval.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="NaN"):
        evaluate_ranks(table_scorer(nan_table), test, filter_triples=train, progress=False)
    assert torch.get_num_threads() == before


def test_consistency_check_tolerates_rounding_of_scores_near_zero():
    table, train, test = make_graph(19)
    h, r, t = (int(x) for x in test[0])
    table = table.clone()
    table[h, r, t] = 1.5001  # (1.5001 - 1.5) * 100 = 0.01: a score that cancels to near zero

    class Rounding(FunctionScorer):
        def score_triples(self, heads, relations, tails):
            return super().score_triples(heads, relations, tails) + 1e-4  # rounding-sized drift

    sc = Rounding(lambda hh, rr, tt: (table[hh, rr, tt] - 1.5) * 100, E, num_relations=R)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = evaluate_ranks(sc, test, filter_triples=train, batch_size=1, progress=False)
    assert out.protocol["consistency_check"]["mismatches"] == 0


class _GatherRounding:
    """Integer table scores, but a call for a list of entities (not a slice) adds 0.5 to every score:
    a stand-in for a BLAS that rounds a product over gathered columns differently from a chunk's."""

    num_entities = E
    num_relations = R

    def __init__(self, table):
        self.fs, self.shifted_calls = table_scorer(table), 0

    def _shift(self, out, entities):
        if isinstance(entities, torch.Tensor):
            self.shifted_calls += 1
            return out + 0.5
        return out

    def score_tails(self, h, r, entities=None):
        return self._shift(self.fs.score_tails(h, r, entities=entities), entities)

    def score_heads(self, r, t, entities=None):
        return self._shift(self.fs.score_heads(r, t, entities=entities), entities)


@pytest.mark.parametrize("chunk", [2, 5])
@pytest.mark.parametrize("filtered", [True, False])
def test_chunked_true_scores_that_differ_in_batch_are_reranked_exactly(chunk, filtered, monkeypatch):
    """Pass 1 scores the batch against its answer columns only; when that value is not bitwise the
    in-batch score, the queries are ranked again (else the ranks below would be off: scores tie)."""
    from kgeval.evaluation import full

    table, train, test = make_graph(16)
    calls = []
    exact = full._rank_chunks_exact
    monkeypatch.setattr(full, "_rank_chunks_exact", lambda *a, **k: calls.append(1) or exact(*a, **k))
    scorer = _GatherRounding(table)
    out = evaluate_ranks(scorer, test, filter_triples=[train], filtered=filtered, entity_chunk_size=chunk,
                         batch_size=8, progress=False)
    expected = brute(table, test, np.concatenate([train, test]), filtered=filtered)
    assert scorer.shifted_calls and calls  # the re-ranking path did run
    assert table_rows(out.rank_table) == {k: v[:3] for k, v in expected.items()}
    # every answer's pass-1 score differs, so every query is ranked again, once: the protocol says how many
    # (the count was kept but never reported)
    queries = sum(np.unique(query_keys(test, side, R)).size for side in (SIDE_HEAD, SIDE_TAIL))
    assert out.protocol["chunk_redone_queries"] == out.protocol.chunk_redone_queries == queries


class _ThreadShifted:
    """Integer table scores plus 0.25 x torch's thread count: one call's scores shift together (ranks
    unchanged), but scores of the same entities differ between a call on the caller's threads and
    one on a chunk walker's single thread -- as TuckER's head scores do by rounding (~1e-7)."""

    num_entities = E
    num_relations = R
    concurrent_scoring = True  # lets the chunk walkers score on one thread each

    def __init__(self, table):
        self.fs = table_scorer(table)

    def _out(self, scores, out):
        scores = scores + 0.25 * torch.get_num_threads()
        if out is not None and out.shape == scores.shape:
            return out.copy_(scores)
        return scores

    def score_tails(self, h, r, entities=None, out=None):
        return self._out(self.fs.score_tails(h, r, entities=entities), out)

    def score_heads(self, r, t, entities=None, out=None):
        return self._out(self.fs.score_heads(r, t, entities=entities), out)


@pytest.mark.parametrize("filtered", [True, False])
@pytest.mark.parametrize("chunk", [1, 4])
def test_reranked_chunks_count_with_the_calls_that_gave_their_true_scores(filtered, chunk, count_kernel):
    """A task whose pass-1 score differs is ranked again with true scores read from chunks; those must
    be the very calls it is counted with. They were not: the true scores came from the caller's
    threads and the count from one-thread walkers, so a task missed its own tie (filtered: a rank one
    better, silently; unfiltered: num_tied = -1, an error from deep inside)."""
    from kgeval.evaluation import count_kernel as ck

    if count_kernel != "numba" or not ck._load() or torch.get_num_threads() < 2:
        pytest.skip("needs the compiled kernel and two torch threads (chunk walkers)")
    table, train, test = make_graph(21)
    out = evaluate_ranks(_ThreadShifted(table), test, filter_triples=[train], filtered=filtered,
                         entity_chunk_size=chunk, batch_size=8, progress=False, check_consistency=False)
    expected = brute(table, test, np.concatenate([train, test]), filtered=filtered)
    assert table_rows(out.rank_table) == {k: v[:3] for k, v in expected.items()}


def test_a_scorer_whose_identical_calls_disagree_is_a_named_error():
    """Re-ranking reads true scores and counts from the very same calls; when even those disagree the
    ranks cannot be exact, and the evaluation says so instead of counting."""
    table, train, test = make_graph(22)
    calls = [0]

    class Drifting(_ThreadShifted):
        def _out(self, scores, out):
            calls[0] += 1
            return super()._out(scores + 1e-3 * calls[0], out)

    with pytest.raises(InvalidInputError, match=r"returned different scores for the same queries and candidates in "
                                                r"two identical calls .*exact ranks need deterministic scores"):
        evaluate_ranks(Drifting(table), test, filter_triples=[train], entity_chunk_size=4, batch_size=8,
                       progress=False, check_consistency=False)
