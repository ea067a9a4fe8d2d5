"""Full ranking: every task against all (allowed) candidates, one score row per unique query.

Tasks are grouped by query, so a row is scored once and shared by all tasks of its query. The
true scores are read first; then every known answer of the query (the task's own answer
included) is overwritten with NaN, which compares neither greater nor equal (see
:mod:`.counting`), so ``better = #{row > s}`` and ``tied = #{row == s}`` directly exclude the
filtered answers and the answer itself, at a cost linear in the number of known answers per
*query*. ``num_candidates = #allowed entities - #other known answers among them``.

Entity chunks: when even a small batch of whole rows would exceed the memory budget (or when
``entity_chunk_size`` is given), each query batch is scored in column chunks ``[q, chunk]``
through the scorer's ``entities=`` keyword. ``better`` / ``tied`` add exactly over chunks and the
masking is applied per chunk. The true scores are read from the very chunk that holds the answer
(a first pass over the chunks holding answers), so they are bitwise the values compared
against; chunked batches therefore score those chunks twice. A scorer without ``entities=``
cannot be chunked (whole rows, with a warning). Query-level metrics need whole rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .batching import auto_batch, run_batches
from .context import RunContext, SideResult
from .counting import apply_nan_policy, check_nan
from .filter_index import FilterIndex
from .query_metrics import QueryMetricAccumulator, add_query_metrics
from .scoring import SideScorer

__all__ = ["rank_full"]

_MIN_CHUNK_ROWS = 64  # automatic chunking keeps at least this many query rows per batch


@dataclass
class _Queries:
    """The tasks of one side sorted by query key, so each query's tasks are contiguous."""

    qstart: np.ndarray  # first (sorted) task of each query
    task_end: np.ndarray  # tasks of queries [0, i] end at task_end[i]
    ent: torch.Tensor  # per query: the given entity and relation
    rel: torch.Tensor
    keys: torch.Tensor
    answers: torch.Tensor  # per sorted task
    triples: np.ndarray
    triple_index: np.ndarray


