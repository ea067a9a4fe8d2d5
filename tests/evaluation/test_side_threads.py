"""Both sides ranked at once, one thread each (:mod:`kgeval.evaluation.side_threads`): the same rank
tables, protocol and consistency counts as one side after the other; a finished side helps the other;
an error on either side is the one raised; each side keeps to half the memory budget."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from kgeval.errors import InvalidInputError
from kgeval.evaluation import count_kernel, evaluate_ranks, evaluator, full, side_threads
from kgeval.models import get_model


@pytest.fixture(autouse=True)
def _two_walkers(monkeypatch):
    """Two walkers (one per side when the sides run at once) and the compiled kernel, on any machine."""
    monkeypatch.setenv("KGEVAL_COUNT_KERNEL", "numba")
    monkeypatch.setenv("KGEVAL_CHUNK_WORKERS", "2")
    if not count_kernel.kernel_ready():
        count_kernel._load()
    if not count_kernel.kernel_ready():
        pytest.skip("needs the compiled kernel (numba)")


def _spy_side_threads(monkeypatch) -> list:
    """What :func:`evaluator._side_threads` decided for each evaluation (None: one side after the other)."""
    seen = []
    real = evaluator._side_threads
    monkeypatch.setattr(evaluator, "_side_threads", lambda ctx, inp: seen.append(real(ctx, inp)) or seen[-1])
    return seen


def _tables(a, b):
    for name in ("side", "triple_index", "optimistic", "pessimistic", "num_candidates"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def _model_and_triples(seed=3, ne=300, nr=6, n=900, ntrain=600):
    model = get_model("distmult", ne, nr, dim=8, seed=seed).eval()
    with torch.no_grad():  # few distinct values: many ties
        model.entity.weight.copy_(torch.round(model.entity.weight * 4) / 4)
    allt = np.random.default_rng(seed + 1).integers(0, [ne, nr, ne], size=(n, 3))
    return model, allt[:ntrain], allt[ntrain:]


def _in_turn_and_at_once(monkeypatch, model, test, **kw):
    """The evaluation with the sides one after the other, then at once (checked to run at once, one walker each)."""
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "0")
    in_turn = evaluate_ranks(model, test, **kw)
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "1")
    seen = _spy_side_threads(monkeypatch)
    at_once = evaluate_ranks(model, test, **kw)
    assert seen == [(1, 1)]
    return in_turn, at_once


def _whole_rows_of_4096():
    """DistMult over 4,096 entities (whole rows, no prediction) and 9,000 distinct test queries per side: with
    two walkers one whole-row batch per side, with one walker two (the consistency check picks 4 vs 8 tasks)."""
    ne = 4096
    model = get_model("distmult", ne, 3, dim=4, seed=1).eval()
    rng = np.random.default_rng(2)
    test = np.stack([rng.permutation(ne * 3)[:9000] % ne, np.arange(9000) % 3, rng.permutation(ne * 3)[:9000] % ne], 1)
    return model, test


@pytest.mark.parametrize("kw", [{}, {"filtered": False}, {"restrict_entities": range(0, 300, 3)},
                                {"entity_chunk_size": 23, "batch_size": 37}, {"tie_tolerance": 0.25},
                                {"sides": ("tail", "head")}])
def test_sides_at_once_give_the_tables_protocol_and_checks_of_one_after_the_other(kw, monkeypatch):
    model, train, test = _model_and_triples()
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "0")
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, check_consistency=True, **kw)
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "1")
    seen = _spy_side_threads(monkeypatch)
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False, check_consistency=True, **kw)
    assert seen == [(1, 1)]  # ranked at once, one walker each
    _tables(got.rank_table, ref.rank_table)
    assert got.protocol.entity_chunk_size == ref.protocol.entity_chunk_size
    assert got.protocol.consistency_checked == ref.protocol.consistency_checked > 0


def test_off_where_it_cannot_help_or_is_turned_off(monkeypatch):
    """One side, one walker, query metrics, sampled negatives or KGEVAL_PARALLEL_SIDES=0: one after the other."""
    model, train, test = _model_and_triples()
    seen = _spy_side_threads(monkeypatch)
    cases = [dict(sides=("head",)), dict(query_metrics_k=(1,)), dict(num_negatives=20, seed=1)]
    for kw in cases:
        evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw)
    monkeypatch.setenv("KGEVAL_CHUNK_WORKERS", "1")
    evaluate_ranks(model, test, filter_triples=[train], progress=False)
    monkeypatch.setenv("KGEVAL_CHUNK_WORKERS", "2")
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "0")
    evaluate_ranks(model, test, filter_triples=[train], progress=False)
    assert seen == [None] * 5
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "yes")
    with pytest.raises(InvalidInputError, match="KGEVAL_PARALLEL_SIDES must be 0 or 1, got 'yes'"):
        evaluate_ranks(model, test, filter_triples=[train], progress=False)


def test_a_finished_side_helps_the_other_with_the_same_tables(monkeypatch):
    """Every test triple shares one (head, relation): the tail side has one query row and ends at once,
    the head side has hundreds; the tail side's thread then takes chunks of the head side's walks
    (a helper slot, 1) and the counts it adds give the tables of one side after the other."""
    model, train, _ = _model_and_triples()
    rng = np.random.default_rng(9)
    test = np.stack([np.zeros(400, dtype=np.int64), np.zeros(400, dtype=np.int64), rng.integers(0, 300, 400)], 1)
    kw = dict(entity_chunk_size=20, batch_size=60)
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "0")
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw).rank_table
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "1")
    taken, real_chunk = [], full.SideScorer.chunk

    def chunk(self, ent, rel, c0, c1, slot=0, prepared=None):
        taken.append((self.side, slot, threading.get_ident()))
        time.sleep(0.0005)  # long enough that the head side still has chunks left when the tail side ends
        return real_chunk(self, ent, rel, c0, c1, slot=slot, prepared=prepared)

    monkeypatch.setattr(full.SideScorer, "chunk", chunk)
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw).rank_table
    _tables(got, ref)
    sides = {s for s, _, _ in taken}
    big = max(sides, key=lambda s: sum(1 for x in taken if x[0] == s))
    helped = [x for x in taken if x[0] == big and x[1] >= 1]
    assert helped, "the finished side's thread never helped"
    small_threads = {t for s, _, t in taken if s != big}
    assert {t for _, _, t in helped} <= small_threads  # the helper is the other side's thread


@pytest.mark.parametrize("failing", ["head", "tail"])
def test_an_error_on_either_side_is_the_one_raised_and_the_next_evaluation_runs(failing, monkeypatch):
    """Scoring fails on one side only, in the middle of its walks: that error reaches the caller (never
    the other side's cancellation), whichever thread ranks it; nothing is left running (the next
    evaluation is exact)."""
    from kgeval.ranks import SIDE_NAMES

    model, train, test = _model_and_triples()
    kw = dict(entity_chunk_size=30, batch_size=50)
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw).rank_table
    calls, real_chunk = {"n": 0}, full.SideScorer.chunk

    def chunk(self, ent, rel, c0, c1, slot=0, prepared=None):
        if SIDE_NAMES[self.side] == failing:
            calls["n"] += 1
            if calls["n"] > 25:
                raise RuntimeError(f"{failing} scoring broke")
        return real_chunk(self, ent, rel, c0, c1, slot=slot, prepared=prepared)

    monkeypatch.setattr(full.SideScorer, "chunk", chunk)
    seen = _spy_side_threads(monkeypatch)
    with pytest.raises(RuntimeError, match=f"{failing} scoring broke"):
        evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw)
    assert seen == [(1, 1)]
    monkeypatch.setattr(full.SideScorer, "chunk", real_chunk)
    again = evaluate_ranks(model, test, filter_triples=[train], progress=False, **kw).rank_table
    _tables(again, ref)


def test_each_side_plans_with_half_the_memory_budget(monkeypatch):
    model, train, test = _model_and_triples()
    budgets = []
    real = full.plan_full
    monkeypatch.setattr(full, "plan_full", lambda ctx, *a, **k: budgets.append(ctx.budget) or real(ctx, *a, **k))
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "0")
    evaluate_ranks(model, test, filter_triples=[train], progress=False, memory_budget=1 << 24)
    assert budgets == [1 << 24] * 2
    budgets.clear()
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "1")
    evaluate_ranks(model, test, filter_triples=[train], progress=False, memory_budget=1 << 24)
    assert budgets == [1 << 23] * 2


def test_a_helpers_error_is_raised_by_the_walks_owner():
    share = side_threads.WalkShare(2)
    started = threading.Event()
    out = {}

    def walk(slot):
        if slot == 0:
            started.set()
            time.sleep(0.2)  # open long enough for the helper to join
            return "own"
        raise ValueError("helper failed")

    def owner():
        try:
            out["got"] = share.walk(walk)
        except ValueError as exc:
            out["err"] = str(exc)
        finally:
            share.help(work=False)

    t = threading.Thread(target=owner)
    t.start()
    started.wait(5)
    share.help()  # this thread's side is done: it joins the open walk, fails, and returns once the owner is done
    t.join(5)
    assert not t.is_alive() and out == {"err": "helper failed"}


@pytest.fixture
def _hang_guard():
    """A hang fails (the process dumps its threads and exits) instead of blocking the run."""
    import faulthandler

    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt (which pytest would take as the end of the session)."""


