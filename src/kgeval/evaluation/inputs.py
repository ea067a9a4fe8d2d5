"""The data of one evaluation, validated: scorer, evaluation triples, filter sets, restriction."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from .._validation import check_entity_count, check_positive_int
from ..errors import InvalidInputError
from ..filtering import FilterIndex, count_distinct_triples
from ..ranks import SIDE_HEAD, SIDE_NAMES, side_code
from ..triples import as_triples, check_ids, restrict_mask
from .options import EvaluationOptions
from .scorers import as_scorer

__all__ = ["Inputs", "KnownTriples", "prepare_inputs", "available_memory_bytes", "default_memory_budget"]


class KnownTriples:
    """Known true triples (the filter sets of the filtered setting), validated once, with what
    evaluations derive from them memoised: pass the same object as ``filter_triples`` to every
    evaluation of a loop (validation during training, hyper-parameter trials, benchmarks).

    An evaluation's known triples are its evaluation triples plus these sets. For each evaluation
    triple set (identified by its exact content) this object keeps, computed on first use:

    - each side's :class:`kgeval.filtering.FilterIndex` of the queries evaluated, per device;
    - the number of distinct known triples (the protocol's ``num_known_triples``).

    The arrays are copied once and made read-only, so what is memoised can never go stale (``copy=False``
    for sets too large to hold twice: they are then used as given, and must not change while this
    object is in use). Without a ``KnownTriples``, an evaluation builds the same things from scratch
    and throws them away.

    Parameters
    ----------
    filter_triples:
        one ``(n, 3)`` id array (numpy, torch, or a 2-d table), a list of them, or a dict
        ``name -> array`` (the names appear in the protocol), as :func:`kgeval.evaluation.evaluate`
        takes them; another ``KnownTriples`` is shared as it is.
    copy:
        keep read-only copies of the sets (default), or use them as given.

    Examples
    --------
    >>> import numpy as np
    >>> from kgeval.evaluation import FunctionScorer, KnownTriples, evaluate_ranks
    >>> scorer = FunctionScorer(lambda h, r, t: (h + t) % 3 * 1.0, 6, num_relations=1)
    >>> known = KnownTriples({"train": np.array([[0, 0, 1], [2, 0, 3]])})
    >>> valid = np.array([[0, 0, 2], [4, 0, 5]])
    >>> [int(evaluate_ranks(scorer, valid, filter_triples=known, progress=False).protocol.num_known_triples)
    ...  for epoch in range(2)]
    [4, 4]
    """

    #: memoised values kept per object (least recently used first out): a few evaluation sets and devices
    MAX_ENTRIES = 8

    def __init__(self, filter_triples=(), *, copy: bool = True):
        if isinstance(filter_triples, KnownTriples):
            self.sets = filter_triples.sets
        else:
            self.sets = [(name, _frozen(as_triples(name, arr, allow_empty=True)) if copy
                          else as_triples(name, arr, allow_empty=True)) for name, arr in _filter_sets(filter_triples)]
        self._memo: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def _plain(cls, named_sets: list[tuple[str, np.ndarray]]) -> KnownTriples:
        """One evaluation's own sets, used as they are (not copied: nothing outlives the evaluation)."""
        out = cls.__new__(cls)
        out.sets, out._memo, out._lock = named_sets, OrderedDict(), threading.Lock()
        return out

    def __repr__(self) -> str:
        return "KnownTriples(" + ", ".join(f"{name}: {a.shape[0]}" for name, a in self.sets) + ")"

    def __iter__(self):
        """The sets' arrays (read-only), in order."""
        return iter([a for _, a in self.sets])

    @property
    def num_rows(self) -> int:
        """The number of rows of every set together (duplicates included)."""
        return sum(int(a.shape[0]) for _, a in self.sets)

    def _get(self, key, build):
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]
        value = build()  # outside the lock: two threads missing the same key both build the same value
        with self._lock:
            self._memo[key] = value
            while len(self._memo) > self.MAX_ENTRIES:
                self._memo.popitem(last=False)
        return value

    def check_ids(self, num_entities: int, num_relations: int | None) -> None:
        """Raise naming the first triple whose ids are out of range (once per ``(E, R)``)."""
        def check():
            for name, arr in self.sets:
                check_ids(name, arr, num_entities, num_relations)
            return True

        if num_relations is None:
            check()
        else:
            self._get(("ids", int(num_entities), int(num_relations)), check)

    def index(self, evaluation: np.ndarray, side: int, keys: np.ndarray, num_entities: int, num_relations: int,
              device) -> FilterIndex:
        """The filter index of ``side`` over ``evaluation`` and these sets, for the query keys ``keys``."""
        key = ("index", int(side), str(device), int(num_entities), int(num_relations), _digest(evaluation),
               _digest(keys))
        return self._get(key, lambda: FilterIndex(
            [evaluation] + [a for _, a in self.sets], side=side, num_entities=num_entities,
            num_relations=num_relations, device=device, queries=keys))

    def num_distinct(self, evaluation: np.ndarray, num_entities: int, num_relations: int) -> int:
        """The number of distinct triples of ``evaluation`` and these sets together."""
        key = ("distinct", int(num_entities), int(num_relations), _digest(evaluation))
        return self._get(key, lambda: count_distinct_triples(
            [evaluation] + [a for _, a in self.sets], num_entities, num_relations))