def _group_by_query(ctx: RunContext, sub, eval_idx, keys, answers) -> _Queries:
    dev = ctx.device
    order = np.argsort(keys, kind="stable")
    skeys = keys[order]
    qstart = np.flatnonzero(np.r_[True, skeys[1:] != skeys[:-1]])  # where the key changes
    uq = skeys[qstart]
    return _Queries(
        qstart=qstart,
        task_end=np.r_[qstart[1:], skeys.shape[0]],
        ent=torch.as_tensor((uq // ctx.num_relations).astype(np.int64), device=dev),
        rel=torch.as_tensor((uq % ctx.num_relations).astype(np.int64), device=dev),
        keys=torch.as_tensor(uq, device=dev),
        answers=torch.as_tensor(answers[order], device=dev),
        triples=sub[order],
        triple_index=eval_idx[order],
    )


def _plan(ctx: RunContext, sc: SideScorer, n_tasks: int) -> tuple[int, int | None]:
    """``(batch size in tasks, entity chunk width or None)``."""
    opts, ncols, extra = ctx.options, ctx.num_columns, sc.score_bytes
    width = opts.entity_chunk_size
    if width is None and not ctx.want_query_metrics:
        # automatic: chunk when the budget does not hold a small batch of whole rows
        rows = min(n_tasks, _MIN_CHUNK_ROWS)
        if auto_batch(ctx.budget, ncols, n_tasks, extra=extra) < rows:
            width = max(1, int((ctx.budget // rows - 256) // (3 * 4 + 2 + extra)))
    if width is not None and width >= ncols:
        width = None
    if width is not None and not sc.accepts_entities:
        warnings.warn(
            f"scorer.{sc.method.__name__} has no entities= keyword: entity chunking is impossible, "
            "whole score rows are used",
            stacklevel=5,
        )
        width = None
    if width is None:
        return opts.batch_size or auto_batch(ctx.budget, ctx.num_entities, n_tasks, extra=extra), None
    ctx.note_chunk(int(width))
    return opts.batch_size or auto_batch(ctx.budget, width, n_tasks, extra=extra), int(width)


def rank_full(ctx: RunContext, sc: SideScorer, sub: np.ndarray, eval_idx: np.ndarray, keys: np.ndarray,
              answers: np.ndarray, index: FilterIndex | None, bar, qacc: QueryMetricAccumulator | None) -> SideResult:
    """Counts of every task of one side (``sub``: its triples, ``keys``: their query keys)."""
    queries = _group_by_query(ctx, sub, eval_idx, keys, answers)
    batch_size, width = _plan(ctx, sc, sub.shape[0])
    res = SideResult()

    def step(a0: int, a1: int) -> None:  # a0, a1 are query boundaries (run_batches aligns them)
        q0 = int(np.searchsorted(queries.task_end, a0, side="right"))
        q1 = int(np.searchsorted(queries.task_end, a1, side="right"))
        better, tied, ncand = _rank_batch(ctx, sc, queries, q0, q1, a0, a1, index, qacc, width)
        res.add(queries.triple_index[a0:a1], better, tied, ncand)

    run_batches(sub.shape[0], batch_size, step, bar, ends=queries.task_end)
    return res


def _rank_batch(ctx, sc, queries: _Queries, q0, q1, a0, a1, index, qacc, width):
    """``(better, tied, num_candidates)`` of the tasks ``a0:a1``, whose queries are ``q0:q1``."""
    dev, nq, nt = ctx.device, q1 - q0, a1 - a0
    qstart = queries.qstart[q0:q1] - a0
    task_q = torch.as_tensor(np.searchsorted(qstart, np.arange(nt), side="right") - 1, device=dev)
    ans = queries.answers[a0:a1]
    col = ans if ctx.pos_map is None else ctx.pos_map[ans]
    if nt == nq:  # one task per query: compare every row in place
        first = rest = None
    else:
        first = torch.as_tensor(qstart, device=dev)
        rest = torch.ones(nt, dtype=torch.bool, device=dev)
        rest[first] = False
        rest = rest.nonzero().view(-1)
    known = None
    ncand = torch.full((nt,), ctx.num_columns, dtype=torch.long, device=dev)
    if index is not None:
        known = _known_answers(ctx, index, queries.keys[q0:q1])
        nfilt = torch.zeros(nq, dtype=torch.long, device=dev).index_add_(0, known[0], torch.ones_like(known[0]))
        ncand = ncand - nfilt[task_q] + 1  # the true answer is one of the known answers: count it back in
    ent, rel, triples = queries.ent[q0:q1], queries.rel[q0:q1], queries.triples[a0:a1]
    if width is None:
        better, tied, true, scale = _rank_rows(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, qacc)
    else:
        better, tied, true = _rank_chunks(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, width)
        scale = None
    if index is None:
        tied = tied - 1  # the true answer ties with itself
    better, tied = apply_nan_policy(better, tied, true, ncand, ctx.options.nan_policy)
    if ctx.consistency is not None:
        ctx.consistency.check(sc, triples, true, sorted({0, nt - 1}), scale)
    return better, tied, ncand


def _known_answers(ctx: RunContext, index: FilterIndex, keys: torch.Tensor):
    """``(query row, column)`` of every known answer of the batch's queries that is a candidate."""
    rows, ents = index.pairs(keys)
    if ctx.pos_map is None:
        return rows, ents
    cols = ctx.pos_map[ents]
    ok = cols >= 0  # answers outside the restriction are not candidates
    return rows[ok], cols[ok]


def _rank_rows(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, qacc):
    """Whole score rows: ``(better, tied, true scores, score scale of the checked rows)``."""
    scores = sc.rows(ent, rel)
    true = scores[task_q, col]
    check_nan(ctx.options.nan_policy, sc.side, scores, true, triples, task_q)
    masked = None
    if known is not None:
        rows, fcol = known
        scores = sc.writable(scores)  # never write into the scorer's memory
        if qacc is not None:  # query metrics restore the relevant answers' scores
            masked = (rows, fcol, scores[rows, fcol])
        scores[rows, fcol] = float("nan")
    better, tied = ctx.counter.rows(scores, true, task_q, first, rest)
    scale = None
    if ctx.consistency is not None:  # score scale of the checked tasks' rows (masked answers count 0)
        picks = torch.as_tensor(sorted({0, true.shape[0] - 1}), device=ctx.device)
        scale = float(torch.nan_to_num(scores[task_q[picks]].abs().double(), nan=0.0, posinf=0.0).mean())
    if qacc is not None:
        add_query_metrics(qacc, sc.side, scores, task_q, col, masked, ctx.options.nan_policy)
    return better, tied, true, scale


def _rank_chunks(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, width):
    """Column chunks of ``width``: ``(better, tied, true scores)``."""
    dev, nt, ncols = ctx.device, task_q.shape[0], ctx.num_columns
    # pass 1: the true scores, read from the chunk holding each answer
    true = torch.empty(nt, dtype=torch.float32, device=dev)
    chunk_of = col // width
    for c in torch.unique(chunk_of).tolist():
        sel = (chunk_of == c).nonzero().view(-1)
        part = sc.chunk(ent, rel, c * width, min(ncols, (c + 1) * width))
        true = true.to(part.dtype)
        true[sel] = part[task_q[sel], col[sel] - c * width]
    if known is not None:
        order = torch.argsort(known[1])
        rows, fcol = known[0][order], known[1][order]
    better = torch.zeros(nt, dtype=torch.long, device=dev)
    tied = torch.zeros(nt, dtype=torch.long, device=dev)
    # pass 2: count chunk by chunk, masking the known answers that fall in the chunk
    for c0 in range(0, ncols, width):
        c1 = min(ncols, c0 + width)
        part = sc.chunk(ent, rel, c0, c1)
        check_nan(ctx.options.nan_policy, sc.side, part, true, triples, task_q)
        if known is not None:
            lo, hi = torch.searchsorted(fcol, torch.tensor([c0, c1], device=dev)).tolist()
            if hi > lo:
                part = sc.writable(part)
                part[rows[lo:hi], fcol[lo:hi] - c0] = float("nan")
        b, t = ctx.counter.rows(part, true, task_q, first, rest)
        better += b
        tied += t
    return better, tied, true
