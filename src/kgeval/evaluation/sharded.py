"""Ranking with entity shards (``distributed="entities"``, see :mod:`.distributed`).

Every rank walks all tasks of a side in the same batches (:meth:`Plan.run_batches`). A batch is
three phases, each a local step followed by one ``all_reduce`` (:meth:`Plan.reduce`):

A. the rows of the batch's query entities, filled in by their owners (``#queries x width``);
B. scores against the local entities; the owner of each task's answer reads the true score
   (``#tasks``, float64 bit patterns in int64: exact, NaN and -0.0 included);
C. better / tied counts against the local entities, known answers in the local slice masked
   (``2 x #tasks`` int64).

The counts then go through the same NaN policy and ``num_candidates`` rule as one process
(:mod:`.full`, :mod:`.sampled`); the rank table is the same on every rank.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import InvalidInputError
from ..ranks import SIDE_HEAD, SIDE_TAIL
from .batching import auto_batch
from .context import RunContext, SideResult
from .counting import apply_nan_policy, check_nan
from .full import _MIN_CHUNK_ROWS, _group_by_query, _known_answers, batch_tasks
from .scoring import SideScorer

__all__ = ["ShardSideScorer", "rank_full_sharded", "rank_sampled_sharded"]


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

    def __init__(self, shard, side: int, *, num_entities: int, device: torch.device, allowed, threads,
                 lo: int, hi: int, width: int, row_dtype: torch.dtype):
        self.scorer = shard
        self.side = side
        self.num_entities = num_entities
        self.device = device
        self.allowed = allowed
        self.num_columns = num_entities if allowed is None else int(allowed.shape[0])
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

    def local(self, rows: torch.Tensor, rel: torch.Tensor, c0: int, c1: int) -> torch.Tensor:
        """Scores of the local columns ``[c0, c1)`` (local positions): ``(b, c1 - c0)``."""
        if self.allowed is None:
            entities = None if (c0, c1) == (0, self.num_local) else slice(self.lo + c0, self.lo + c1)
        else:
            entities = self.allowed[self.c_lo + c0:self.c_lo + c1]
        out = self._call(self.method, rows, rel, entities=entities)
        return self._checked(out, (rows.shape[0], c1 - c0), self.method.__name__)

    def local_column(self, ids: torch.Tensor, pos_map) -> torch.Tensor:
        """Local column of each entity id (-1: not a local candidate)."""
        p = ids if pos_map is None else pos_map[ids.clamp(min=0)]
        ok = (ids >= 0) & (p >= self.c_lo) & (p < self.c_hi)
        return torch.where(ok, p - self.c_lo, torch.full_like(p, -1))


class _Alone:
    """The consistency check's single-triple score, from a query row and the answer's own column."""

    def __init__(self, sc: ShardSideScorer, rows: torch.Tensor, qrow: dict):
        self.sc, self.rows, self.qrow, self.side = sc, rows, qrow, sc.side

    def alone(self, h: int, r: int, t: int) -> float:
        ent, ans = (t, h) if self.side == SIDE_HEAD else (h, t)
        row = self.rows[self.qrow[(ent, r)]][None]
        rel = torch.tensor([r], device=self.sc.device)
        out = self.sc._call(self.sc.method, row, rel, entities=torch.tensor([ans], device=self.sc.device))
        return float(self.sc._checked(out, (1, 1), self.sc.method.__name__)[0, 0])


def _plan(ctx: RunContext, sc: ShardSideScorer, n_tasks: int) -> tuple[int, int | None]:
    """``(batch size agreed by all ranks, local chunk width or None)``: as :func:`.full._plan` on the
    local columns."""
    opts, ncols, extra = ctx.options, max(1, sc.num_local), sc.score_bytes
    width = opts.entity_chunk_size
    if width is None and auto_batch(ctx.budget, ncols, n_tasks, extra=extra) < min(n_tasks, _MIN_CHUNK_ROWS):
        rows = min(n_tasks, _MIN_CHUNK_ROWS)
        width = max(1, int((ctx.budget // rows - 256) // (3 * 4 + 2 + extra)))
    if width is not None and width >= ncols:
        width = None
    if width is not None:
        ctx.note_chunk(int(width))
    local = opts.batch_size or auto_batch(ctx.budget, width or ncols, n_tasks, extra=extra)
    return local, width


def rank_full_sharded(ctx: RunContext, sc: ShardSideScorer, sub: np.ndarray, eval_idx: np.ndarray, keys: np.ndarray,
                      answers: np.ndarray, index, bar) -> SideResult:
    """Counts of every task of one side (all tasks, on every rank) against every entity."""
    plan = ctx.dist
    queries = plan.guard(_group_by_query, ctx, sub, eval_idx, keys, answers)
    local_batch, width = plan.guard(_plan, ctx, sc, sub.shape[0])
    batch_size = plan.agree_min(local_batch)
    res = SideResult()

    def step(a0: int, a1: int) -> None:
        q0 = int(np.searchsorted(queries.task_end, a0, side="right"))
        q1 = int(np.searchsorted(queries.task_end, a1, side="right"))
        better, tied, ncand = _rank_batch(ctx, sc, queries, q0, q1, a0, a1, index, width)
        res.add(queries.triple_index[a0:a1], better, tied, ncand)

    plan.run_batches(sub.shape[0], batch_size, step, bar, ends=queries.task_end)
    return res


def _rank_batch(ctx, sc: ShardSideScorer, queries, q0, q1, a0, a1, index, width):
    dev, nq, nt, plan = ctx.device, q1 - q0, a1 - a0, ctx.dist
    st = {}

    def phase_a():
        task_q, st["first"], st["rest"] = batch_tasks(queries.qstart[q0:q1] - a0, nt, dev)
        st["task_q"] = task_q
        ans = queries.answers[a0:a1]
        st["lcol"] = sc.local_column(ans, ctx.pos_map)
        ncand = torch.full((nt,), ctx.num_columns, dtype=torch.long, device=dev)
        st["known"] = None
        if index is not None:
            rows, cols = _known_answers(ctx, index, queries.keys[q0:q1])
            nfilt = torch.zeros(nq, dtype=torch.long, device=dev).index_add_(0, rows, torch.ones_like(rows))
            ncand = ncand - nfilt[task_q] + 1
            local = (cols >= sc.c_lo) & (cols < sc.c_hi)  # filtered answers are masked where they live
            st["known"] = (rows[local], cols[local] - sc.c_lo)
        st["ncand"] = ncand
        wire, ints = _int_of(sc.row_dtype)
        return _to_bits(sc.query_rows(queries.ent[q0:q1]), wire, ints)

    wire, ints = _int_of(sc.row_dtype)
    qrows = plan.reduce(phase_a, (nq, sc.width), ints).view(wire).to(device=dev, dtype=sc.row_dtype)
    rel = queries.rel[q0:q1]
    triples = queries.triples[a0:a1]

    def phase_b():
        task_q, lcol = st["task_q"], st["lcol"]
        mine = (lcol >= 0).nonzero().view(-1)
        true = torch.zeros(nt, dtype=torch.float64, device=dev)
        st["scores"] = None
        if width is None:
            scores = sc.local(qrows, rel, 0, sc.num_local)
            st["scores"] = scores
            true[mine] = scores[task_q[mine], lcol[mine]].double()
        else:  # pass 1: the chunks holding this rank's answers
            chunk_of = lcol[mine] // width
            for c in torch.unique(chunk_of).tolist():
                sel = mine[chunk_of == c]
                part = sc.local(qrows, rel, c * width, min(sc.num_local, (c + 1) * width))
                true[sel] = part[task_q[sel], lcol[sel] - c * width].double()
        return true.view(torch.int64)

    true64 = plan.reduce(phase_b, (nt,), torch.int64).view(torch.float64).to(dev)

    def phase_c():
        task_q, first, rest, known = st["task_q"], st["first"], st["rest"], st["known"]
        better = torch.zeros(nt, dtype=torch.long, device=dev)
        tied = torch.zeros(nt, dtype=torch.long, device=dev)
        chunks = [(0, sc.num_local)] if width is None else \
            [(c0, min(sc.num_local, c0 + width)) for c0 in range(0, sc.num_local, width)]
        if known is not None and width is not None:
            order = torch.argsort(known[1])
            known = (known[0][order], known[1][order])
        true = None
        for c0, c1 in chunks:
            part = st.pop("scores") if width is None else sc.local(qrows, rel, c0, c1)
            if true is None:
                true = true64.to(part.dtype)
                st["true"] = true
            check_nan(ctx.options.nan_policy, sc.side, part, true, triples, task_q)
            if known is not None:
                if width is None:
                    frow, fcol = known
                else:
                    lo, hi = torch.searchsorted(known[1], torch.tensor([c0, c1], device=dev)).tolist()
                    frow, fcol = known[0][lo:hi], known[1][lo:hi] - c0
                if frow.numel():
                    part = sc.writable(part)
                    part[frow, fcol] = float("nan")
            b, t = ctx.counter.rows(part, true, task_q, first, rest)
            better += b
            tied += t
        if true is None:  # no local columns (a restriction leaves this slice empty)
            true = true64.float()
            st["true"] = true
            check_nan(ctx.options.nan_policy, sc.side, torch.zeros((nq, 0), device=dev), true, triples, task_q)
        if ctx.consistency is not None:
            _check(ctx, sc, qrows, queries, q0, q1, a0, a1, st, true, triples)
        return torch.cat([better, tied])

    counts = plan.reduce(phase_c, (2 * nt,), torch.int64).to(dev)
    better, tied = counts[:nt], counts[nt:]
    if index is None:
        tied = tied - 1  # the true answer ties with itself (on the rank that owns it)
    true = true64.to(st["true"].dtype)
    better, tied = apply_nan_policy(better, tied, true, st["ncand"], ctx.options.nan_policy)
    return better, tied, st["ncand"]


def _check(ctx, sc, qrows, queries, q0, q1, a0, a1, st, true, triples) -> None:
    """The consistency check of the batch's first and last task, on the rank owning each answer."""
    nt = a1 - a0
    picks = [j for j in sorted({0, nt - 1}) if int(st["lcol"][j]) >= 0]
    if not picks:
        return
    ent = queries.ent[q0:q1].tolist()
    rel = queries.rel[q0:q1].tolist()
    qrow = {(e, r): i for i, (e, r) in enumerate(zip(ent, rel))}
    ctx.consistency.check(_Alone(sc, qrows, qrow), triples, true, picks)


