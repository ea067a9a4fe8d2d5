"""What an evaluation derives from its known triples, kept for the next evaluation of the same ones.

A filtered evaluation reads every known triple (evaluation triples and filter sets) for the
protocol's number of distinct known triples (:func:`.filter_index.count_distinct_triples`) and for
each side's filter index (:class:`.filter_index.FilterIndex`). Early stopping, hyper-parameter
trials and benchmarks evaluate again and again with the same filter sets: with 10⁶ of them that
work is ~15 ms of one core per evaluation (distinct count ~10 ms, the second side's index ~4.6
ms), beside a ranking that needs both cores (10⁴ entities, 5,000 test triples: a ~110 ms
evaluation ran ~13 ms faster without it).

Entries are keyed by the *content* of the known triples, never by the identity of the arrays: an
array changed in place between two evaluations gives another key. The fingerprint of triples
``T`` (a multiset: the order of rows and of sets is irrelevant, as it is to the filter) is

    F(T) = (|T|, E, R, Σ_{t ∈ T} mix₁(code t) mod 2⁶⁴, Σ_{t ∈ T} mix₂(code t) mod 2⁶⁴),
    code (h, r, t) = (h·R + r)·E + t,

with ``mix₁`` splitmix64's output function (``z = k + γ``, then xor-shift 30, multiply, xor-shift
27, multiply, xor-shift 31) and ``mix₂`` MurmurHash3's fmix64 of ``k`` xor a constant: two different
full avalanche finalisers, non-linear from the first step, so changes that keep column sums (two
triples swapping tails) or sums of codes (``{k, k}`` vs ``{2k, 0}``) still change both sums. Two
different multisets of the same size share a key only if both 64-bit sums collide: ~2⁻¹²⁸ for a
change that is not built to collide. (Until 2026-11-24 ``mix₁`` began with a plain multiply, and
~1 in 30 small codes ``k`` had ``{k, k}`` and ``{2k, 0}`` collide in the first sum: the key then
rested on the second sum alone, ~2⁻⁶⁴.) One pass: ~0.8 ms per 10⁶ triples
with the compiled kernel (:func:`.count_kernel.fingerprint_codes`, which also checks the id ranges:
numpy's checks alone took ~2.7 ms), ~15 ms in numpy before it is loaded. Graphs whose codes overflow
int64 (more than ~2·10⁶ entities with 10³ relations) are not cached.

Bounded: at most :data:`MAX_ENTRIES` entries holding at most :data:`MAX_PAIRS` indexed (query,
answer) pairs together (16 bytes each, ~128 MiB), least recently used first out; only CPU
indexes are kept (a GPU's memory is the ranking's). ``KGEVAL_FILTER_CACHE=0`` turns the cache off
(read at each evaluation: cold-cost benchmarks, or any doubt).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict

import numpy as np

from ..errors import InvalidInputError
from .count_kernel import _FMIX1, _FMIX2, _HASH, _MIX1, _MIX2, fingerprint_codes
from .filter_index import _code_fits

__all__ = ["enabled", "fingerprint", "checked_fingerprint", "keys_digest", "get_or_build", "clear", "held",
           "MAX_ENTRIES", "MAX_PAIRS"]

MAX_ENTRIES = 8
MAX_PAIRS = 1 << 23
_BLOCK = 1 << 18  # rows per block of the numpy fingerprint

_ENTRIES: OrderedDict = OrderedDict()  # key -> (value, pairs held)
_LOCK = threading.Lock()


def _after_fork_in_child() -> None:  # a fork while another thread held the lock: it stays held there
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def enabled() -> bool:
    """Whether evaluations use the cache: ``KGEVAL_FILTER_CACHE`` is not ``0`` (read at each call)."""
    return os.environ.get("KGEVAL_FILTER_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def fingerprint(sets: list[np.ndarray], num_entities: int, num_relations: int) -> tuple | None:
    """The content key ``F`` (module docstring) of the int64 ``(n, 3)`` arrays ``sets`` together
    (ids in range: the inputs are validated first), or None when the cache is off or a code
    ``(h·R + r)·E + t`` could overflow int64."""
    ne, nr = int(num_entities), int(num_relations)
    if not _keyed(ne, nr):
        return None
    sums = fingerprint_codes(sets, ne, nr)
    return _key(sets, ne, nr, _fingerprint_numpy(sets, ne, nr) if sums is None else sums)


def _keyed(ne: int, nr: int) -> bool:
    """Whether evaluations of a graph this size are keyed: the cache is on and every code
    ``(h·R + r)·E + t`` fits int64."""
    return enabled() and _code_fits(ne * nr, ne)


def _key(sets: list[np.ndarray], ne: int, nr: int, sums: tuple[int, int]) -> tuple:
    """The key ``F`` of the module docstring from the two sums."""
    return (sum(int(a.shape[0]) for a in sets), ne, nr) + sums


def checked_fingerprint(named_sets: list[tuple[str, np.ndarray]], num_entities: int, num_relations: int | None):
    """The id range check of :func:`kgeval.triples.check_ids` of every ``(name, int64 (n, 3) array)``
    and the fingerprint of them together, in one compiled pass over each (~0.8 ms per 10⁶ triples,
    where numpy's range checks alone took ~2.7 ms; column-major arrays, e.g. pandas' ``.values``,
    in C-ordered blocks, ~4.5 ms): the key, or None when this pass is not taken (cache off, kernel
    not loaded, relations unknown, codes overflowing); then the caller checks the ids itself. An id
    out of range raises check_ids' named error."""
    from ..triples import check_ids

    if num_relations is None:
        return None
    ne, nr = int(num_entities), int(num_relations)
    if not _keyed(ne, nr):
        return None
    big = np.iinfo(np.int64)
    lohi = np.array([big.max, big.min] * 3 * len(named_sets), np.int64)
    sums = fingerprint_codes([a for _, a in named_sets], ne, nr, lohi)
    if sums is None:
        return None
    limits = np.array([ne, nr, ne] * len(named_sets), np.int64)
    lo, hi = lohi[0::2], lohi[1::2]
    nonempty = np.repeat([a.shape[0] > 0 for _, a in named_sets], 3)
    bad = nonempty & ((lo < 0) | (hi >= limits))
    for i in np.flatnonzero(bad.reshape(-1, 3).any(1)):
        name, arr = named_sets[i]
        check_ids(name, arr, ne, nr)  # names the first bad triple
        raise InvalidInputError(f"{name}: an id is out of range (entities [0, {ne}), relations [0, {nr}))")
    return _key([a for _, a in named_sets], ne, nr, sums)


