"""Ranking with entity shards (``distributed="entities"``, see :mod:`.distributed`).

Every rank walks all tasks of a side in the same batches (:meth:`Plan.run_batches`). A batch is
three phases, each a local step followed by one sum over ranks (:meth:`Plan.reduce`: ``all_reduce``, or
an all-gather and a local sum on small gloo groups):

A. the rows of the batch's query entities, filled in by their owners (``#queries x width``);
B. the true scores: the owner of each task's answer scores it (``#tasks``, float64 bit patterns
   in int64: exact, NaN and -0.0 included);
C. better / tied counts against the local entities, known answers in the local slice excluded
   (``2 x #tasks`` int64; ``3 x #tasks`` when the local slice is chunked, see below).

The counts then go through the same NaN policy and ``num_candidates`` rule as one process
(:mod:`.full`, :mod:`.listed`); the rank table is the same on every rank.

Local slices are planned as one process plans its columns (:func:`.full.plan_batches`: on the CPU score
blocks of 1M entries, so a wide slice is streamed in entity chunks, e.g. 1,024 queries x 1,024
entities; whole local rows in one block of up to 4M entries per batch). Whole local rows are scored once in B and counted in C. Chunked slices use one
process's one-pass method (:func:`.full._rank_chunks`) on the local columns: in B the owner scores
the batch against its answer columns only (:func:`.full.answer_scores`, ~#rows / #local columns
of the work); in C every rank counts chunk by chunk and the owner checks that the in-batch score
of each of its answers is bitwise the B value, flagging the task otherwise (the third
``#tasks`` of C). Flagged queries (rare: a scorer whose narrow and wide products round
differently) are ranked again on their own, B and C once more with true scores read from whole
chunks (:func:`.full.chunk_true_scores`), so the true score is exactly the value compared against.

Sampled negatives: each rank scores only the batch's candidates (answers and negatives) in its
slice, as the sorted union ``U`` of their columns through ``entities=``
(:func:`.full.answer_scores`): ``b x |U|`` scores with ``|U| <= min(#local, b (k + 1))`` (at least
64 columns), batches of ``b ~ sqrt(block / (k + 1))`` tasks, instead of ``b x #local``.
"""

from __future__ import annotations

import math

import torch

from .._threads import torch_threads
from ..errors import InvalidInputError
from ..ranks import SIDE_HEAD
from .batches import Batch, RunContext, auto_batch
from .blocks import count_block, count_tiles
from .batches import BatchPlan, plan_full
from .full import OneProcess, answer_scores, tile_scores, tile_width
from .scorers import accepts_keyword
from .scoring import SideScorer, own_prepare

__all__ = ["ShardSideScorer", "ShardReduce"]


def _prepare_from(shard, side: int):
    """``shard.prepare_heads_from`` / ``prepare_tails_from`` of a kgeval :class:`EntityShard` (see
    :func:`.scoring.own_prepare`; a user's shard is called per slice)."""
    kind = "heads" if side == SIDE_HEAD else "tails"
    return own_prepare(shard, f"score_{kind}_from", f"prepare_{kind}_from", "score_prepared_from")


