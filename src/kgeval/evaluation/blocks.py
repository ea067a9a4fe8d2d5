"""Counting a batch against its score blocks (one block, column tiles of whole rows, the walk over the
column chunks of a chunked batch: :class:`ChunkWalk`) and the walkers, the evaluator's only threads.

Every count goes through :func:`count_block` or :class:`Counts` (compiled kernel on the CPU, torch
reference elsewhere; :mod:`.counting`). Counts add exactly over chunks; a chunk walk reads each task's
in-batch true score from the chunk holding its answer, compared with pass 1 after the walk.

:func:`walk_parts` runs a batch's independent parts (row groups, or (row block, column chunk) pairs)
on ``workers`` walkers: walker 0 is the calling thread, the others come from one process-wide pool;
each takes the next part as it finishes one, scores it on one torch thread into its own reused block
and uses it. A ``setup`` task (the batch's serial work) runs on the calling thread first; no part is
used before it is done. A failing walker makes the others stop at their next part, and its error is
raised once all have ended. One walker: everything on the calling thread, in order.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np
import torch

from .._threads import thread_pool, torch_threads
from .batches import Batch, walkers
from .counting import FusedCounts, check_nan, fused_counts

__all__ = ["count_block", "count_tiles", "count_chunks", "Counts", "ChunkWalk", "known_by_column", "chunk_bounds",
           "row_bounds", "RowBlocks", "walk_parts", "run_on_workers"]


def count_block(ctx, sc, scores, true, b: Batch, task0: int = 0):
    """``(better, tied)`` of every task of ``b`` against its query row of ``scores``, ``b.known``
    excluded, after the NaN rule (:func:`.counting.check_nan`; ``task0``: the batch index of the first
    of these tasks, for its message)."""
    task_q, known = b.task_q, b.known
    fused = None
    if ctx.counter.fused:
        fused = fused_counts(scores, true, task_q, ctx.counter.tol, known)
    if fused is not None:
        better, tied, nan_rows = fused
        if nan_rows or bool(torch.isnan(true).any()):
            check_nan(ctx.options.nan_policy, sc.side, scores, true, b.triples, task_q, task0, known)
        return better, tied  # on the CPU, like the scores (fused_counts declines any other device)
    check_nan(ctx.options.nan_policy, sc.side, scores, true, b.triples, task_q, task0, known)
    if known is not None:
        scores = sc.writable(scores)  # never write into the scorer's memory
        scores[known[0], known[1]] = float("nan")
    return ctx.counter.rows(scores, true, task_q, b.first, b.rest)


def count_tiles(ctx, sc, tiles: list, tile: int, true, b: Batch, task0: int = 0):
    """:func:`count_block` summed over the column tiles of whole rows (``b.known``: pairs of the whole
    rows, split among the tiles by column)."""
    parts_known = known_by_column(b.known, [k * tile for k in range(len(tiles) + 1)])
    better = tied = 0
    for part, part_known in zip(tiles, parts_known):
        bb, t = count_block(ctx, sc, part, true, _with_known(b, part_known), task0)
        better, tied = better + bb, tied + t
    return better, tied


class Counts:
    """``better`` / ``tied`` of one batch's tasks summed over any number of its score blocks (each block:
    the columns of a chunk for some of its query rows), the NaN rule checked on each: one accumulator,
    two back ends. The compiled kernel (:class:`.counting.FusedCounts`: one read per block) where this
    evaluation counts with it and the block is CPU float32/float64; otherwise the torch reference
    (:func:`count_block`). Counts add exactly over blocks, so any split gives the counts of whole rows."""

    def __init__(self, ctx, sc, b: Batch, true: torch.Tensor):
        self.ctx, self.sc, self.b, self.true = ctx, sc, b, true
        self.true_nan = bool(torch.isnan(true).any())
        nt, dev = b.num_tasks, ctx.device
        self.better = torch.zeros(nt, dtype=torch.long, device=dev)
        self.tied = torch.zeros(nt, dtype=torch.long, device=dev)
        self.fused = FusedCounts.start(true, b.task_q, ctx.counter.tol) if ctx.counter.fused else None
        self._rows: dict = {}

    def add(self, scores: torch.Tensor, part: Batch, t0: int, r0: int, known) -> None:
        """Add the counts of ``part`` (tasks ``t0:`` of the batch, query rows from ``r0``, rows relative to
        ``r0``) against ``scores`` (its rows; ``known``: the block's known pairs, numpy or torch)."""
        t1 = t0 + part.num_tasks
        nan_rows = None
        if self.fused is not None:
            whole = t0 == 0 and t1 == self.b.num_tasks
            rows = None if whole else self._rows.setdefault(t0, self.fused.rows(t0, t1, r0))
            nan_rows = self.fused.add(scores, known, rows)
        if nan_rows is None:  # the torch reference
            bb, t = count_block(self.ctx, self.sc, scores, self.true[t0:t1], _with_known(part, _torch_pairs(known)), t0)
            self.better[t0:t1] += bb
            self.tied[t0:t1] += t
        elif nan_rows or self.true_nan:
            check_nan(self.ctx.options.nan_policy, self.sc.side, scores, self.true[t0:t1], part.triples, part.task_q,
                      t0, _torch_pairs(known))

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        better, tied = self.better, self.tied
        if self.fused is not None:
            bb, t = self.fused.result()
            better, tied = better + bb.to(better.device), tied + t.to(tied.device)
        return better, tied


def _with_known(b: Batch, known) -> Batch:
    return Batch(b.ent, b.rel, b.task_q, b.col, b.first, b.rest, known, b.triples)


def known_by_column(known, bounds: list[int], as_numpy: bool = False) -> list:
    """The known ``(row, column)`` pairs of each column range ``[bounds[k], bounds[k + 1])``, columns
    relative to the range's start; None for a range holding none (or ``known`` None). ``as_numpy`` (CPU
    tensors): int64 numpy arrays grouped by range (:func:`_grouped`), as the counting kernel takes them
    (cheaper than torch's per-call overhead, paid for every part of every batch)"""
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


def row_bounds(nq: int, row_block: int | None) -> list[int]:
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


class RowBlocks:
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

    def batch(self, b: Batch, i: int) -> tuple[int, Batch]:
        """``(t0, block i of b as a batch of its own)``."""
        t0, t1, _, known = self.part(i)
        return t0, b.part(self.bounds[i], self.bounds[i + 1], t0, t1, known)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bitwise-equal floats (NaN equals NaN)."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def count_chunks(ctx, sc, b: Batch, width: int, true, *, verify: bool, prepared=None, workers: int | None = None,
                 row_block: int | None = None):
    """Pass 2 over the ``sc.num_columns`` columns of batch ``b`` in chunks of ``width``: ``(better, tied,
    tasks whose in-batch true score differs from ``true`` or None)`` (:class:`ChunkWalk`; ``col < 0``: not
    verified). ``true``: the pass-1 true scores, or a function computing them (run by walker 0 while the
    others score); ``row_block``: parts are then (row block, column chunk) pairs, one walk per batch."""
    rb = row_bounds(b.ent.shape[0], row_block)
    nparts = (len(rb) - 1) * (len(chunk_bounds(sc.num_columns, width)) - 1)
    if workers is None:
        workers = walkers(ctx, sc, nparts, max(y - x for x, y in zip(rb, rb[1:])) * width)
    if prepared is None:
        prepared = sc.prepared(b.ent, b.rel, workers)  # the batch's queries, built once for all its chunks
    walk = ChunkWalk(ctx, sc, b, width, true, verify, prepared, rb)
    states = walk_parts(sc, nparts, workers, walk.score, walk.use, setup=walk.setup, start=walk.start)
    return walk.result(states)


