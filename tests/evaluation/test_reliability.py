"""Issue 7 regressions: scorer memory is never written, CPU out-of-memory shrinks the batch,
huge num_negatives is capped before allocating, scorer misbehaviour gets one clear error."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import torch
from patience import scaled

from kgeval.errors import InvalidInputError
from kgeval.evaluation import FunctionScorer, evaluate_ranks
from kgeval.models import DistMultScorer
from kgeval.evaluation.batches import is_out_of_memory
from kgeval.evaluation.scoring import SideScorer
from kgeval.ranks import SIDE_TAIL

E, R = 9, 2


def _graph(seed=0):
    rng = np.random.default_rng(seed)
    allt = rng.integers(0, [E, R, E], size=(50, 3))
    return allt[:30], allt[30:]


def _rows(tab):
    return sorted(zip(tab.side.tolist(), tab.triple_index.tolist(), tab.optimistic.tolist(),
                      tab.pessimistic.tolist(), tab.num_candidates.tolist()))


class Popularity:
    """Scores every candidate by its (log) degree, the same row for every query."""

    num_entities = E
    num_relations = R

    def __init__(self, counts, *, expand: bool):
        self.row = torch.log1p(counts)
        self.expand = expand

    def _out(self, n, entities):
        row = self.row if entities is None else self.row[entities]
        return row.expand(n, -1) if self.expand else row.repeat(n, 1)

    def score_tails(self, h, r, entities=None):
        return self._out(h.shape[0], entities)

    def score_heads(self, r, t, entities=None):
        return self._out(t.shape[0], entities)


@pytest.mark.parametrize("mode", [{}, {"entity_chunk_size": 4}, {"num_negatives": 3},
                                  {"restrict_entities": range(1, E)}, {"query_metrics_k": (1, 3)}])
def test_expanded_score_views_are_never_written(mode):
    train, test = _graph()
    counts = torch.as_tensor(np.bincount(np.r_[train[:, 0], train[:, 2]], minlength=E), dtype=torch.float32)
    expanded = Popularity(counts, expand=True)
    before = expanded.row.clone()
    kw = dict(filter_triples=train, progress=False, **mode)
    got = evaluate_ranks(expanded, test, **kw)
    ref = evaluate_ranks(Popularity(counts, expand=False), test, **kw)
    assert _rows(got.rank_table) == _rows(ref.rank_table)
    assert got.extra == ref.extra
    assert torch.equal(expanded.row, before)  # the shared row is untouched (no NaN written)


def test_scorer_returning_its_own_buffer_is_not_written():
    train, test = _graph(1)
    table = torch.as_tensor(np.random.default_rng(1).integers(0, 3, size=(E, R, E)), dtype=torch.float32)

    class Cached:  # returns the same preallocated tensor each call (a plain tensor, not a view)
        num_entities, num_relations = E, R

        def __init__(self):
            self.buf = torch.empty(1, E)

        def score_tails(self, h, r):
            self.buf = table[h, r].clone() if self.buf.shape[0] != h.shape[0] else self.buf.copy_(table[h, r])
            return self.buf

        def score_heads(self, r, t):
            return table[:, r, t].T.contiguous()

    s = Cached()
    got = evaluate_ranks(s, test, filter_triples=train, sides="tail", batch_size=1, progress=False)
    plain = evaluate_ranks(type("T", (), {"num_entities": E, "num_relations": R,
                                          "score_tails": lambda self, h, r: table[h, r],
                                          "score_heads": lambda self, r, t: table[:, r, t].T})(),
                           test, filter_triples=train, sides="tail", batch_size=1, progress=False)
    assert _rows(got.rank_table) == _rows(plain.rank_table)
    assert not torch.isnan(s.buf).any()


def test_fresh_scores_are_written_in_place_without_a_copy():
    s = DistMultScorer(torch.randn(E, 4), torch.randn(R, 4))
    sc = SideScorer(s, SIDE_TAIL, num_entities=E, device=torch.device("cpu"), allowed=None, threads=None)
    with torch.inference_mode():
        fresh = sc.rows(torch.tensor([0, 1]), torch.tensor([0, 1]))
        assert sc.writable(fresh) is fresh  # the fast path keeps no extra copy
        assert sc.writable(s.entity[:2]) is not s.entity[:2]
        assert sc.writable(fresh[:, :3]).data_ptr() != fresh.data_ptr()


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                     "you tried to allocate 123456789 bytes. Error code 12 (Cannot allocate memory)"),
        MemoryError("Unable to allocate 1.00 GiB for an array with shape (1024, 262144) and data type float32"),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    ],
)
@pytest.mark.parametrize("mode", [{}, {"num_negatives": 4}])
def test_out_of_memory_of_any_allocator_halves_the_batch(exc, mode):
    train, test = _graph(2)
    table = torch.as_tensor(np.random.default_rng(2).integers(0, 4, size=(E, R, E)), dtype=torch.float32)

    class Fragile:
        num_entities, num_relations = E, R

        def score_tails(self, h, r):
            if h.shape[0] > 3:
                raise exc
            return table[h, r]

        def score_heads(self, r, t):
            if t.shape[0] > 3:
                raise exc
            return table[:, r, t].T.contiguous()

    with pytest.warns(UserWarning, match="out of memory"):
        got = evaluate_ranks(Fragile(), test, filter_triples=train, batch_size=16, progress=False, **mode)
    ref = evaluate_ranks(Fragile(), test, filter_triples=train, batch_size=1, progress=False, **mode)
    assert _rows(got.rank_table) == _rows(ref.rank_table)


def test_is_out_of_memory_recognises_numpy_and_refuses_others():
    try:
        np.empty(2**62, dtype=np.uint8)
    except MemoryError as e:  # numpy._core._exceptions._ArrayMemoryError
        assert is_out_of_memory(e)
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of memory"))  # only allocator errors


def test_huge_num_negatives_is_capped_before_allocating():
    train, test = _graph(3)
    s = DistMultScorer(torch.randint(-2, 3, (E, 3)).float(), torch.randint(-2, 3, (R, 3)).float())
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        huge = evaluate_ranks(s, test, filter_triples=train, num_negatives=10**6, progress=False)
        every = evaluate_ranks(s, test, filter_triples=train, num_negatives=E, progress=False)
    assert time.perf_counter() - t0 < scaled(5)
    assert _rows(huge.rank_table) == _rows(every.rank_table)
    assert all(n.shape[1] <= E for n in huge.sampled_negatives.values())
    assert huge.protocol["sampling"]["num_negatives"] == 10**6


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", [{}, {"entity_chunk_size": 4}, {"num_negatives": 3}])
def test_half_precision_scores_are_widened(dtype, mode):
    train, test = _graph(4)
    table = torch.as_tensor(np.random.default_rng(4).integers(-3, 4, size=(E, R, E)), dtype=torch.float32)

    def make(dt):
        class T:
            num_entities, num_relations = E, R

            def score_tails(self, h, r, entities=None):
                out = table[h, r] if entities is None else table[h, r][:, entities]
                return out.to(dt)

            def score_heads(self, r, t, entities=None):
                out = table[:, r, t].T if entities is None else table[:, r, t].T[:, entities]
                return out.to(dt)

        return T()

    got = evaluate_ranks(make(dtype), test, filter_triples=train, progress=False, **mode)
    ref = evaluate_ranks(make(torch.float32), test, filter_triples=train, progress=False, **mode)
    assert _rows(got.rank_table) == _rows(ref.rank_table)


def test_output_shape_checked_on_every_call_not_only_the_first():
    train, test = _graph(5)
    table = torch.rand(E, R, E)
    calls = []

    class Drifts:
        num_entities, num_relations = E, R

        def score_tails(self, h, r):
            calls.append(1)
            out = table[h, r]
            return out if len(calls) == 1 else out[:, :-1]

        def score_heads(self, r, t):
            return table[:, r, t].T

    with pytest.raises(InvalidInputError, match=r"returned shape \(\d+, 8\), expected \(\d+, 9\)"):
        evaluate_ranks(Drifts(), test, sides="tail", batch_size=2, progress=False)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda out: out.reshape(-1), "returned shape"),  # wrong ndim
        (lambda out: out.to(torch.complex64), "floating-point"),
        (lambda out: out > 0.5, "floating-point"),
        (lambda out: out.tolist(), "torch.Tensor"),
    ],
)
def test_bad_scorer_output_is_one_clear_error(make, match):
    train, test = _graph(6)
    table = torch.rand(E, R, E)

    class Bad:
        num_entities, num_relations = E, R

        def score_tails(self, h, r):
            return make(table[h, r])

        def score_heads(self, r, t):
            return table[:, r, t].T

    with pytest.raises(InvalidInputError, match=match):
        evaluate_ranks(Bad(), test, sides="tail", progress=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_scores_on_another_device_are_moved():
    train, test = _graph(7)
    table = torch.rand(E, R, E)

    class OnGPU:
        num_entities, num_relations = E, R

        def score_tails(self, h, r):
            return table[h, r].cuda()

        def score_heads(self, r, t):
            return table[:, r, t].T.cuda()

    got = evaluate_ranks(OnGPU(), test, filter_triples=train, progress=False, device="cpu")
    ref = evaluate_ranks(type("T", (), {"num_entities": E, "num_relations": R,
                                        "score_tails": lambda self, h, r: table[h, r],
                                        "score_heads": lambda self, r, t: table[:, r, t].T})(),
                         test, filter_triples=train, progress=False)
    assert _rows(got.rank_table) == _rows(ref.rank_table)


@pytest.mark.parametrize("empty", [[], (), np.zeros((0, 3)), torch.tensor([]), np.zeros((0, 3), dtype=np.int64)])
def test_empty_triples_say_empty(empty):
    s = DistMultScorer(torch.randn(E, 2), torch.randn(R, 2))
    with pytest.raises(InvalidInputError, match="triples is empty"):
        evaluate_ranks(s, empty, progress=False)


def test_not_a_scorer_is_refused_clearly():
    with pytest.raises(InvalidInputError, match="is not a scorer"):
        evaluate_ranks(object(), np.array([[0, 0, 1]]), progress=False)


def test_bookkeeping_runs_on_the_tunings_threads_and_restores_the_callers(monkeypatch):
    from kgeval.evaluation import Tuning, counting

    seen = []
    real = counting.Counter.rows

    def rows(self, *a, **k):
        seen.append(torch.get_num_threads())
        return real(self, *a, **k)

    monkeypatch.setattr(counting.Counter, "rows", rows)
    threads = torch.get_num_threads()
    scorer = FunctionScorer(lambda h, r, t: (h * 7 + r * 3 + t * 5) % 11 * 1.0, 20, num_relations=2)
    test = np.array([[0, 0, 1], [2, 1, 3]])
    for book, want in ((1, 1), (None, threads)):
        seen.clear()
        evaluate_ranks(scorer, test, progress=False, tuning=Tuning(kernel="torch", bookkeeping_threads=book))
        assert seen and set(seen) == {want} and torch.get_num_threads() == threads


def test_memory_budget_respects_an_address_space_limit(monkeypatch):
    import resource

    from kgeval.evaluation import inputs

    with open("/proc/self/statm") as fh:
        vsize = int(fh.read().split()[0]) * resource.getpagesize()
    monkeypatch.setattr(resource, "getrlimit", lambda what: (vsize + (64 << 20), resource.RLIM_INFINITY))
    avail = inputs.available_memory_bytes()
    assert avail is not None and avail <= 64 << 20
    assert inputs.default_memory_budget() <= max(16 << 20, avail // 4)


def test_scores_are_moved_to_the_evaluation_device():
    # the move itself, without a second accelerator: "meta" stands in for the evaluation device
    s = DistMultScorer(torch.randn(E, 4), torch.randn(R, 4))
    sc = SideScorer(s, SIDE_TAIL, num_entities=E, device=torch.device("meta"), allowed=None, threads=None)
    out = sc._checked(torch.zeros(2, E, dtype=torch.bfloat16), (2, E), "score_tails")
    assert out.device.type == "meta" and out.dtype == torch.float32
