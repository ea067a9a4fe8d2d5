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
masking is applied per chunk. The true scores come first, read from the batch scored against its
answer columns only (~#rows / #columns extra work), and are checked to be bitwise the in-batch
values compared against (rows that differ are re-ranked exactly, see :func:`_rank_chunks`). On the
CPU, automatic sizes keep score blocks near 1-2M entries (rows of more than ``Tuning.cpu_whole_cols``
entities: 1,024 queries x 1,024 entities; shorter rows: groups of whole rows, see :func:`plan_full`),
so a large (e.g. memory-mapped) entity table is read once per ~1,024 queries; when the memory budget
forces chunking elsewhere, batches aim at ``Tuning.chunk_rows`` query rows. A scorer without ``entities=`` cannot be chunked (whole rows, with a warning). Query-level
metrics need whole rows.

Memory of one batch: the score block ``rows x width`` (on the CPU one per walker, each holding
one row group or chunk at a time; plus a comparison buffer of at most 2^18 entries and the masked
copy when the scorer keeps the block), the batch's known answers
(``O(#known answers of its queries)``) and ``O(rows)`` counts: within ``memory_budget``, whatever
the number of entities.
"""

from __future__ import annotations

import os
import threading
import warnings

from dataclasses import dataclass

import numpy as np
import torch

from .._threads import thread_pool, torch_threads
from ..errors import InvalidInputError
from .batching import auto_batch, run_batches
from .context import RunContext, SideResult
from .count_kernel import FusedCounts, fused_counts
from .counting import apply_nan_policy, check_nan
from .filter_index import FilterIndex
from .query_metrics import QueryMetricAccumulator, add_query_metrics
from .querybatch import Queries, batch_tasks, first_rest, group_by_query, known_answers, redo_batch
from .scoring import SideScorer

__all__ = ["rank_full", "plan_full", "BatchPlan"]

@dataclass(frozen=True)
class BatchPlan:
    """How one side's tasks are batched: ``batch`` tasks per batch; ``width``: the entity chunk width
    (None: whole rows); ``row_block``: query rows per row block of a chunked batch (None: one block)."""

    batch: int
    width: int | None = None
    row_block: int | None = None


def plan_batches(ctx: RunContext, sc: SideScorer, n_tasks: int, row_cols: int | None = None,
                 split_rows: bool = True) -> tuple[int, int | None]:
    """``(batch size in tasks, entity chunk width or None)``: :func:`plan_full` without row blocks."""
    plan = plan_full(ctx, sc, n_tasks, row_cols, split_rows)
    return plan.batch if plan.row_block is None else min(plan.batch, plan.row_block), plan.width


def plan_full(ctx: RunContext, sc: SideScorer, n_tasks: int, row_cols: int | None = None,
              split_rows: bool = True, quiet: bool = False) -> BatchPlan:
    """The :class:`BatchPlan` for rows of ``sc.num_columns`` candidate columns, whose whole-row call
    returns ``row_cols`` scores (default: every entity; an entity shard's local slice: its own columns);
    the sizes are the :class:`.options.Tuning` of ``ctx``. A pure function of the options, the tuning,
    the budget, the device and the scorer's capabilities: it changes nothing (the caller records the
    chunk width for the protocol).

    On the CPU, automatic sizes keep each score block near ``cpu_block`` entries: a fresh block of
    hundreds of MB costs page faults and zeroing on every batch, and a block that fits the cache is
    counted from the cache. Rows of more than ``cpu_whole_cols`` entities are chunked
    (``cpu_block_rows`` queries x ``cpu_chunk_block / cpu_block_rows`` entities, batches of equal size)
    rather than batched a few rows at a time (each batch reads the whole entity table). Shorter rows
    are whole; a batch holds up to ``whole_batch_blocks`` row groups of one block per walker
    (:func:`_row_groups`; ``split_rows=False`` for callers that score a batch's rows in one piece: one
    block of ``shard_row_block`` entries). A batch of automatic CPU chunks holds up to ``row_blocks``
    row blocks, walked as one (:func:`count_chunks` ``row_block``). The memory budget stays an upper
    bound; explicit ``batch_size`` / ``entity_chunk_size`` are used as given. ``quiet``: no warning.
    """
    tun, opts, extra = ctx.tuning, ctx.options, sc.score_bytes
    even_rows = None
    ncols = max(1, sc.num_columns)
    row_cols = ctx.num_entities if row_cols is None else max(1, row_cols)
    width = opts.entity_chunk_size
    cpu_blocks = ctx.device.type == "cpu" and opts.batch_size is None
    if width is None and not ctx.want_query_metrics:
        # automatic: chunk when the budget does not hold a small batch of whole rows
        if auto_batch(ctx.budget, ncols, n_tasks, extra=extra) < min(n_tasks, tun.min_chunk_rows):
            rows = min(n_tasks, tun.chunk_rows)
            width = max(1, int((ctx.budget // rows - 256) // (3 * 4 + 2 + extra)))
        if cpu_blocks and sc.accepts_entities and ncols > tun.cpu_whole_cols:
            # batches of equal size, not full ones and a remainder (a short batch pays the per-batch
            # work for few rows)
            rows = tun.cpu_block_rows
            rows = even_rows = -(-n_tasks // -(-n_tasks // rows)) if n_tasks else 1  # (no task: a "tasks" rank's share)
            cap = max(1, tun.cpu_chunk_block // rows)
            cap = max(tun.cpu_chunk_align, cap // tun.cpu_chunk_align * tun.cpu_chunk_align)
            width = cap if width is None else min(width, cap)
    if width is not None and width >= ncols:
        width = None
    if width is not None and not sc.accepts_entities:
        if not quiet:
            warnings.warn(
                f"scorer.{sc.method.__name__} has no entities= keyword (or the scorer declares entity_subsets=False): "
                "entity chunking is impossible, "
                "whole score rows are used",
                stacklevel=5,
            )
        width = None
    if width is None:
        batch = opts.batch_size or auto_batch(ctx.budget, row_cols, n_tasks, extra=extra)
        if cpu_blocks and split_rows:
            # rows are scored and counted in groups of one block (_row_groups): a batch of several
            # groups per walker pays the per-batch work (known answers, task bookkeeping) once for
            # all; query metrics score a batch's rows in one piece (one block per walker's share)
            walkers = _walkers(ctx, sc, 2, 0)
            groups = 1 if ctx.want_query_metrics else tun.whole_batch_blocks
            batch = min(batch, max(tun.min_chunk_rows, groups * walkers * tun.cpu_block // ncols))
        elif cpu_blocks:  # whole local rows of row_cols (an entity shard's slice: not all ncols columns)
            batch = min(batch, max(tun.min_chunk_rows, tun.shard_row_block // row_cols))
        return BatchPlan(batch)
    batch = opts.batch_size or auto_batch(ctx.budget, width, n_tasks, extra=extra)
    row_block = None
    if cpu_blocks:
        if even_rows is not None and split_rows:
            row_block = max(1, min(batch, even_rows))
            batch = min(batch, row_block * tun.row_blocks)
        else:
            batch = min(batch, max(tun.min_chunk_rows, tun.cpu_chunk_block // width))
            if even_rows is not None:
                batch = min(batch, even_rows)
    return BatchPlan(batch, int(width), row_block)


def rank_full(ctx: RunContext, sc: SideScorer, sub: np.ndarray, eval_idx: np.ndarray, keys: np.ndarray,
              answers: np.ndarray, index: FilterIndex | None, bar, qacc: QueryMetricAccumulator | None) -> SideResult:
    """Counts of every task of one side (``sub``: its triples, ``keys``: their query keys)."""
    queries = group_by_query(ctx, sub, eval_idx, keys, answers)
    plan = plan_full(ctx, sc, sub.shape[0])
    batch_size, width, row_block = plan.batch, plan.width, plan.row_block
    if width is not None:
        ctx.note_chunk(width)
    res = SideResult()

    def step(a0: int, a1: int) -> None:  # a0, a1 are query boundaries (run_batches aligns them)
        q0 = int(np.searchsorted(queries.task_end, a0, side="right"))
        q1 = int(np.searchsorted(queries.task_end, a1, side="right"))
        better, tied, ncand = _rank_batch(ctx, sc, queries, q0, q1, a0, a1, index, qacc, width, row_block)
        res.add(queries.triple_index[a0:a1], better, tied, ncand)

    run_batches(sub.shape[0], batch_size, step, bar, ends=queries.task_end)
    return res


def _rank_batch(ctx, sc, queries: Queries, q0, q1, a0, a1, index, qacc, width, row_block=None):
    """``(better, tied, num_candidates)`` of the tasks ``a0:a1``, whose queries are ``q0:q1``."""
    dev, nq, nt = ctx.device, q1 - q0, a1 - a0
    task_q, first, rest = batch_tasks(queries.qstart[q0:q1] - a0, nt, dev)
    ans = queries.answers[a0:a1]
    col = ans if ctx.pos_map is None else ctx.pos_map[ans]
    known = None
    ncand = torch.full((nt,), ctx.num_columns, dtype=torch.long, device=dev)
    if index is not None:
        known = known_answers(ctx, index, queries.keys[q0:q1])
        nfilt = torch.zeros(nq, dtype=torch.long, device=dev).index_add_(0, known[0], torch.ones_like(known[0]))
        ncand = ncand - nfilt[task_q] + 1  # the true answer is one of the known answers: count it back in
    ent, rel, triples = queries.ent[q0:q1], queries.rel[q0:q1], queries.triples[a0:a1]
    if width is None:
        better, tied, true, scale = _rank_rows(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, qacc)
    else:
        better, tied, true = _rank_chunks(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, width,
                                          row_block)
        scale = None
    if index is None:
        tied = tied - 1  # the true answer ties with itself
    better, tied = apply_nan_policy(better, tied, true, ncand, ctx.options.nan_policy)
    if ctx.consistency is not None:
        ctx.consistency.check(sc, triples, true, sorted({0, nt - 1}), scale)
    return better, tied, ncand


def _rank_rows(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, qacc):
    """Whole score rows: ``(better, tied, true scores, score scale of the checked rows)``."""
    picks = sorted({0, task_q.shape[0] - 1}) if ctx.consistency is not None else []
    if qacc is None:
        parts = _rank_row_groups(ctx, sc, ent, rel, task_q, col, known, triples, picks, tile_width(ctx, sc))
        better, tied, true = (torch.cat([p[i] for p in parts]) for i in range(3))
        return better, tied, true, _scale(sum(p[3] for p in parts), picks, sc)
    scores = sc.rows(ent, rel)
    true = scores[task_q, col]
    abs_sum = sum(_abs_sum(scores[task_q[p]]) for p in picks)
    check_nan(ctx.options.nan_policy, sc.side, scores, true, triples, task_q, known=known)
    masked = None
    if known is not None:
        rows, fcol = known
        scores = sc.writable(scores)  # never write into the scorer's memory
        masked = (rows, fcol, scores[rows, fcol])  # query metrics restore the relevant answers' scores
        scores[rows, fcol] = float("nan")
    better, tied = ctx.counter.rows(scores, true, task_q, first, rest)
    add_query_metrics(qacc, sc.side, scores, task_q, col, masked, ctx.options.nan_policy)
    return better, tied, true, _scale(abs_sum, picks, sc)


def _abs_sum(rows: torch.Tensor) -> float:
    """Sum of ``|score|`` over ``rows`` in float64, NaN and inf counting 0 (the consistency check's scale)."""
    return float(torch.nan_to_num(rows.abs().double(), nan=0.0, posinf=0.0).sum())


def _scale(abs_sum: float, picks: list, sc) -> float | None:
    """Mean ``|score|`` of the checked tasks' rows (the consistency check's tolerance scale), or None."""
    return abs_sum / (len(picks) * max(1, sc.num_columns)) if picks else None


def tile_width(ctx, sc) -> int | None:
    """Column tile width for scoring whole rows on the CPU, or None for one product per batch.

    A product into rows whose length is not a multiple of 16 floats (64 bytes) is slow; tiles are
    about equal, their widths multiples of ``Tuning.tile_align`` columns, near ``Tuning.tile_cols``.
    Aligned rows stay whole (there tiles cost more). Only for scorers taking ``entities=``.
    """
    ncols, w, align = sc.num_columns, ctx.tuning.tile_cols, ctx.tuning.tile_align
    if ctx.device.type != "cpu" or not sc.accepts_entities or ncols <= w or ncols % 16 == 0:
        return None
    even = -(-ncols // -(-ncols // w))  # ceil(ncols / ceil(ncols / w)): equal tiles
    return -(-even // align) * align


def _rank_part(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, picks, tile, slot, task0=0, prepared=None):
    """``(better, tied, true scores, |score| sum of the picked tasks' rows)`` of whole-row queries
    ``ent, rel`` (``picks``: task indices, relative to this part, in the consistency check;
    ``task0``: the batch index of this part's first task; ``prepared``: these queries prepared, see
    :meth:`SideScorer.rows`).

    With ``tile`` (:func:`tile_width`) the rows are scored tile after tile into one block of the
    whole rows' size (:meth:`SideScorer.tiles`), the true scores read from those very tiles, then
    each tile counted: exact like a single whole-row product, no second pass.
    """
    if tile is None:
        scores = sc.rows(ent, rel, slot=slot, prepared=prepared)
        true = scores[task_q, col]
        abs_sum = sum(_abs_sum(scores[task_q[p]]) for p in picks)
        better, tied = count_block(ctx, sc, scores, true, task_q, first, rest, known, triples, task0)
        return better, tied, true, abs_sum
    tiles = sc.tiles(ent, rel, tile, slot=slot, prepared=prepared)
    true = tile_scores(tiles, tile, task_q, col)
    abs_sum = sum(_abs_sum(part[task_q[p]]) for p in picks for part in tiles)
    better, tied = count_tiles(ctx, sc, tiles, tile, true, task_q, first, rest, known, triples, task0)
    return better, tied, true, abs_sum


def tile_scores(tiles: list, tile: int, task_q: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """Each task's score at its column ``col`` (``>= 0``) of its query row, read from the tiles of
    :meth:`SideScorer.tiles` (width ``tile``)."""
    of = torch.div(col, tile, rounding_mode="floor")
    true = torch.empty(task_q.shape[0], dtype=tiles[0].dtype, device=task_q.device)
    for k, part in enumerate(tiles):
        sel = (of == k).nonzero().view(-1)
        true[sel] = part[task_q[sel], col[sel] - k * tile]
    return true


def known_by_column(known, bounds: list[int], as_numpy: bool = False) -> list:
    """The known ``(row, column)`` pairs of each column range ``[bounds[k], bounds[k + 1])``, columns
    relative to the range's start; None for a range holding none (or ``known`` None). One sort of
    the batch's pairs by column, one ``searchsorted`` for all ranges.

    ``as_numpy`` (CPU tensors): the pairs as int64 numpy arrays, as the counting kernel takes them
    (:meth:`.count_kernel.FusedCounts.add`; :func:`_torch_pairs` turns one back), grouped by range
    (:func:`_grouped`: the pairs' order within a range does not matter) instead of sorted by column:
    small numpy operations cost a fraction of torch's per-call overhead, paid for every (row block,
    column chunk) part of every batch."""
    if known is None:
        return [None] * (len(bounds) - 1)
    n = len(bounds) - 1
    if as_numpy:
        rows, fcol = known[0].to(torch.int64).numpy(), known[1].to(torch.int64).numpy()
        order, at = _grouped(_chunk_of(fcol, bounds), n)
        rows, fcol = rows[order], fcol[order]
    else:
        order = torch.argsort(known[1])
        rows, fcol = known[0][order], known[1][order]
        at = torch.searchsorted(fcol, torch.tensor(bounds, device=fcol.device)).tolist()
    return [(rows[at[k]:at[k + 1]], fcol[at[k]:at[k + 1]] - bounds[k]) if at[k + 1] > at[k] else None
            for k in range(n)]


def _torch_pairs(known):
    """Known ``(row, column)`` pairs as tensors (``known_by_column(..., as_numpy=True)`` gives numpy)."""
    if known is None or isinstance(known[0], torch.Tensor):
        return known
    return torch.from_numpy(known[0]), torch.from_numpy(known[1])


def count_tiles(ctx, sc, tiles: list, tile: int, true, task_q, first, rest, known, triples, task0: int = 0):
    """:func:`count_block` summed over the tiles of whole rows (``known``: ``(row, column)`` pairs
    of the whole rows, split among the tiles by column)."""
    parts_known = known_by_column(known, [k * tile for k in range(len(tiles) + 1)])
    better = tied = 0
    for part, part_known in zip(tiles, parts_known):
        b, t = count_block(ctx, sc, part, true, task_q, first, rest, part_known, triples, task0)
        better, tied = better + b, tied + t
    return better, tied


def _row_bounds(nq: int, row_block: int | None) -> list[int]:
    """Bounds of about equal blocks of at most ``row_block`` of ``nq`` query rows (one block when None)."""
    n = 1 if row_block is None or row_block >= nq else -(-nq // row_block)
    return [nq * k // n for k in range(n + 1)]


def chunk_bounds(ncols: int, width: int) -> list[int]:
    """Column chunk bounds ``[0, width, 2 width, ..., ncols]`` of a batch's walk."""
    return list(range(0, ncols, width)) + [ncols]


def _chunk_of(cols: np.ndarray, bounds: list[int]) -> np.ndarray:
    """The chunk (index into ``bounds``' ranges) of each column ``cols`` (``>= 0``)."""
    return np.searchsorted(np.asarray(bounds[1:-1], dtype=np.int64), cols, side="right")


def _grouped(group: np.ndarray, n: int) -> tuple[np.ndarray, list[int]]:
    """``(order, at)``: the indices of ``group`` (values in ``[0, n)``) grouped by value, stably, and where
    each group starts in that order (``at[k]:at[k + 1]`` is group ``k``; ``at[n]`` the end). A 16-bit
    radix sort where ``n`` fits (numpy's stable sort of uint16), not a comparison sort."""
    order = np.argsort(group.astype(np.uint16) if n <= 1 << 16 else group, kind="stable")
    return order, [0] + np.cumsum(np.bincount(group, minlength=n)[:n]).tolist()


class _RowBlocks:
    """A batch's tasks and known answers split by the query-row blocks ``[bounds[i], bounds[i + 1])``:
    ``task_q`` and the known answers' rows are sorted, so each block's are one range (one
    ``searchsorted`` each); :meth:`part` slices one block, rows relative to its first."""

    def __init__(self, task_q: torch.Tensor, known, bounds: list[int]):
        at = torch.tensor(bounds, device=task_q.device)
        self.bounds, self.task_q, self.known = bounds, task_q, known
        self.tb = torch.searchsorted(task_q, at).tolist()
        self.kb = None if known is None else torch.searchsorted(known[0], at).tolist()

    def part(self, i: int):
        """``(t0, t1, rows of tasks t0:t1 in the block, the block's known (row, column) pairs or None)``."""
        r0, t0, t1 = self.bounds[i], self.tb[i], self.tb[i + 1]
        known = None
        if self.known is not None:
            k0, k1 = self.kb[i], self.kb[i + 1]
            known = (self.known[0][k0:k1] - r0, self.known[1][k0:k1])
        return t0, t1, self.task_q[t0:t1] - r0, known


def _row_groups(ctx, sc, nq: int) -> list[int]:
    """Bounds of the row groups of a whole-row batch of ``nq`` query rows: on the CPU groups of one
    block (``Tuning.cpu_block`` scores, at least ``Tuning.min_walker_rows`` rows), and a batch that holds fewer
    groups than there are walkers is split among them; elsewhere one group (one product per batch).

    A group is scored and counted before the next is scored into the same block, so the counting
    reads scores from the cache.
    """
    if ctx.device.type != "cpu":
        return [0, nq]
    tun = ctx.tuning
    size = max(tun.min_walker_rows, tun.cpu_block // max(1, sc.num_columns))
    n = max(-(-nq // size), _walkers(ctx, sc, nq // tun.min_walker_rows, 0), 1)
    return [nq * k // n for k in range(n + 1)]


def _rank_row_groups(ctx, sc, ent, rel, task_q, col, known, triples, picks, tile) -> list:
    """:func:`_rank_part` of each row group (:func:`_row_groups`) of the batch, in group order.

    Each group is a whole-row batch of its own (tasks and known answers, sorted by query row, are
    contiguous ranges), so its true scores come from the very call it is counted against. Several
    walkers (:func:`_walk_in_parallel`) take the next unscored group as they finish one, each scoring
    (one-thread products into its own block) and counting: the counting of one group hides behind
    another walker's product, where one ``t``-thread product followed by one-thread counting leaves
    ``t - 1`` cores idle.
    """
    nq = ent.shape[0]
    bounds = _row_groups(ctx, sc, nq)
    ngroups = len(bounds) - 1
    split = _RowBlocks(task_q, known, bounds)
    widest = max(b - a for a, b in zip(bounds, bounds[1:]))
    workers = _walkers(ctx, sc, ngroups, widest * sc.num_columns)
    # the batch's queries prepared once, each group scored from its rows
    prepared = sc.prepared(ent, rel, workers) if ngroups > 1 else None

    def group(g: int, slot: int):
        q0, q1 = bounds[g], bounds[g + 1]
        t0, t1, tq, part_known = split.part(g)
        first, rest = first_rest(tq)
        return _rank_part(ctx, sc, ent[q0:q1], rel[q0:q1], tq, col[t0:t1], first, rest, part_known,
                          triples[t0:t1], [p - t0 for p in picks if t0 <= p < t1], tile, slot, t0,
                          None if prepared is None else prepared.rows(q0, q1))

    if workers == 1:
        return [group(g, 0) for g in range(ngroups)]
    out = [None] * ngroups
    order = iter(range(ngroups))  # shared: next() is atomic under the GIL, each group is taken by one walker

    failed = []  # a walker that fails (or is interrupted) makes the others stop at their next group

    def walk(slot: int) -> None:
        try:
            for g in order:
                if failed:
                    return
                out[g] = group(g, slot)
        except BaseException:
            failed.append(slot)
            raise

    _walk_in_parallel(sc, walk, workers)
    return out


def count_block(ctx, sc, scores, true, task_q, first, rest, known, triples, task0: int = 0):
    """``(better, tied)`` of every task against its query row of ``scores``, the ``known``
    ``(row, column)`` pairs excluded, after the NaN rule (:func:`.counting.check_nan`; ``task0``:
    the batch index of the first of these tasks, for its message).

    On the CPU one compiled pass counts, subtracts the known answers and looks for NaN
    (:mod:`.count_kernel`); elsewhere the known answers are overwritten with NaN in a writable
    copy (:meth:`SideScorer.writable`) and counted by torch.
    """
    fused = None
    if ctx.counter.fused:
        fused = fused_counts(scores, true, task_q, ctx.counter.tol, known)
    if fused is not None:
        better, tied, nan_rows = fused
        if nan_rows or bool(torch.isnan(true).any()):
            check_nan(ctx.options.nan_policy, sc.side, scores, true, triples, task_q, task0, known)
        return better, tied  # on the CPU, like the scores (fused_counts declines any other device)
    check_nan(ctx.options.nan_policy, sc.side, scores, true, triples, task_q, task0, known)
    if known is not None:
        scores = sc.writable(scores)  # never write into the scorer's memory
        scores[known[0], known[1]] = float("nan")
    return ctx.counter.rows(scores, true, task_q, first, rest)


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bitwise-equal floats (NaN equals NaN)."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def answer_scores(sc, ent, rel, task_q: torch.Tensor, col: torch.Tensor, min_true_columns: int = 64) -> torch.Tensor:
    """Scores of each task's query row ``ent[task_q[i]]`` at its column(s) ``col[i]`` (``col``:
    ``(nt,)`` or ``(nt, m)`` positions in ``[0, sc.num_columns)``), from one call on the sorted union
    ``U`` of the batch's columns: ``#rows x |U|`` scores instead of ``#rows x sc.num_columns``.

    ``U`` holds at least ``min_true_columns`` columns (padded with the first ones): BLAS kernels
    for very narrow products round differently from the wide products of whole rows and chunks.
    """
    ncols, dev = sc.num_columns, task_q.device
    cols = torch.unique(col)
    pad = min(ncols, min_true_columns)
    if cols.numel() < pad:
        cols = torch.unique(torch.cat([cols, torch.arange(pad, device=dev)]))
    part = sc.columns(ent, rel, cols)
    at = torch.searchsorted(cols, col.contiguous())
    return part[task_q.view(-1, *([1] * (col.dim() - 1))), at]


def chunk_true_scores(sc, ent, rel, task_q: torch.Tensor, col: torch.Tensor, width: int,
                      prepared=None) -> torch.Tensor:
    """True scores read from whole ``width`` chunks scored for every row of this very batch (exact by
    construction when pass 2 repeats those very calls: the same rows, chunks, prepared queries and
    thread count, see :func:`_rank_chunks_exact`; up to 2x the work). Tasks with ``col < 0`` (an
    answer on another entity shard) get 0."""
    true = torch.zeros(task_q.shape[0], dtype=torch.float32, device=task_q.device)
    mine = (col >= 0).nonzero().view(-1)
    bounds = chunk_bounds(sc.num_columns, width)  # the chunks of count_chunks
    chunk_of = torch.searchsorted(torch.tensor(bounds[1:-1], dtype=col.dtype, device=col.device), col[mine],
                                  right=True)
    for c in torch.unique(chunk_of).tolist():
        sel = mine[chunk_of == c]
        part = sc.chunk(ent, rel, bounds[c], bounds[c + 1], prepared=prepared)
        true = true.to(part.dtype)
        true[sel] = part[task_q[sel], col[sel] - bounds[c]]
    return true


def _rank_chunks(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, width, row_block=None):
    """Column chunks of ``width``: ``(better, tied, true scores)``.

    Pass 1 scores the whole batch against the batch's answer columns only (:func:`answer_scores`),
    ~#rows / #columns of the batch's work. Pass 2 scores every chunk for the whole batch and counts
    against those scores; in the answer's chunk it reads the in-batch score, and all are compared
    bitwise with the pass-1 values at the end. The queries of any task that differs are ranked again
    on their own with true scores and counts from the same chunk calls (:func:`_rank_chunks_exact`),
    so the true score is always exactly the value compared against. :mod:`.sharded` runs the same
    passes on an entity shard's local columns.
    """
    rb = _row_bounds(ent.shape[0], row_block)
    walkers = _walkers(ctx, sc, -(-sc.num_columns // width) * (len(rb) - 1),
                       max(b - a for a, b in zip(rb, rb[1:])) * width)
    prepared = sc.prepared(ent, rel, walkers)  # the batch's queries, built once for both passes
    one = {}

    def pass_one() -> torch.Tensor:  # run by count_chunks while the other walkers score their first chunk
        one["true"] = t = answer_scores(sc, ent, rel, task_q, col, ctx.tuning.min_true_columns)
        return t

    better, tied, differ = count_chunks(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, width, pass_one,
                                         verify=True, prepared=prepared, workers=walkers, row_block=row_block)
    true = one["true"]
    if differ is not None:
        redo = redo_batch(ent.shape[0], task_q, differ, known)
        ctx.chunk_redone_queries += int(redo.queries.numel())
        t = redo.tasks
        b, tt, tr = _rank_chunks_exact(ctx, sc, ent[redo.queries], rel[redo.queries], redo.task_q, col[t],
                                       redo.first, redo.rest, redo.known, triples[t.cpu().numpy()], width, row_block)
        better[t], tied[t], true[t] = b, tt, tr.to(true.dtype)
    return better, tied, true


def _rank_chunks_exact(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, width, row_block=None):
    """As :func:`_rank_chunks`, the true scores read from whole chunks of this very batch
    (:func:`chunk_true_scores`) and counted by the very same calls: the batch's prepared queries, one
    walker on the calling thread. Walkers score on one torch thread each, and a scorer's rounding
    may depend on the thread count (TuckER's heads), so true scores
    read on the caller's threads and counted by walkers missed their own tie, silently (a filtered
    rank one better) -- unfiltered it surfaced as ``num_tied = -1``. The count checks every answer's
    score once more; identical calls that still disagree are a named error, never a wrong rank.
    ``row_block``: at most this many query rows at a time (each group its own batch: the true scores
    and the counts of a group come from the same calls)."""
    rb = _row_bounds(ent.shape[0], row_block)
    if len(rb) > 2:
        split, out = _RowBlocks(task_q, known, rb), []
        for i in range(len(rb) - 1):
            t0, t1, tq, part_known = split.part(i)
            out.append(_rank_chunks_exact(ctx, sc, ent[rb[i]:rb[i + 1]], rel[rb[i]:rb[i + 1]], tq, col[t0:t1],
                                          *first_rest(tq), part_known, triples[t0:t1], width))
        return tuple(torch.cat([o[j] for o in out]) for j in range(3))
    prepared = sc.prepared(ent, rel)
    true = chunk_true_scores(sc, ent, rel, task_q, col, width, prepared=prepared)
    better, tied, differ = count_chunks(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, width, true,
                                         verify=True, prepared=prepared, workers=1)
    if differ is not None:
        raise nondeterministic(sc, differ.numel())
    return better, tied, true


def nondeterministic(sc, n: int) -> InvalidInputError:
    """The error for a scorer whose identical calls gave different scores (ranks cannot be exact)."""
    return InvalidInputError(
        f"scorer.{sc.method.__name__} returned different scores for the same queries and candidates in two "
        f"identical calls ({n} answer scores differ): exact ranks need deterministic scores (on a GPU: "
        "torch.use_deterministic_algorithms(True))"
    )


def _walkers(ctx, sc, nparts: int, block: int) -> int:
    """How many threads walk a batch's ``nparts`` parts (column chunks, or groups of whole rows) at
    once, each scoring on one torch thread.

    On the CPU with ``t >= 2`` walkers (``Tuning.workers``, default the caller's torch threads),
    single-threaded walkers (each scores its part, then counts it with the compiled kernel, both
    outside the GIL) keep every core busy; one walker with a ``t``-thread matmul leaves ``t - 1``
    cores idle while it counts. A scorer's rounding may depend on the thread count, which is safe
    because every walker reads each answer's score from the very block it counts with, pass 2
    verifies pass 1, and re-ranking scores and counts on one walker (:func:`_rank_chunks_exact`).
    Only for scorers that say several threads may score at once (``concurrent_scoring``) and take
    ``out=``, automatic block sizes (each walker holds one block of at most ``block`` scores) and
    when this evaluation counts with the kernel (decided at its start).
    """
    n = ctx.tuning.workers or ctx.score_threads or 1
    if n < 2 or nparts < 2 or ctx.device.type != "cpu" or not sc.accepts_out or block > ctx.tuning.cpu_block:
        return 1
    if getattr(sc.scorer, "concurrent_scoring", False) is not True:
        return 1
    if not ctx.counter.fused:
        return 1
    return min(n, nparts)


def _walk_in_parallel(sc, walk, workers: int) -> list:
    """``[walk(slot) for slot in range(workers)]``, slot 0 on the calling thread, the
    others on a thread pool; the scorer's calls run on one torch thread each meanwhile."""
    # at least one thread per core: evaluations run at once from several threads never queue
    pool = thread_pool("kgeval-chunks", max(workers - 1, os.cpu_count() or 1)) if workers > 1 else None
    threads = sc.threads
    sc.threads = 1  # scorer calls must not change the process-wide thread count under each other
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def walker(slot: int):  # autograd modes are per thread: the walker takes the caller's
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return walk(slot)

    try:
        with torch_threads(1):
            futures = [pool.submit(walker, slot) for slot in range(1, workers)]
            try:
                parts = [walk(0)]
            finally:  # never leave a walker running past this batch (an error is raised after all end)
                done = [f.exception() for f in futures]
            for f, err in zip(futures, done):
                if err is not None:
                    raise err
                parts.append(f.result())
    finally:
        sc.threads = threads
    return parts


def count_chunks(ctx, sc, ent, rel, task_q, col, first, rest, known, triples, width, true, *, verify: bool,
                 prepared=None, workers: int | None = None, row_block: int | None = None):
    """Pass 2 over the ``sc.num_columns`` columns: ``(better, tied, tasks whose in-batch true score
    differs from ``true`` or None)``; tasks with ``col < 0`` (answer on another entity shard) are not verified.
    ``true``: the pass-1 true scores, or a function computing them (called once, on the calling
    thread, while the other walkers score their first chunk: see ``setup`` below);
    ``prepared``: :meth:`.scoring.SideScorer.prepared` of these queries (built here when None);
    ``workers``: how many walk the chunks (1 = every chunk on the calling thread; default: :func:`_walkers`);
    ``row_block``: score the batch's query rows in about equal blocks of at most this many (None: all
    at once). The walk's parts are then (row block, column chunk) pairs: a batch of several row
    blocks pays one walk -- one setup, one wait for the slowest walker -- where batches of one block
    each paid one per block (see :func:`plan_full`)."""
    dev, nt, ncols, nq = ctx.device, task_q.shape[0], sc.num_columns, ent.shape[0]
    bounds = chunk_bounds(ncols, width)
    nchunks = len(bounds) - 1
    rb = _row_bounds(nq, row_block)  # row blocks [rb[i], rb[i + 1])
    nblocks = len(rb) - 1
    if workers is None:
        workers = _walkers(ctx, sc, nchunks * nblocks, max(b - a for a, b in zip(rb, rb[1:])) * width)
    if prepared is None:
        prepared = sc.prepared(ent, rel, workers)  # the batch's queries, built once for all its chunks
    if nblocks == 1:
        blocks = [(ent, rel, prepared)]
    else:
        blocks = [(ent[a:b], rel[a:b], None if prepared is None else prepared.rows(a, b)) for a, b in zip(rb, rb[1:])]
    # walkers take the next chunk as they finish one: a fixed share of every other chunk leaves the
    # faster walker waiting for the slower one at the end of every batch
    order = iter(range(nblocks * nchunks))  # part k: row block k // nchunks, column chunk k % nchunks;
    # shared: next() is atomic under the GIL, each part is taken by one walker
    st = {}  # what counting needs, made by setup() on the calling thread (slot 0)
    ready = threading.Event()  # set once st is complete, or setup failed ("failed" in st)

    def setup() -> None:
        """The batch's serial steps, on the calling thread while the other walkers already score their
        first chunk (which needs none of it): serial per-batch work would otherwise leave the other
        cores idle)."""
        t = true() if callable(true) else true
        st["true"], st["true_nan"] = t, bool(torch.isnan(t).any())
        # each part's known answers, rows relative to its row block
        # numpy pairs where the counting kernel will take them (CPU); torch ones for count_block's path
        as_np = ctx.counter.fused and (known is None or known[0].device.type == "cpu")
        if nblocks == 1:
            st["parts_known"] = known_by_column(known, bounds, as_np)
            st["tasks"] = [(0, nt, task_q, first, rest)]
        else:
            split = _RowBlocks(task_q, known, rb)
            st["parts_known"], st["tasks"] = [], []
            for i in range(nblocks):
                t0, t1, tq, part_known = split.part(i)
                st["parts_known"] += known_by_column(part_known, bounds, as_np)
                st["tasks"].append((t0, t1, tq, *first_rest(tq)))
        if verify and dev.type == "cpu":
            # tasks grouped by part (row block, column chunk), those answered on another shard first (unread):
            # each part's answers are one contiguous range; a radix sort of part numbers (:func:`_grouped`:
            # (cheaper than torch's argsort of (block, column) keys and searchsorted)
            c, tq = col.numpy(), task_q.numpy()
            blk = 0 if nblocks == 1 else np.searchsorted(np.asarray(rb[1:]), tq, side="right")
            part = np.where(c >= 0, blk * nchunks + _chunk_of(c, bounds) + 1, 0)
            order, at = _grouped(part, nblocks * nchunks + 1)
            st["by_col"] = by_col = torch.from_numpy(order)
            st["ans_at"] = at[1:]  # part k's answers from ans_at[k] (group 0: answers on another shard)
            rows = tq[order] if nblocks == 1 else (tq - np.asarray(rb[:-1])[blk])[order]
            st["seen"] = _AnswerScores(torch.from_numpy(rows), col[by_col], t.dtype)
        elif verify:  # tasks sorted by (row block, answer column): each part's answers are one contiguous range
            if nblocks == 1:
                key, starts, row0 = col, bounds, None
            else:
                blk = torch.searchsorted(torch.tensor(rb[1:], device=dev), task_q, right=True)
                key = torch.where(col >= 0, blk * ncols + col, -1)  # answers on another shard first, unread
                starts = [i * ncols + c for i in range(nblocks) for c in bounds[:-1]] + [nblocks * ncols]
                row0 = torch.tensor(rb[:-1], device=dev)[blk]
            st["by_col"] = by_col = torch.argsort(key)
            st["ans_at"] = torch.searchsorted(key[by_col], torch.tensor(starts, device=dev)).tolist()
            rows = task_q[by_col] if row0 is None else (task_q - row0)[by_col]
            st["seen"] = _AnswerScores(rows, col[by_col], t.dtype)

    def walk(slot: int):
        """The chunks this walker takes: their summed counts (and their answers' in-batch scores); a walker
        that fails (or is interrupted) makes the others stop at their next chunk: its error is raised, and the
        rest of the batch would be thrown away (an interrupt waited for every chunk left)."""
        try:
            return walk_chunks(slot)
        except BaseException:
            st["failed"] = True
            raise

    def walk_chunks(slot: int):
        better = torch.zeros(nt, dtype=torch.long, device=dev)
        tied = torch.zeros(nt, dtype=torch.long, device=dev)
        if slot == 0:
            try:
                setup()
            except BaseException:
                st["failed"] = True  # the other walkers stop at their first chunk; this error is raised
                raise
            finally:
                ready.set()
        fused, counting, rows = None, False, None
        for k in order:  # count chunk by chunk, excluding the known answers in it
            if "failed" in st:  # another walker failed: its error ends the batch
                return better, tied
            i, c = divmod(k, nchunks)
            c0, c1 = bounds[c], bounds[c + 1]
            b_ent, b_rel, b_prep = blocks[i]
            part = sc.chunk(b_ent, b_rel, c0, c1, slot=slot, prepared=b_prep)
            if not counting:  # this walker's first chunk: counting needs setup()'s results
                ready.wait()
                if "failed" in st:
                    return better, tied
                counting = True
                # the kernel sums this walker's chunks into one pair of arrays (no per-chunk conversions);
                # None: count_block's path for every chunk (no kernel, not loaded yet, another dtype)
                fused = FusedCounts.start(st["true"], task_q, ctx.counter.tol) if ctx.counter.fused else None
                if fused is not None and nblocks > 1:
                    rows = [fused.rows(t0, t1, r0) for (t0, t1, *_), r0 in zip(st["tasks"], rb)]
            if verify and st["ans_at"][k + 1] > st["ans_at"][k]:
                st["seen"].read(part, st["ans_at"][k], st["ans_at"][k + 1], c0)
            known_k = st["parts_known"][k]
            t0, t1, tq, b_first, b_rest = st["tasks"][i]
            nan_rows = None if fused is None else fused.add(part, known_k, None if rows is None else rows[i])
            if nan_rows is None:  # the kernel does not take this block: count_block's own path
                b, t = count_block(ctx, sc, part, st["true"][t0:t1], tq, b_first, b_rest, _torch_pairs(known_k),
                                   triples[t0:t1], t0)
                better[t0:t1] += b
                tied[t0:t1] += t
            elif nan_rows or st["true_nan"]:
                check_nan(ctx.options.nan_policy, sc.side, part, st["true"][t0:t1], triples[t0:t1], tq, t0,
                          _torch_pairs(known_k))
        if fused is not None:
            b, t = fused.result()
            better += b.to(dev)
            tied += t.to(dev)
        return better, tied

    if workers == 1:
        better, tied = walk(0)
    else:
        parts = _walk_in_parallel(sc, walk, workers)
        better, tied = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if not verify:
        return better, tied, None
    by_col, ans_at = st["by_col"], st["ans_at"]
    a, b = ans_at[0], ans_at[-1]  # the tasks whose answer is a column here (col < 0: on another shard)
    bad = (~_same(st["seen"].out[a:b], st["true"][by_col[a:b]])).nonzero().view(-1)
    return better, tied, (by_col[a:b][bad] if bad.numel() else None)


class _AnswerScores:
    """The in-batch score of each task's answer, read from the chunk that holds it while the chunk
    is scored (tasks sorted by answer column: a chunk's answers are one range ``a:b``), to be
    compared with the pass-1 true scores once, after the walk. Walkers write disjoint ranges. On the
    CPU through numpy, which avoids torch's per-call overhead on every chunk."""

    def __init__(self, task_q: torch.Tensor, col: torch.Tensor, dtype: torch.dtype):
        self.cpu = task_q.device.type == "cpu"
        self.out = torch.empty(task_q.shape[0], dtype=dtype, device=task_q.device)
        if self.cpu:
            self.rows, self.cols, self.out_np = task_q.numpy(), col.numpy(), self.out.numpy()
        else:
            self.rows, self.cols = task_q, col

    def read(self, part: torch.Tensor, a: int, b: int, c0: int) -> None:
        """Read tasks ``a:b``'s scores from ``part``, the chunk of columns from ``c0``."""
        if self.cpu and part.device.type == "cpu":
            self.out_np[a:b] = part.detach().numpy()[self.rows[a:b], self.cols[a:b] - c0]
        else:
            self.out[a:b] = part[self.rows[a:b], self.cols[a:b] - c0].to(device=self.out.device)