def _frozen(arr: np.ndarray) -> np.ndarray:
    """A read-only int64 copy of ``arr``."""
    out = np.array(arr, dtype=np.int64, copy=True)
    out.flags.writeable = False
    return out


def _digest(arr: np.ndarray) -> bytes:
    """An exact-content key of an int array (BLAKE2b-128 of its int64 bytes, and its shape)."""
    a = np.ascontiguousarray(arr, dtype=np.int64)
    return hashlib.blake2b(a.tobytes(), digest_size=16).digest() + repr(a.shape).encode()


@dataclass
class Inputs:
    scorer: object
    num_entities: int
    num_relations: int
    side_codes: list[int]
    triples: np.ndarray  # (n, 3) evaluation triples
    filter_sets: list[tuple[str, np.ndarray]]  # named known-triple sets beyond ``triples``
    keep: np.ndarray  # bool per evaluation triple: inside the restriction
    entities: np.ndarray | None  # allowed entity ids (None = all)
    relations: np.ndarray | None  # allowed relation ids (None = all)
    device: torch.device
    #: the filter sets with what evaluations derive from them (the caller's :class:`KnownTriples`, or this
    #: evaluation's own)
    known_triples: KnownTriples | None = None
    #: type constraints (a :class:`kgeval.data.types.CandidateSets`, :mod:`.constraints`); None = none
    constraints: object | None = None

    @property
    def known_sets(self) -> list[np.ndarray]:
        """The known true triples as the arrays they came in: the evaluation triples, then each filter set."""
        return [self.triples] + [a for _, a in self.filter_sets]

    @property
    def universe(self) -> np.ndarray:
        """The candidate entity ids, sorted."""
        return self.entities if self.entities is not None else np.arange(self.num_entities, dtype=np.int64)


def _filter_sets(filter_triples) -> list[tuple[str, object]]:
    if filter_triples is None:
        return []
    if isinstance(filter_triples, KnownTriples):
        return list(filter_triples.sets)
    if isinstance(filter_triples, Mapping):
        return [(str(k), v) for k, v in filter_triples.items()]
    # one array: numpy, torch, or any 2-d table (a pandas DataFrame, whose iteration would give column names)
    from .._compat import is_triples_factory

    if (isinstance(filter_triples, (np.ndarray, torch.Tensor)) or getattr(filter_triples, "ndim", None) == 2
            or is_triples_factory(filter_triples)):  # (a PyKEEN TriplesFactory: as_triples names it)
        return [("filter_triples", filter_triples)]
    try:
        items = list(filter_triples)
    except TypeError:
        raise InvalidInputError(
            f"filter_triples must be an (n, 3) id array, a list of them or a dict name -> array, got "
            f"{type(filter_triples).__name__}") from None
    if not items:
        return []
    # a single list of 3 ints per row also counts as one array
    if all(isinstance(x, (list, tuple)) and len(x) == 3 and all(isinstance(v, (int, np.integer)) for v in x) for x in items):
        return [("filter_triples", np.asarray(items))]
    return [(f"filter_triples[{i}]", x) for i, x in enumerate(items)]