def mix1(k: np.ndarray) -> np.ndarray:
    """The first finaliser of ``F``, per int64 code: splitmix64's output for state ``k`` (shifts
    logical, products wrapping; numpy's integer overflow warnings are the caller's to silence)."""
    z = k + _HASH
    z = (z ^ ((z >> 30) & 0x3FFFFFFFF)) * _MIX1
    z = (z ^ ((z >> 27) & 0x1FFFFFFFFF)) * _MIX2
    return z ^ ((z >> 31) & 0x1FFFFFFFF)


def mix2(k: np.ndarray) -> np.ndarray:
    """The second finaliser of ``F``, per int64 code: MurmurHash3's fmix64 of ``k`` xor a constant."""
    y = k ^ _FMIX2
    y = (y ^ ((y >> 33) & 0x7FFFFFFF)) * _FMIX1
    y = (y ^ ((y >> 33) & 0x7FFFFFFF)) * _FMIX2
    return y ^ ((y >> 33) & 0x7FFFFFFF)


def _fingerprint_numpy(sets: list[np.ndarray], ne: int, nr: int) -> tuple[int, int]:
    """The compiled :func:`.count_kernel._fingerprint`, bit for bit, in numpy (int64 wraps), in blocks
    of :data:`_BLOCK` rows (its temporaries are a few block-long arrays, whatever the sets' size)."""
    a = b = np.int64(0)
    with np.errstate(over="ignore"):
        for whole in sets:
            for lo in range(0, whole.shape[0], _BLOCK):
                arr = whole[lo:lo + _BLOCK]
                k = (arr[:, 0] * nr + arr[:, 1]) * ne + arr[:, 2]
                a = a + mix1(k).sum(dtype=np.int64)
                b = b + mix2(k).sum(dtype=np.int64)
    return int(a), int(b)


def keys_digest(keys: np.ndarray) -> bytes:
    """An exact-content digest of an int64 array (the query keys of one side's index): BLAKE2b-128."""
    arr = np.ascontiguousarray(keys, dtype=np.int64)
    return hashlib.blake2b(arr.tobytes(), digest_size=16).digest() + arr.shape[0].to_bytes(8, "little")


def get_or_build(key, build, pairs=lambda value: 0):
    """The value kept under ``key``, else ``build()`` (kept when ``pairs(value)`` fits :data:`MAX_PAIRS`).

    ``key`` None (no fingerprint) builds without keeping. ``build`` runs outside the lock: two
    threads missing the same key both build, and the second result replaces the first (equal)."""
    if key is None:
        return build()
    with _LOCK:
        hit = _ENTRIES.get(key)
        if hit is not None:
            _ENTRIES.move_to_end(key)
            return hit[0]
    value = build()
    size = int(pairs(value))
    if size <= MAX_PAIRS:
        with _LOCK:
            _ENTRIES[key] = (value, size)
            _ENTRIES.move_to_end(key)
            held = sum(p for _, p in _ENTRIES.values())
            while len(_ENTRIES) > MAX_ENTRIES or held > MAX_PAIRS:
                _, (_, p) = _ENTRIES.popitem(last=False)
                held -= p
    return value


def clear() -> None:
    """Forget every entry (tests; or to free the memory of cached indexes)."""
    with _LOCK:
        _ENTRIES.clear()


def held() -> tuple[int, int]:
    """``(entries, indexed pairs)`` kept now."""
    with _LOCK:
        return len(_ENTRIES), sum(p for _, p in _ENTRIES.values())
