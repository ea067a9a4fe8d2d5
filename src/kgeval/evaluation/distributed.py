"""Exact distributed evaluation on ``torch.distributed`` (gloo on CPU, NCCL on GPU), launched
with ``torchrun``; the default process group must be initialised before :func:`kgeval.evaluate`.

``distributed="tasks"``: every rank holds the whole model and ranks a contiguous slice
``[n * rank // world, n * (rank + 1) // world)`` of each side's tasks; the per-task counts
``(better, tied, num_candidates)`` are gathered (``all_gather_object``) and sorted by triple index,
so every rank returns the same :class:`~kgeval.Results`, identical to one process: a task's counts
depend only on its own score row, the filter index (built from all known triples on every rank)
and, for sampled negatives, the negatives drawn for *all* tasks from the seed before slicing. The ranks check at the start that they hold the same model: each
scores a few probe queries and compares them with rank 0's (:func:`check_replicas`).

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

``distributed="entities"``: no rank holds the whole entity table. Rank ``rank`` of ``world`` holds
the entity rows ``[n * rank // world, n * (rank + 1) // world)`` (:func:`shard_range`) and every
rank walks *all* tasks, in the same batches. Per batch (see :mod:`.sharded`):

1. the embedding rows of the batch's query entities are summed over ranks (each rank fills the
   rows it owns, zeros elsewhere; sent as the floats' bit patterns in integers, so the rows
   arrive bit for bit): ``#queries x row width`` numbers;
2. every rank scores the queries against its own entities only; the true answer's score is read
   by the rank that owns the answer and summed over ranks the same way (``#tasks`` int64), so
   every rank compares against exactly the value the owner computed;
3. every rank counts its better and tied candidates (known answers in its slice masked, i.e.
   filtered answers are subtracted where they live) and the counts are summed:
   ``2 x #tasks`` int64 (plus one re-rank flag per task when the local slice is scored in entity
   chunks, see :mod:`.sharded`). Scores of candidates never leave their rank.

Each of the three sums (``all_reduce``; on gloo with up to 4 ranks an all-gather and a local sum,
see :func:`_sum_over_ranks`) also carries two status counters (failed ranks, ranks out
of memory): a rank whose local step raised still takes part in the collective with zeros and
its flag set, so every rank learns of the failure at the same collective and none waits; they
then exchange the error (:meth:`Plan.exchange`): the failing rank raises its own exception, the
others :class:`RankFailedError`. An out-of-memory error on any rank halves the batch on every
rank (the batch size is the smallest any rank can afford). Every rank returns the same
:class:`~kgeval.Results`, with the same rank table as one process holding the whole model
(full and sampled ranking, filtered or not, with restrictions; ``query_metrics_k`` is refused
for both modes). Sampled negatives are drawn for all tasks from the seed on every rank; each
rank scores those in its slice.

The scorer is an *entity shard* (``model.shard(rank, world)`` of a built-in model,
:func:`kgeval.models.shard_embeddings`, or your own object) with

- ``num_entities``: the number of entities of the *whole* model;
- ``entity_range``: ``(lo, hi)``, the ids held here; must be ``shard_range(num_entities, rank, world)``;
- ``entity_rows(ids) -> (k, w)``: the rows of local entities (global ids) from which any rank forms
  a query on them (an embedding row; same width and float dtype on every rank);
- ``score_tails_from(head_rows, relations, entities=None) -> (b, m)``: scores of ``(h_i, r_i, e)``
  for local entities ``e``, ``h_i`` given by its row; ``entities``: None = every local entity in id
  order, a slice or 1-d tensor of global ids inside ``entity_range``;
- ``score_heads_from(relations, tail_rows, entities=None) -> (b, m)``: likewise for ``(e, r_i, t_i)``;
- optionally ``num_relations``, ``device`` and ``replicated_digest() -> str`` (a hash of the
  parameters every rank holds, e.g. relations; compared at the start). Without it the ranks compare
  the float tensors of the shard that are not entity rows (:func:`replicated_tensors`: its
  ``state_dict()``, or its tensor, array and module attributes; a tensor with a dimension of the local
  entity count is taken for entity rows). A shard holding none (its parameters in closures or
  containers, say) is not checked, with a warning: define ``replicated_digest()``.

A rank's shard range that differs from ``shard_range(n, rank, world)``, rows of another width or
dtype, another ``replicated_digest()`` (or other replicated tensors) or another ``num_entities`` fail at
the start with :class:`DistributedMismatchError` on every rank; more ranks than entities with
:class:`TooManyRanksError`.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InvalidInputError, KGEvalError, NaNScoresError
from .context import SideResult

__all__ = ["MODES", "Plan", "start", "check_mode", "fingerprint", "DistributedError", "RankFailedError",
           "CollectiveError",
           "DistributedMismatchError", "TooManyRanksError", "init_from_env", "shard_range", "check_shard_scorer",
           "check_shards", "check_replicas", "replicated_tensors"]

MODES = ("tasks", "entities")

# options that change how work is split or shown, never a rank: ranks may differ in them
_LOCAL_OPTIONS = ("progress", "device", "memory_budget", "batch_size", "entity_chunk_size", "check_consistency")


class DistributedError(KGEvalError):
    """Base class of the errors of a distributed evaluation."""


class RankFailedError(DistributedError):
    """Another rank raised; the message names the rank and its error."""


class CollectiveError(DistributedError):
    """A collective of the evaluation failed or timed out: another rank is not running the same
    distributed evaluation (never called it, called it without ``distributed=``), died, or took
    longer than the process group's timeout."""


