"""Every bad input raises InvalidInputError with a message naming the problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgeval import InvalidInputError
from kgeval.evaluation import FunctionScorer, evaluate_ranks

E, R = 6, 2
TABLE = torch.arange(E * R * E, dtype=torch.float32).reshape(E, R, E) % 5
GOOD = np.array([[0, 0, 1], [2, 1, 3]])


def scorer(**kw):
    return FunctionScorer(lambda h, r, t: TABLE[h, r, t], E, **kw)


def run(triples=GOOD, s=None, **kw):
    kw.setdefault("progress", False)
    return evaluate_ranks(s if s is not None else scorer(num_relations=R), triples, **kw)


@pytest.mark.parametrize(
    "triples, match",
    [
        (GOOD.astype(float), "integer ids"),
        (torch.tensor(GOOD, dtype=torch.float32), "integer ids"),
        (GOOD[:, :2], r"shape \(n, 3\)"),
        (GOOD.reshape(-1), r"shape \(n, 3\)"),
        (np.zeros((0, 3), dtype=np.int64), "empty"),
        (np.array([[0, 0, E]]), r"tail id 6 .* out of range \[0, 6\)"),
        (np.array([[-1, 0, 1]]), "head id -1"),
        (np.array([[0, R, 1]]), r"relation id 2 .* out of range \[0, 2\)"),
        (np.array([["a", "b", "c"]]), "integer ids"),
    ],
)
def test_bad_triples(triples, match):
    with pytest.raises(InvalidInputError, match=match):
        run(triples)


def test_bad_filter_triples():
    with pytest.raises(InvalidInputError, match=r"filter_triples.*shape"):
        run(filter_triples=np.zeros((4, 2), dtype=np.int64))
    with pytest.raises(InvalidInputError, match=r"train: tail id 9"):
        run(filter_triples={"train": np.array([[0, 0, 9]])})
    with pytest.raises(InvalidInputError, match=r"filter_triples\[1\].*integer ids"):
        run(filter_triples=[GOOD, GOOD.astype(float)])


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"restrict_entities": []}, "restrict_entities is empty"),
        ({"restrict_entities": set()}, "restrict_entities is empty"),
        ({"restrict_entities": torch.tensor([], dtype=torch.long)}, "restrict_entities is empty"),
        ({"restrict_relations": np.array([], dtype=np.int64)}, "restrict_relations is empty"),
        ({"restrict_entities": [4, 5]}, "excludes every evaluation triple"),
        ({"restrict_relations": {1}, "restrict_entities": [0, 1]}, "excludes every evaluation triple"),
        ({"restrict_entities": [0, 99]}, r"entity id 99 is out of range"),
        ({"restrict_relations": [-1]}, r"relation id -1 is out of range"),
        ({"restrict_entities": [0.5, 1.0]}, "integer entity ids"),
        # triples passed as the entity restriction: flattened, their relation ids counted as entities
        ({"restrict_entities": GOOD}, r"1-d list of entity ids, got an array of shape \(2, 3\) \(triples\?"),
        ({"restrict_relations": [[0, 1]]}, r"1-d list of relation ids, got an array of shape \(1, 2\)"),
        ({"nan_policy": "ignore"}, "nan_policy"),
        ({"sides": ("middle",)}, "unknown side"),
        ({"sides": ()}, "sides is empty"),
        ({"tie_tolerance": -1.0}, "tie_tolerance"),
        ({"tie_tolerance": float("nan")}, "tie_tolerance"),
        ({"num_negatives": 0}, "num_negatives"),
        ({"batch_size": 0}, "batch_size"),
        ({"memory_budget": -5}, "memory_budget"),
        ({"query_metrics_k": (0,)}, "query_metrics_k"),
    ],
)
def test_bad_options(kw, match):
    with pytest.raises(InvalidInputError, match=match):
        run(**kw)


def test_scorer_without_num_entities_or_methods():
    class NoCount:
        def score_tails(self, h, r):
            return TABLE[h, r]

    with pytest.raises(InvalidInputError, match="num_entities"):
        run(s=NoCount())

    class TailsOnly:
        num_entities = E

        def score_tails(self, h, r):
            return TABLE[h, r]

    with pytest.raises(InvalidInputError, match=r"no score_heads\(\) method"):
        run(s=TailsOnly())
    run(s=TailsOnly(), sides="tail")  # fine for tail prediction only


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda h, r: TABLE[h, r][:, :-1], r"returned shape \(2, 5\), expected \(2, 6\)"),
        (lambda h, r: TABLE[h, r].long(), "floating-point"),
        (lambda h, r: TABLE[h, r].numpy(), "torch.Tensor"),
        (lambda h, r: TABLE[h, r][:1], r"returned shape \(1, 6\)"),
    ],
)
def test_scorer_output_checked_on_first_batch(fn, match):
    class Bad:
        num_entities = E

        def score_tails(self, h, r):
            return fn(h, r)

        def score_heads(self, r, t):
            return TABLE[:, r, t].T

    with pytest.raises(InvalidInputError, match=match):
        run(s=Bad(), sides="tail")


def test_sampled_candidate_output_checked():
    s = scorer()
    s.score_tail_candidates = lambda h, r, c: TABLE[h, r][:, :2]
    with pytest.raises(InvalidInputError, match="score_tail_candidates|returned shape"):
        run(s=s, sides="tail", num_negatives=3)


def test_nan_scores_raise_naming_triple_and_side():
    table = TABLE.clone()
    table[2, 1, 4] = float("nan")  # row of query (2, 1, ?), not the true answer
    s = FunctionScorer(lambda h, r, t: table[h, r, t], E)
    with pytest.raises(InvalidInputError, match=r"NaN scores .*\(2, 1, 3\), tail prediction"):
        evaluate_ranks(s, GOOD, progress=False)
    table2 = TABLE.clone()
    table2[0, 0, 1] = float("nan")  # the true answer of (0, 0, 1): hit on the head side first
    s2 = FunctionScorer(lambda h, r, t: table2[h, r, t], E)
    with pytest.raises(InvalidInputError, match=r"\(0, 0, 1\), head prediction"):
        evaluate_ranks(s2, GOOD, progress=False)
    # sampled protocol too
    with pytest.raises(InvalidInputError, match=r"NaN scores .*\(0, 0, 1\)"):
        evaluate_ranks(s2, GOOD, progress=False, num_negatives=2, sides="tail")


def test_invalid_input_error_is_a_value_error():
    with pytest.raises(ValueError):
        run(np.array([[0.0, 0.0, 1.0]]))


@pytest.mark.parametrize(
    "device, match",
    [("meta", "holds no data"),
     pytest.param("cuda:7", "CUDA is not available|has \\d+ CUDA", marks=pytest.mark.skipif(
         torch.cuda.device_count() > 7, reason="this machine has a cuda:7")),
     # other backends torch names but this build cannot use: bare RuntimeError / AssertionError before
     pytest.param("xla", "cannot be used here"), pytest.param("lazy", "cannot be used here"),
     pytest.param("xpu", "cannot be used here", marks=pytest.mark.skipif(
         hasattr(torch, "xpu") and torch.xpu.is_available(), reason="this machine has an XPU"))],
)
def test_unusable_device_is_named_before_any_work(device, match):
    """cuda:7 on a CPU-only torch and the meta device failed deep inside torch."""
    with pytest.raises(InvalidInputError, match=f"device '{device}'.*({match})"):
        run(device=device)


class _ShrinkingRows:
    """Right shape on the first call, one row too few afterwards (the consistency check's one-row
    re-scoring then got zero rows: an IndexError from deep inside, before the check was named)."""

    num_entities, num_relations = E, R

    def __init__(self, triple_scores: bool):
        self.calls = 0
        if triple_scores:
            self.score_triples = lambda h, r, t: torch.zeros(0)

    def score_tails(self, h, r):
        self.calls += 1
        rows = len(h) if self.calls == 1 else len(h) - 1
        return TABLE[h[:rows], r[:rows]]

    def score_heads(self, r, t):
        return self.score_tails(t, r)


@pytest.mark.parametrize("triple_scores, match", [(False, r"returned shape \(0, 6\), expected \(1, 6\)"),
                                                  (True, r"score_triples returned shape \(0,\) for one triple")])
def test_consistency_check_names_a_wrong_one_row_shape(triple_scores, match):
    with pytest.raises(InvalidInputError, match=match):
        run(s=_ShrinkingRows(triple_scores), sides="tail")


@pytest.mark.parametrize("triple,message", [
    ((-1, 0, 1), r"head id -1 of triple 2 \(-1, 0, 1\) is out of range \[0, 5\)"),
    ((0, 0, 5), r"tail id 5 of triple 2 \(0, 0, 5\) is out of range \[0, 5\)"),
    ((0, 3, 1), r"relation id 3 of triple 2 \(0, 3, 1\) is out of range \[0, 3\)"),
    ((0, -2, 1), r"relation id -2 of triple 2 \(0, -2, 1\) is out of range \[0, 3\)"),
])
def test_check_ids_names_the_first_bad_triple(triple, message):
    from kgeval.triples import check_ids

    arr = np.array([(0, 0, 1), (4, 2, 4), triple, (1, 1, 1)], dtype=np.int64)
    with pytest.raises(InvalidInputError, match=message):
        check_ids("filter", arr, 5, 3)
    check_ids("filter", arr[:2], 5, 3)  # the good ones pass


def test_check_ids_takes_more_relations_than_entities():
    """The fast path bounds every id by the entity count; relation ids above it are still checked by
    their own bound."""
    from kgeval.triples import check_ids

    check_ids("t", np.array([(0, 7, 1), (1, 2, 0)], dtype=np.int64), 2, 8)
    with pytest.raises(InvalidInputError, match=r"relation id 8 of triple 0 \(0, 8, 1\) is out of range \[0, 8\)"):
        check_ids("t", np.array([(0, 8, 1)], dtype=np.int64), 2, 8)
    with pytest.raises(InvalidInputError, match=r"tail id 2 of triple 1"):
        check_ids("t", np.array([(0, 7, 1), (1, 2, 2)], dtype=np.int64), 2, 8)


def test_num_relations_beyond_the_scorers_is_named():
    """num_relations above the scorer's let relation ids pass the range check that the scorer cannot
    score (an IndexError from inside the scorer); at most the scorer's is fine."""
    tri = np.array([[0, 3, 1]])
    with pytest.raises(InvalidInputError, match=r"num_relations=5 exceeds the scorer's num_relations=2"):
        run(tri, num_relations=5)
    with pytest.raises(InvalidInputError, match=r"relation id 3 .* out of range \[0, 2\)"):
        run(tri, num_relations=2)
    assert len(run(GOOD, num_relations=2).rank_table) == 4
    # a scorer without a relation count takes the option as given
    assert len(run(np.array([[0, 1, 1]]), s=scorer(), num_relations=2).rank_table) == 2