def test_an_interrupt_while_waiting_for_the_other_side_stops_it_at_its_next_batch(monkeypatch, _hang_guard):
    """An interrupt (Ctrl-C) reaching the calling thread once its own side is done, while it waits for the
    other side: the other side stops at its next batch, as one side after the other would. Before, the
    wait went on until the other side had ranked every one of its batches (15 x 0.2 s here, all of them
    run after the interrupt), and only then was the interrupt raised."""
    import signal

    model, train, test = _model_and_triples()
    caller = threading.main_thread()
    if threading.current_thread() is not caller:
        pytest.skip("signals reach the main thread only")
    real_batch, real_side = full._rank_batch, evaluator._rank_side
    seen = {"other": 0, "after": 0}
    interrupted = threading.Event()

    def rank_batch(ctx, sc, *a, **k):
        if threading.current_thread() is not caller:  # the other side's thread: slow batches
            seen["other"] += 1
            seen["after"] += interrupted.is_set()
            time.sleep(0.2)
        return real_batch(ctx, sc, *a, **k)

    def rank_side(ctx, *a, **k):
        out = real_side(ctx, *a, **k)
        if threading.current_thread() is caller:  # this side is done: interrupt the wait that follows
            def later():
                time.sleep(0.1)
                interrupted.set()
                signal.pthread_kill(caller.ident, signal.SIGUSR1)
            threading.Thread(target=later, daemon=True).start()
        return out

    def handler(signum, frame):
        raise _Interrupt()

    monkeypatch.setattr(full, "_rank_batch", rank_batch)
    monkeypatch.setattr(evaluator, "_rank_side", rank_side)
    seen_threads = _spy_side_threads(monkeypatch)
    old = signal.signal(signal.SIGUSR1, handler)
    try:
        with pytest.raises(_Interrupt):
            evaluate_ranks(model, test, filter_triples=[train], progress=False, entity_chunk_size=30, batch_size=20)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert seen_threads == [(1, 1)]
    returned = seen["other"]
    assert interrupted.is_set() and seen["after"] <= 1  # at most the batch it was in when interrupted
    time.sleep(0.5)
    assert seen["other"] == returned  # nothing runs on after the call returned


