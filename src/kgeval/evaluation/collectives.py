"""The collectives of a distributed evaluation, their fault handling (:class:`Plan`), and the hooks
with which entity shards run the one-process drivers (:class:`ShardReduce`); see :mod:`.distributed`.

Faults. Every collective goes through :meth:`Plan.exchange` or :meth:`Plan.reduce`: a rank's local
work runs inside ``try`` and its outcome is what the collective carries, so an exception on one rank
ends every rank (the failing one with its own exception, the others with :class:`RankFailedError`);
an out-of-memory error on any rank halves the batch on every rank. A NaN score under
``nan_policy="raise"`` is a property of the inputs, not of a rank: every rank raises the same
:class:`~kgeval.errors.NaNScoresError`. A dead or absent rank is a :class:`CollectiveError` at the
process group's timeout (the CLI's ``--dist-timeout``).

Entity shards. Every rank walks all tasks of a side in the same batches; per batch the drivers of
:mod:`.full` and :mod:`.listed` call three sums over ranks, each after a local step: the rows of the
batch's query entities (filled in by their owners), the true scores (the owner of each answer scores
it; float64 bit patterns in int64: exact, NaN and -0.0 included), and the better / tied counts
against the local columns (known answers excluded where they live), with one re-rank flag per task
when some rank chunks its slice. Scores of candidates never leave their rank.
"""

from __future__ import annotations

import math
import pickle
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .._partition import DistributedError, TooManyRanksError
from ..errors import InvalidInputError, NaNScoresError
from ..ranks import SIDE_HEAD
from .batches import Batch, BatchPlan, RunContext, _batch_stop, auto_batch, is_out_of_memory, plan_full
from .blocks import count_block, count_tiles
from .full import OneProcess, answer_scores, tile_scores, tile_width
from .options import DISTRIBUTED_MODES
from .scoring import ShardSideScorer

__all__ = ["MODES", "Plan", "DistributedError", "RankFailedError", "CollectiveError", "DistributedMismatchError",
           "TooManyRanksError", "ShardReduce"]

#: the values of ``EvaluationOptions.distributed`` besides None (one process)
MODES = DISTRIBUTED_MODES


class RankFailedError(DistributedError):
    """Another rank raised; the message names the rank and its error."""


class CollectiveError(DistributedError):
    """A collective of the evaluation failed or timed out: another rank is not running the same
    distributed evaluation (never called it, called it without ``distributed=``), died, or took
    longer than the process group's timeout."""


class DistributedMismatchError(DistributedError, InvalidInputError):
    """Ranks were given different triples, filter sets, restrictions, options or entity shards."""


class _Abort(Exception):
    """A collective reported a failed rank (``oom_only``: every failure was out of memory)."""

    def __init__(self, oom_only: bool):
        super().__init__("a rank failed")
        self.oom_only = oom_only


def _dist():
    import torch.distributed as dist

    return dist