def test_a_dataframe_of_filter_triples_is_one_set():
    """A DataFrame passed as filter_triples was iterated like a list of sets: its column names became
    'sets' ("filter_triples[0] must hold integer ids, got dtype <U4"). It is one set, as an array is."""
    pd = pytest.importorskip("pandas")
    train = np.array([[0, 0, 2], [1, 1, 1], [2, 1, 4]])
    frame = pd.DataFrame(train, columns=["head", "relation", "tail"])
    got = run(filter_triples=frame)
    want = run(filter_triples=train)
    assert got.protocol.num_known_triples == want.protocol.num_known_triples == 5
    assert [f.name for f in got.protocol.filter_sets] == ["evaluation", "filter_triples"]
    assert np.array_equal(got.rank_table.optimistic, want.rank_table.optimistic)
    assert np.array_equal(got.rank_table.num_candidates, want.rank_table.num_candidates)


def test_a_single_id_restricts_to_it():
    """A scalar restriction is a restriction to that one id (as a list of one)."""
    one, listed = run(restrict_relations=1), run(restrict_relations=[1])
    assert np.array_equal(one.rank_table.triple_index, listed.rank_table.triple_index)
    assert set(GOOD[one.rank_table.triple_index, 1].tolist()) == {1}


class _RowsOnly:
    """A scorer without ``score_*_candidates``: sampled ranking scores whole rows and gathers."""

    def __init__(self, table):
        self.table, self.num_entities, self.num_relations = table, table.shape[0], table.shape[1]

    def score_tails(self, h, r):
        return self.table[h, r]

    def score_heads(self, r, t):
        return self.table[:, r, t].T.contiguous()