class ChunkWalk:
    """The parts of one chunked batch: part ``k`` is row block ``k // nchunks`` x column chunk
    ``k % nchunks``. :meth:`setup` is the batch's serial work (true scores, each part's known answers
    and tasks, the answer order for verification); :meth:`score` scores a part into the walker's
    block; :meth:`use` verifies and counts it into the walker's accumulator (:meth:`start`)."""

    def __init__(self, ctx, sc, b: Batch, width: int, true, verify: bool, prepared, rb: list[int]):
        self.ctx, self.sc, self.b, self.true_in, self.verify, self.rb = ctx, sc, b, true, verify, rb
        self.bounds = chunk_bounds(sc.num_columns, width)
        self.nchunks, self.nblocks = len(self.bounds) - 1, len(rb) - 1
        if self.nblocks == 1:
            self.blocks = [(b.ent, b.rel, prepared)]
        else:
            self.blocks = [(b.ent[x:y], b.rel[x:y], None if prepared is None else prepared.rows(x, y))
                           for x, y in zip(rb, rb[1:])]

    def setup(self) -> None:
        ctx, b = self.ctx, self.b
        t = self.true_in() if callable(self.true_in) else self.true_in
        self.true, self.true_nan = t, bool(torch.isnan(t).any())
        # numpy pairs where the counting kernel will take them (CPU); torch ones for count_block's path
        as_np = ctx.counter.fused and (b.known is None or b.known[0].device.type == "cpu")
        if self.nblocks == 1:
            self.parts_known = known_by_column(b.known, self.bounds, as_np)
            self.tasks = [(0, b)]
        else:
            split = RowBlocks(b.task_q, b.known, self.rb)
            self.parts_known, self.tasks = [], []
            for i in range(self.nblocks):
                t0, part = split.batch(b, i)
                self.parts_known += known_by_column(part.known, self.bounds, as_np)
                self.tasks.append((t0, part))
        if self.verify:
            self._answer_order(t.dtype)

    def _answer_order(self, dtype) -> None:
        """Tasks grouped by part (row block, column chunk), those answered on another shard first (unread):
        each part's answers are one contiguous range ``ans_at[k]:ans_at[k + 1]``."""
        b, rb, nchunks, nblocks, dev = self.b, self.rb, self.nchunks, self.nblocks, self.ctx.device
        if dev.type == "cpu":  # a radix sort of part numbers (_grouped), cheaper than torch's argsort
            c, tq = b.col.numpy(), b.task_q.numpy()
            blk = 0 if nblocks == 1 else np.searchsorted(np.asarray(rb[1:]), tq, side="right")
            part = np.where(c >= 0, blk * nchunks + _chunk_of(c, self.bounds) + 1, 0)
            order, at = _grouped(part, nblocks * nchunks + 1)
            self.by_col = torch.from_numpy(order)
            self.ans_at = at[1:]  # part k's answers from ans_at[k] (group 0: answers on another shard)
            rows = tq[order] if nblocks == 1 else (tq - np.asarray(rb[:-1])[blk])[order]
            self.seen = _AnswerScores(torch.from_numpy(rows), b.col[self.by_col], dtype)
            return
        ncols = self.sc.num_columns
        if nblocks == 1:
            key, starts, row0 = b.col, self.bounds, None
        else:
            blk = torch.searchsorted(torch.tensor(rb[1:], device=dev), b.task_q, right=True)
            key = torch.where(b.col >= 0, blk * ncols + b.col, -1)  # answers on another shard first, unread
            starts = [i * ncols + c for i in range(nblocks) for c in self.bounds[:-1]] + [nblocks * ncols]
            row0 = torch.tensor(rb[:-1], device=dev)[blk]
        self.by_col = torch.argsort(key)
        self.ans_at = torch.searchsorted(key[self.by_col], torch.tensor(starts, device=dev)).tolist()
        rows = b.task_q[self.by_col] if row0 is None else (b.task_q - row0)[self.by_col]
        self.seen = _AnswerScores(rows, b.col[self.by_col], dtype)

    def score(self, k: int, slot: int) -> torch.Tensor:
        i, c = divmod(k, self.nchunks)
        ent, rel, prep = self.blocks[i]
        return self.sc.chunk(ent, rel, self.bounds[c], self.bounds[c + 1], slot=slot, prepared=prep)

    def start(self, slot: int) -> Counts:
        """A walker's accumulator."""
        return Counts(self.ctx, self.sc, self.b, self.true)

    def use(self, k: int, scores: torch.Tensor, acc: Counts) -> None:
        i, c = divmod(k, self.nchunks)
        if self.verify and self.ans_at[k + 1] > self.ans_at[k]:
            self.seen.read(scores, self.ans_at[k], self.ans_at[k + 1], self.bounds[c])
        t0, part = self.tasks[i]
        acc.add(scores, part, t0, self.rb[i], self.parts_known[k])

    def result(self, states: list):
        """``(better, tied, tasks whose in-batch true score differs or None)`` summed over the walkers."""
        nt, dev = self.b.num_tasks, self.ctx.device
        better = torch.zeros(nt, dtype=torch.long, device=dev)
        tied = torch.zeros(nt, dtype=torch.long, device=dev)
        for acc in states:
            if acc is not None:  # (a walker that took no part: None)
                bb, t = acc.result()
                better += bb
                tied += t
        if not self.verify:
            return better, tied, None
        by_col, a, z = self.by_col, self.ans_at[0], self.ans_at[-1]  # tasks whose answer is a column here
        bad = (~same_bits(self.seen.out[a:z], self.true[by_col[a:z]])).nonzero().view(-1)
        return better, tied, (by_col[a:z][bad] if bad.numel() else None)


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