class DistributedMismatchError(DistributedError, InvalidInputError):
    """Ranks were given different triples, filter sets, restrictions, options or entity shards."""


class TooManyRanksError(DistributedError, InvalidInputError):
    """``distributed="entities"`` with more ranks than entities (a rank would hold none)."""


def shard_range(n: int, rank: int, world: int) -> tuple[int, int]:
    """``(lo, hi)``: the entity ids ``[n * rank // world, n * (rank + 1) // world)`` of rank ``rank``."""
    for name, v in (("num_entities", n), ("rank", rank), ("world", world)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InvalidInputError(f"{name} must be an integer, got {v!r}")
    n, rank, world = int(n), int(rank), int(world)
    if world < 1 or not 0 <= rank < world:
        raise InvalidInputError(f"rank must lie in [0, world) with world >= 1, got rank={rank}, world={world}")
    if world > n:
        raise TooManyRanksError(f"world size {world} is larger than the number of entities {n}: with "
                                f"distributed='entities' every rank must hold at least one entity")
    return n * rank // world, n * (rank + 1) // world


_SHARD_METHODS = ("entity_rows", "score_tails_from", "score_heads_from")


def check_shard_scorer(scorer, side_codes) -> object:
    """``scorer`` checked against the entity-shard protocol (module docstring)."""
    from ..ranks import SIDE_HEAD

    need = ["entity_rows"] + ["score_heads_from" if c == SIDE_HEAD else "score_tails_from" for c in side_codes]
    missing = [m for m in need if not callable(getattr(scorer, m, None))]
    if missing or getattr(scorer, "entity_range", None) is None:
        raise InvalidInputError(
            f"distributed='entities' needs an entity shard, but {type(scorer).__name__} lacks "
            f"{', '.join(missing + ([] if getattr(scorer, 'entity_range', None) is not None else ['entity_range']))}: "
            "use model.shard(rank, world) (built-in models), kgeval.models.shard_embeddings(...), or see "
            "kgeval.evaluation.distributed for the protocol"
        )
    return scorer


def check_shards(plan: Plan, scorer, num_entities: int) -> tuple[int, int, int, torch.dtype]:
    """Every rank's shard is its ``shard_range`` with rows of one width and dtype: ``(lo, hi, width, dtype)``."""
    if plan.world > num_entities:  # num_entities is the same on every rank (fingerprint)
        shard_range(num_entities, plan.rank, plan.world)

    def info():
        rng = scorer.entity_range
        try:
            lo, hi = (int(x) for x in rng)
        except (TypeError, ValueError):
            raise InvalidInputError(f"scorer.entity_range must be (lo, hi), got {rng!r}") from None
        width, dtype = None, None
        if hi > lo:
            row = scorer.entity_rows(torch.tensor([lo], dtype=torch.long))
            if not isinstance(row, torch.Tensor) or row.dim() != 2 or row.shape[0] != 1 \
                    or not row.is_floating_point():
                raise InvalidInputError(f"scorer.entity_rows must return a 2-d float tensor (one row per id), "
                                        f"got {type(row).__name__} {tuple(getattr(row, 'shape', ()))}")
            width, dtype = int(row.shape[1]), str(row.dtype)
        if callable(getattr(scorer, "replicated_digest", None)):
            digest = ("own", scorer.replicated_digest())
        else:
            digest = ("tensors", replicated_tensors(scorer, hi - lo))
        return lo, hi, width, dtype, digest

    infos = plan.exchange(info)
    for r, (lo, hi, width, dtype, digest) in enumerate(infos):
        want = shard_range(num_entities, r, plan.world)
        if (lo, hi) != want:
            raise DistributedMismatchError(
                f"rank {r} of {plan.world} holds entities [{lo}, {hi}) but must hold [{want[0]}, {want[1]}) of "
                f"{num_entities} (build each rank's shard with model.shard(rank, world))")
        if (width, dtype) != infos[0][2:4]:
            raise DistributedMismatchError(
                f"rank {r}'s entity rows are {width} x {dtype} but rank 0's are {infos[0][2]} x {infos[0][3]}")
    _check_replicated(plan, [info[4] for info in infos], type(scorer).__name__)
    lo, hi, width, dtype, _ = infos[plan.rank]
    return lo, hi, width, getattr(torch, dtype.split(".")[-1])


def replicated_tensors(scorer, num_local: int) -> dict[str, tuple]:
    """``{name: (shape, dtype, SHA-256)}`` of the float tensors an entity shard without ``replicated_digest()``
    holds besides its entity rows: its ``state_dict()`` (an ``nn.Module``), else its tensor and array
    attributes and the state of its ``nn.Module`` attributes. A tensor with a dimension of ``num_local`` (the
    entities held here) is taken for entity rows and skipped, as are integer tensors (offsets, ids); only
    what is hashed is read (a memory-mapped entity table is not)."""
    from torch import nn

    from ..models.base import state_digest

    if isinstance(scorer, nn.Module):
        items = list(scorer.state_dict().items())
    else:
        items = []
        for key, value in sorted(getattr(scorer, "__dict__", {}).items()):
            if isinstance(value, nn.Module):
                items += [(f"{key}.{k}", v) for k, v in value.state_dict().items()]
            elif isinstance(value, (torch.Tensor, np.ndarray)):
                items.append((key, value))
    out = {}
    for name, t in items:
        if num_local in tuple(t.shape):
            continue
        if isinstance(t, np.ndarray):
            if t.dtype.kind not in "fc":
                continue
            t = torch.from_numpy(np.ascontiguousarray(t))
        if t.is_floating_point() or t.is_complex():
            out[name] = (tuple(t.shape), str(t.dtype), state_digest({name: t}))
    return out


def _check_replicated(plan: Plan, digests: list, kind: str) -> None:
    """Every rank's shard holds rank 0's replicated parameters: the shards' own ``replicated_digest()``
    (built-in shards: relations, cores, batch norms and configuration), else the float tensors
    :func:`replicated_tensors` finds on every rank (a user's shard: without it, shards of different relation
    parameters silently ranked with a mix of them)."""
    import warnings

    kinds = [d[0] for d in digests]
    for r, d in enumerate(digests):
        if d[0] != kinds[0]:
            has = r if d[0] == "own" else 0
            raise DistributedMismatchError(
                f"rank {has}'s shard defines replicated_digest() but rank {r if has == 0 else 0}'s does not: "
                "every rank must hold a shard of the same kind")
        if d[0] == "own" and d[1] != digests[0][1]:
            raise DistributedMismatchError(
                f"rank {r}'s shard has other parameters than rank 0's (relations or configuration differ: "
                "shards of different models?)")
    if kinds[0] == "own":
        return
    common = set.intersection(*(set(d[1]) for d in digests))
    for name in sorted(common):
        for r, d in enumerate(digests):
            if d[1][name] != digests[0][1][name]:
                (s0, t0, _), (s, t, _) = digests[0][1][name], d[1][name]
                what = "other values" if (s, t) == (s0, t0) else f"{s} {t} (rank 0: {s0} {t0})"
                raise DistributedMismatchError(
                    f"rank {r}'s shard holds {what} in {name!r} than rank 0's: every rank must hold the same "
                    "parameters besides its entity rows (relations, configuration; shards of different models?). "
                    f"If {name!r} may differ between ranks, define replicated_digest() on the shard: a hash of "
                    "what every rank must share (see kgeval.evaluation.distributed)")
    if not common and plan.rank == 0:
        warnings.warn(
            f"distributed='entities': the shard ({kind}) has no replicated_digest() and no "
            "float tensor besides its entity rows that every rank holds, so the ranks cannot check that they "
            "score with the same relation parameters: define replicated_digest() (a hash of them)", stacklevel=4)


class _Abort(Exception):
    """A collective reported a failed rank (``oom_only``: every failure was out of memory)."""

    def __init__(self, oom_only: bool):
        super().__init__("a rank failed")
        self.oom_only = oom_only


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
        try:
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=float(timeout_s)))
        except RuntimeError as exc:  # torch's DistStoreError / DistNetworkError are RuntimeErrors
            raise _join_error(exc, timeout_s) from exc
    return dist.get_rank()


