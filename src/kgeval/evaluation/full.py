"""Full ranking: every task against all (allowed) candidates, one score row per unique query.

A row is scored once and shared by the tasks of its query. The known answers of the query are
excluded from its counts (subtracted by the kernel, or overwritten with NaN, which compares neither
greater nor equal), so ``better = #{row > s}`` and ``tied = #{row == s}``, at a cost linear in the
known answers per query; ``num_candidates = #allowed entities - #other known answers among them``.

Whole rows are scored in row groups of one cache-sized block (aligned column tiles when the row length
is unaligned), the true scores read from the very block they are counted against. Column chunks
(``entity_chunk_size``, a tight memory budget, or wide rows on the CPU: :func:`.batches.plan_full`) add
exactly; their true scores come first from the batch scored against its answer columns only (pass 1)
and are checked bitwise against the in-batch values (:func:`_rank_chunks`). Memory of one batch: its
score blocks (one per walker), its known answers and ``O(rows)`` counts, within ``memory_budget``.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import InvalidInputError
from ..filtering import FilterIndex
from .batches import (Batch, BatchPlan, Queries, RunContext, SideResult, auto_batch, batch_tasks, group_by_query,
                      known_answers, plan_full, run_batches, walkers)
from .blocks import RowBlocks, chunk_bounds, count_block, count_chunks, count_tiles, row_bounds, walk_parts
from .counting import apply_nan_policy, check_nan
from ..ranks import SIDE_NAMES
from .scoring import SideScorer

__all__ = ["rank_full", "plan_full", "BatchPlan", "answer_scores", "chunk_true_scores", "tile_width", "tile_scores",
           "nondeterministic"]


class OneProcess:
    """The hooks of :func:`rank_full` in one process: nothing to agree on or to sum over ranks. An entity
    shard's (:class:`.collectives.ShardReduce`) sum the query rows, the true scores (read by the owner of each
    answer) and the counts over ranks, each after a local step whose errors end every rank."""

    flags = False

    def guard(self, fn, *args):
        return fn(*args)

    def plan(self, ctx, sc, n_tasks: int) -> BatchPlan:
        plan = plan_full(ctx, sc, n_tasks)
        if plan.width is not None:
            ctx.note_chunk(plan.width)
        return plan

    def run_batches(self, n: int, batch_size: int, step, bar, ends) -> None:
        run_batches(n, batch_size, step, bar, ends=ends)

    def listed_batch(self, ctx, sc, n: int, k: int) -> int:
        """Tasks per batch of ranking against ``k`` listed candidates each (:mod:`.listed`)."""
        cols = (k + 1) if sc.candidates_method is not None else ctx.num_entities
        return ctx.options.batch_size or auto_batch(ctx.budget, cols, n)

    def rows(self, sc, ent: torch.Tensor) -> torch.Tensor:
        return ent

    def candidates(self, ctx, sc, b: Batch, ans: torch.Tensor, ng: torch.Tensor, valid: torch.Tensor):
        """``(scores of [answer, candidates...] (b, 1 + k), the usable candidate entries)``; padding is
        scored as the answer."""
        cand = torch.cat([ans[:, None], torch.where(valid, ng, ans[:, None])], dim=1)
        return sc.candidates(b.ent, b.rel, cand), valid

    def columns(self, ctx, sc, ans: torch.Tensor, known):
        """``(each answer's candidate column, the known (row, column) pairs to exclude)``."""
        return (ans if ctx.pos_map is None else ctx.pos_map[ans]), known

    def true(self, sc, b: Batch, read) -> torch.Tensor:
        """The true scores ``read(task_q, col)`` of the tasks of ``b``."""
        return read(b.task_q, b.col)

    def counts(self, ctx, sc, b: Batch, count, flags: bool = False, true=None):
        """``count()``: ``(better, tied, tasks to re-rank or None)``."""
        return count()

    def whole_rows(self, ctx, sc, b: Batch):
        """``(better, tied, true scores, tasks to re-rank (None), score scale)`` of whole score rows."""
        return _rank_rows(ctx, sc, b, ctx.query_metrics)

    def check(self, ctx, sc, b: Batch, true, scale) -> None:
        ctx.consistency.check(sc, b.triples, true, sorted({0, b.num_tasks - 1}), scale)


ONE_PROCESS = OneProcess()


def rank_full(ctx: RunContext, sc: SideScorer, sub: np.ndarray, eval_idx: np.ndarray, keys: np.ndarray,
              answers: np.ndarray, index: FilterIndex | None, bar, red: OneProcess = ONE_PROCESS) -> SideResult:
    """Counts of every task of one side (``sub``: its triples, ``keys``: their query keys); ``red``: the
    hooks of an entity shard (:class:`.collectives.ShardReduce`), or of one process."""
    queries = red.guard(group_by_query, ctx, sub, eval_idx, keys, answers)
    plan = red.plan(ctx, sc, sub.shape[0])
    res = SideResult()

    def step(a0: int, a1: int) -> None:  # a0, a1 are query boundaries (run_batches aligns them)
        q0 = int(np.searchsorted(queries.task_end, a0, side="right"))
        q1 = int(np.searchsorted(queries.task_end, a1, side="right"))
        better, tied, ncand = _rank_batch(ctx, sc, queries, (q0, q1, a0, a1), index, plan, red)
        res.add(queries.triple_index[a0:a1], better, tied, ncand)

    red.run_batches(sub.shape[0], plan.batch, step, bar, queries.task_end)
    return res


def _rank_batch(ctx, sc, queries: Queries, span: tuple, index, plan: BatchPlan, red: OneProcess):
    """``(better, tied, num_candidates)`` of the tasks ``a0:a1``, whose queries are ``q0:q1`` (``span``)."""
    q0, q1, a0, a1 = span
    dev, nq, nt = ctx.device, q1 - q0, a1 - a0
    task_q, first, rest = batch_tasks(queries.qstart[q0:q1] - a0, nt, dev)
    known = None
    ncand = torch.full((nt,), ctx.num_columns, dtype=torch.long, device=dev)
    if index is not None:
        known = known_answers(ctx, index, queries.keys[q0:q1])
        nfilt = torch.zeros(nq, dtype=torch.long, device=dev).index_add_(0, known[0], torch.ones_like(known[0]))
        ncand = ncand - nfilt[task_q] + 1  # the true answer is one of the known answers: count it back in
    col, known = red.columns(ctx, sc, queries.answers[a0:a1], known)
    b = Batch(red.rows(sc, queries.ent[q0:q1]), queries.rel[q0:q1], task_q, col, first, rest, known,
              queries.triples[a0:a1])
    if plan.width is None:
        better, tied, true, differ, scale = red.whole_rows(ctx, sc, b)
    else:
        better, tied, true, differ = _rank_chunks(ctx, sc, b, plan.width, plan.row_block, red)
        scale = None
    if differ is not None:  # queries whose pass-1 true score is not the in-batch one: ranked again, exactly
        redo, t = b.redo(differ)
        ctx.chunk_redone_queries += int(redo.ent.shape[0])
        bb, tt, tr = _rank_chunks_exact(ctx, sc, redo, plan.width or max(1, sc.num_columns), plan.row_block, red)
        better[t], tied[t], true[t] = bb, tt, tr.to(true.dtype)
    if index is None:
        tied = tied - 1  # the true answer ties with itself
    better, tied = apply_nan_policy(better, tied, true, ncand, ctx.options.nan_policy)
    if ctx.consistency is not None:
        red.check(ctx, sc, b, true, scale)
    return better, tied, ncand


def _rank_rows(ctx, sc, b: Batch, qacc):
    """Whole score rows: ``(better, tied, true scores, None, score scale of the checked rows)``."""
    picks = sorted({0, b.num_tasks - 1}) if ctx.consistency is not None else []
    if qacc is None:
        parts = _rank_row_groups(ctx, sc, b, picks, tile_width(ctx, sc))
        better, tied, true = (torch.cat([p[i] for p in parts]) for i in range(3))
        return better, tied, true, None, _scale(sum(p[3] for p in parts), picks, sc)
    scores = sc.rows(b.ent, b.rel)
    true = scores[b.task_q, b.col]
    abs_sum = sum(_abs_sum(scores[b.task_q[p]]) for p in picks)
    check_nan(ctx.options.nan_policy, sc.side, scores, true, b.triples, b.task_q, known=b.known)
    masked = None
    if b.known is not None:
        rows, fcol = b.known
        scores = sc.writable(scores)  # never write into the scorer's memory
        masked = (rows, fcol, scores[rows, fcol])  # query metrics restore the relevant answers' scores
        scores[rows, fcol] = float("nan")
    better, tied = ctx.counter.rows(scores, true, b.task_q, b.first, b.rest)
    add_query_metrics(qacc, sc.side, scores, b.task_q, b.col, masked, ctx.options.nan_policy)
    return better, tied, true, None, _scale(abs_sum, picks, sc)


def _abs_sum(rows: torch.Tensor) -> float:
    """Sum of ``|score|`` over ``rows`` in float64, NaN and inf counting 0 (the consistency check's scale)."""
    return float(torch.nan_to_num(rows.abs().double(), nan=0.0, posinf=0.0).sum())


def _scale(abs_sum: float, picks: list, sc) -> float | None:
    """Mean ``|score|`` of the checked tasks' rows (the consistency check's tolerance scale), or None."""
    return abs_sum / (len(picks) * max(1, sc.num_columns)) if picks else None


def tile_width(ctx, sc) -> int | None:
    """Column tile width for whole rows on the CPU (a product into rows of unaligned length is slow): about
    equal tiles near ``Tuning.tile_cols``, multiples of ``Tuning.tile_align``; None: one product per batch."""
    ncols, w, align = sc.num_columns, ctx.tuning.tile_cols, ctx.tuning.tile_align
    if ctx.device.type != "cpu" or not sc.accepts_entities or ncols <= w or ncols % 16 == 0:
        return None
    even = -(-ncols // -(-ncols // w))  # ceil(ncols / ceil(ncols / w)): equal tiles
    return -(-even // align) * align


def _rank_part(ctx, sc, b: Batch, picks, tile, slot, task0=0, prepared=None):
    """``(better, tied, true scores, |score| sum of the picked tasks' rows)`` of the whole-row batch ``b``
    (``picks``: its tasks in the consistency check; ``task0``: the batch index of its first task). With
    ``tile`` the rows are scored tile after tile (:meth:`SideScorer.tiles`) and the true scores read from
    those very tiles: exact like one whole-row product."""
    if tile is None:
        scores = sc.rows(b.ent, b.rel, slot=slot, prepared=prepared)
        true = scores[b.task_q, b.col]
        abs_sum = sum(_abs_sum(scores[b.task_q[p]]) for p in picks)
        better, tied = count_block(ctx, sc, scores, true, b, task0)
        return better, tied, true, abs_sum
    tiles = sc.tiles(b.ent, b.rel, tile, slot=slot, prepared=prepared)
    true = tile_scores(tiles, tile, b.task_q, b.col)
    abs_sum = sum(_abs_sum(part[b.task_q[p]]) for p in picks for part in tiles)
    better, tied = count_tiles(ctx, sc, tiles, tile, true, b, task0)
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


def _row_groups(ctx, sc, nq: int) -> list[int]:
    """Bounds of the row groups of a whole-row batch of ``nq`` query rows: on the CPU groups of one block
    (``Tuning.cpu_block`` scores, at least ``Tuning.min_walker_rows`` rows; counted from the cache), split
    among the walkers when there are fewer groups; elsewhere one group."""
    if ctx.device.type != "cpu":
        return [0, nq]
    tun = ctx.tuning
    size = max(tun.min_walker_rows, tun.cpu_block // max(1, sc.num_columns))
    n = max(-(-nq // size), walkers(ctx, sc, nq // tun.min_walker_rows, 0), 1)
    return [nq * k // n for k in range(n + 1)]


def _rank_row_groups(ctx, sc, b: Batch, picks, tile) -> list:
    """:func:`_rank_part` of each row group (:func:`_row_groups`) of the batch, in group order: each group
    is a whole-row batch of its own, taken by the next free walker (:func:`.blocks.walk_parts`), so the
    counting of one group hides behind another walker's product."""
    bounds = _row_groups(ctx, sc, b.ent.shape[0])
    ngroups = len(bounds) - 1
    split = RowBlocks(b.task_q, b.known, bounds)
    widest = max(y - x for x, y in zip(bounds, bounds[1:]))
    n_walkers = walkers(ctx, sc, ngroups, widest * sc.num_columns)
    # the batch's queries prepared once, each group scored from its rows
    prepared = sc.prepared(b.ent, b.rel, n_walkers) if ngroups > 1 else None
    out = [None] * ngroups

    def group(g: int, slot: int):
        t0, part = split.batch(b, g)
        return _rank_part(ctx, sc, part, [p - t0 for p in picks if t0 <= p < t0 + part.num_tasks], tile, slot, t0,
                          None if prepared is None else prepared.rows(bounds[g], bounds[g + 1]))

    def keep(g: int, result, _state) -> None:
        out[g] = result

    walk_parts(sc, ngroups, n_walkers, group, keep)
    return out


def answer_scores(sc, ent, rel, task_q: torch.Tensor, col: torch.Tensor, min_true_columns: int = 64) -> torch.Tensor:
    """Scores of each task's query row ``ent[task_q[i]]`` at its column(s) ``col[i]`` (``col``:
    ``(nt,)`` or ``(nt, m)`` positions in ``[0, sc.num_columns)``), from one call on the sorted union
    ``U`` of the batch's columns: ``#rows x |U|`` scores instead of ``#rows x sc.num_columns``.

    ``U`` holds at least ``min_true_columns`` columns (padded with the first ones): BLAS kernels
    for very narrow products round differently from the wide products of whole rows and chunks.
    """
    ncols, dev = sc.num_columns, task_q.device
    if col.numel() == 0:  # (an entity shard owning none of the batch's answers)
        return torch.zeros(col.shape, device=dev)
    cols = torch.unique(col)
    pad = min(ncols, min_true_columns)
    if cols.numel() < pad:
        cols = torch.unique(torch.cat([cols, torch.arange(pad, device=dev)]))
    part = sc.columns(ent, rel, cols)
    at = torch.searchsorted(cols, col.contiguous())
    return part[task_q.view(-1, *([1] * (col.dim() - 1))), at]


def chunk_true_scores(sc, ent, rel, task_q: torch.Tensor, col: torch.Tensor, width: int,
                      prepared=None) -> torch.Tensor:
    """True scores read from whole ``width`` chunks scored for every row of this very batch: exact by
    construction when pass 2 repeats those very calls (:func:`_rank_chunks_exact`)."""
    true = torch.zeros(task_q.shape[0], dtype=torch.float32, device=task_q.device)
    bounds = chunk_bounds(sc.num_columns, width)  # the chunks of count_chunks
    chunk_of = torch.searchsorted(torch.tensor(bounds[1:-1], dtype=col.dtype, device=col.device), col, right=True)
    for c in torch.unique(chunk_of).tolist():
        sel = (chunk_of == c).nonzero().view(-1)
        part = sc.chunk(ent, rel, bounds[c], bounds[c + 1], prepared=prepared)
        true = true.to(part.dtype)
        true[sel] = part[task_q[sel], col[sel] - bounds[c]]
    return true


def _rank_chunks(ctx, sc, b: Batch, width, row_block, red):
    """Column chunks of ``width``: ``(better, tied, pass-1 true scores, tasks to rank again or None)``.

    Pass 1 scores the batch against its answer columns only (:func:`answer_scores`, ~#rows / #columns of
    the work; in one process while the other walkers score their first chunk). Pass 2 counts chunk by
    chunk and compares each answer's in-batch score bitwise with pass 1; the queries of a task that
    differs are ranked again (:func:`_rank_chunks_exact`), so a true score is exactly the value compared.
    """
    rb = row_bounds(b.ent.shape[0], row_block)
    n_walkers = walkers(ctx, sc, -(-sc.num_columns // width) * (len(rb) - 1),
                        max(y - x for x, y in zip(rb, rb[1:])) * width)
    one = {}

    def pass_one() -> torch.Tensor:
        one["true"] = t = red.true(sc, b, lambda tq, c: answer_scores(sc, b.ent, b.rel, tq, c,
                                                                       ctx.tuning.min_true_columns))
        return t

    def count():
        prepared = sc.prepared(b.ent, b.rel, n_walkers)  # the batch's queries, built once for all chunks
        return count_chunks(ctx, sc, b, width, one.get("true", pass_one), verify=True, prepared=prepared,
                            workers=n_walkers, row_block=row_block)

    if red is not ONE_PROCESS:
        pass_one()  # a sum over ranks: on the calling thread, before the walk
    better, tied, differ = red.counts(ctx, sc, b, count, red.flags, one.get("true"))
    return better, tied, one["true"], differ


def _rank_chunks_exact(ctx, sc, b: Batch, width, row_block=None, red=ONE_PROCESS):
    """``(better, tied, true scores)`` of ``b``, the true scores read from whole chunks of this very batch
    (:func:`chunk_true_scores`) and counted by the very same calls (prepared queries, one walker on the
    calling thread: a scorer's rounding may depend on the thread count). Identical calls that still
    disagree are a named error, never a wrong rank. ``row_block``: at most this many query rows at a time."""
    rb = row_bounds(b.ent.shape[0], row_block)
    if len(rb) > 2:
        split, out = RowBlocks(b.task_q, b.known, rb), []
        for i in range(len(rb) - 1):
            out.append(_rank_chunks_exact(ctx, sc, split.batch(b, i)[1], width, None, red))
        return tuple(torch.cat([o[j] for o in out]) for j in range(3))
    got = {}

    def read(task_q, col):
        got["prepared"] = p = sc.prepared(b.ent, b.rel)
        return chunk_true_scores(sc, b.ent, b.rel, task_q, col, width, prepared=p)

    true = red.true(sc, b, read)

    def count():
        better, tied, differ = count_chunks(ctx, sc, b, width, true, verify=True, prepared=got["prepared"],
                                            workers=1)
        if differ is not None:  # (on an entity shard every rank ends with this error)
            raise nondeterministic(sc, differ.numel())
        return better, tied, None

    better, tied, _ = red.counts(ctx, sc, b, count)
    return better, tied, true


def nondeterministic(sc, n: int) -> InvalidInputError:
    """The error for a scorer whose identical calls gave different scores (ranks cannot be exact)."""
    return InvalidInputError(
        f"scorer.{sc.method.__name__} returned different scores for the same queries and candidates in two "
        f"identical calls ({n} answer scores differ): exact ranks need deterministic scores (on a GPU: "
        "torch.use_deterministic_algorithms(True))"
    )


# ------------------------------------------------------------------ query-level metrics
def add_query_metrics(qacc, side: int, scores, task_q, col, masked, nan_policy: str) -> None:
    """Add the query rows of one batch to ``qacc`` (:class:`kgeval.evaluation.QueryMetricAccumulator`): query-level
    precision@k and recall@k (set retrieval per query, not per task).

    A query's *relevant* set is its answers in the evaluation set (``m``); answers known only from the
    filter sets become ``-inf`` and leave the candidates (``N`` left). ``P@k = hits@k / k``,
    ``R@k = hits@k / m``, with ``hits@k`` its exact expectation under random tie-breaking
    (:func:`expected_hits`); the null model's ``E[hits@k] = min(k, N) m / N``. Ties are exact score
    equality: ``query_metrics_k`` is refused with ``tie_tolerance > 0`` (a tolerant tie is not
    transitive, so the top ``k`` would be undefined).

    ``scores``: the batch's ``(q, C)`` rows, with the known answers masked when ``masked`` =
    ``(rows, columns, saved scores)`` is given (then ``scores`` is the evaluator's own tensor).
    """
    dev = scores.device
    nq, ncols = scores.shape
    code = torch.unique(task_q * ncols + col)  # unique (query row, relevant column) pairs
    rel_rows, rel_cols = code // ncols, code % ncols
    num_rel = torch.zeros(nq, dtype=torch.long, device=dev).index_add_(0, rel_rows, torch.ones_like(rel_rows))
    n_excl = torch.zeros(nq, dtype=torch.long, device=dev)
    if masked is not None:
        rows, fcol, saved = masked
        is_rel = torch.isin(rows * ncols + fcol, code)
        scores[rows, fcol] = torch.where(is_rel, saved, torch.full_like(saved, float("-inf")))
        n_excl.index_add_(0, rows, (~is_rel).long())
    if nan_policy in ("worst", "minus_inf") and bool(torch.isnan(scores).any()):
        scores = torch.nan_to_num(scores, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    hits = expected_hits(scores, rel_rows, rel_cols, num_rel, n_excl, qacc.ks)
    qacc.add(SIDE_NAMES[side], hits, num_rel, ncols - n_excl)


def expected_hits(
    scores: torch.Tensor,
    rel_rows: torch.Tensor,
    rel_cols: torch.Tensor,
    num_relevant: torch.Tensor,
    num_excluded: torch.Tensor,
    ks,
) -> dict[int, torch.Tensor]:
    """``E[hits@k]`` per query row for each ``k`` in ``ks``: with ``v`` the k-th largest score, ``n_gt`` /
    ``n_eq`` the candidates above / equal to it and ``rel_gt`` / ``rel_eq`` the relevant ones among them,
    ``E[hits@k] = rel_gt + (k - n_gt) rel_eq / n_eq`` (hypergeometric mean); ``m`` when ``k >= N``.

    ``scores``: ``(q, C)`` with excluded candidates already set to ``-inf`` (and no NaN);
    ``rel_rows``/``rel_cols``: positions of the relevant candidates; ``num_excluded``: the number
    of ``-inf`` entries per row that are not candidates.
    """
    q, c = scores.shape
    kmax = min(max(ks) + 1, c)
    vals = scores.topk(kmax, dim=1).values  # descending
    rel_scores = scores[rel_rows, rel_cols]
    n_cand = c - num_excluded
    m = num_relevant.to(torch.float64)
    out = {}
    for k in ks:
        kk = min(k, kmax)
        v = vals[:, kk - 1]
        # everything scoring above the k-th largest value sits in the first k-1 positions
        n_gt = (vals[:, : kk - 1] > v[:, None]).sum(1)
        n_eq = (vals == v[:, None]).sum(1)
        # the tie block may run past the top-k list: count it on the full row
        full = (vals[:, kmax - 1] == v) & (kmax < c)
        if bool(full.any()):
            rows = full.nonzero().view(-1)
            n_eq[rows] = (scores[rows] == v[rows, None]).sum(1)
        n_eq = n_eq - torch.where(v == float("-inf"), num_excluded, torch.zeros_like(num_excluded))
        rv = v[rel_rows]
        rel_gt = torch.zeros(q, dtype=torch.float64, device=scores.device).index_add_(
            0, rel_rows, (rel_scores > rv).to(torch.float64)
        )
        rel_eq = torch.zeros(q, dtype=torch.float64, device=scores.device).index_add_(
            0, rel_rows, (rel_scores == rv).to(torch.float64)
        )
        hits = rel_gt + (k - n_gt).to(torch.float64) * rel_eq / n_eq.clamp(min=1).to(torch.float64)
        out[k] = torch.where(n_cand <= k, m, hits)
    return out