def _in_range(name: str, ids: tuple[int, ...] | None, limit: int, what: str) -> np.ndarray | None:
    """A restriction's ids (sorted, distinct, non-negative: see the options) checked against ``limit``."""
    if ids is None:
        return None
    arr = np.asarray(ids, dtype=np.int64)
    if arr[-1] >= limit:
        raise InvalidInputError(f"{name}: {what} id {int(arr[-1])} is out of range [0, {limit})")
    return arr


def _check_scorer(scorer, sides, sharded: bool = False) -> tuple[object, int, list[int]]:
    side_codes = [side_code(s) for s in sides]
    if sharded:  # distributed="entities": an entity shard, with its own protocol
        from .distributed import check_shard_scorer

        scorer = check_shard_scorer(scorer, side_codes)
        num_entities = check_positive_int("the scorer's num_entities", getattr(scorer, "num_entities", None))
        return scorer, int(num_entities), side_codes
    scorer = as_scorer(scorer)
    num_entities = check_positive_int("the scorer's num_entities", getattr(scorer, "num_entities", None))
    for c in side_codes:
        meth = "score_heads" if c == SIDE_HEAD else "score_tails"
        if not callable(getattr(scorer, meth, None)):
            raise InvalidInputError(f"the scorer has no {meth}() method, needed for {SIDE_NAMES[c]} prediction")
    return scorer, int(num_entities), side_codes


# ------------------------------------------------------------------------------- the memory budget
_DEFAULT_BUDGET_CAP = 1 << 30  # 1 GiB
def available_memory_bytes(device: torch.device | None = None) -> int | None:
    """Free memory on ``device``: CUDA free memory; on the CPU the smallest of MemAvailable (psutil or
    /proc/meminfo), the cgroup's headroom (containers) and the address-space limit's headroom
    (``ulimit -v`` / ``prlimit --as``), since exceeding any of them fails the allocation."""
    if device is not None and device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:
            return None
    found = [x for x in (_mem_available(), _cgroup_headroom(), _address_space_headroom()) if x is not None]
    return max(0, min(found)) if found else None


_PSUTIL = None  # the psutil module once looked up; False when it is not installed


def _psutil():
    """psutil (optional), imported once (a failed import searched sys.path again on every call)."""
    global _PSUTIL
    if _PSUTIL is None:
        try:
            import psutil
        except Exception:  # noqa: BLE001 - missing or broken: /proc/meminfo is read instead
            psutil = False
        _PSUTIL = psutil
    return _PSUTIL or None


def _mem_available() -> int | None:
    ps = _psutil()
    if ps is not None:
        try:
            return int(ps.virtual_memory().available)
        except Exception:  # noqa: BLE001 - unsupported platform: fall back to /proc/meminfo
            pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_headroom() -> int | None:
    """``limit - usage`` of the process's memory cgroup (v2, else v1); None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as fh:
                raw = fh.read().strip()
            if raw == "max" or int(raw) >= 1 << 60:  # v1 writes a huge number for "no limit"
                return None
            with open(usage_file) as fh:
                return int(raw) - int(fh.read().strip())
        except (OSError, ValueError):
            continue
    return None


def _address_space_headroom() -> int | None:
    """``RLIMIT_AS - current virtual size``; None without a limit (or off Linux)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft < 0:
            return None
        with open("/proc/self/statm") as fh:
            vsize = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return int(soft) - vsize
    except (ImportError, OSError, ValueError, AttributeError):
        return None