def _join_error(exc: RuntimeError, timeout_s: float) -> CollectiveError:
    """The process group did not form: which rank is missing, as far as torch's message tells.

    Rank 0 hosting the store says "1/2 clients joined"; under torchrun (the agent hosts the store)
    gloo waits for the missing rank's key, ``.../<rank>``; a rank that cannot reach rank 0 says "connect".
    """
    import os
    import re

    rank, world = os.environ.get("RANK", "?"), os.environ.get("WORLD_SIZE", "?")
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    key = re.search(r"keys?: \S*/(\d+)\s*$", text)
    joined = re.search(r"(\d+)/(\d+) clients joined", text)
    if key:
        who = f"rank {key.group(1)} did not join"
    elif joined:
        n, w = int(joined.group(1)), int(joined.group(2))
        missing = f"rank {w - 1}" if w == 2 else f"{w - n} of ranks 1..{w - 1}"
        who = f"only {n} of {w} ranks joined ({missing} missing)"
    elif "connect" in text.lower():
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        who = f"rank 0 (the process group's host, {where}) could not be reached"
    else:
        who = "not every rank joined"
    return CollectiveError(
        f"rank {rank} of {world}: the process group did not form within {float(timeout_s):g} s: {who} ({text}). "
        "Every rank must start and reach the evaluation (torchrun --nproc-per-node N starts N, all with the same "
        "MASTER_ADDR and MASTER_PORT); raise --dist-timeout if some start slowly")