@dataclass
class Plan:
    """This rank's share of a distributed evaluation and its collectives."""

    mode: str
    rank: int
    world: int

    def task_slice(self, n: int) -> slice:
        """This rank's contiguous share of ``n`` tasks."""
        return slice(n * self.rank // self.world, n * (self.rank + 1) // self.world)

    def guard(self, fn, *args):
        """``fn(*args)`` on this rank (its result stays local); raises on every rank when any rank raised."""
        box = []
        self.exchange(lambda: box.append(fn(*args)))
        return box[0]

    def exchange(self, fn, *args):
        """``fn(*args)`` on this rank, then the results of every rank (a list in rank order); raises on every
        rank when any rank raised (see the module docstring: own error, :class:`RankFailedError`, or the
        first failing rank's :class:`~kgeval.errors.NaNScoresError`, message and all)."""
        err = out = None
        try:
            out = fn(*args)
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the peers were told
            err = exc
        status = None if err is None else f"{type(err).__name__}: {err}"
        try:  # an unpicklable result is this rank's failure too, not a hang of the others
            payload = pickle.dumps(out) if err is None else None
        except Exception as exc:  # noqa: BLE001
            err, payload, status = exc, None, f"{type(exc).__name__}: {exc}"
        nan = str(err) if isinstance(err, NaNScoresError) else None
        gathered = [None] * self.world
        self._collective("exchange", _dist().all_gather_object, gathered, (status, payload, nan))
        failed = [(r, s, n) for r, (s, _, n) in enumerate(gathered) if s is not None]
        if failed and failed[0][2] is not None and (err is None or nan is not None):
            # a NaN score under nan_policy="raise" is a fault of the evaluation's inputs, not of a rank:
            # the first failing rank's error, word for word, on every rank (which rank computes a score,
            # or checks which task first, must not change the error a rank raises)
            if nan == failed[0][2]:
                raise err
            raise NaNScoresError(failed[0][2]) from None
        if err is not None:
            raise err
        if failed:
            r, s, _ = failed[0]
            raise RankFailedError(f"rank {r} of {self.world} failed during distributed evaluation: {s}")
        return [pickle.loads(p) for _, p, _ in gathered]

    def _collective(self, what: str, fn, *args):
        """``fn(*args)``, a collective: torch's error when it fails (a timeout, a closed connection) as a
        :class:`CollectiveError` saying why a rank ends up there (out-of-memory errors pass unchanged)."""
        try:
            return fn(*args)
        except RuntimeError as exc:
            if is_out_of_memory(exc):
                raise
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise CollectiveError(
                f"rank {self.rank} of {self.world}: the {what} with the other ranks failed ({first}). Every rank "
                "must run the same distributed evaluation: a rank that never calls it, evaluates without "
                "distributed=, died, or takes longer than the process group's timeout "
                "(init_process_group(timeout=...); the CLI's --dist-timeout) leaves the others here") from exc

    def check_same(self, digest: str) -> None:
        """Every rank's input fingerprint equals rank 0's, else :class:`DistributedMismatchError`."""
        digests = self.exchange(lambda: digest)
        differ = [r for r, d in enumerate(digests) if d != digests[0]]
        if differ:
            raise DistributedMismatchError(
                f"rank(s) {differ} were given different inputs than rank 0 (triples, filter triples, "
                "restriction, options or number of entities differ; input SHA-256 "
                f"{digests[differ[0]][:12]} vs {digests[0][:12]})"
            )

    def gather_side(self, fn):
        """``fn()``, this rank's per-task counts (a :class:`.batches.SideResult`: lists ``triple_index``,
        ``better``, ``tied``, ``ncand``), merged with every other rank's into one of the same type."""
        mine = []
        parts = self.exchange(lambda: _flat(_kept(mine, fn())))
        res = type(mine[0])()
        for p in parts:
            res.triple_index.append(p[0])
            res.better.append(p[1])
            res.tied.append(p[2])
            res.ncand.append(p[3])
        return res

    def merge_consistency(self, cc) -> None:
        """Sum the consistency check's counts over ranks (the first mismatch message of the lowest rank); every
        rank takes part, with or without a check (``check_consistency`` may differ between ranks)."""
        parts = self.exchange(lambda: None if cc is None else (cc.checked, cc.mismatches, cc.first_mismatch))
        parts = [p for p in parts if p is not None]
        if cc is None:
            return
        cc.checked = sum(p[0] for p in parts)
        cc.mismatches = sum(p[1] for p in parts)
        cc.first_mismatch = next((p[2] for p in parts if p[2]), "")

    # ------------------------------------------------------------------ entities mode
    @property
    def comm_device(self) -> torch.device:
        """Where collective tensors live: the current CUDA device under NCCL, else the CPU."""
        if _dist().get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def reduce(self, fn, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """``all_reduce`` (sum) of the integer tensor ``fn()`` of ``shape`` over ranks, with two status
        counters: a rank whose ``fn`` raised sends zeros and its flag, and then every rank raises
        :class:`_Abort` (:func:`run_batches` turns it into the error on every rank, or a smaller batch)."""
        numel = int(np.prod(shape, dtype=np.int64))
        err = out = None
        try:
            out = fn()
            if tuple(out.shape) != tuple(shape) or out.dtype != dtype:  # a bug, never a hang
                raise RuntimeError(f"internal: reduce of {tuple(out.shape)} {out.dtype}, expected {shape} {dtype}")
        except Exception as exc:  # noqa: BLE001 - reported to the peers, raised after the exchange
            err = exc
        dev = self.comm_device
        buf = torch.zeros(numel + 2, dtype=dtype, device=dev)
        if err is None:
            buf[:numel] = out.reshape(-1).to(dev)
        else:
            buf[numel + int(is_out_of_memory(err))] = 1
        buf = self._collective("sum", _sum_over_ranks, buf, self.world)
        failed, oom = int(buf[numel]), int(buf[numel + 1])
        if failed or oom:
            self.pending = err
            raise _Abort(oom_only=failed == 0)
        return buf[:numel].view(shape)

    def raise_pending(self):
        """After :class:`_Abort`: every rank's error exchanged and raised (own error, or RankFailedError)."""
        err, self.pending = getattr(self, "pending", None), None

        def own():
            if err is not None:
                raise err

        self.exchange(own)
        raise RankFailedError("internal: a rank reported a failure but no error was exchanged")

    def run_batches(self, n: int, batch_size: int, step, bar=None, *, ends=None) -> int:
        """:func:`.batches.run_batches` in lockstep: every rank walks the same batches; an
        out-of-memory error on any rank halves the batch on all (re-raised at a single row/group)."""
        start, size = 0, int(batch_size)
        while start < n:
            stop = _batch_stop(start, size, n, ends)
            try:
                step(start, stop)
            except _Abort as ab:
                if ab.oom_only and stop > _batch_stop(start, 1, n, ends):
                    self.pending = None
                    size = max(1, min(size, stop - start) // 2)
                    if torch.cuda.is_available():
                        torch.cuda.empty_cache()
                    warnings.warn(f"out of memory on a rank: retrying with batch size {size}", stacklevel=3)
                    continue
                self.raise_pending()
            if bar is not None:
                bar.update(stop - start)
            start = stop
        return size

    def agree_min(self, value: int) -> int:
        """The smallest ``value`` over ranks."""
        return min(self.exchange(lambda: int(value)))


def _kept(box: list, value):
    box.append(value)
    return value


def _flat(res):
    def cat(xs, dtype):
        return np.concatenate(xs) if xs else np.zeros(0, dtype=dtype)

    return (cat(res.triple_index, np.int64), cat(res.better, np.int64), cat(res.tied, np.int64),
            cat(res.ncand, np.int64))


#: gloo process groups of at most this many ranks sum by all-gather (see :func:`_sum_over_ranks`)
_GATHER_SUM_RANKS = 4


def _sum_over_ranks(buf: torch.Tensor, world: int) -> torch.Tensor:
    """The element-wise sum over ranks of the integer tensor ``buf``: ``all_reduce``, or on gloo with at most
    :data:`_GATHER_SUM_RANKS` ranks an all-gather and a local sum (cheaper there per call, see
    ``benchmarks/results/evaluation-notes.md``; integer sums are exact in any order)."""
    d = _dist()
    if world <= _GATHER_SUM_RANKS and d.get_backend() == "gloo":
        out = torch.empty((world, buf.numel()), dtype=buf.dtype, device=buf.device)
        gather = getattr(d, "all_gather_single", None) or d.all_gather_into_tensor  # the name from torch 2.12
        gather(out.view(-1), buf.reshape(-1))
        return out.sum(0, dtype=buf.dtype).view(buf.shape)  # int32 stays int32 (float rows as bits)
    d.all_reduce(buf)
    return buf


# ------------------------------------------------------------ entity shards: the hooks of the drivers
def _int_of(dtype: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
    """``(float dtype sent, integer dtype of its bits)`` for a row dtype."""
    if dtype == torch.float64:
        return torch.float64, torch.int64
    return torch.float32, torch.int32  # float16 / bfloat16 widen exactly to float32


def _to_bits(x: torch.Tensor, wire: torch.dtype, ints: torch.dtype) -> torch.Tensor:
    return x.to(wire).contiguous().view(ints)


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
    """The hooks of :func:`.full.rank_full` and :func:`.listed.rank_listed` on an entity shard (see the
    module docstring): each sum over ranks runs after a local step whose errors end every rank."""

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
