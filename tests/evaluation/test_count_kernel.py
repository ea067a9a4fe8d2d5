"""The compiled counting kernel against brute force and against the torch path it replaces."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch
from patience import scaled

from kgeval.errors import InvalidInputError
from kgeval.evaluation import FunctionScorer, evaluate_ranks
from kgeval.evaluation import count_kernel, full
from kgeval.evaluation import Tuning
from kgeval.evaluation.counting import fused_counts, use_kernel
from kgeval.evaluation.counting import Counter
from kgeval.evaluation.batches import first_rest


@pytest.fixture(autouse=True)
def loaded_kernel():
    assert count_kernel._load(), "numba is a dependency: the kernel must load"


def _brute(S, task_q, true, tol, known):
    """Per task: #{c not known: S > t + tol}, #{c not known: t - tol <= S <= t + tol}, in Python
    floats (float64: float32 scores are exact there, the definition's real arithmetic up to 2^-53)."""
    known = {(int(r), int(c)) for r, c in zip(*known)} if known is not None else set()
    better, tied = [], []
    for t, i in enumerate(task_q.tolist()):
        hi = true[t].item() + tol
        lo = true[t].item() - tol
        b = g = 0
        for j, s in enumerate(S[i].tolist()):
            if (i, j) in known:
                continue
            b += s > hi
            g += lo <= s <= hi
        better.append(b)
        tied.append(g)
    return better, tied


def _case(seed, dtype=torch.float32):
    rng = np.random.default_rng(seed)
    nq, w = int(rng.integers(1, 7)), int(rng.integers(1, 40))
    S = torch.as_tensor(rng.integers(0, 5, size=(nq, w)), dtype=dtype)  # small integers: many ties
    S[torch.as_tensor(rng.random((nq, w)) < 0.05)] = float("nan")
    # every row has a task, some rows several (tasks sorted by row, as the evaluator batches them)
    task_q = torch.as_tensor(np.sort(np.concatenate([np.arange(nq), rng.integers(0, nq, size=int(rng.integers(0, 2 * nq + 1)))])))
    true = torch.as_tensor(rng.integers(0, 5, size=task_q.shape[0]), dtype=dtype)
    flat = rng.choice(nq * w, size=int(rng.integers(0, nq * w // 3 + 1)), replace=False)
    known = (torch.as_tensor(flat // w), torch.as_tensor(flat % w))
    return S, task_q, true, known


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("tol", [0.0, 1.0])
def test_kernel_matches_brute_force(seed, tol):
    S, task_q, true, known = _case(seed, torch.float32 if seed % 2 else torch.float64)
    for k in (None, known):
        b, t, nan_rows = fused_counts(S, true, task_q, tol, k)
        assert (b.tolist(), t.tolist()) == _brute(S, task_q, true, tol, k)
        assert nan_rows == int(torch.isnan(S).any(1).sum())


@functools.lru_cache(maxsize=1)
def _narrow_kernel():
    """The count kernel compiled with float32 counts only below 8 columns (once per session)."""
    import types

    import numba

    f = count_kernel._count_rows
    narrow = types.FunctionType(f.__code__, {**f.__globals__, "_SEGMENT": 8}, "count_rows_narrow")
    return numba.njit(nogil=True, boundscheck=False, fastmath={"reassoc"})(narrow)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("tol", [0.0, 1.0])
def test_integer_counts_of_rows_too_long_for_float32_match_brute_force(seed, tol):
    """Rows of 2^24 columns or more are counted in integers (float32 counts are exact only below):
    the kernel compiled again with that bound at 8 columns takes the integer loops for most of these
    rows and must give brute force, NaN rows included."""
    kernel = _narrow_kernel()
    S, task_q, true, known = _case(seed, torch.float32 if seed % 2 else torch.float64)
    from kgeval.evaluation.counting import tolerance_bounds

    hi, lo = tolerance_bounds(true, tol)
    for k in (None, known):
        krow, kcol = (np.zeros(0, np.int64),) * 2 if k is None else (k[0].numpy(), k[1].numpy())
        better, tied = np.zeros(task_q.shape[0], np.int64), np.zeros(task_q.shape[0], np.int64)
        nan_rows = kernel(S.numpy(), task_q.numpy(), lo.numpy(), hi.numpy(), krow, kcol, better, tied)
        assert (better.tolist(), tied.tolist()) == _brute(S, task_q, true, tol, k)
        assert nan_rows == int(torch.isnan(S).any(1).sum())


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("tol", [0.0, 1.0])
def test_fused_counts_summed_over_column_blocks_match_brute_force(seed, tol):
    """FusedCounts (one walker's chunks of a batch) summed over column blocks, each with its own known
    pairs (columns relative to the block), equals brute force on the whole rows; NaN rows are flagged."""
    from kgeval.evaluation.blocks import known_by_column

    S, task_q, true, known = _case(seed, torch.float32 if seed % 2 else torch.float64)
    w = S.shape[1]
    bounds = sorted({0, w, *np.random.default_rng(seed).integers(0, w, 3).tolist()})
    acc = count_kernel.FusedCounts.start(true, task_q, tol)
    flagged = 0
    for (c0, c1), part_known in zip(zip(bounds, bounds[1:]), known_by_column(known, bounds)):
        flagged += acc.add(S[:, c0:c1], part_known)
    b, t = acc.result()
    assert (b.tolist(), t.tolist()) == _brute(S, task_q, true, tol, known)
    assert bool(flagged) == bool(torch.isnan(S).any())
    assert count_kernel.FusedCounts.start(true.half(), task_q, tol) is None  # float16: the caller's other path
    assert acc.add(S[:, :1].half(), None) is None


@pytest.mark.parametrize("seed", range(20))
def test_kernel_matches_the_torch_path_on_float_scores(seed):
    """Continuous scores, tasks sharing rows, known answers: the torch path (NaN-masking a copy) gives the same."""
    rng = np.random.default_rng(100 + seed)
    nq, w = 9, 1000
    S = torch.as_tensor(rng.standard_normal((nq, w)), dtype=torch.float32)
    task_q = torch.as_tensor(np.sort(np.concatenate([np.arange(nq), rng.integers(0, nq, 12)])))
    cols = torch.as_tensor(rng.integers(0, w, task_q.shape[0]))
    true = S[task_q, cols]
    flat = np.unique(np.concatenate([rng.choice(nq * w, 300, replace=False), (task_q * w + cols).numpy()]))
    known = (torch.as_tensor(flat // w), torch.as_tensor(flat % w))
    b, t, _ = fused_counts(S, true, task_q, 0.0, known)
    masked = S.clone()
    masked[known] = float("nan")
    first, rest = first_rest(task_q)
    rb, rt = Counter(0.0).rows(masked, true, task_q, first, rest)
    assert torch.equal(b, rb) and torch.equal(t, rt)
    assert int(t.min()) >= 0  # each task's own answer is known: never counted as its own tie


def test_kernel_needs_cpu_floats_and_reads_non_contiguous_blocks():
    S = torch.arange(12, dtype=torch.float32).view(3, 4)
    assert fused_counts(S.to(torch.int64), torch.zeros(3), torch.arange(3), 0.0, None) is None
    b, t, _ = fused_counts(S.t(), torch.tensor([1.0, 5.0, 2.0, 11.0]), torch.arange(4), 0.0, None)
    assert b.tolist() == [2, 1, 2, 0] and t.tolist() == [0, 1, 1, 1]  # S.t() rows: [0,4,8] [1,5,9] [2,6,10] [3,7,11]


@pytest.mark.parametrize("kernel, device, pairs, loaded, expected", [
    ("auto", "cpu", 99, True, True),  # warmed (or loaded by an earlier evaluation): small ones use it too
    ("auto", "cpu", 99, False, False),  # not loaded and small: the one-off import would cost more than it saves
    ("auto", "cpu", 100, False, True),  # this evaluation alone is large enough: loaded now
    ("auto", "meta", 10**12, True, False),  # accelerators count with torch
    ("numba", "cpu", 1, False, True),
    ("numba", "meta", 1, True, False),
    ("torch", "cpu", 10**12, True, False),
])
def test_use_kernel_is_one_rule_on_this_evaluation(kernel, device, pairs, loaded, expected, monkeypatch):
    """The decision depends on the Tuning, the device, this evaluation's size and whether the kernel is
    loaded (warm_kernel), never on what earlier evaluations scored."""
    import threading

    if not loaded:
        ready = threading.Event()
        monkeypatch.setattr(count_kernel, "_READY", ready)  # as in a fresh process
        monkeypatch.setattr(count_kernel, "_load", lambda: ready.set() or True)
    tuning = Tuning(kernel=kernel, kernel_min_pairs=100)
    assert use_kernel(torch.device(device), pairs, tuning) is expected
    for _ in range(3):  # asking again (a loop of evaluations) changes nothing by itself
        assert use_kernel(torch.device(device), pairs, tuning) is expected


def test_use_kernel_without_numba(monkeypatch):
    monkeypatch.setattr(count_kernel, "_KERNEL", False)  # as if numba could not be imported
    monkeypatch.setattr(count_kernel, "_READY", __import__("threading").Event())
    assert fused_counts(torch.zeros(1, 1), torch.zeros(1), torch.zeros(1, dtype=torch.long), 0.0, None) is None
    with pytest.raises(InvalidInputError, match="numba cannot be imported"):
        use_kernel(torch.device("cpu"), 1, Tuning(kernel="numba"))
    assert not use_kernel(torch.device("cpu"), 10**12, Tuning())  # "auto" quietly keeps torch
    assert not count_kernel.warm_kernel()


@pytest.mark.parametrize("env, expected", [
    ({}, Tuning()),
    ({"KGEVAL_COUNT_KERNEL": " Numba "}, Tuning(kernel="numba")),
    ({"KGEVAL_CHUNK_WORKERS": "3"}, Tuning(workers=3)),
    ({"KGEVAL_BOOKKEEPING_THREADS": "0"}, Tuning(bookkeeping_threads=None)),
    ({"KGEVAL_BOOKKEEPING_THREADS": "2", "KGEVAL_COUNT_KERNEL": ""}, Tuning(bookkeeping_threads=2)),
])
def test_tuning_from_env(env, expected):
    assert Tuning.from_env(env) == expected


@pytest.mark.parametrize("env, match", [
    ({"KGEVAL_COUNT_KERNEL": "fast"}, "KGEVAL_COUNT_KERNEL must be"),
    ({"KGEVAL_CHUNK_WORKERS": "two"}, "KGEVAL_CHUNK_WORKERS must be a positive integer"),
    ({"KGEVAL_CHUNK_WORKERS": "0"}, "KGEVAL_CHUNK_WORKERS must be a positive integer"),
    ({"KGEVAL_BOOKKEEPING_THREADS": "-1"}, "KGEVAL_BOOKKEEPING_THREADS must be a non-negative integer"),
])
def test_tuning_from_env_names_a_bad_value(env, match):
    with pytest.raises(InvalidInputError, match=match):
        Tuning.from_env(env)


def test_tuning_refuses_bad_fields_and_evaluate_takes_one():
    with pytest.raises(InvalidInputError, match="Tuning.kernel"):
        Tuning(kernel="gpu")
    with pytest.raises(InvalidInputError, match="Tuning.cpu_block"):
        Tuning(cpu_block=0)
    scorer, _, train, test = _graph()
    with pytest.raises(InvalidInputError, match="tuning must be a Tuning"):
        evaluate_ranks(scorer, test, filter_triples=[train], progress=False, tuning={"kernel": "torch"})


def _graph(seed=0, e=50, r=4):
    rng = np.random.default_rng(seed)
    table = torch.as_tensor(rng.integers(0, 6, size=(e, r, e)), dtype=torch.float32)
    allt = rng.integers(0, [e, r, e], size=(400, 3))
    return FunctionScorer(lambda h, rr, t: table[h, rr, t], e, num_relations=r), table, allt[:300], allt[300:]


@pytest.mark.parametrize("kw", [{}, {"entity_chunk_size": 7}, {"filtered": False}, {"restrict_entities": range(0, 50, 2)},
                                {"tie_tolerance": 1.0}])
def test_evaluations_use_the_kernel_and_agree_with_torch(kw, monkeypatch):
    """Whole rows (fused_counts per block) and chunks (FusedCounts summing a walker's chunks) are
    counted by the kernel under KGEVAL_COUNT_KERNEL=numba, never under torch, with the same ranks."""
    scorer, _, train, test = _graph()
    calls = []
    from kgeval.evaluation import blocks

    real, real_add = blocks.fused_counts, count_kernel.FusedCounts.add

    def spy(*a, **k):
        out = real(*a, **k)
        calls.append(out is not None)
        return out

    def spy_add(self, *a, **k):
        out = real_add(self, *a, **k)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(blocks, "fused_counts", spy)
    monkeypatch.setattr(count_kernel.FusedCounts, "add", spy_add)
    tables = {}
    for mode in ("torch", "numba"):
        calls.clear()
        tables[mode] = evaluate_ranks(scorer, test, filter_triples=[train], progress=False, tuning=Tuning(kernel=mode),
                                      **kw).rank_table
        assert calls and all(calls) if mode == "numba" else not calls
    _assert_same_tables(tables["torch"], tables["numba"])


@pytest.mark.parametrize("chunk", [None, 5])
def test_nan_rule_is_the_same_with_the_kernel(chunk, monkeypatch):
    scorer, table, train, test = _graph(1)
    h, r, _ = test[3]
    table[h, r, 17] = float("nan")  # a NaN candidate score (not the answer's)
    messages = {}
    for mode in ("torch", "numba"):
        tuning = Tuning(kernel=mode)
        with pytest.raises(InvalidInputError, match="NaN scores for triple") as err:
            evaluate_ranks(scorer, test, filter_triples=[train], entity_chunk_size=chunk, progress=False, tuning=tuning)
        messages[mode] = str(err.value)
        worst = evaluate_ranks(scorer, test, filter_triples=[train], entity_chunk_size=chunk, nan_policy="worst",
                               progress=False, tuning=tuning).rank_table
        messages[mode + "-worst"] = (worst.optimistic.tolist(), worst.pessimistic.tolist())
    assert messages["torch"] == messages["numba"]
    assert messages["torch-worst"] == messages["numba-worst"]


@pytest.mark.parametrize("chunk", [None, 5])
def test_rows_holding_both_infinities_are_counted_not_taken_for_nan(chunk, monkeypatch):
    """The kernel's NaN hint is a row sum, NaN also for a row holding +inf and -inf: such rows are
    flagged, the exact check finds no NaN, and the counts are brute force's and the torch path's."""
    S = torch.tensor([[0.0, float("inf"), float("-inf"), 1.0, 1.0], [0.0, 1.0, 2.0, 3.0, float("nan")]])
    task_q, true = torch.tensor([0, 0, 1]), torch.tensor([1.0, float("inf"), 2.0])
    b, t, nan_rows = fused_counts(S, true, task_q, 0.0, None)
    assert (b.tolist(), t.tolist()) == _brute(S, task_q, true, 0.0, None)
    assert nan_rows == 2  # row 0 (inf - inf) and row 1 (a NaN): the caller's exact check tells them apart
    scorer, table, train, test = _graph(2)
    h, r, _ = test[3]
    table[h, r, 11], table[h, r, 12] = float("inf"), float("-inf")
    tables = {}
    for mode in ("torch", "numba"):
        tables[mode] = evaluate_ranks(scorer, test, filter_triples=[train], entity_chunk_size=chunk,
                                      progress=False, tuning=Tuning(kernel=mode)).rank_table
    _assert_same_tables(tables["numba"], tables["torch"])


def _tuned(kernel: str = "numba", workers: int | str | None = None, **changes) -> Tuning:
    """A Tuning counting with ``kernel`` on ``workers`` walkers (None: torch's thread count), with ``changes``."""
    return Tuning(kernel=kernel, workers=None if workers is None else int(workers), **changes)


def _tied_model_and_triples(name, ne, nr, seed, n, ntrain):
    """A built-in model whose entity embeddings take few distinct values (many tied scores), and
    ``(train, test)`` random triples."""
    from kgeval.models import get_model

    model = get_model(name, ne, nr, dim=8, seed=seed).eval()
    with torch.no_grad():
        model.entity.weight.copy_(torch.round(model.entity.weight * 4) / 4)
    allt = np.random.default_rng(seed + 1).integers(0, [ne, nr, ne], size=(n, 3))
    return model, allt[:ntrain], allt[ntrain:]


def _assert_same_tables(a, b, label=""):
    for name in ("side", "triple_index", "optimistic", "pessimistic", "num_candidates"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), (label, name)


def _spy_walkers(monkeypatch):
    """The walker counts of every parallel walk (``blocks.run_on_workers`` calls), as a list."""
    from kgeval.evaluation import blocks

    walkers = []
    real = blocks.run_on_workers
    monkeypatch.setattr(blocks, "run_on_workers", lambda sc, walk, n: walkers.append(n) or real(sc, walk, n))
    return walkers


def _tables_by_walker_count(monkeypatch, model, test, train, sides="0", **kw):
    """Rank tables with 1, 2 and 3 walkers (``Tuning.workers``, the compiled kernel), the walker counts each
    evaluation used, and whether torch's thread count came back after each."""
    walkers = _spy_walkers(monkeypatch)
    tables, used, threads = {}, {}, torch.get_num_threads()
    for n in ("1", "2", "3"):
        walkers.clear()
        tables[n] = evaluate_ranks(model, test, filter_triples=[train], progress=False, tuning=_tuned(workers=n),
                                   **kw).rank_table
        used[n] = list(walkers)
        assert torch.get_num_threads() == threads
    return tables, used


class _NoOut:
    """The same model behind methods without ``out=``: every score block is a fresh tensor."""

    def __init__(self, model):
        self.m = model
        self.num_entities, self.num_relations = model.num_entities, model.num_relations

    def score_tails(self, heads, relations, entities=None):
        return self.m.score_tails(heads, relations, entities=entities)

    def score_heads(self, relations, tails, entities=None):
        return self.m.score_heads(relations, tails, entities=entities)

    def score_triples(self, heads, relations, tails):
        return self.m.score_triples(heads, relations, tails)


@pytest.mark.parametrize("mode", ["torch", "numba"])
@pytest.mark.parametrize("kw", [{}, {"entity_chunk_size": 13}, {"filtered": False}, {"restrict_entities": range(0, 60, 3)},
                                {"query_metrics_k": [3]}])
def test_reused_score_block_gives_the_same_ranks(mode, kw, monkeypatch):
    """Built-in models write each CPU score block into one reused buffer (``out=``); the ranks, the
    masking (torch path) and the query metrics equal those from fresh blocks."""
    from kgeval.models import base

    model, train, test = _tied_model_and_triples("distmult", 60, 5, 3, 500, 400)
    blocks = []
    real = base.matmul_into

    def spy(q, cand, out=None):
        res = real(q, cand, out)
        blocks.append(None if out is None else (res.data_ptr() == out.data_ptr(), out.untyped_storage().data_ptr()))
        return res

    monkeypatch.setattr("kgeval.models.distmult.matmul_into", spy)
    monkeypatch.setattr("kgeval.models.base.matmul_into", spy)  # prepared queries (Model.prepare_tails)
    got = evaluate_ranks(model, test, filter_triples=[train], batch_size=16, progress=False, tuning=_tuned(mode), **kw)
    used = [b for b in blocks if b is not None]
    # one block per side and chunk walker (grown at most once), reused by every batch
    assert all(b[0] for b in used) and len({b[1] for b in used}) <= 8 and len(used) >= 2
    ref = evaluate_ranks(_NoOut(model), test, filter_triples=[train], batch_size=16, progress=False,
                         tuning=_tuned(mode), **kw)
    _assert_same_tables(got.rank_table, ref.rank_table)
    assert got.extra == ref.extra


def _expected_walkers(n: str, sides: str) -> set:
    """The walker counts of each walk with ``Tuning(workers=n)`` (the sides run one after the other)."""
    return {int(n)}


@pytest.mark.parametrize("sides", ["0"])
@pytest.mark.parametrize("kw", [{}, {"filtered": False}, {"restrict_entities": range(0, 300, 2)}, {"tie_tolerance": 0.5}])
def test_parallel_chunk_walkers_give_the_same_ranks(kw, sides, monkeypatch):
    """Two threads walking a batch's entity chunks (each scoring on one torch thread, counting with the
    kernel) give the rank tables of one walker; the thread count is restored afterwards. With the sides
    ranked at once (one thread each) the walkers are split between them, with the same tables."""
    model, train, test = _tied_model_and_triples("complex", 300, 6, 5, 900, 700)
    tables, used = _tables_by_walker_count(monkeypatch, model, test, train, sides, entity_chunk_size=37, **kw)
    for n in ("1", "2", "3"):
        if n == "1":
            assert not used[n]
        else:  # every walk of both sides (with sides at once, a walk of one walker is one the other side may help)
            assert used[n] and set(used[n]) <= _expected_walkers(n, sides) and max(used[n]) == max(
                _expected_walkers(n, sides))
    for n in ("2", "3"):
        _assert_same_tables(tables[n], tables["1"], n)


def test_chunk_walkers_take_the_next_chunk_so_a_slow_walker_takes_fewer(monkeypatch):
    """Walkers take chunks as they finish one (not a fixed share of every other chunk): with the second
    walker slowed down, the first takes most chunks, each chunk is counted exactly once and the rank
    table is the one walker's."""
    import time

    model, train, test = _tied_model_and_triples("distmult", 300, 6, 7, 700, 600)
    ref = evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=20, progress=False,
                         tuning=_tuned(workers=1)).rank_table
    two = _tuned(workers=2)
    taken = []
    real_chunk = full.SideScorer.chunk

    def chunk(self, ent, rel, c0, c1, slot=0, prepared=None):
        taken.append((slot, c0))
        if slot == 1:
            time.sleep(0.003)
        return real_chunk(self, ent, rel, c0, c1, slot=slot, prepared=prepared)

    monkeypatch.setattr(full.SideScorer, "chunk", chunk)
    walkers = _spy_walkers(monkeypatch)
    got = evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=20, progress=False,
                         tuning=two).rank_table
    _assert_same_tables(got, ref)
    assert walkers and set(walkers) == {2}
    by_slot = [sum(1 for s, _ in taken if s == k) for k in (0, 1)]
    assert by_slot[0] > 2 * by_slot[1]  # a fixed share of every other chunk: 7-8 of the 15 per batch each


def test_pass_one_runs_while_the_other_walker_scores_and_its_error_ends_the_walk(monkeypatch):
    """Pass 1 (the true scores) runs on the calling thread after the other walkers started scoring
    their first chunk: they count only once it is done (same table as one walker), and an error in
    it is raised, never leaving a walker waiting for it (the next evaluation runs normally)."""
    import threading

    model, train, test = _tied_model_and_triples("distmult", 300, 6, 7, 700, 600)
    ref = evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=20, progress=False,
                         tuning=_tuned(workers=1)).rank_table
    two = _tuned(workers=2)
    real_pass, real_chunk = full.answer_scores, full.SideScorer.chunk
    first_chunks = threading.Event()  # set by the second walker's first product

    def chunk(self, ent, rel, c0, c1, slot=0, prepared=None):
        if slot == 1:
            first_chunks.set()
        return real_chunk(self, ent, rel, c0, c1, slot=slot, prepared=prepared)

    def slow_pass(*args):  # pass 1 waits until the other walker has scored: they overlap
        assert first_chunks.wait(10), "the second walker did not start before pass 1 ended"
        first_chunks.clear()
        return real_pass(*args)

    monkeypatch.setattr(full.SideScorer, "chunk", chunk)
    monkeypatch.setattr(full, "answer_scores", slow_pass)
    walkers = _spy_walkers(monkeypatch)
    got = evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=20, progress=False,
                         tuning=two).rank_table
    _assert_same_tables(got, ref)
    assert walkers and set(walkers) == {2}

    def failing_pass(*args):
        raise RuntimeError("pass one failed")

    monkeypatch.setattr(full, "answer_scores", failing_pass)
    with pytest.raises(RuntimeError, match="pass one failed"):
        evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=20, progress=False, tuning=two)
    monkeypatch.setattr(full, "answer_scores", real_pass)
    again = evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=20, progress=False,
                           tuning=two).rank_table
    _assert_same_tables(again, ref)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_chunk_walkers_count_with_torch_while_the_kernel_is_not_ready(monkeypatch, workers):
    """Under "auto" the kernel may still be loading when a batch is walked (FusedCounts.start gives
    None): every chunk is then counted by count_block, with the same table."""
    model, train, test = _tied_model_and_triples("distmult", 300, 6, 7, 700, 600)
    ref = evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=20, progress=False,
                         tuning=_tuned("torch")).rank_table
    starts = []
    monkeypatch.setattr(count_kernel.FusedCounts, "start", classmethod(lambda cls, *a: starts.append(1)))
    got = evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=20, progress=False,
                         tuning=_tuned(workers=workers)).rank_table
    _assert_same_tables(got, ref)
    assert starts  # the walkers asked for the kernel and counted without it