def default_memory_budget(device: torch.device | None = None) -> int:
    """``min(1 GiB, available / 4)``: a safe share for the score matrix and its temporaries."""
    avail = available_memory_bytes(device)
    if avail is None:
        return _DEFAULT_BUDGET_CAP // 2
    return int(max(16 << 20, min(_DEFAULT_BUDGET_CAP, avail // 4)))


def prepare_inputs(scorer, triples, filter_triples, opts: EvaluationOptions) -> Inputs:
    """Validate the data against the scorer and the options; raise before any work starts."""
    scorer, num_entities, side_codes = _check_scorer(scorer, opts.sides, opts.distributed == "entities")
    given = filter_triples if isinstance(filter_triples, KnownTriples) else None
    if callable(getattr(scorer, "map_triples", None)):  # labels / PyKEEN TriplesFactory -> ids
        triples, filter_triples = scorer.map_triples(triples, () if given is not None else filter_triples)
    device = evaluation_device(opts, scorer)
    check_entity_count(num_entities, available_memory_bytes(), None if device.type == "cpu" else available_memory_bytes(device),
                       score_row=opts.distributed != "entities")
    tri = as_triples("triples", triples, allow_empty=False)
    if given is not None:  # ids already, validated once
        known = given
    else:
        known = KnownTriples._plain([(name, as_triples(name, arr, allow_empty=True))
                                     for name, arr in _filter_sets(filter_triples)])
    fsets = known.sets
    scorer_relations = getattr(scorer, "num_relations", None)
    if opts.num_relations is not None and scorer_relations is not None and opts.num_relations > int(scorer_relations):
        # ids up to num_relations - 1 would pass the range check and reach a scorer that has fewer
        raise InvalidInputError(
            f"num_relations={opts.num_relations} exceeds the scorer's num_relations={int(scorer_relations)}: "
            f"relation ids {int(scorer_relations)}..{opts.num_relations - 1} cannot be scored")
    num_relations = opts.num_relations if opts.num_relations is not None else scorer_relations
    rel_limit = int(num_relations) if num_relations is not None else None
    check_ids("triples", tri, num_entities, rel_limit)
    known.check_ids(num_entities, rel_limit)
    if rel_limit is None:
        rel_limit = int(max([int(tri[:, 1].max())] + [int(a[:, 1].max()) for _, a in fsets if a.shape[0]])) + 1
    ents = _in_range("restrict_entities", opts.restrict_entities, num_entities, "entity")
    rels = _in_range("restrict_relations", opts.restrict_relations, rel_limit, "relation")
    keep = restrict_mask(tri, rels, ents)
    if not keep.any():
        raise InvalidInputError(
            "the restriction excludes every evaluation triple "
            f"({tri.shape[0]} triples, restrict_entities={None if ents is None else ents.size} ids, "
            f"restrict_relations={None if rels is None else rels.size} ids)"
        )
    if ents is not None and ents.size == num_entities:
        ents = None  # restricting to everything is no restriction
    return Inputs(scorer, num_entities, rel_limit, side_codes, tri, fsets, keep, ents, rels,
                  device, known)


def evaluation_device(opts: EvaluationOptions, scorer) -> torch.device:
    """``opts.device``, else the scorer's ``device``, else CPU; checked by :func:`usable_device`."""
    device = opts.device if opts.device is not None else getattr(scorer, "device", None)
    return usable_device(torch.device(device) if device is not None else torch.device("cpu"))


def usable_device(device: torch.device) -> torch.device:
    """``device``, or a named error when this process cannot put tensors there (checked before any
    work: ``cuda:7`` on a CPU-only build or the ``meta`` device otherwise fail deep inside torch)."""
    if device.type == "meta":
        raise InvalidInputError("device 'meta' holds no data: evaluate on 'cpu' or a GPU ('cuda')")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidInputError(f"device {str(device)!r}: CUDA is not available here (no GPU, or a CPU-only "
                                    f"torch build); use device='cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InvalidInputError(f"device {str(device)!r}: this machine has {torch.cuda.device_count()} CUDA "
                                    f"device(s) (cuda:0 .. cuda:{torch.cuda.device_count() - 1})")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise InvalidInputError(f"device {str(device)!r}: MPS is not available here; use device='cpu'")
    elif device.type not in ("cpu", "cuda", "mps"):
        # xla, xpu, hip, lazy, ...: torch failed deep inside with a bare RuntimeError / AssertionError
        # / NotImplementedError at the first tensor placed there
        try:
            torch.empty(1, device=device)
        except Exception as exc:  # noqa: BLE001 - whatever the backend raises: it cannot hold our tensors
            raise InvalidInputError(f"device {str(device)!r} cannot be used here ({type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0][:120]}); use device='cpu' or 'cuda'") from None
    return device


def seen_candidates(opts: EvaluationOptions, scorer, train_triples, filter_triples) -> EvaluationOptions:
    """PyKEEN's rule for unseen entities: its model has none (the test split is mapped with the training
    vocabulary), so they are no candidates either; ``opts`` restricted to the training entities where some
    entity of the scorer is missing from them."""
    from ..data.unseen import training_triples_of

    train = train_triples if train_triples is not None else training_triples_of(filter_triples)[1]
    seen = np.unique(np.asarray(train)[:, [0, 2]])
    n = getattr(scorer, "num_entities", None)
    if n is None or seen.size >= int(n):
        return opts
    return opts.replace(restrict_entities=seen)