#: "tasks": the ranks compare the score rows of up to this many evaluation queries per side (see check_replicas)
_PROBE_QUERIES = 4
#: ... at this many entity columns per row, evenly spaced (plus the probe triples' heads and tails)
_PROBE_COLUMNS = 64


def _probe_scores(inp) -> np.ndarray:
    """This rank's scores of the probe queries of :func:`check_replicas` (float64, flat)."""
    from ..ranks import SIDE_TAIL
    from .scoring import SideScorer

    tri = inp.triples[np.flatnonzero(inp.keep)]
    # the first evaluation triple of each relation (up to _PROBE_QUERIES): differences confined to a
    # relation's parameters show where that relation is scored
    _, first = np.unique(tri[:, 1], return_index=True)
    tri = tri[np.sort(first)[:_PROBE_QUERIES]]
    ne = int(inp.num_entities)
    spaced = np.linspace(0, ne - 1, min(ne, _PROBE_COLUMNS)).round().astype(np.int64)
    cols = np.unique(np.concatenate([spaced, tri[:, 0], tri[:, 2]]))  # the answers of both sides too
    out = []
    with torch.inference_mode():
        for side in inp.side_codes:
            ent = tri[:, 0] if side == SIDE_TAIL else tri[:, 2]
            sc = SideScorer(inp.scorer, side, num_entities=ne, device=inp.device, allowed=None,
                            threads=torch.get_num_threads())
            ent, rel = (torch.as_tensor(x, device=inp.device) for x in (ent, tri[:, 1]))
            if sc.accepts_entities:  # only the probe columns (a whole row of 10^8 entities is not needed)
                scores = sc.columns(ent, rel, torch.as_tensor(cols, device=inp.device))
            else:
                scores = sc.rows(ent, rel)[:, torch.as_tensor(cols, device=inp.device)]
            out.append(scores.detach().to(device="cpu", dtype=torch.float64).numpy().reshape(-1))
    return np.concatenate(out)