_COLD = """
import os, sys, numpy as np
from kgeval.evaluation import Tuning, count_kernel, evaluate_ranks, warm_kernel
from kgeval.models import get_model
assert not count_kernel.kernel_ready()  # a fresh process: nothing loaded the kernel yet
rng = np.random.default_rng(3)
ne, nr, nt = 3000, 5, 400
m = get_model("distmult", ne, nr, dim=8, seed=2).eval()
test = np.stack([rng.integers(0, ne, nt), rng.integers(0, nr, nt), rng.integers(0, ne, nt)], 1)
train = np.stack([rng.integers(0, ne, 5000), rng.integers(0, nr, 5000), rng.integers(0, ne, 5000)], 1)
pairs = 2 * nt * ne
small = evaluate_ranks(m, test, filter_triples=train, progress=False, tuning=Tuning(kernel_min_pairs=pairs + 1))
again = evaluate_ranks(m, test, filter_triples=train, progress=False, tuning=Tuning(kernel_min_pairs=pairs + 1))
assert not count_kernel.kernel_ready()  # small evaluations, however many: torch, no load
large = evaluate_ranks(m, test, filter_triples=train, progress=False, tuning=Tuning(kernel_min_pairs=pairs))
assert count_kernel.kernel_ready()  # this one was large enough: loaded at its start
assert warm_kernel()
for other in (again, large):
    for k in ("optimistic", "pessimistic", "num_candidates", "triple_index"):
        assert np.array_equal(getattr(small.rank_table, k), getattr(other.rank_table, k)), k
print("same")
"""