@pytest.mark.parametrize("budget", [5000, 20000, 60000, 1 << 20, 1 << 24])
def test_a_binding_memory_budget_gives_the_protocol_of_one_side_after_the_other(budget, monkeypatch):
    """Each side ranked at once plans with half the memory budget: where that plans other batches or chunks,
    the sides run one after the other. Before, the consistency check (one pick at each end of a batch)
    counted other numbers: 36 checked tasks instead of 20 at a 20,000-byte budget (136 vs 68 at 5,000)."""
    model, train, test = _model_and_triples()
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "0")
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, check_consistency=True,
                         memory_budget=budget)
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", "1")
    seen = _spy_side_threads(monkeypatch)
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False, check_consistency=True,
                         memory_budget=budget)
    _tables(got.rank_table, ref.rank_table)
    assert got.protocol.to_dict() == ref.protocol.to_dict()
    assert seen == ([(1, 1)] if budget == 1 << 24 else [None])  # a budget that does not bind at half: at once


def test_whole_row_batches_are_those_of_one_side_after_the_other(monkeypatch):
    """Whole-row batches hold up to 16 row groups per walker of the evaluation: with the sides ranked at once
    (one walker each) still those of one side after the other (two walkers). Before, each side's batches
    held half as many rows: 9,000 queries of 4,096 entities in 2 batches instead of 1, 8 consistency
    checks instead of 4."""
    model, test = _whole_rows_of_4096()
    kw = dict(filtered=False, progress=False, check_consistency=True, memory_budget=1 << 32)
    ref, got = _in_turn_and_at_once(monkeypatch, model, test, **kw)
    _tables(got.rank_table, ref.rank_table)
    assert got.protocol.to_dict() == ref.protocol.to_dict()
    assert ref.protocol.consistency_checked == 4