def _int_of(dtype: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
    """``(float dtype sent, integer dtype of its bits)`` for a row dtype."""
    if dtype == torch.float64:
        return torch.float64, torch.int64
    return torch.float32, torch.int32  # float16 / bfloat16 widen exactly to float32


def _to_bits(x: torch.Tensor, wire: torch.dtype, ints: torch.dtype) -> torch.Tensor:
    return x.to(wire).contiguous().view(ints)


class ShardSideScorer(SideScorer):
    """One side of an entity shard: scores of query rows against the local (allowed) entities.

    Local columns are the allowed entities inside ``[lo, hi)``: positions ``[c_lo, c_hi)`` of the
    global candidate columns (the allowed ids are sorted, so they are contiguous).
    """

    def __init__(self, shard, side: int, *, num_entities: int, device: torch.device, allowed, threads, layout: tuple):
        """``layout``: ``(lo, hi, row width, row dtype)`` of this rank's entity shard (``RunContext.shard``)."""
        lo, hi, width, row_dtype = layout
        self.scorer = shard
        self.side = side
        self.num_entities = num_entities
        self.device = device
        self.allowed = allowed
        self.threads = threads
        self.method = shard.score_heads_from if side == SIDE_HEAD else shard.score_tails_from
        self.accepts_entities = True
        self.candidates_method = None
        self.score_bytes = float(getattr(shard, "score_bytes", 0.0) or 0.0)
        self.lo, self.hi, self.width, self.row_dtype = lo, hi, width, row_dtype
        if allowed is None:
            self.c_lo, self.c_hi = lo, hi
        else:
            self.c_lo, self.c_hi = (int(x) for x in torch.searchsorted(allowed, torch.tensor([lo, hi],
                                                                                            device=allowed.device)))
        self.num_local = self.c_hi - self.c_lo
        #: this scorer's columns are the local ones (what :mod:`.full`'s chunk passes walk)
        self.num_columns = self.num_local
        self._score_dtype: torch.dtype | None = None
        # on the CPU a shard taking out= writes each local block into one reused buffer, as in one process
        self.accepts_out, self._blocks = device.type == "cpu" and accepts_keyword(self.method, "out"), []
        #: the shard's prepare_heads_from / prepare_tails_from (queries built once per batch), or None
        self.prepare = _prepare_from(shard, side)
        self.light_prepare = getattr(shard, "light_prepare", False) is True

    def query_rows(self, ent: torch.Tensor) -> torch.Tensor:
        """``(len(ent), width)``: the rows of the query entities owned here, zeros elsewhere."""
        rows = torch.zeros((ent.shape[0], self.width), dtype=self.row_dtype, device=self.device)
        own = ((ent >= self.lo) & (ent < self.hi)).nonzero().view(-1)
        if own.numel():
            out = self.scorer.entity_rows(ent[own])
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (own.numel(), self.width) \
                    or not out.is_floating_point():
                raise InvalidInputError(f"scorer.entity_rows returned {type(out).__name__} "
                                        f"{tuple(getattr(out, 'shape', ()))}, expected ({own.numel()}, {self.width}) "
                                        "floats")
            rows[own] = out.to(device=self.device, dtype=self.row_dtype)
        return rows

    def _tile(self, rows, rel, c0: int, c1: int, kw: dict, prepared=None) -> torch.Tensor:
        """Scores of the local columns ``[c0, c1)`` (local positions): ``(b, c1 - c0)``, for
        :meth:`SideScorer.chunk` (in the reused block when the shard takes ``out=``) and
        :meth:`SideScorer.tiles`; all local columns are asked for as ``entities=None``."""
        if self.allowed is None:
            entities = None if (c0, c1) == (0, self.num_local) else slice(self.lo + c0, self.lo + c1)
        else:
            entities = self.allowed[self.c_lo + c0:self.c_lo + c1]
        return self._scored(rows, rel, entities, c1 - c0, prepared, **kw)

    def columns(self, rows: torch.Tensor, rel: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Scores of the local columns at the sorted local positions ``cols``: ``(b, len(cols))``."""
        entities = cols + self.lo if self.allowed is None else self.allowed[cols + self.c_lo]
        return self._scored(rows, rel, entities, int(cols.shape[0]))

    def _scored(self, rows, rel, entities, m: int, prepared=None, **kw) -> torch.Tensor:
        if prepared is not None:  # the batch's queries, built once (EntityShard.prepare_tails_from)
            with torch_threads(self.threads):
                out = self.scorer.score_prepared_from(prepared, entities=entities, **kw)
        else:
            out = self._call(self.method, rows, rel, entities=entities, **kw)
        out = self._checked(out, (rows.shape[0], m), self.method.__name__)
        self._score_dtype = out.dtype
        return out

    def score_dtype(self, rows: torch.Tensor, rel: torch.Tensor) -> torch.dtype:
        """The dtype of this shard's scores (true scores are compared in it, as in one process): from
        the last scoring call, else one probe call on a single row and column; float32 (float64 for
        float64 rows) without local columns, where nothing is compared."""
        if self._score_dtype is None:
            if self.num_local and rows.shape[0]:
                self.chunk(rows[:1], rel[:1], 0, 1)
            else:
                return torch.float64 if self.row_dtype == torch.float64 else torch.float32
        return self._score_dtype

    def local_column(self, ids: torch.Tensor, pos_map) -> torch.Tensor:
        """Local column of each entity id (-1: not a local candidate)."""
        p = ids if pos_map is None else pos_map[ids.clamp(min=0)]
        ok = (ids >= 0) & (p >= self.c_lo) & (p < self.c_hi)
        return torch.where(ok, p - self.c_lo, torch.full_like(p, -1))


class _Alone:
    """The consistency check's single-triple score, from the batch's query row and the answer's column."""

    def __init__(self, sc: ShardSideScorer, b: Batch, picks: list):
        self.sc, self.b, self.side = sc, b, sc.side
        self.row_of = {tuple(int(x) for x in b.triples[j]): int(b.task_q[j]) for j in picks}

    def alone(self, h: int, r: int, t: int) -> float:
        i = self.row_of[(h, r, t)]
        ans = h if self.side == SIDE_HEAD else t
        sc = self.sc
        out = sc._call(sc.method, self.b.ent[i:i + 1], self.b.rel[i:i + 1],
                       entities=torch.tensor([ans], device=sc.device))
        return float(sc._checked(out, (1, 1), sc.method.__name__)[0, 0])


class ShardReduce(OneProcess):
    """The hooks of :func:`.full.rank_full` on an entity shard: every rank walks all tasks in the same
    batches; the query rows (filled in by their owners), the true scores (read by the owner of each
    answer, as float64 bit patterns: exact, NaN and -0.0 included) and the counts against the local
    columns (with one re-rank flag per task when some rank chunks) are summed over ranks, each after a
    local step whose errors end every rank (:meth:`.collectives.Plan.reduce`)."""

    def __init__(self, plan):
        self.dist = plan
        self.flags = False

    def guard(self, fn, *args):
        return self.dist.guard(fn, *args)

    def plan(self, ctx, sc, n_tasks: int) -> BatchPlan:
        """:func:`.batches.plan_full` on the local columns (a whole-row call returns those only), the
        smallest batch of any rank; widths stay local (a rank's slice may be narrow or empty)."""
        def local():
            p = plan_full(ctx, sc, n_tasks, row_cols=sc.num_local, split_rows=False)
            if p.width is not None:
                ctx.note_chunk(p.width)
            return p

        p = self.dist.guard(local)
        self.flags = any(self.dist.exchange(lambda: p.width is not None))
        return BatchPlan(self.dist.agree_min(p.batch), p.width)

    def run_batches(self, n: int, batch_size: int, step, bar, ends) -> None:
        self.dist.run_batches(n, batch_size, step, bar, ends=ends)

    def listed_batch(self, ctx, sc, n: int, k: int) -> int:
        return self.dist.agree_min(self.dist.guard(_sampled_batch, ctx, sc, n, k))

    def candidates(self, ctx, sc, b: Batch, ans, ng: torch.Tensor, valid: torch.Tensor):
        """Only the candidates in this rank's slice are scored (:func:`_local_candidates`), the others 0."""
        ncol = sc.local_column(ng, ctx.pos_map)
        scores = _local_candidates(sc, b.ent, b.rel, torch.cat([b.col[:, None], ncol], dim=1))
        return scores, valid & (ncol >= 0)

    def rows(self, sc, ent: torch.Tensor) -> torch.Tensor:
        wire, ints = _int_of(sc.row_dtype)
        rows = self.dist.reduce(lambda: _to_bits(sc.query_rows(ent), wire, ints), (ent.shape[0], sc.width), ints)
        return rows.view(wire).to(device=sc.device, dtype=sc.row_dtype)

    def columns(self, ctx, sc, ans: torch.Tensor, known):
        col = sc.local_column(ans, ctx.pos_map)
        if known is not None:  # filtered answers are excluded where they live
            rows, cols = known
            local = (cols >= sc.c_lo) & (cols < sc.c_hi)
            known = (rows[local], cols[local] - sc.c_lo)
        return col, known

    def true(self, sc, b: Batch, read) -> torch.Tensor:
        nt, dev = b.num_tasks, sc.device

        def local():
            mine = (b.col >= 0).nonzero().view(-1)
            true = torch.zeros(nt, dtype=torch.float64, device=dev)
            got = read(b.task_q[mine], b.col[mine])  # (scores the local rows where read does)
            true[mine] = got.double()
            return true.view(torch.int64)

        true64 = self.dist.reduce(local, (nt,), torch.int64).view(torch.float64).to(dev)
        return true64.to(sc.score_dtype(b.ent, b.rel))

    def counts(self, ctx, sc, b: Batch, count, flags: bool = False, true=None):
        nt, dev = b.num_tasks, ctx.device

        def local():
            better, tied, differ = count()
            if true is not None and ctx.consistency is not None:
                picks = [j for j in sorted({0, nt - 1}) if int(b.col[j]) >= 0]  # on the rank owning the answer
                if picks:
                    ctx.consistency.check(_Alone(sc, b, picks), b.triples, true, picks)
            parts = [better.to(dev), tied.to(dev)]
            if flags:
                redo = torch.zeros(nt, dtype=torch.long, device=dev)
                if differ is not None:
                    redo[differ] = 1
                parts.append(redo)
            return torch.cat(parts)

        c = self.dist.reduce(local, ((3 if flags else 2) * nt,), torch.int64).to(dev)
        differ = (c[2 * nt:] > 0).nonzero().view(-1) if flags else None
        return c[:nt].clone(), c[nt:2 * nt].clone(), differ if differ is not None and differ.numel() else None

    def whole_rows(self, ctx, sc, b: Batch):
        """Whole local rows, scored once (in tiles when unaligned, as in one process), the true scores
        summed over ranks before the counts: ``(better, tied, true scores, tasks to re-rank or None, None)``."""
        tile = tile_width(ctx, sc) if sc.num_columns else None
        got = {}

        def read(task_q, col):  # scored here, inside the guarded step
            if tile is None:
                got["scores"] = s = sc.chunk(b.ent, b.rel, 0, sc.num_columns)
                return s[task_q, col]
            got["tiles"] = t = sc.tiles(b.ent, b.rel, tile)
            return tile_scores(t, tile, task_q, col)

        true = self.true(sc, b, read)

        def count():
            if tile is None:
                return (*count_block(ctx, sc, got.pop("scores"), true, b), None)
            return (*count_tiles(ctx, sc, got.pop("tiles"), tile, true, b), None)

        better, tied, differ = self.counts(ctx, sc, b, count, self.flags, true)
        return better, tied, true, differ, None

    def check(self, ctx, sc, b: Batch, true, scale) -> None:
        """(Checked in :meth:`counts`, on the rank owning each checked answer.)"""


def _sampled_batch(ctx: RunContext, sc: ShardSideScorer, n: int, k: int) -> int:
    """This rank's batch of sampled tasks: a batch of ``b`` scores ``b x min(#local, b (k + 1))``
    entries at most (the union of its local candidates), so ``b = sqrt(block / (k + 1))`` with
    ``block`` the entries the budget holds (on the CPU at most ``Tuning.cpu_block``), and never
    fewer rows than whole local rows would allow."""
    if ctx.options.batch_size:
        return int(ctx.options.batch_size)
    extra = sc.score_bytes
    whole = auto_batch(ctx.budget, max(1, sc.num_local), n, extra=extra)
    block = ctx.budget // int(3 * 4 + 2 + extra + 1)
    if ctx.device.type == "cpu":
        block = min(block, ctx.tuning.cpu_block)
    return int(max(whole, min(n, math.isqrt(max(1, block // (k + 1))))))


def _local_candidates(sc: ShardSideScorer, qrows, rel, cand: torch.Tensor) -> torch.Tensor:
    """Scores of the local columns ``cand`` ``(b, m)`` (-1: not here; those entries are 0) of each row:
    the union of the batch's local columns through ``entities=``, or whole local rows when the union
    is most of them."""
    here = cand >= 0
    b = cand.shape[0]
    if not bool(here.any()):
        return torch.zeros(cand.shape, dtype=sc.score_dtype(qrows, rel), device=cand.device)
    pos = cand.clamp(min=0)
    if 2 * int(torch.unique(pos).numel()) >= sc.num_local:
        got = sc.chunk(qrows, rel, 0, sc.num_local).gather(1, pos)
    else:
        got = answer_scores(sc, qrows, rel, torch.arange(b, device=cand.device), pos)
    return torch.where(here, got, torch.zeros_like(got))
