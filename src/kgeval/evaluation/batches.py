"""The batches of one evaluation, shared by :mod:`.full` and :mod:`.listed` (nothing here scores or
counts): the evaluation's state (:class:`RunContext`) and a side's collected counts (:class:`SideResult`);
the pure batch plan (:func:`plan_full`, :func:`walkers`, :func:`auto_batch`); the one out-of-memory-aware
batch driver (:func:`run_batches`: on an out-of-memory error it halves the batch and resumes at the
failed batch, finished batches are never redone); a side's tasks grouped by query (:func:`group_by_query`)
and cut into :class:`Batch` es of whole queries, with their known answers as ``(row, column)`` pairs.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from ..filtering import FilterIndex
from .counting import ConsistencyCheck, Counter
from .options import EvaluationOptions
from .tuning import Tuning

__all__ = ["RunContext", "SideResult", "BatchPlan", "plan_full", "walkers", "auto_batch",
           "is_out_of_memory", "run_batches", "Batch", "Queries", "group_by_query", "known_answers", "batch_tasks",
           "first_rest", "Redo", "redo_batch"]


# ------------------------------------------------------------------------ the evaluation's context
@dataclass
class RunContext:
    """What every batch of one evaluation needs besides its own tasks."""

    options: EvaluationOptions
    #: the internal performance knobs of this evaluation (read once, at its start)
    tuning: Tuning
    device: torch.device
    num_entities: int
    num_relations: int
    #: candidate columns per score row: allowed entities (restriction) or all entities
    num_columns: int
    #: the allowed entity ids, sorted (None = all entities)
    allowed: torch.Tensor | None
    #: entity id -> column position under a restriction (-1 = not allowed); None = identity
    pos_map: torch.Tensor | None
    #: bytes for score matrices and temporaries
    budget: int
    counter: Counter
    consistency: ConsistencyCheck | None
    #: query-level metrics requested (full ranking only; needs whole score rows)
    want_query_metrics: bool
    #: torch's thread count for the scorer calls (the caller's)
    score_threads: int | None = None
    #: the widest entity chunk used (None = whole rows)
    chunk_used: int | None = None
    #: query rows re-ranked because a scored pass-1 true score differed from the in-batch one (see full.py);
    #: the protocol's ``chunk_redone_queries``
    chunk_redone_queries: int = 0
    #: sampled ranking scored through ``score_*_candidates`` (the last side's)
    used_candidates_method: bool = False
    #: this rank's share of a distributed evaluation (:class:`.distributed.Plan`); None = one process
    dist: object | None = None
    #: ``distributed="entities"``: ``(lo, hi, row width, row dtype)`` of this rank's entity shard
    shard: tuple | None = None
    #: the accumulator of query-level metrics (:class:`kgeval.evaluation.QueryMetricAccumulator`), or None
    query_metrics: object | None = None

    def note_chunk(self, width: int) -> None:
        self.chunk_used = width if self.chunk_used is None else max(self.chunk_used, width)


@dataclass
class SideResult:
    """Per-task counts of one side, collected batch by batch."""

    triple_index: list = field(default_factory=list)
    better: list = field(default_factory=list)
    tied: list = field(default_factory=list)
    ncand: list = field(default_factory=list)

    def add(self, triple_index: np.ndarray, better, tied, ncand) -> None:
        self.triple_index.append(triple_index)
        self.better.append(better.cpu().numpy())
        self.tied.append(tied.cpu().numpy())
        self.ncand.append(ncand.cpu().numpy())


# ---------------------------------------------------------------- batch sizes and the batch driver
# substrings of allocation failures raised as plain RuntimeError: CUDA's caching allocator and
# torch's CPU allocator ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ...",
# "not enough memory" on Windows)
_OOM_MESSAGES = ("out of memory", "can't allocate memory", "not enough memory")


def auto_batch(budget: int, columns: int, n_tasks: int, itemsize: int = 4, extra: float = 0.0) -> int:
    """Task rows per batch: ``budget / (columns * (3 * itemsize + 2 + extra) + 256)``, in ``[1, n_tasks]``.

    Per row: the score matrix, a gathered/restricted copy and the float comparison buffer (batches
    hold whole queries, so a batch may exceed its task count by one query's tasks); ``extra``: the
    scorer's own working memory per score entry (``score_bytes``, e.g. a broadcast
    ``batch x entities x dim`` tensor).
    """
    per_row = int(columns * (3 * itemsize + 2 + extra)) + 256
    return int(max(1, min(n_tasks, budget // per_row)))


@dataclass(frozen=True)
class BatchPlan:
    """How one side's tasks are batched: ``batch`` tasks per batch; ``width``: the entity chunk width
    (None: whole rows); ``row_block``: query rows per row block of a chunked batch (None: one block)."""

    batch: int
    width: int | None = None
    row_block: int | None = None


def plan_full(ctx: RunContext, sc, n_tasks: int, row_cols: int | None = None,
              split_rows: bool = True, quiet: bool = False) -> BatchPlan:
    """The :class:`BatchPlan` for rows of ``sc.num_columns`` columns whose whole-row call returns ``row_cols``
    scores (default every entity; an entity shard: its local columns), sized by ``ctx.tuning``. Pure: a
    function of the options, tuning, budget, device and scorer capabilities.

    On the CPU automatic score blocks stay near ``cpu_block`` entries (counted from the cache). Rows of
    more than ``cpu_whole_cols`` entities are chunked (``cpu_block_rows`` queries x ``cpu_chunk_block /
    cpu_block_rows`` entities, equal batches of up to ``row_blocks`` row blocks walked as one); shorter
    rows are whole, up to ``whole_batch_blocks`` row groups per walker (``split_rows=False``: one block of
    ``shard_row_block`` entries). The memory budget is an upper bound; explicit ``batch_size`` /
    ``entity_chunk_size`` are used as given. ``quiet``: no warning.
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
            n_walkers = walkers(ctx, sc, 2, 0)
            groups = 1 if ctx.want_query_metrics else tun.whole_batch_blocks
            batch = min(batch, max(tun.min_chunk_rows, groups * n_walkers * tun.cpu_block // ncols))
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


def walkers(ctx, sc, nparts: int, block: int) -> int:
    """How many walkers take a batch's ``nparts`` parts, each scoring on one torch thread and counting
    outside the GIL (``Tuning.workers``, default the caller's torch threads): only on the CPU, for scorers
    declaring ``concurrent_scoring`` and taking ``out=``, blocks of at most ``cpu_block`` scores, when this
    evaluation counts with the kernel. Otherwise 1: the sequential executor. (Each walker reads an answer's
    score from the very block it counts with, so thread-dependent rounding stays exact.)"""
    n = ctx.tuning.workers or ctx.score_threads or 1
    if n < 2 or nparts < 2 or ctx.device.type != "cpu" or not sc.accepts_out or block > ctx.tuning.cpu_block:
        return 1
    if getattr(sc.scorer, "concurrent_scoring", False) is not True:
        return 1
    if not ctx.counter.fused:
        return 1
    return min(n, nparts)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure: ``MemoryError`` (numpy's ``_ArrayMemoryError``
    included), ``torch.OutOfMemoryError``, or a ``RuntimeError`` from torch's CUDA or CPU allocator."""
    if isinstance(exc, MemoryError):
        return True
    for name in ("OutOfMemoryError",):
        cls = getattr(torch, name, None) or getattr(torch.cuda, name, None)
        if cls is not None and isinstance(exc, cls):
            return True
    if isinstance(exc, RuntimeError):
        msg = str(exc).lower()
        return any(m in msg for m in _OOM_MESSAGES)
    return False


def _batch_stop(start: int, size: int, n: int, ends: np.ndarray | None) -> int:
    """End of the batch starting at ``start``: ``start + size``, moved back to the last group end
    (at least one whole group)."""
    stop = min(n, start + size)
    if ends is None:
        return stop
    i = int(np.searchsorted(ends, stop, side="right"))  # groups ending at or before stop
    first = int(np.searchsorted(ends, start, side="right"))  # the group starting at ``start``
    return int(ends[max(i, first + 1) - 1])


def run_batches(n: int, batch_size: int, step, bar=None, *, ends: np.ndarray | None = None) -> int:
    """Call ``step(start, stop)`` over ``[0, n)``; returns the final batch size.

    ``ends``: sorted group end positions (the last one ``n``); batches then cover whole groups.
    An out-of-memory error halves the batch size (frees the CUDA cache) and retries the same
    start; it is re-raised when the batch is a single row or a single group already.
    """
    start, size = 0, int(batch_size)
    while start < n:
        stop = _batch_stop(start, size, n, ends)
        try:
            step(start, stop)
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is an allocation failure
            smallest = _batch_stop(start, 1, n, ends)
            if not is_out_of_memory(exc) or stop <= smallest:
                raise
            size = max(1, min(size, stop - start) // 2)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            warnings.warn(f"out of memory: retrying with batch size {size}", stacklevel=3)
            continue
        if bar is not None:
            bar.update(stop - start)
        start = stop
    return size


# ---------------------------------------------------------------- a side's queries and its batches
@dataclass
class Batch:
    """One batch of one side's tasks, as every ranking routine takes it: its query rows and its tasks
    (sorted by query row), with the known answers to exclude."""

    ent: torch.Tensor  # per query row: the given entity id (an entity shard: its embedding row)
    rel: torch.Tensor  # per query row: the relation id
    task_q: torch.Tensor  # per task: its query row (sorted)
    col: torch.Tensor  # per task: its answer's candidate column (-1: on another entity shard)
    first: torch.Tensor | None  # each query row's first task and the others (None, None: one task per row)
    rest: torch.Tensor | None
    known: tuple | None  # (row, column) pairs of the known answers to exclude (None: unfiltered)
    triples: np.ndarray  # per task: its triple (for error messages)

    @property
    def num_tasks(self) -> int:
        return int(self.task_q.shape[0])

    def part(self, q0: int, q1: int, t0: int, t1: int, known) -> Batch:
        """Query rows ``q0:q1`` with their tasks ``t0:t1`` (``known``: their pairs, rows relative to ``q0``)."""
        tq = self.task_q[t0:t1] - q0
        return Batch(self.ent[q0:q1], self.rel[q0:q1], tq, self.col[t0:t1], *first_rest(tq), known,
                     self.triples[t0:t1])

    def redo(self, differ: torch.Tensor) -> tuple[Batch, torch.Tensor]:
        """The queries of the tasks ``differ`` as a batch of their own, and its tasks' positions here."""
        r = redo_batch(self.ent.shape[0], self.task_q, differ, self.known)
        t = r.tasks
        return Batch(self.ent[r.queries], self.rel[r.queries], r.task_q, self.col[t], r.first, r.rest, r.known,
                     self.triples[t.cpu().numpy()]), t


@dataclass
class Queries:
    """The tasks of one side sorted by query key, so each query's tasks are contiguous."""

    qstart: np.ndarray  # first (sorted) task of each query
    task_end: np.ndarray  # tasks of queries [0, i] end at task_end[i]
    ent: torch.Tensor  # per query: the given entity and relation
    rel: torch.Tensor
    keys: torch.Tensor
    answers: torch.Tensor  # per sorted task
    triples: np.ndarray
    triple_index: np.ndarray


def group_by_query(ctx: RunContext, sub, eval_idx, keys, answers) -> Queries:
    """The side's tasks (``sub``: triples, ``keys``: query keys ``entity * #relations + relation``,
    ``answers``) sorted stably by key, with each query's first task and entity / relation."""
    dev = ctx.device
    order = np.argsort(keys, kind="stable")
    skeys = keys[order]
    # where the key changes (no query at all for no task: a "tasks" rank's empty share)
    qstart = np.flatnonzero(np.r_[skeys.size > 0, skeys[1:] != skeys[:-1]])
    uq = skeys[qstart]
    return Queries(
        qstart=qstart,
        task_end=np.r_[qstart[1:], skeys.shape[0]],
        ent=torch.as_tensor((uq // ctx.num_relations).astype(np.int64), device=dev),
        rel=torch.as_tensor((uq % ctx.num_relations).astype(np.int64), device=dev),
        keys=torch.as_tensor(uq, device=dev),
        answers=torch.as_tensor(answers[order], device=dev),
        triples=sub[order],
        triple_index=eval_idx[order],
    )


def known_answers(ctx: RunContext, index: FilterIndex, keys: torch.Tensor):
    """``(query row, column)`` of every known answer of the batch's queries that is a candidate."""
    rows, ents = index.pairs(keys)
    if ctx.pos_map is None:
        return rows, ents
    cols = ctx.pos_map[ents]
    ok = cols >= 0  # answers outside the restriction are not candidates
    return rows[ok], cols[ok]


def batch_tasks(qstart: np.ndarray, nt: int, dev):
    """``(task_q, first, rest)`` of a batch whose query ``i`` owns tasks ``qstart[i]..``: each task's
    query row, and the first / other tasks of each query as :meth:`Counter.rows` takes them
    (``None, None`` when every query has one task: rows are compared in place)."""
    task_q = torch.as_tensor(np.searchsorted(qstart, np.arange(nt), side="right") - 1, device=dev)
    if nt == len(qstart):
        return task_q, None, None
    first = torch.as_tensor(qstart, device=dev)
    rest = torch.ones(nt, dtype=torch.bool, device=dev)
    rest[first] = False
    return task_q, first, rest.nonzero().view(-1)


def first_rest(task_q: torch.Tensor):
    """``(first, rest)`` of sorted ``task_q`` as :meth:`Counter.rows` takes them (None, None: one task per row)."""
    nt = task_q.shape[0]
    if task_q.device.type == "cpu":  # numpy: cheaper than five small torch ops (once per row group)
        a = task_q.numpy()
        change = np.empty(nt, dtype=bool)
        change[:1] = True
        np.not_equal(a[1:], a[:-1], out=change[1:])
        first = np.flatnonzero(change)
        if first.shape[0] == nt:
            return None, None
        return torch.from_numpy(first), torch.from_numpy(np.flatnonzero(~change))
    change = torch.ones(nt, dtype=torch.bool, device=task_q.device)
    change[1:] = task_q[1:] != task_q[:-1]
    first = change.nonzero().view(-1)
    if first.numel() == nt:
        return None, None
    return first, (~change).nonzero().view(-1)


@dataclass
class Redo:
    """The queries of the tasks whose true score differed, as a batch of their own."""

    queries: torch.Tensor  # their rows in the batch
    tasks: torch.Tensor  # their tasks in the batch
    task_q: torch.Tensor  # each of those tasks' row in ``queries``
    known: tuple | None  # the known answers of those rows, rows renumbered
    first: torch.Tensor | None
    rest: torch.Tensor | None


def redo_batch(nq: int, task_q: torch.Tensor, differ: torch.Tensor, known) -> Redo:
    """Every task of a query any of whose tasks ``differ`` (positions in the batch), as a batch of its own:
    its query rows, tasks, task -> row map, known answers (rows renumbered) and first / rest split."""
    dev = task_q.device
    redo_q = torch.unique(task_q[differ])
    pos = torch.full((nq,), -1, dtype=torch.long, device=dev)
    pos[redo_q] = torch.arange(redo_q.numel(), device=dev)
    tasks = (pos[task_q] >= 0).nonzero().view(-1)
    sub_q = pos[task_q[tasks]]
    sub_known = None
    if known is not None:
        keep = pos[known[0]] >= 0
        sub_known = (pos[known[0][keep]], known[1][keep])
    first, rest = first_rest(sub_q)
    return Redo(redo_q, tasks, sub_q, sub_known, first, rest)