@pytest.mark.multiprocess  # a fresh interpreter
def test_the_kernel_loads_for_a_large_evaluation_of_a_fresh_process():
    """In a fresh process under "auto", small evaluations count with torch and load nothing; one of at
    least ``kernel_min_pairs`` loads the kernel at its start; the tables are the same."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("KGEVAL_COUNT_KERNEL", "KGEVAL_CHUNK_WORKERS")}
    out = subprocess.run([sys.executable, "-c", _COLD], capture_output=True, text=True, timeout=scaled(300), env=env)
    assert out.returncode == 0 and out.stdout.strip() == "same", out.stderr[-2000:]


def test_parallel_chunk_walkers_raise_the_nan_error():
    from kgeval.models import get_model

    model = get_model("distmult", 200, 3, dim=4, seed=1).eval()
    with torch.no_grad():
        model.entity.weight[150] = float("nan")  # in a chunk the second walker scores
    test = np.array([[0, 0, 1], [2, 1, 3]])
    with pytest.raises(InvalidInputError, match="NaN scores for triple"):
        evaluate_ranks(model, test, entity_chunk_size=40, progress=False, filtered=False, tuning=_tuned(workers=2))


def test_tuning_from_env_reads_os_environ_by_default(monkeypatch):
    """The one place the environment is read: Tuning.from_env() without a mapping reads os.environ (the other
    tests pass a Tuning; test_tuning_from_env covers every variable through a mapping)."""
    monkeypatch.setenv("KGEVAL_COUNT_KERNEL", "torch")
    monkeypatch.setenv("KGEVAL_CHUNK_WORKERS", "2")
    monkeypatch.delenv("KGEVAL_BOOKKEEPING_THREADS", raising=False)
    assert Tuning.from_env() == Tuning(kernel="torch", workers=2)


def _evaluate_in_child(queue):
    from kgeval.models import get_model

    model = get_model("distmult", 200, 3, dim=4, seed=1).eval()
    test = np.array([[0, 0, 1], [2, 1, 3], [5, 2, 7]])
    table = evaluate_ranks(model, test, entity_chunk_size=40, progress=False, tuning=_tuned(workers=2)).rank_table
    queue.put(table.optimistic.tolist())


def test_chunk_walkers_work_in_a_forked_child(monkeypatch):
    """The walkers' thread pool and the protocol count's (evaluator._count_known_beside) of the parent
    do not exist in a forked child: new ones are made (the child would otherwise wait forever on a
    pool without threads; either missing pid check hangs this test)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    _evaluate_in_child(q)  # the parent's pool exists now
    expected = q.get(timeout=10)
    from kgeval import _threads

    assert "kgeval-chunks" in _threads._POOLS  # the walkers' pool, made in the parent
    child = ctx.Process(target=_evaluate_in_child, args=(q,))
    child.start()
    child.join(scaled(60))
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung on the parent's walker pool")
    assert child.exitcode == 0 and q.get(timeout=10) == expected


