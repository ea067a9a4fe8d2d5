"""The collectives of a distributed evaluation and their fault handling (:class:`Plan`); see
:mod:`.distributed` for the two modes. Nothing here reads the evaluation's options or inputs.

Faults. Every collective of an evaluation goes through :meth:`Plan.exchange`: a rank's local work
runs inside ``try``; its outcome (result or exception) is what the collective carries, so an
exception on one rank ends every rank, the failing one with its own exception, the others with
:class:`RankFailedError` naming the rank and the error (no rank waits for a peer that already
failed). A NaN score under ``nan_policy="raise"`` is a property of the inputs, not of a rank: whichever
rank computes it (a candidate in its entity slice, a task in its share), every rank raises the same
:class:`~kgeval.errors.NaNScoresError`, with the message of the lowest rank that found one. A rank that dies without raising (killed, segfault) is caught by the process group's
timeout: ``init_process_group(timeout=...)``; the CLI sets it from ``--dist-timeout``
(default 600 s). So is a rank that never joins the evaluation (evaluates without ``distributed=``):
a collective that fails or times out raises :class:`CollectiveError` naming the rank. At the start the ranks exchange a SHA-256 of their inputs (triples, known
triples, restriction, options that change results, number of entities): a difference raises
:class:`DistributedMismatchError` on every rank before any scoring.
"""

from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .._partition import DistributedError, TooManyRanksError
from ..errors import InvalidInputError, NaNScoresError
from .batches import _batch_stop, is_out_of_memory
from .options import DISTRIBUTED_MODES

__all__ = ["MODES", "Plan", "DistributedError", "RankFailedError", "CollectiveError", "DistributedMismatchError",
           "TooManyRanksError"]

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
        """``fn(*args)`` on this rank, then the results of every rank (a list in rank order).

        Raises on every rank when any rank raised: its own exception on the failing rank,
        :class:`RankFailedError` on the others. Except for a NaN score under ``nan_policy="raise"``
        (:class:`~kgeval.errors.NaNScoresError`, about the inputs, not a rank): when the first failing
        rank raised one, every rank without another error of its own raises it, message and all.
        """
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
        """``fn(*args)``, a collective: torch's error when it fails (gloo: ``RuntimeError: Timed out
        waiting 1800000ms for send operation``, or a closed connection) as :class:`CollectiveError`
        saying why a rank ends up there (out-of-memory errors pass unchanged)."""
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
        """Sum the consistency check's counts over ranks (the first mismatch message of the lowest rank).

        Every rank takes part, with or without a check (``check_consistency`` may differ between
        ranks: a rank without one skipping the collective left the others waiting)."""
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
    """The element-wise sum over ranks of the integer tensor ``buf`` (``all_reduce``, SUM).

    On gloo with at most :data:`_GATHER_SUM_RANKS` ranks it is an all-gather and a local sum instead:
    measured between 2 CPU processes, gloo's ``all_reduce`` took 1.6-1.9 ms per call whatever the
    size (10 to 10^4 int64; a send/recv round trip 0.15 ms), the all-gather 0.5-0.9 ms, and the
    entity-sharded evaluation makes three such sums per batch. Integer sums are exact in any order,
    so the result is the same; the all-gather moves ``(world - 1) x`` the tensor to each rank, at most
    twice a ring all-reduce's volume up to 4 ranks. NCCL and larger groups keep ``all_reduce``.
    """
    d = _dist()
    if world <= _GATHER_SUM_RANKS and d.get_backend() == "gloo":
        out = torch.empty((world, buf.numel()), dtype=buf.dtype, device=buf.device)
        gather = getattr(d, "all_gather_single", None) or d.all_gather_into_tensor  # the name from torch 2.12
        gather(out.view(-1), buf.reshape(-1))
        return out.sum(0, dtype=buf.dtype).view(buf.shape)  # int32 stays int32 (float rows as bits)
    d.all_reduce(buf)
    return buf