@pytest.mark.parametrize("mode", ["torch", "numba"])
def test_nan_at_a_filtered_answer_is_no_candidate_in_any_protocol(mode, monkeypatch):
    """One NaN rule for full and sampled ranking: the true score and the candidates decide a rank, a
    filtered known answer is none of them. Before, full ranking raised for the NaN of the train triple
    (0, 0, 3) ('NaN scores for triple 0 of the batch (0, 0, 1)') while sampled ranking, which never
    scores a known answer, ranked it (optimistic 2 of 3 candidates)."""
    from kgeval.errors import NaNScoresError

    monkeypatch.setenv("KGEVAL_COUNT_KERNEL", mode)
    n = 8
    table = (torch.arange(n * n, dtype=torch.float32).reshape(n, 1, n) * 7) % 5
    train, test = np.array([[0, 0, 3], [0, 0, 5], [6, 0, 2]]), np.array([[0, 0, 1], [0, 0, 4], [2, 0, 6]])
    nan = table.clone()
    nan[0, 0, 3] = float("nan")  # a train triple: a filtered answer of query (0, 0, ?), and of (?, 0, 3)
    for kw in ({}, {"entity_chunk_size": 3}, {"batch_size": 1}, {"query_metrics_k": (1, 2)},
               {"num_negatives": 3, "seed": 1}, {"num_negatives": n}):
        for make in (lambda t: FunctionScorer(lambda h, r, e: t[h, r, e], n, num_relations=1), _RowsOnly):
            got = run(test, make(nan), filter_triples=train, **kw)
            want = run(test, make(table), filter_triples=train, **kw)  # any value there gives these ranks
            for col in ("side", "triple_index", "optimistic", "pessimistic", "num_candidates"):
                assert np.array_equal(getattr(got.rank_table, col), getattr(want.rank_table, col)), (kw, col)
            assert got.extra == want.extra, kw
    # where it is a candidate (unfiltered), or the true answer, the NaN raises in every protocol
    for kw in ({}, {"entity_chunk_size": 3}, {"num_negatives": n}):
        for make in (lambda t: FunctionScorer(lambda h, r, e: t[h, r, e], n, num_relations=1), _RowsOnly):
            with pytest.raises(NaNScoresError, match=r"NaN scores for triple \d of the batch"):
                run(test, make(nan), filter_triples=train, filtered=False, **kw)
            with pytest.raises(NaNScoresError, match=r"\(0, 0, 3\), tail prediction"):
                run(np.array([[0, 0, 3]]), make(nan), filter_triples=train, sides="tail", **kw)