def rank_sampled_sharded(ctx: RunContext, sc: ShardSideScorer, sub: np.ndarray, eval_idx: np.ndarray,
                         negs: np.ndarray, bar) -> SideResult:
    """Counts of every task against its sampled negatives (drawn for all tasks on every rank);
    each rank scores the candidates in its slice, as whole local rows gathered at them (the way
    one process scores a built-in model: ``full rows, gathered``)."""
    plan, dev = ctx.dist, ctx.device
    n, k = negs.shape
    local_batch = ctx.options.batch_size or auto_batch(ctx.budget, max(1, sc.num_local), n, extra=sc.score_bytes)
    batch_size = plan.agree_min(local_batch)
    res = SideResult()
    t_sub = torch.as_tensor(sub, device=dev)
    t_negs = torch.as_tensor(negs, device=dev)
    nan_policy = ctx.options.nan_policy
    wire, ints = _int_of(sc.row_dtype)

    def step(a0: int, a1: int) -> None:
        h, r, t = t_sub[a0:a1, 0], t_sub[a0:a1, 1], t_sub[a0:a1, 2]
        ans, ent = (t, h) if sc.side == SIDE_TAIL else (h, t)
        ng = t_negs[a0:a1]
        valid = ng >= 0
        b = a1 - a0
        st = {}
        qrows = plan.reduce(lambda: _to_bits(sc.query_rows(ent), wire, ints), (b, sc.width), ints) \
            .view(wire).to(device=dev, dtype=sc.row_dtype)

        def phase_b():
            scores = sc.local(qrows, r, 0, sc.num_local)
            st["scores"] = scores
            acol = sc.local_column(ans, ctx.pos_map)
            mine = (acol >= 0).nonzero().view(-1)
            true = torch.zeros(b, dtype=torch.float64, device=dev)
            true[mine] = scores[mine, acol[mine]].double()
            return true.view(torch.int64)

        true64 = plan.reduce(phase_b, (b,), torch.int64).view(torch.float64).to(dev)

        def phase_c():
            scores = st.pop("scores")
            true = true64.to(scores.dtype)
            st["true"] = true
            ncol = sc.local_column(ng, ctx.pos_map)
            here = valid & (ncol >= 0)
            got = scores.gather(1, ncol.clamp(min=0)) if scores.shape[1] else torch.zeros_like(ng, dtype=true.dtype)
            # the NaN check sees the local candidates (and the true score); other columns count 0
            check_nan(nan_policy, sc.side, torch.where(here, got, torch.zeros_like(got)), true, sub[a0:a1],
                      torch.arange(b, device=dev))
            neg = torch.where(here, got, torch.full_like(got, float("nan")))
            better, tied = ctx.counter.pairs(neg, true)
            if ctx.consistency is not None:
                acol = sc.local_column(ans, ctx.pos_map)
                picks = [j for j in sorted({0, b - 1}) if int(acol[j]) >= 0]
                if picks:
                    qrow = {(int(e), int(x)): i for i, (e, x) in enumerate(zip(ent.tolist(), r.tolist()))}
                    ctx.consistency.check(_Alone(sc, qrows, qrow), sub[a0:a1], true, picks)
            return torch.cat([better, tied])

        counts = plan.reduce(phase_c, (2 * b,), torch.int64).to(dev)
        better, tied = counts[:b], counts[b:]
        ncand = 1 + valid.sum(1)
        better, tied = apply_nan_policy(better, tied, true64.to(st["true"].dtype), ncand, nan_policy)
        res.add(eval_idx[a0:a1], better, tied, ncand)

    plan.run_batches(n, batch_size, step, bar)
    return res
