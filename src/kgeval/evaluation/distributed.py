"""Exact distributed evaluation on ``torch.distributed`` (gloo on CPU, NCCL on GPU), launched
with ``torchrun``; the default process group must be initialised before :func:`kgeval.evaluate`.

``distributed="tasks"``: every rank holds the whole model and ranks a contiguous slice
``[n * rank // world, n * (rank + 1) // world)`` of each side's tasks; the per-task counts
``(better, tied, num_candidates)`` are gathered (``all_gather_object``) and sorted by triple index,
so every rank returns the same :class:`~kgeval.Results`, identical to one process: a task's counts
depend only on its own score row, the filter index (built from all known triples on every rank)
and, for sampled negatives, the negatives drawn for *all* tasks from the seed before slicing.

Faults. Every collective of an evaluation goes through :meth:`Plan.exchange`: a rank's local work
runs inside ``try``; its outcome (result or exception) is what the collective carries, so an
exception on one rank ends every rank, the failing one with its own exception, the others with
:class:`RankFailedError` naming the rank and the error (no rank waits for a peer that already
failed). A rank that dies without raising (killed, segfault) is caught by the process group's
timeout: ``init_process_group(timeout=...)``; the CLI sets it from ``--dist-timeout``
(default 600 s). At the start the ranks exchange a SHA-256 of their inputs (triples, known
triples, restriction, options that change results, number of entities): a difference raises
:class:`DistributedMismatchError` on every rank before any scoring.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError, KGEvalError
from .context import SideResult

__all__ = ["MODES", "Plan", "start", "check_mode", "fingerprint", "DistributedError", "RankFailedError",
           "DistributedMismatchError", "init_from_env"]

MODES = ("tasks",)

# options that change how work is split or shown, never a rank: ranks may differ in them
_LOCAL_OPTIONS = ("progress", "device", "memory_budget", "batch_size", "entity_chunk_size", "check_consistency")


class DistributedError(KGEvalError):
    """Base class of the errors of a distributed evaluation."""


class RankFailedError(DistributedError):
    """Another rank raised; the message names the rank and its error."""


class DistributedMismatchError(DistributedError, InvalidInputError):
    """Ranks were given different triples, filter sets, restrictions or options."""


def check_mode(value) -> str | None:
    """``value`` validated as a distributed mode (None = one process)."""
    if value is None or value in MODES:
        return value
    raise InvalidInputError(f"distributed must be one of {', '.join(map(repr, MODES))} or None, got {value!r}")


def _dist():
    import torch.distributed as dist

    return dist


def start(mode: str) -> Plan:
    """The plan of this rank in the initialised default process group."""
    dist = _dist()
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidInputError(
            f"distributed={mode!r} needs an initialised torch.distributed process group: launch with torchrun "
            "and call torch.distributed.init_process_group() first (the kgeval CLI does this itself)"
        )
    return Plan(mode=mode, rank=dist.get_rank(), world=dist.get_world_size())


def init_from_env(timeout_s: float) -> int:
    """Initialise the default process group from torchrun's environment (if not yet done); the rank.

    Backend: NCCL when CUDA is available, else gloo. ``timeout_s`` bounds every collective wait.
    """
    import datetime
    import os

    import torch

    dist = _dist()
    if not dist.is_initialized():
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise InvalidInputError("--distributed needs torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR): "
                                    "launch with torchrun --nproc-per-node N -m kgeval evaluate ...")
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=float(timeout_s)))
    return dist.get_rank()


def fingerprint(inp, opts) -> str:
    """SHA-256 of everything that must be the same on every rank."""
    h = hashlib.sha256()
    for arr in (inp.triples, inp.known, inp.entities, inp.relations, inp.keep):
        a = np.ascontiguousarray(np.asarray([] if arr is None else arr, dtype=np.int64))
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    d = {k: v for k, v in opts.to_dict().items() if k not in _LOCAL_OPTIONS}
    d["num_entities"], d["num_relations"] = int(inp.num_entities), int(inp.num_relations)
    h.update(json.dumps(d, sort_keys=True, default=str).encode())
    return h.hexdigest()


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
        :class:`RankFailedError` on the others.
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
        gathered = [None] * self.world
        _dist().all_gather_object(gathered, (status, payload))
        if err is not None:
            raise err
        failed = [(r, s) for r, (s, _) in enumerate(gathered) if s is not None]
        if failed:
            r, s = failed[0]
            raise RankFailedError(f"rank {r} of {self.world} failed during distributed evaluation: {s}")
        return [pickle.loads(p) for _, p in gathered]

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

    def gather_side(self, fn) -> SideResult:
        """This rank's :class:`SideResult` from ``fn()``, merged with every other rank's."""
        parts = self.exchange(lambda: _flat(fn()))
        res = SideResult()
        for p in parts:
            res.triple_index.append(p[0])
            res.better.append(p[1])
            res.tied.append(p[2])
            res.ncand.append(p[3])
        return res

    def merge_consistency(self, cc) -> None:
        """Sum the consistency check's counts over ranks (the first mismatch message of the lowest rank)."""
        if cc is None:
            return
        parts = self.exchange(lambda: (cc.checked, cc.mismatches, cc.first_mismatch))
        cc.checked = sum(p[0] for p in parts)
        cc.mismatches = sum(p[1] for p in parts)
        cc.first_mismatch = next((p[2] for p in parts if p[2]), "")


def _flat(res: SideResult):
    def cat(xs, dtype):
        return np.concatenate(xs) if xs else np.zeros(0, dtype=dtype)

    return (cat(res.triple_index, np.int64), cat(res.better, np.int64), cat(res.tied, np.int64),
            cat(res.ncand, np.int64))
