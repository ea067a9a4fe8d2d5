"""Exact distributed evaluation on ``torch.distributed`` (gloo on CPU, NCCL on GPU), launched with
``torchrun``; the default process group must be initialised before :func:`kgeval.evaluate`. Every rank
returns the same :class:`~kgeval.Results`, with the rank table of one process holding the whole model
(full and sampled ranking, filtered or not, with restrictions; ``query_metrics_k`` is refused).

``distributed="tasks"``: every rank holds the whole model and ranks a contiguous slice of each side's
tasks; the per-task counts are gathered and sorted by triple index (a task's counts depend only on its
own score row, the filter index built from all known triples on every rank, and negatives drawn for
*all* tasks from the seed). The ranks check at the start that they hold the same model
(:func:`check_replicas`).

``distributed="entities"``: no rank holds the whole entity table; rank ``r`` of ``w`` holds the entities
:func:`shard_range` gives it, every rank walks *all* tasks in the same batches, and the drivers sum the
query rows, the true scores and the counts over ranks (:class:`.collectives.ShardReduce`). The scorer is
an *entity shard* (protocol in :mod:`.scorers`), checked at the start (:func:`check_shards`).

Faults and the input fingerprint compared at the start: :mod:`.collectives`, :func:`fingerprint`.
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
    """Every rank's shard holds rank 0's replicated parameters: its ``replicated_digest()``, else the float
    tensors :func:`replicated_tensors` finds on every rank."""
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
    """Initialise the default process group from torchrun's environment (``env://``), if not yet done, and
    return the rank: NCCL when CUDA is available (node-local GPU), else gloo; ``timeout_s`` bounds every
    collective wait; without a launcher, a named error instead of torch's."""
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
    """The process group did not form: which rank is missing, as far as torch's message tells ("1/2
    clients joined", a missing rank's key ``.../<rank>``, or "connect")."""
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
    """``distributed="tasks"``: every rank must hold the same model (each ranks its share with its own
    copy). The ranks score the same few probe queries (the first evaluation triple of up to
    :data:`_PROBE_QUERIES` relations) at up to :data:`_PROBE_COLUMNS` entities and compare them with rank
    0's within the consistency check's tolerance; a difference raises :class:`DistributedMismatchError`
    on every rank before any ranking (a checkpoint loaded on rank 0 only would rank a share silently)."""
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
    """SHA-256 of everything that must be the same on every rank (triples, known triples, restriction,
    options that change results, sizes). The known triples are hashed as one stream of their sets' bytes,
    read in place (sets split differently agree; nothing is concatenated)."""
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