def test_chunk_walkers_only_for_scorers_that_allow_concurrent_scoring(monkeypatch):
    """A scorer that does not declare ``concurrent_scoring`` is walked by one thread, ``out=`` or not;
    a model in training mode is evaluated in eval mode (:func:`kgeval.evaluation.scoring.eval_mode`),
    so it is walked like one."""
    two = _tuned(workers=2)
    model, train, test = _tied_model_and_triples("distmult", 120, 4, 7, 300, 250)
    walkers = _spy_walkers(monkeypatch)

    class WithOut(_NoOut):  # takes out= but says nothing about threads
        def score_tails(self, heads, relations, entities=None, out=None):
            return self.m.score_tails(heads, relations, entities=entities, out=out)

        def score_heads(self, relations, tails, entities=None, out=None):
            return self.m.score_heads(relations, tails, entities=entities, out=out)

    ref = evaluate_ranks(model, test, filter_triples=[train], entity_chunk_size=30, progress=False,
                         tuning=two).rank_table
    assert walkers  # eval mode: walked by two threads
    for scorer, train_mode in ((WithOut(model), False), (model, True)):
        walkers.clear()
        model.train(train_mode)
        got = evaluate_ranks(scorer, test, filter_triples=[train], entity_chunk_size=30, progress=False,
                             check_consistency=False, tuning=two).rank_table
        assert bool(walkers) == train_mode  # the training-mode model is walked in eval mode
        assert model.training == train_mode  # and given back in its own mode
        _assert_same_tables(got, ref)
    model.eval()


