"""The streaming, filtered link-prediction evaluator: one side after the other (on the CPU, two sides at
once on a thread each, see :mod:`.side_threads`), the tasks of a side ranked in batches (:mod:`.full` against every candidate, :mod:`.listed` against sampled
negatives), collected into a :class:`~kgeval.ranks.RankTable` and described by an
:class:`~kgeval.protocol.EvaluationProtocol`.

For every evaluation triple ``(h, r, t)`` and side, the true answer's score ``s`` is compared with
every candidate's score:

    optimistic = 1 + #{c : score(c) > s},   pessimistic = optimistic + #{c != answer : score(c) == s}

(see :mod:`.counting` for the tie tolerance and NaN rules). The batch size follows a memory budget
and halves on out-of-memory errors, resuming at the failed batch (:mod:`.batching`).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from .._threads import bookkeeping_threads, thread_pool, torch_threads
from ..protocol import EvaluationProtocol, FilterSet, Sampling, tasks_digest
from ..ranks import SIDE_NAMES, RankTable
from . import distributed, known_cache, side_threads
from .batching import default_memory_budget
from .context import RunContext
from .count_kernel import kernel_ready, use_kernel
from .counting import ConsistencyCheck, Counter
from .filter_index import FilterIndex, answer_column, count_distinct_triples, query_keys
from .full import _walkers, plan_full, rank_full
from .inputs import Inputs, prepare_inputs
from .options import EvaluationOptions, as_options
from .query_metrics import QueryMetricAccumulator
from .listed import rank_listed, sample_negatives
from .scorers import eval_mode
from .scoring import SideScorer
from .side_threads import WalkShare

__all__ = ["EvaluationOutput", "evaluate_ranks", "run_evaluation"]


@dataclass
class EvaluationOutput:
    """What :func:`evaluate_ranks` computes: the rank table, the protocol and extra metrics."""

    rank_table: RankTable
    protocol: EvaluationProtocol
    extra: dict[str, float] = field(default_factory=dict)
    sampled_negatives: dict[str, np.ndarray] | None = None


def evaluate_ranks(scorer, triples, *, filter_triples=(), options: EvaluationOptions | Mapping | None = None,
                   **overrides) -> EvaluationOutput:
    """Rank every evaluation task; the arguments are those of :func:`kgeval.evaluation.evaluate`."""
    opts = as_options(options)
    if overrides:
        opts = opts.replace(**overrides)
    return run_evaluation(scorer, triples, filter_triples, opts)


def run_evaluation(scorer, triples, filter_triples, opts: EvaluationOptions) -> EvaluationOutput:
    """The evaluation of ``triples`` under ``opts`` (validated before any work starts), with a torch
    module scorer in eval mode meanwhile (:func:`.scorers.eval_mode`: no dropout, no batch-norm updates)."""
    with eval_mode(scorer):
        return _run_evaluation(scorer, triples, filter_triples, opts)


def _run_evaluation(scorer, triples, filter_triples, opts: EvaluationOptions) -> EvaluationOutput:
    if opts.query_metrics_k and opts.num_negatives is not None:  # asked for, not computed: say so
        warnings.warn(f"query_metrics_k={opts.query_metrics_k} is ignored with num_negatives={opts.num_negatives}: "
                      "query-level precision / recall need whole score rows (no such keys in the results)",
                      stacklevel=3)
    plan = None if opts.distributed is None else distributed.start(opts.distributed)
    if plan is None:
        inp = prepare_inputs(scorer, triples, filter_triples, opts)
    else:  # a rank whose inputs fail to load ends every rank; then the inputs must agree
        inp = plan.guard(prepare_inputs, scorer, triples, filter_triples, opts)
        plan.check_same(distributed.fingerprint(inp, opts))
        if plan.mode == "tasks":  # each rank ranks its share with its own copy of the model
            distributed.check_replicas(plan, inp)
    shard = None
    if plan is not None and plan.mode == "entities":  # (lo, hi, row width, row dtype), the same on all ranks
        shard = distributed.check_shards(plan, inp.scorer, inp.num_entities)
    ctx = _context(inp, opts) if plan is None else plan.guard(_context, inp, opts)
    ctx.dist = plan
    ctx.shard = shard
    eval_idx = np.flatnonzero(inp.keep)
    # the known triples' content key (.known_cache): taken with the id checks, else first on the thread
    # beside the ranking; then there the second side's filter index (while this thread builds or looks up
    # the first's) and the protocol's count
    digest = None
    if opts.filtered:
        if inp.known_fingerprint is not None:
            digest = Future()
            digest.set_result(inp.known_fingerprint)
        else:
            digest = _beside().submit(known_cache.fingerprint, inp.known_sets, inp.num_entities, inp.num_relations)
    later = _index_beside(ctx, inp, eval_idx, digest)
    num_known = _count_known_beside(inp, opts, digest)
    qacc = QueryMetricAccumulator(opts.query_metrics_k) if ctx.want_query_metrics else None
    from tqdm.auto import tqdm

    bar = tqdm(total=eval_idx.shape[0] * len(inp.side_codes), unit="task", desc="Evaluating",
               disable=not opts.progress, leave=False)
    tables, sampled, capped = [], {}, 0
    try:
        with torch.inference_mode(), torch_threads(bookkeeping_threads()):
            for side, (table, negs, n_capped) in zip(inp.side_codes, _rank_sides(ctx, inp, eval_idx, bar, qacc, later)):
                tables.append(table)
                capped += n_capped
                if negs is not None:
                    sampled[SIDE_NAMES[side]] = negs
    finally:
        bar.close()
    if capped:
        warnings.warn(
            f"{capped} task(s) have fewer than num_negatives={opts.num_negatives} available negatives; "
            "they use all available ones (num_candidates = 1 + available)",
            stacklevel=3,
        )
    if plan is not None:
        plan.merge_consistency(ctx.consistency)
        # chunk widths differ between ranks (local slices; "tasks": each rank plans its own share of the
        # tasks): the protocol reports the widest, the same on every rank
        if plan.mode == "tasks":  # each rank re-ranked queries of its own share ("entities": the same on all)
            got = plan.exchange(lambda: (ctx.chunk_redone_queries, ctx.chunk_used))
            ctx.chunk_redone_queries = sum(g[0] for g in got)
            widths = [g[1] for g in got if g[1] is not None]
        else:
            widths = [w for w in plan.exchange(lambda: ctx.chunk_used) if w is not None]
        ctx.chunk_used = max(widths) if widths else None
    if ctx.consistency is not None and ctx.consistency.mismatches:
        c = ctx.consistency
        warnings.warn(c.first_mismatch + f" ({c.mismatches} of {c.checked} checked tasks differ)", stacklevel=3)
    table = RankTable.concat(tables)
    protocol = _protocol(inp, opts, ctx, table, eval_idx, capped, None if num_known is None else num_known.result())
    extra = qacc.to_flat_dict() if qacc is not None else {}
    return EvaluationOutput(table, protocol, extra, sampled or None)


def _context(inp: Inputs, opts: EvaluationOptions) -> RunContext:
    dev = inp.device
    pos_map = allowed = None
    if inp.entities is not None:
        allowed = torch.as_tensor(inp.entities, device=dev)
        pos_map = torch.full((inp.num_entities,), -1, dtype=torch.long, device=dev)
        pos_map[allowed] = torch.arange(allowed.shape[0], device=dev)
    counter = Counter(opts.tie_tolerance, fused=use_kernel(
        dev, int(np.count_nonzero(inp.keep)) * len(inp.side_codes) * int(inp.universe.shape[0])))
    return RunContext(
        options=opts,
        device=dev,
        num_entities=inp.num_entities,
        num_relations=inp.num_relations,
        num_columns=int(inp.universe.shape[0]),
        allowed=allowed,
        pos_map=pos_map,
        budget=opts.memory_budget if opts.memory_budget is not None else default_memory_budget(dev),
        counter=counter,
        kernel=kernel_ready(),  # loaded (after use_kernel, which may have loaded it), whether it counts or not
        consistency=ConsistencyCheck(inp.side_codes) if opts.check_consistency else None,
        want_query_metrics=bool(opts.query_metrics_k) and opts.num_negatives is None,
        # the scorer calls keep the caller's thread count; the bookkeeping around them may use fewer
        score_threads=torch.get_num_threads(),
    )


def _rank_sides(ctx: RunContext, inp: Inputs, eval_idx: np.ndarray, bar, qacc, later: dict) -> list:
    """:func:`_rank_side` of each side, in side order: both at once on two threads where
    :func:`_side_threads` allows (:mod:`.side_threads`), else one after the other."""
    codes = inp.side_codes
    threads = _side_threads(ctx, inp)
    if threads is None:
        return [_rank_side(ctx, inp, side, eval_idx, bar, qacc, later.get(side)) for side in codes]
    share = WalkShare(len(codes), walkers=sum(threads))
    # each side: half the memory budget (both sides' batches are alive at once) and its share of the walkers
    ctxs = [replace(ctx, budget=ctx.budget // 2, score_threads=t, share=share) for t in threads]
    bar, keep = _LockedBar(bar), bookkeeping_threads()

    def run(i: int):
        done = False
        try:
            out = _rank_side(ctxs[i], inp, codes[i], eval_idx, bar, qacc, later.get(codes[i]))
            done = True
            return out
        except BaseException:
            share.cancel()  # the other side stops at its next batch
            raise
        finally:
            share.help(work=done)  # a finished side takes parts of the other side's walks

    def second():  # inference mode and the thread count are per thread
        with torch.inference_mode(), torch_threads(keep):
            return run(1)

    future = _side_pool().submit(second)
    try:
        try:
            first = run(0)
        except side_threads.Cancelled:  # the other side failed first: its error is the one raised
            first = None
    except BaseException:  # an interrupt while this thread helped or waited (after run's own except)
        share.cancel()  # the other side stops at its next batch, as one side after the other would
        raise
    finally:
        failed = _wait_side(future, share)  # wait for the other side, whatever happened here
    if failed is not None:
        raise failed
    if first is None:  # cancelled, yet the other side did not fail: never a partial result
        raise RuntimeError("internal error: a side was cancelled without a failure")
    ctx.chunk_used = max((c.chunk_used for c in ctxs if c.chunk_used is not None), default=None)
    ctx.chunk_redone_queries += sum(c.chunk_redone_queries for c in ctxs)
    return [first, future.result()]


def _wait_side(future, share: WalkShare):
    """The other side's error or None, once it has ended. Interrupted while waiting (Ctrl-C), the other
    side is cancelled and waited for again (it stops at its next batch; a second interrupt ends the wait)."""
    try:
        return future.exception()
    except BaseException:
        share.cancel()
        future.exception()
        raise


def _side_threads(ctx: RunContext, inp: Inputs) -> tuple[int, int] | None:
    """Each side's walker count when both sides of this evaluation are ranked at once, else None:
    a two-sided full ranking in one process on the CPU (no query metrics: they need whole rows in one
    accumulator) with at least two walkers (:func:`.full._walkers`: ``KGEVAL_CHUNK_WORKERS`` or the
    caller's thread count) whose scorer may score on several threads at once, split between the sides, and
    where each side's plan (:func:`.full.plan_full`) with half the memory budget is that of one side after the
    other: the consistency check and the protocol never depend on how the sides ran."""
    opts = ctx.options
    if (not side_threads.enabled() or ctx.dist is not None or ctx.device.type != "cpu" or len(inp.side_codes) != 2
            or opts.num_negatives is not None or ctx.want_query_metrics):
        return None
    probes = [SideScorer(inp.scorer, side, num_entities=inp.num_entities, device=ctx.device, allowed=ctx.allowed,
                         threads=1) for side in inp.side_codes]
    # the evaluation's walkers by the rule every walk follows (1 where none may walk: no out=, no concurrent
    # scoring, no kernel at the start, KGEVAL_CHUNK_WORKERS=1)
    n = min(_walkers(ctx, probe, sys.maxsize, 0, evaluation=True) for probe in probes)
    if n < 2:
        return None
    split = -(-n // 2), n // 2
    share, n_tasks = WalkShare(2, walkers=n), int(np.count_nonzero(inp.keep))
    for probe, t in zip(probes, split):
        # each side's batches and chunks as one side after the other plans them (they decide the consistency
        # check's picks and the protocol's chunk width), else one after the other: a memory budget that binds
        # at half (each side's share) plans smaller batches or chunks
        alone = plan_full(replace(ctx, chunk_used=None), probe, n_tasks, quiet=True)
        if plan_full(replace(ctx, budget=ctx.budget // 2, score_threads=t, share=share, chunk_used=None), probe,
                     n_tasks, quiet=True) != alone:
            return None
    return split


class _LockedBar:
    """A progress bar updated from both side threads (tqdm's counter is not atomic)."""

    def __init__(self, bar):
        self._bar, self._lock = bar, threading.Lock()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self._bar.update(n)

    def __getattr__(self, name):
        return getattr(self._bar, name)


def _side_pool():
    """The pool running the second side; one thread per core, so that evaluations run at once from
    several threads never queue one's side behind another's."""
    return thread_pool("kgeval-side", max(2, os.cpu_count() or 1))


def _rank_side(ctx: RunContext, inp: Inputs, side: int, eval_idx: np.ndarray, bar, qacc, index_future=None):
    """``(rank table, sampled negatives or None, #tasks with capped negatives)`` of one side
    (``index_future``: a future of its filter index, built on another thread; else built here)."""
    opts = ctx.options
    sub = inp.triples[eval_idx]
    keys = query_keys(sub, side, inp.num_relations)
    answers = answer_column(sub, side).astype(np.int64, copy=False)
    sharded = ctx.dist is not None and ctx.dist.mode == "entities"

    def setup():
        index = None
        if index_future is not None:
            index = index_future.result()
        elif opts.filtered:  # only the known answers of the queries evaluated here
            index = _kept_side_index(inp, side, keys, ctx.device, inp.known_fingerprint)
        if sharded:
            from .sharded import ShardSideScorer

            lo, hi, width, dtype = ctx.shard
            sc = ShardSideScorer(inp.scorer, side, num_entities=inp.num_entities, device=ctx.device,
                                 allowed=ctx.allowed, threads=ctx.score_threads, lo=lo, hi=hi, width=width,
                                 row_dtype=dtype)
        else:
            sc = SideScorer(inp.scorer, side, num_entities=inp.num_entities, device=ctx.device, allowed=ctx.allowed,
                            threads=ctx.score_threads)
        negs = counts = None
        if opts.num_negatives is not None:  # drawn for all tasks (on every rank) before any split
            negs, counts = sample_negatives(keys, answers, num_negatives=opts.num_negatives, seed=opts.seed,
                                            side=side, universe=inp.universe, index=index)
        return index, sc, negs, counts

    # a rank failing here (out of memory, say) ends every rank instead of leaving them waiting
    index, sc, negs, counts = setup() if ctx.dist is None else ctx.dist.guard(setup)
    capped = 0
    # distributed="tasks": this rank's slice of the side's tasks
    part = slice(None) if ctx.dist is None or sharded else ctx.dist.task_slice(sub.shape[0])
    if opts.num_negatives is None:
        def local():
            if sharded:
                from .sharded import rank_full_sharded

                return rank_full_sharded(ctx, sc, sub, eval_idx, keys, answers, index, bar)
            return rank_full(ctx, sc, sub[part], eval_idx[part], keys[part], answers[part], index, bar, qacc)
    else:
        capped = int((counts < opts.num_negatives).sum())
        ctx.used_candidates_method = sc.candidates_method is not None

        def local():
            if sharded:
                from .sharded import rank_sampled_sharded

                return rank_sampled_sharded(ctx, sc, sub, eval_idx, negs, bar)
            return rank_listed(ctx, sc, sub[part], eval_idx[part], negs[part], bar)
    # "entities": every rank holds every task's summed counts already
    res = local() if ctx.dist is None or sharded else ctx.dist.gather_side(local)
    ti = np.concatenate(res.triple_index)
    order = _index_order(ti, inp.triples.shape[0])
    weights = None
    if opts.macro:  # 1 / #tasks sharing the query; keys and the sorted table rows are in eval_idx order
        _, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
        weights = 1.0 / cnt[inv]
    table = RankTable.from_counts(
        np.concatenate(res.better)[order], np.concatenate(res.tied)[order], np.concatenate(res.ncand)[order],
        side=side, triple_index=ti[order], relation=inp.triples[ti[order], 1], weights=weights,
    )
    return table, negs, capped


def _index_order(values: np.ndarray, upper: int) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` of triple indices in ``[0, upper)``: where they are distinct (each
    task of a side once) one scatter into ``upper`` slots (~10 us for 5,000 where the sort took ~130);
    a sort where they repeat or ``upper`` dwarfs their count."""
    if values.size and upper <= 4 * values.size + 4096:
        slot = np.full(upper, -1, dtype=np.int64)
        slot[values] = np.arange(values.size)
        order = slot[slot >= 0]
        if order.size == values.size:  # distinct: no slot was written twice
            return order
    return np.argsort(values, kind="stable")


def _beside():
    """The one-thread pool of the work done beside the ranking (:func:`_count_known_beside`,
    :func:`_index_beside`). Normal priority: at nice 19 (tried) it would gain 1-2 ms alone on the box, but
    starve behind other processes' threads (parallel HPO workers) while the ranking waits for its result."""
    return thread_pool("kgeval-protocol", 1)


def _index_beside(ctx: RunContext, inp: Inputs, eval_idx: np.ndarray, digest) -> dict:
    """``{side: future of its filter index}`` for the second side of a filtered two-sided run in one
    process, built on the thread beside the ranking while this one builds the first side's: each is
    one pass over every known triple (~3-5 ms at 10⁶), serial work that left the second core idle.
    Kept in :mod:`.known_cache` for the next evaluation of the same known triples and queries (CPU
    only). Empty otherwise (distributed runs build each index under their failure guard)."""
    if not ctx.options.filtered or ctx.dist is not None or len(inp.side_codes) < 2:
        return {}
    side = inp.side_codes[1]
    keys = query_keys(inp.triples[eval_idx], side, inp.num_relations)
    device = ctx.device
    if device.type == "cuda" and device.index is None:  # "cuda" means this thread's current device,
        device = torch.device("cuda", torch.cuda.current_device())  # not the other thread's (cuda:0)

    # digest.result() is ready when this runs: submitted first to the same one-thread pool, or given
    return {side: _beside().submit(lambda: _kept_side_index(inp, side, keys, device, digest.result()))}


def _kept_side_index(inp: Inputs, side: int, keys: np.ndarray, device, fingerprint) -> FilterIndex:
    """The filter index of ``side`` for the query keys ``keys`` on ``device``: the known triples read as
    they came (:func:`.filter_index.rows_of_queries`), never concatenated; kept in :mod:`.known_cache`
    under their ``fingerprint`` and the query keys (CPU indexes only; built without keeping when
    ``fingerprint`` is None)."""
    key = None
    if fingerprint is not None and torch.device(device).type == "cpu":
        key = ("index", fingerprint, side, known_cache.keys_digest(keys))
    return known_cache.get_or_build(key, lambda: FilterIndex(
        inp.known_sets, side=side, num_entities=inp.num_entities, num_relations=inp.num_relations, device=device,
        queries=keys), pairs=lambda ix: ix.num_pairs)


def _count_known_beside(inp: Inputs, opts: EvaluationOptions, digest):
    """A future of the protocol's number of distinct known triples (filtered runs; None otherwise),
    counted on a thread beside the ranking (the compiled count of
    :func:`.count_kernel.count_distinct_codes` releases the GIL): ~8-10 ms of one core for 10⁶ filter
    triples (38 ms before 2026-11-23, when its one 16 MiB hash table took a cache miss per triple and
    slowed the ranking's two threads beside it), kept in :mod:`.known_cache` for the next evaluation
    of the same known triples."""
    if not opts.filtered:
        return None

    def count():
        d = digest.result()  # done: submitted first to the same one-thread pool
        # the sets as they came: concatenating them would double their memory (12 GB for WikiKG90M's 5e8)
        return known_cache.get_or_build(None if d is None else ("distinct", d), lambda: count_distinct_triples(
            inp.known_sets, inp.num_entities, inp.num_relations))

    return _beside().submit(count)


def _protocol(inp: Inputs, opts: EvaluationOptions, ctx: RunContext, table: RankTable, eval_idx, capped: int,
              num_known: int | None):
    """The run's :class:`EvaluationProtocol` (``num_known``: distinct known triples of a filtered run,
    the (query, answer) pairs of either side's filter index)."""
    tri, ne, nr = inp.triples, inp.num_entities, inp.num_relations
    filtered = opts.filtered
    sampling = None
    if opts.num_negatives is not None:
        sampling = Sampling(
            num_negatives=opts.num_negatives, seed=opts.seed,
            excludes="known true answers" if filtered else "the true answer", capped_tasks=capped,
            scoring="candidates method" if ctx.used_candidates_method else "full rows, gathered",
        )
    cc = ctx.consistency
    return EvaluationProtocol(
        sides=tuple(SIDE_NAMES[c] for c in inp.side_codes),
        filtered=filtered,
        filter_sets=(FilterSet("evaluation", int(tri.shape[0])),
                     *(FilterSet(n, int(a.shape[0])) for n, a in inp.filter_sets)) if filtered else (),
        num_known_triples=num_known,
        num_triples=int(tri.shape[0]),
        num_evaluated_triples=int(eval_idx.shape[0]),
        num_tasks=len(table),
        num_entities=ne,
        num_relations=nr,
        restrict_entities=None if inp.entities is None else int(inp.entities.size),
        restrict_relations=None if inp.relations is None else int(inp.relations.size),
        num_triples_dropped=int((~inp.keep).sum()),
        sampling=sampling,
        macro=opts.macro,
        tie_tolerance=opts.tie_tolerance,
        nan_policy=opts.nan_policy,
        candidates=(
            "1 + sampled negatives" if sampling is not None
            else "allowed entities" + (" minus the other known true answers of the query" if filtered else "")
            + "; the true answer counted"
        ),
        query_metrics_k=opts.query_metrics_k if ctx.want_query_metrics else (),
        consistency_checked=None if cc is None else cc.checked,
        consistency_mismatches=None if cc is None else cc.mismatches,
        entity_chunk_size=ctx.chunk_used,
        chunk_redone_queries=ctx.chunk_redone_queries,
        device=str(ctx.device),
        tasks_sha256=tasks_digest(tri),
    )
