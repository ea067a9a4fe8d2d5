"""Exact distributed evaluation on ``torch.distributed`` (gloo on CPU, NCCL on GPU), launched
with ``torchrun``; the default process group must be initialised before :func:`kgeval.evaluate`.

``distributed="tasks"``: every rank holds the whole model and ranks a contiguous slice
``[n * rank // world, n * (rank + 1) // world)`` of each side's tasks; the per-task counts
``(better, tied, num_candidates)`` are gathered (``all_gather_object``) and sorted by triple index,
so every rank returns the same :class:`~kgeval.Results`, identical to one process: a task's counts
depend only on its own score row, the filter index (built from all known triples on every rank)
and, for sampled negatives, the negatives drawn for *all* tasks from the seed before slicing. The ranks check at the start that they hold the same model: each
scores a few probe queries and compares them with rank 0's (:func:`check_replicas`).

Faults (:mod:`.collectives`): an exception on one rank ends every rank, the failing one with its own
exception, the others with :class:`RankFailedError`; a NaN score under ``nan_policy="raise"`` is the same
:class:`~kgeval.errors.NaNScoresError` on every rank; a dead or absent rank is a :class:`CollectiveError` at
the process group's timeout. At the start the ranks exchange a SHA-256 of their inputs (triples, known
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
see :func:`.collectives._sum_over_ranks`) also carries two status counters (failed ranks, ranks out
of memory): a rank whose local step raised still takes part in the collective with zeros and
its flag set, so every rank learns of the failure at the same collective and none waits; they
then exchange the error (:meth:`Plan.exchange`): the failing rank raises its own exception, the
others :class:`RankFailedError`. An out-of-memory error on any rank halves the batch on every
rank (the batch size is the smallest any rank can afford). Every rank returns the same
:class:`~kgeval.Results`, with the same rank table as one process holding the whole model
(full and sampled ranking, filtered or not, with restrictions; ``query_metrics_k`` is refused
for both modes). Sampled negatives are drawn for all tasks from the seed on every rank; each
rank scores those in its slice.

The scorer is an *entity shard*: its protocol is in :mod:`.scorers`.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import warnings

import numpy as np
import torch
import torch.distributed

from .._partition import shard_range
from .._tensor import state_digest
from ..errors import InvalidInputError
from .collectives import (MODES, CollectiveError, DistributedError, DistributedMismatchError, Plan, RankFailedError,
                          TooManyRanksError)

__all__ = ["MODES", "Plan", "start", "fingerprint", "DistributedError", "RankFailedError",
           "CollectiveError", "DistributedMismatchError", "TooManyRanksError", "init_from_env", "shard_range",
           "check_shard_scorer", "check_shards", "check_replicas", "replicated_tensors"]

# options that change how work is split or shown, never a rank: ranks may differ in them
_LOCAL_OPTIONS = ("progress", "device", "memory_budget", "batch_size", "entity_chunk_size", "check_consistency")


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
            "kgeval.evaluation.scorers for the protocol"
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


def start(mode: str) -> Plan:
    """The plan of this rank in the initialised default process group (its rank and world size)."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidInputError(
            f"distributed={mode!r} needs an initialised torch.distributed process group: launch with torchrun "
            "and call torch.distributed.init_process_group() first (the kgeval CLI does this itself)"
        )
    return Plan(mode=mode, rank=dist.get_rank(), world=dist.get_world_size())


def init_from_env(timeout_s: float) -> int:
    """Initialise the default process group from the launcher's environment (torchrun's ``env://``
    rendezvous), if not yet done; the rank.

    Backend: NCCL when CUDA is available (each process on its node-local GPU), else gloo. ``timeout_s``
    bounds every collective wait. torch reads the environment; a process started without a launcher
    gets a named error instead of torch's.
    """
    dist = torch.distributed
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(dist.get_node_local_rank(fallback_rank=0))
        try:
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=float(timeout_s)))
        except RuntimeError as exc:  # torch's DistStoreError / DistNetworkError are RuntimeErrors
            raise _join_error(exc, timeout_s) from exc
        except ValueError as exc:  # env:// rendezvous: "environment variable RANK expected, but not set"
            if "environment variable" not in str(exc):
                raise
            raise InvalidInputError("--distributed needs torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR): "
                                    "launch with torchrun --nproc-per-node N -m kgeval evaluate ...") from None
    return dist.get_rank()


def _join_error(exc: RuntimeError, timeout_s: float) -> CollectiveError:
    """The process group did not form: which rank is missing, as far as torch's message tells.

    Rank 0 hosting the store says "1/2 clients joined"; under torchrun (the agent hosts the store)
    gloo waits for the missing rank's key, ``.../<rank>``; a rank that cannot reach rank 0 says "connect".
    """
    import re

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
        who = "rank 0 (the process group's host, MASTER_ADDR:MASTER_PORT) could not be reached"
    else:
        who = "not every rank joined"
    return CollectiveError(
        f"the process group did not form within {float(timeout_s):g} s: {who} ({text}). "
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