@pytest.mark.parametrize("sides", ["0"])
@pytest.mark.parametrize("kw", [{}, {"filtered": False}, {"restrict_entities": range(0, 90, 2)}, {"tie_tolerance": 0.5},
                                {"nan_policy": "worst"}, {"check_consistency": True}])
def test_row_walkers_give_the_same_ranks(kw, sides, monkeypatch):
    """Whole-row batches split over two or three walkers (each scores and counts its query rows)
    give the rank tables of one walker, the torch path and fresh score blocks (``sides``: the sides one
    after the other or at once, the walkers split between them)."""
    model, train, test = _tied_model_and_triples("complex", 90, 5, 11, 900, 500)
    tables, used = _tables_by_walker_count(monkeypatch, model, test, train, sides, **kw)
    for n in ("1", "2", "3"):  # parts of at least _MIN_WALKER_ROWS query rows: a small batch gets fewer walkers
        if n == "1":
            assert not used[n]
        else:
            assert used[n] and max(used[n]) == max(_expected_walkers(n, sides))
            assert min(used[n]) >= (2 if sides == "0" else 1)
    tables["torch"] = evaluate_ranks(_NoOut(model), test, filter_triples=[train], progress=False, tuning=_tuned("torch"),
                                     **kw).rank_table
    for n in ("2", "3", "torch"):
        _assert_same_tables(tables[n], tables["1"], n)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_row_groups_hold_one_block_each_and_query_metrics_batches_stay_one_block_per_walker(workers, monkeypatch):
    """Whole rows are scored in row groups of at most ``Tuning.cpu_block`` scores (several per batch), with
    the ranks of one product per batch; query metrics score each batch in one piece, so their
    batches stay at one block per walker (never ``whole_batch_blocks`` of them at once)."""
    model, train, test = _tied_model_and_triples("distmult", 300, 5, 21, 1300, 500)
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, batch_size=10**6,
                         tuning=_tuned(workers=workers)).rank_table
    tuning = _tuned(workers=workers, cpu_block=20 * 300)  # groups of 20 query rows
    blocks = []
    real_rows = full.SideScorer.rows

    def rows(self, ent, rel, *a, **k):
        blocks.append(ent.shape[0] * self.num_columns)
        return real_rows(self, ent, rel, *a, **k)

    monkeypatch.setattr(full.SideScorer, "rows", rows)
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False, tuning=tuning).rank_table
    _assert_same_tables(got, ref)
    assert len(blocks) > 2 * 20 and max(blocks) <= 20 * 300  # ~400 query rows per side in groups of 20
    blocks.clear()
    evaluate_ranks(model, test, filter_triples=[train], progress=False, query_metrics_k=(1,), tuning=tuning)
    assert blocks and max(blocks) <= max(64, int(workers) * 20) * 300