# ------------------------------------------------------------------------------------- the walkers
def walk_parts(sc, n_parts: int, workers: int, score: Callable, use: Callable, *,
               setup: Callable | None = None, start: Callable | None = None) -> list:
    """Walk parts ``0 .. n_parts - 1``: ``x = score(k, slot)`` then ``use(k, x, state)``, where ``state``
    is ``start(slot)`` (made once per walker, after ``setup()`` has run; None without ``start``).
    Returns every walker's ``state``, walker 0 first (walkers that took no part: None)."""
    order = iter(range(n_parts))  # shared: next() is atomic under the GIL, each part is taken by one walker
    failed = []
    ready = threading.Event()
    if setup is None:
        ready.set()

    def walk(slot: int):
        try:
            if slot == 0 and setup is not None:
                try:
                    setup()
                finally:
                    ready.set()
            state, started = None, False
            for k in order:
                if failed:
                    break
                x = score(k, slot)
                if not started:  # this walker's first part: using it needs setup()'s results
                    ready.wait()
                    if failed:
                        break
                    state, started = (start(slot) if start is not None else None), True
                use(k, x, state)
            return state
        except BaseException:
            failed.append(slot)  # the other walkers stop at their next part; this error is raised
            raise

    if workers <= 1:
        return [walk(0)]
    return run_on_workers(sc, walk, workers)


def run_on_workers(sc, walk: Callable[[int], object], workers: int) -> list:
    """``[walk(slot) for slot in range(workers)]``, slot 0 on the calling thread, the others on the
    process's walker pool; the scorer's calls run on one torch thread each meanwhile (its
    ``threads`` is set to 1 and restored)."""
    # at least one thread per core: evaluations run at once from several threads never queue
    pool = thread_pool("kgeval-chunks", max(workers - 1, os.cpu_count() or 1))
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