def check_replicas(plan: Plan, inp) -> None:
    """``distributed="tasks"``: every rank must hold the same model, since each ranks its share of the
    tasks with its own copy. The ranks score the same few probe queries (the first evaluation triple
    of up to :data:`_PROBE_QUERIES` relations, each evaluated side) at up to :data:`_PROBE_COLUMNS`
    evenly spaced entities and the probe triples' own (a few hundred scores sent), and compare them
    with rank 0's, within the consistency check's tolerance (relative 1e-5,
    absolute 1e-5 x the mean |score|: rounding may differ between devices); a difference raises
    :class:`DistributedMismatchError` on every rank before any ranking. Without it a rank holding
    another model (a checkpoint loaded on rank 0 only, an unseeded initialisation) silently ranked
    its share of the tasks with it."""
    from .counting import score_tolerance

    probes = plan.exchange(_probe_scores, inp)
    ref = probes[0]
    rtol, atol = score_tolerance(float(np.mean(np.abs(ref[np.isfinite(ref)]))) if np.isfinite(ref).any() else 0.0)
    for r, p in enumerate(probes):
        same = p.shape == ref.shape and bool(np.all(np.isclose(p, ref, rtol=rtol, atol=atol, equal_nan=True)))
        if not same:
            worst = float(np.nanmax(np.abs(p - ref))) if p.shape == ref.shape else float("nan")
            raise DistributedMismatchError(
                f"rank {r} of {plan.world} scores the same queries differently than rank 0 (largest difference "
                f"{worst:.6g}): distributed='tasks' needs the same model on every rank (load the same checkpoint "
                "or seed the initialisation on every rank; a model in training mode with dropout scores "
                "differently at each call: call model.eval())")


def fingerprint(inp, opts) -> str:
    """SHA-256 of everything that must be the same on every rank. The known triples are hashed as one
    stream of their sets' bytes (the digest of their concatenation, so sets split differently agree),
    read in place: concatenating them first copied every filter triple (24 MB for 10⁶, ~12 GB for
    WikiKG90M's 5·10⁸) and kept the copy for the whole evaluation."""
    h = hashlib.sha256()

    def add(parts: list) -> None:  # the shape of the parts stacked, then their bytes in order
        parts = [np.ascontiguousarray(np.asarray(p, dtype=np.int64)) for p in parts]
        rows = sum(p.shape[0] for p in parts)
        h.update(repr((rows,) + parts[0].shape[1:]).encode())
        for p in parts:
            if p.size:
                h.update(memoryview(p.reshape(-1)).cast("B"))  # the bytes in place, no tobytes() copy

    add([inp.triples])
    add(inp.known_sets)
    for arr in (inp.entities, inp.relations, inp.keep):
        add([[] if arr is None else arr])
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
        from .batching import is_out_of_memory

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
        from .batching import is_out_of_memory

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
        """:func:`.batching.run_batches` in lockstep: every rank walks the same batches; an
        out-of-memory error on any rank halves the batch on all (re-raised at a single row/group)."""
        import warnings

        from .batching import _batch_stop

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


def _flat(res: SideResult):
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