def test_row_walkers_name_the_nan_triple_by_its_batch_index(monkeypatch):
    """A NaN row in the second walker's part is reported with its index in the batch, not in the part."""
    from kgeval.models import get_model

    model = get_model("distmult", 50, 3, dim=4, seed=1).eval()
    with torch.no_grad():
        model.relation.weight[2] = float("nan")  # only the last triple uses relation 2
    test = np.array([[i, i % 2, (i + 1) % 50] for i in range(39)] + [[45, 2, 9]])
    walkers = _spy_walkers(monkeypatch)
    with pytest.raises(InvalidInputError, match=r"NaN scores for triple 39 of the batch \(45, 2, 9\), tail"):
        evaluate_ranks(model, test, progress=False, filtered=False, sides=["tail"], tuning=_tuned(workers=2))
    assert walkers == [2]


@pytest.mark.parametrize("mode", ["numba", "torch"])
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("kw", [{}, {"filtered": False}, {"restrict_entities": range(1, 299, 3)},
                                {"check_consistency": True, "tie_tolerance": 0.25}])
def test_rows_scored_in_tiles_give_the_same_ranks(mode, workers, kw, monkeypatch):
    """Whole rows of unaligned length scored in column tiles (:func:`full.tile_width`; shrunk here
    to tiles of 40 columns) give the rank tables of one whole-row product per batch."""
    model, train, test = _tied_model_and_triples("distmult", 299, 5, 13, 800, 600)
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, tuning=_tuned(mode, workers),
                         **kw).rank_table
    widths = []
    real = full.tile_width
    monkeypatch.setattr(full, "tile_width", lambda ctx, sc: widths.append(real(ctx, sc)) or widths[-1])
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False,
                         tuning=_tuned(mode, workers, tile_cols=40, tile_align=8), **kw).rank_table
    assert widths and set(widths) == {40}  # 299 or 100 columns: unaligned, so tiled
    _assert_same_tables(got, ref)