def test_prediction_turned_off_by_misses_does_not_replan_the_other_side(monkeypatch):
    """A batch of mispredicted true scores turns prediction off for the rest of the evaluation; each side is
    still planned as at its start (rows of 4,097-16,384 entities are chunked only where pass 1 is
    predicted), whether the sides run one after the other or at once. Before, one side after the other
    planned the second side as whole rows of 1,136 tasks (5 batches: 12 consistency checks in all) and at
    once as chunks (one batch: 4 checks), a protocol that depended on the mode."""
    from kgeval.evaluation import predicted

    ne = 4200
    model = get_model("distmult", ne, 3, dim=8, seed=1).eval()
    test = np.random.default_rng(2).integers(0, [ne, 3, ne], size=(5000, 3))
    kw = dict(filtered=False, progress=False, check_consistency=True, memory_budget=64 << 20)
    ref = evaluate_ranks(model, test, **kw)
    if predicted.chain_length(8) is None:
        pytest.skip("true scores are not predicted on this machine")
    real = count_kernel.chain_dots
    monkeypatch.setattr(predicted, "chain_dots", lambda *a: np.nextafter(real(*a), np.float32(np.inf)))
    one, both = _in_turn_and_at_once(monkeypatch, model, test, **kw)
    _tables(one.rank_table, ref.rank_table)
    _tables(both.rank_table, ref.rank_table)
    assert both.protocol.to_dict() == one.protocol.to_dict() == ref.protocol.to_dict()


@pytest.mark.parametrize("sides", ["0", "1"])
def test_a_kernel_load_finishing_during_the_evaluation_does_not_replan_the_second_side(monkeypatch, sides):
    """Under KGEVAL_COUNT_KERNEL=auto the kernel loads in the background; when the load finished after the
    first side, the second was planned with two walkers (whole-row batches twice as tall: 9,000 queries of
    4,096 entities in 1 batch instead of 2, 2 consistency checks instead of 4), so the protocol depended on
    when a thread finished. Now every plan follows the kernel as it was when the evaluation started."""
    model, test = _whole_rows_of_4096()
    kw = dict(filtered=False, progress=False, check_consistency=True, memory_budget=1 << 32)
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", sides)
    ready = threading.Event()  # not set: as while the background load runs
    monkeypatch.setattr(count_kernel, "_READY", ready)
    loading = evaluate_ranks(model, test, **kw)
    real = evaluator._rank_side

    def rank_side(*args, **kwargs):  # the load finishes as the first side to start begins
        ready.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluator, "_rank_side", rank_side)
    got = evaluate_ranks(model, test, **kw)
    _tables(got.rank_table, loading.rank_table)
    assert got.protocol.to_dict() == loading.protocol.to_dict()
    monkeypatch.setattr(evaluator, "_rank_side", real)
    loaded = evaluate_ranks(model, test, **kw)  # loaded from the start: planned with the walkers
    _tables(loaded.rank_table, loading.rank_table)
    assert loaded.protocol.consistency_checked < loading.protocol.consistency_checked