def test_tiles_only_for_unaligned_rows_and_the_nan_error_names_a_triple(monkeypatch):
    """At the real tile width: 4,100 entities (aligned) stay whole, 4,099 are tiled (2 tiles of
    2,176 columns at most), with the same ranks; a NaN in the second tile is still reported."""
    from kgeval.models import get_model

    widths = []
    real = full.tile_width
    monkeypatch.setattr(full, "tile_width", lambda ctx, sc: widths.append(real(ctx, sc)) or widths[-1])
    for ne, expect in ((4112, None), (4099, 2176)):
        model, train, test = _tied_model_and_triples("distmult", ne, 3, 17, 300, 200)
        widths.clear()
        got = evaluate_ranks(model, test, filter_triples=[train], progress=False, tuning=_tuned()).rank_table
        assert set(widths) == {expect}
        ref = evaluate_ranks(_NoOut(model), test, filter_triples=[train], progress=False,
                             tuning=_tuned("torch")).rank_table
        _assert_same_tables(got, ref, ne)
    model = get_model("distmult", 4099, 3, dim=4, seed=1).eval()
    with torch.no_grad():
        model.entity.weight[3000] = float("nan")  # a candidate in the second tile of every row
    with pytest.raises(InvalidInputError, match=r"NaN scores for triple 0 of the batch \(0, 0, 1\)"):
        evaluate_ranks(model, np.array([[0, 0, 1], [2, 1, 3]]), progress=False, filtered=False, tuning=_tuned())


@pytest.mark.parametrize("name", ["distmult", "complex", "rotate", "transe", "tucker", "pairre"])
def test_every_model_ranks_the_same_in_tiles_with_row_walkers(name, monkeypatch):
    """Every built-in model (some write into out=, some ignore it; all take entities=) gives the
    same rank tables with whole rows in tiles and row walkers as with one whole-row product per
    batch on one walker, and as the torch path."""
    from kgeval.models import get_model

    model = get_model(name, 299, 5, dim=8, seed=3).eval()
    allt = np.random.default_rng(4).integers(0, [299, 5, 299], size=(700, 3))
    train, test = allt[:500], allt[500:]
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, tuning=_tuned(workers=1)).rank_table
    walkers = _spy_walkers(monkeypatch)
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False,
                         tuning=_tuned(workers=2, tile_cols=40, tile_align=8)).rank_table
    assert walkers
    _assert_same_tables(got, ref, name)
    torch_path = evaluate_ranks(_NoOut(model), test, filter_triples=[train], progress=False, tuning=_tuned("torch"))
    _assert_same_tables(torch_path.rank_table, ref)



@pytest.mark.parametrize("mode", ["numba", "torch"])
@pytest.mark.parametrize("sampled", [False, True])
def test_tie_tolerance_below_one_float32_spacing(mode, sampled, monkeypatch):
    """tol = 1e-6 with scores in [16, 32), whose float32 spacing is 1.9e-6: a candidate one spacing
    above the true score is better (1.9e-6 > tol), one spacing below is worse, the true score's
    equal ties. In float32, s + tol rounded up to s + spacing and the candidate above counted as tied."""
    s = np.float32(20.0)
    up, down = np.nextafter(s, np.float32(30)), np.nextafter(s, np.float32(10))
    row = torch.tensor([s, up, down, s, 25.0, 17.0], dtype=torch.float32)  # true answer: entity 0

    class Rows:
        num_entities = 6

        def score_tails(self, h, r):
            return row.expand(h.shape[0], -1).clone()

        score_heads = score_tails

    scorer = Rows()
    kw = {"num_negatives": 5, "seed": 0} if sampled else {}
    out = evaluate_ranks(scorer, np.array([[1, 0, 0]]), sides="tail", tie_tolerance=1e-6, filtered=False,
                         progress=False, check_consistency=False, tuning=_tuned(mode), **kw)
    t = out.rank_table
    # better: up (20 + 1.9e-6) and 25; tied: the true answer and the other 20.0
    assert (int(t.optimistic[0]), int(t.pessimistic[0])) == (3, 4)


@pytest.mark.parametrize("name", ["distmult", "complex", "tucker", "rotate"])
@pytest.mark.parametrize("kw", [{"entity_chunk_size": 37}, {"restrict_entities": range(0, 299, 2), "entity_chunk_size": 29},
                                {"tiles": True}, {"groups": True}, {"groups": True, "tiles": True}])
def test_chunks_and_tiles_score_prepared_queries_with_the_same_ranks(name, kw, monkeypatch):
    """Chunked batches, tiled rows and row groups build each batch's queries once
    (Model.prepare_tails), not once per chunk, tile call or group, and give the rank tables of
    per-call scoring."""
    from kgeval.evaluation import scoring
    from kgeval.models import Model, get_model

    kw, changes = dict(kw), {}
    if kw.pop("tiles", False):
        changes.update(tile_cols=40, tile_align=8)
    grouped = kw.pop("groups", False)
    if grouped:  # row groups of 16 query rows (one walker: groups are not a thread's share)
        changes.update(cpu_block=16 * 299, workers=1)
        groups = []
        real_groups = full._row_groups
        monkeypatch.setattr(full, "_row_groups", lambda *a: groups.append(real_groups(*a)) or groups[-1])
    kw["tuning"] = _tuned("auto", **changes)
    model = get_model(name, 299, 5, dim=8, seed=3).eval()
    allt = np.random.default_rng(6).integers(0, [299, 5, 299], size=(700, 3))
    train, test = allt[:500], allt[500:]
    built = []  # every preparation of a batch's queries (score_tails / score_heads prepare per call)
    for method in ("prepare_tails", "prepare_heads"):
        real = getattr(Model, method)
        monkeypatch.setattr(Model, method, lambda self, *a, _real=real: built.append(1) or _real(self, *a))
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw).rank_table
    once_per_batch = len(built)
    if grouped:
        assert groups and min(len(g) for g in groups) > 2 and once_per_batch == len(groups)
    monkeypatch.setattr(scoring, "_prepare_method", lambda scorer, side: None)
    built.clear()
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw).rank_table
    assert 0 < once_per_batch < len(built)
    _assert_same_tables(got, ref, name)


@pytest.mark.parametrize("layout", ["chunks", "row groups"])
def test_a_failing_walker_stops_the_others_at_their_next_part(monkeypatch, layout):
    """An error (or an interrupt) on one walker ends the batch: the other walkers stop at their next chunk or
    row group instead of walking every part left (which an interrupt used to wait for, the whole batch)."""
    import time

    model, train, test = _tied_model_and_triples("distmult", 300, 6, 7, 1300, 600)
    taken, failed_at = [], []
    kw = {"entity_chunk_size": 10} if layout == "chunks" else {}
    kw["tuning"] = _tuned(workers=2)
    if layout == "row groups":
        kw["tuning"] = _tuned(workers=2, cpu_block=300 * 16)  # groups of 16 query rows: dozens per batch
        target, name = full, "_rank_part"
    else:
        target, name = full.SideScorer, "chunk"
    real = getattr(target, name)

    def part(*args, **kwargs):
        slot = kwargs.get("slot", args[5] if layout == "row groups" and len(args) > 5 else 0)
        taken.append((slot, time.perf_counter()))
        if slot == 0 and sum(1 for s, _ in taken if s == 0) == 3:
            failed_at.append(time.perf_counter())
            raise RuntimeError("walker 0 broke")
        if slot != 0:
            time.sleep(0.002)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, part)
    with pytest.raises(RuntimeError, match="walker 0 broke"):
        evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw)
    after = [t for s, t in taken if s != 0 and t > failed_at[0]]
    assert len(after) <= 1, f"{len(after)} parts walked after the failure"


@pytest.mark.parametrize("seed", range(12))
def test_known_pairs_by_column_range_in_every_layout(seed):
    """known_by_column: each range's (row, column - range start) pairs, in torch and as numpy (whose equal ranges
    but the last are grouped by range number, not sorted): the same set of pairs per range as a plain loop, for
    equal chunks with a short, full or one-column last range, uneven ranges, one range, and no pair in some."""
    from kgeval.evaluation.blocks import known_by_column

    rng = np.random.default_rng(seed)
    ncols = int(rng.integers(1, 300))
    width = int(rng.integers(1, ncols + 1))
    layouts = [list(range(0, ncols, width)) + [ncols], [0, ncols],
               sorted({0, ncols, *rng.integers(0, ncols, 4).tolist()})]
    n = int(rng.integers(0, 200))
    rows = torch.as_tensor(np.sort(rng.integers(0, 50, n)))
    cols = torch.as_tensor(rng.integers(0, ncols, n) if seed % 3 else rng.integers(0, max(1, ncols // 3), n))
    for bounds in layouts:
        expected = [sorted((int(r), int(c) - b0) for r, c in zip(rows, cols) if b0 <= c < b1)
                    for b0, b1 in zip(bounds, bounds[1:])]
        for as_numpy in (False, True):
            got = known_by_column((rows, cols), bounds, as_numpy)
            assert len(got) == len(expected)
            for pairs, want in zip(got, expected):
                if not want:
                    assert pairs is None
                    continue
                r, c = pairs
                assert isinstance(r, np.ndarray) == as_numpy and (not as_numpy or r.dtype == np.int64 == c.dtype)
                assert sorted(zip(np.asarray(r).tolist(), np.asarray(c).tolist())) == want


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("fused", [False, True])
def test_counts_over_any_split_into_blocks_match_brute_force(seed, fused):
    """blocks.Counts, both back ends (torch reference, compiled kernel): the counts of a batch summed over
    a random split into row blocks x column chunks equal brute force over whole rows."""
    from kgeval.evaluation import EvaluationOptions
    from kgeval.evaluation.blocks import Counts, RowBlocks, known_by_column
    from kgeval.evaluation.batches import Batch, RunContext, first_rest

    S, task_q, true, known = _case(seed)
    S = torch.nan_to_num(S, nan=2.5)  # the NaN rule has its own tests: here every count is compared
    order = torch.argsort(known[0], stable=True)
    known = (known[0][order], known[1][order])  # sorted by row, as a batch's known answers are
    nq, w = S.shape
    rng = np.random.default_rng(seed)
    ctx = RunContext(options=EvaluationOptions(), tuning=Tuning(), device=torch.device("cpu"), num_entities=w,
                     num_relations=1, num_columns=w, allowed=None, pos_map=None, budget=1 << 30,
                     counter=Counter(0.0, fused=fused), consistency=None, want_query_metrics=False)

    class Side:
        side = 1

        def writable(self, x):
            return x.clone()

    b = Batch(torch.zeros(nq, dtype=torch.long), torch.zeros(nq, dtype=torch.long), task_q, torch.zeros_like(task_q),
              *first_rest(task_q), known, np.zeros((task_q.shape[0], 3), dtype=np.int64))
    rb = sorted({0, nq, *rng.integers(0, nq + 1, 2).tolist()})
    cb = sorted({0, w, *rng.integers(0, w + 1, 3).tolist()})
    acc = Counts(ctx, Side(), b, true)
    assert (acc.fused is not None) == fused
    split = RowBlocks(task_q, known, rb)
    for i in range(len(rb) - 1):
        t0, part = split.batch(b, i)
        for (c0, c1), part_known in zip(zip(cb, cb[1:]), known_by_column(part.known, cb, as_numpy=fused)):
            acc.add(S[rb[i]:rb[i + 1], c0:c1], part, t0, rb[i], part_known)
    better, tied = acc.result()
    assert (better.tolist(), tied.tolist()) == _brute(S, task_q, true, 0.0, known)
