"""CSR index of known true answers, for the filtered setting.

For tail prediction the key of a query ``(h, r, ?)`` is ``h * R + r``; for head prediction the
key of ``(?, r, t)`` is ``t * R + r`` (``R`` = number of relations). The index holds

- ``keys``: sorted unique int64 query keys,
- ``indptr``: ``answers[indptr[i]:indptr[i + 1]]`` are the known answers of ``keys[i]``,
- ``answers``: the answer entity ids, sorted and unique within each query.

It is built once with one sort of ``key * E + answer`` (a two-column sort where that code would
overflow int64: :func:`unique_pairs`), so duplicate triples anywhere are harmless, and lives as
torch tensors on the scoring device. Given the evaluation's query keys (``queries=``), only the known triples of those queries are indexed: a filter set of 10⁶
training triples for 5,000 test queries is then one O(n) membership pass (:func:`member_positions`,
a few ms) and a sort of the few thousand matching triples, instead of a sort of all 10⁶. A batch lookup
(:meth:`FilterIndex.pairs`) returns flat ``(row, entity)`` pairs built with ``repeat_interleave``;
its size is the number of known answers of the batch's queries, never ``batch x |filter triples|``.

The membership pass and the distinct count have compiled (numba) forms, :func:`member_rows` and
:func:`count_distinct_codes`, loaded with the evaluator's counting kernel
(:func:`kgeval.evaluation.warm_kernel` calls :func:`load_kernels`) and used only once loaded: until
then the numpy forms answer the same.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from ._csr import csr_pairs
from .ranks import SIDE_HEAD, SIDE_TAIL


#: size of the hashed pre-filter of the membership tests (:func:`member_table`, a 4 MiB bool table)
_MEMBER_TABLE = 1 << 22


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-d int array by sort + neighbour mask: same result, ~100x faster
    than numpy 2.x's hash-based ``np.unique`` on int64 arrays.

    The sort is torch's (faster than ``np.sort`` on int64); only the values matter, so stability is
    irrelevant.
    """
    values = np.asarray(values)
    if values.dtype in (np.int64, np.int32):
        v = torch.sort(torch.from_numpy(np.ascontiguousarray(values))).values.numpy()
    else:
        v = np.sort(values)
    if v.size == 0:
        return v
    return v[np.r_[True, v[1:] != v[:-1]]]


def unique_pairs(keys: np.ndarray, values: np.ndarray, *, num_keys: int, num_values: int):
    """The distinct ``(key, value)`` pairs (``0 <= key < num_keys``, ``0 <= value < num_values``),
    sorted by key, then value: ``(keys, values)``.

    One sort of the combined code ``key * num_values + value`` when it fits int64; otherwise (a
    graph with ``num_entities^2 x num_relations >= 2^63``, e.g. WikiKG90M's 87M entities and 1,315
    relations) a lexicographic sort of the two columns: the combined code would wrap around and
    pair answers with the wrong queries.
    """
    keys = np.asarray(keys, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    if _code_fits(num_keys, num_values):
        combined = sorted_unique(keys * int(num_values) + values)
        k = combined // int(num_values)
        return k, combined - k * int(num_values)
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    new = np.ones(k.shape[0], dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (v[1:] != v[:-1])
    return k[new], v[new]


def count_distinct_triples(triples: np.ndarray | list[np.ndarray], num_entities: int, num_relations: int) -> int:
    """The number of distinct ``(head, relation, tail)`` rows of ``triples`` (ids in range): one
    ``(n, 3)`` array, or a list of them counted together (read in place when the kernel is loaded)."""
    sets = _as_sets(triples)
    ne, nr = int(num_entities), int(num_relations)
    if sum(a.shape[0] for a in sets) == 0:
        return 0
    fits = _code_fits(ne * nr, ne)  # one int64 code per triple: counted by hash when the kernel is loaded
    counted = count_distinct_codes(sets, ne, nr) if fits else None
    if counted is not None:
        return counted
    return _count_distinct_sorted(sets, ne, nr)


_SORT_ROWS = 1 << 18  # rows per step of _count_distinct_sorted's passes (a few MiB of temporaries)


def _count_distinct_sorted(sets: list[np.ndarray], ne: int, nr: int) -> int:
    """:func:`count_distinct_triples` without the compiled kernel, or for codes that do not fit int64
    (WikiKG90M: 87M entities x 1,315 relations). Triples of different relations are different, so
    the relations are taken in blocks of ``B`` whose code ``(h * B + (r - r0)) * E + t`` fits int64
    (one block of all relations when ``(h * R + r) * E + t`` fits), and each block's distinct codes
    counted by one in-place sort. Peak memory: one int64 per triple of a block plus a few MiB: the
    sets are read in place in ``_SORT_ROWS``-row steps, never concatenated (5e8 triples as one
    (n, 3) copy would be 12 GB, and the column sort it replaced held ~7 int64 per triple)."""
    limit = np.iinfo(np.int64).max
    if ne * ne > limit:  # > 3e9 entities: not even one relation's codes fit; sort the rows instead
        triples = _stacked(sets)
        keys = query_keys(triples, SIDE_TAIL, nr)
        return int(unique_pairs(keys, triples[:, 2], num_keys=ne * nr, num_values=ne)[0].shape[0])
    per = min(nr, limit // (ne * ne))  # relations per block
    total = 0
    for r0 in range(0, nr, per):
        r1 = min(nr, r0 + per)
        whole = r0 == 0 and r1 == nr  # every triple is in this block: no selection by relation

        def steps():  # the block's rows of every set, _SORT_ROWS at a time, as int64
            for a in sets:
                for lo in range(0, a.shape[0], _SORT_ROWS):
                    rows = np.asarray(a[lo:lo + _SORT_ROWS], dtype=np.int64)
                    yield rows if whole else rows[(rows[:, 1] >= r0) & (rows[:, 1] < r1)]

        n = sum(a.shape[0] for a in sets) if whole else sum(rows.shape[0] for rows in steps())
        if n == 0:
            continue
        codes, at = np.empty(n, dtype=np.int64), 0
        for rows in steps():
            m = rows.shape[0]
            codes[at:at + m] = (rows[:, 0] * (r1 - r0) + (rows[:, 1] - r0)) * ne + rows[:, 2]
            at += m
        codes.sort()
        total += 1  # the first code, then each that differs from its predecessor
        for lo in range(0, n - 1, _SORT_ROWS):
            hi = min(n - 1, lo + _SORT_ROWS)
            total += int(np.count_nonzero(codes[lo + 1:hi + 1] != codes[lo:hi]))
    return total


def _as_sets(triples: np.ndarray | list[np.ndarray]) -> list[np.ndarray]:
    """Known triples given as one ``(n, 3)`` array or a list / tuple of them, as a list of arrays."""
    return list(triples) if isinstance(triples, (list, tuple)) else [triples]


def _stacked(sets: list[np.ndarray]) -> np.ndarray:
    """The arrays ``sets`` as one ``(n, 3)`` array (no copy for a single one)."""
    if len(sets) == 1:
        return sets[0]
    return np.concatenate(sets) if sets else np.zeros((0, 3), dtype=np.int64)


def _code_fits(num_keys: int, num_values: int) -> bool:
    """Whether ``key * num_values + value`` fits int64 for every key and value below these bounds."""
    return int(num_keys) * int(num_values) <= np.iinfo(np.int64).max


def member_positions(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The positions ``i`` (ascending) where ``values[i]`` is in ``wanted``, for non-negative int64 keys
    and a sorted unique ``wanted``, in O(n): ``np.flatnonzero(np.isin(values, wanted))``.

    A hashed bool table (key mod 2²²) rejects almost every non-member with one gather; only the
    survivors (members plus ~|wanted|/2²² false positives) are checked exactly by binary search.
    Measured on 10⁶ keys against 8,000: ~2-8 ms for any key range, vs 20–2,300 ms for ``np.isin``.
    The caller gathers its columns at these few positions (a boolean mask would scan 10⁶ entries
    once per column: FilterIndex took 8.5 ms per side with masks, see :class:`FilterIndex`).
    """
    if wanted.size == 0 or values.size == 0:
        return np.zeros(0, dtype=np.int64)
    maybe = np.flatnonzero(member_table(wanted)[values & (_MEMBER_TABLE - 1)])
    sub = values[maybe]
    pos = np.searchsorted(wanted, sub).clip(max=wanted.size - 1)
    return maybe[wanted[pos] == sub]


def member_table(wanted: np.ndarray) -> np.ndarray:
    """The hashed pre-filter of a membership test: ``table[key & (2²² - 1)]`` is True for every wanted
    key (and for ~|wanted|/2²² of the others, which the exact second stage rejects)."""
    table = np.zeros(_MEMBER_TABLE, dtype=bool)
    table[wanted & (_MEMBER_TABLE - 1)] = True
    return table


def query_keys(triples: np.ndarray, side: int, num_relations: int) -> np.ndarray:
    """int64 query key of each triple for ``side``: ``h*R + r`` (tail side) or ``t*R + r`` (head side)."""
    ent = triples[:, 0] if side == SIDE_TAIL else triples[:, 2]
    return ent.astype(np.int64, copy=False) * num_relations + triples[:, 1].astype(np.int64, copy=False)


def answer_column(triples: np.ndarray, side: int) -> np.ndarray:
    """The entity being predicted: the tail for tail prediction, the head for head prediction."""
    return triples[:, 2] if side == SIDE_TAIL else triples[:, 0]


def rows_of_queries(triples: np.ndarray | list[np.ndarray], side: int, num_relations: int,
                    wanted: np.ndarray) -> np.ndarray:
    """The rows of ``triples`` (an ``(n, 3)`` array or a list of them, read in place: the evaluator
    passes its filter sets without concatenating 10⁶ triples first, 1.2-1.6 ms) whose query key for
    ``side`` is in the sorted unique ``wanted``, stacked in order."""
    parts = []
    for arr in _as_sets(triples):
        kept = member_rows(arr, 0 if side == SIDE_TAIL else 2, num_relations, wanted)
        if kept is None:  # the compiled pass is not loaded: keys of every triple, then membership
            kept = member_positions(query_keys(arr, side, num_relations), wanted)
        parts.append(arr[kept])
    return _stacked(parts)


class FilterIndex:
    """Known answers of every query of one side, as CSR arrays (see the module docstring)."""

    def __init__(self, triples: np.ndarray | list[np.ndarray], *, side: int, num_entities: int, num_relations: int, device=None,
                 queries: np.ndarray | None = None):
        """Index ``triples`` (one ``(n, 3)`` array, or a list of them: their union) for ``side``; with
        ``queries`` (int64 query keys), only the triples of those queries (every other key looks up
        as having no known answer)."""
        if side not in (SIDE_HEAD, SIDE_TAIL):
            raise ValueError(f"side must be {SIDE_HEAD} (head) or {SIDE_TAIL} (tail), got {side}")
        self.side = side
        self.num_entities = int(num_entities)
        self.num_relations = int(num_relations)
        if queries is not None:  # only the triples of these queries: a few thousand of maybe 10⁶
            wanted = sorted_unique(np.asarray(queries, dtype=np.int64))
            triples = rows_of_queries(triples, side, num_relations, wanted)
        else:
            triples = _stacked(_as_sets(triples))
        keys = query_keys(triples, side, num_relations)
        ans = answer_column(triples, side).astype(np.int64, copy=False)
        keys_all, answers = unique_pairs(keys, ans, num_keys=self.num_entities * self.num_relations,
                                         num_values=self.num_entities)
        # keys_all is sorted: each new key starts where it differs from its predecessor
        starts = np.flatnonzero(np.r_[True, keys_all[1:] != keys_all[:-1]]) if keys_all.size else np.zeros(0, np.int64)
        uniq = keys_all[starts]
        indptr = np.append(starts, keys_all.shape[0]).astype(np.int64)
        self.num_pairs = int(keys_all.shape[0])
        self.keys = torch.as_tensor(uniq, dtype=torch.int64, device=device)
        self.indptr = torch.as_tensor(indptr, dtype=torch.int64, device=device)
        self.answers = torch.as_tensor(answers, dtype=torch.int64, device=device)

    def __repr__(self) -> str:
        return f"FilterIndex(side={self.side}, queries={self.keys.numel()}, answers={self.num_pairs})"

    def ranges(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(start, count)`` of each query key's answer list (count 0 for unknown keys)."""
        if self.keys.numel() == 0:
            zero = torch.zeros_like(keys)
            return zero, zero
        pos = torch.searchsorted(self.keys, keys).clamp_(max=self.keys.numel() - 1)
        found = self.keys[pos] == keys
        start = self.indptr[pos]
        count = torch.where(found, self.indptr[pos + 1] - start, torch.zeros_like(start))
        return start, count

    def pairs(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat ``(row, entity)`` pairs: every known answer of ``keys[row]``, for all rows."""
        rows, positions = csr_pairs(*self.ranges(keys))
        return rows, self.answers[positions]

    def answers_of(self, key: int) -> np.ndarray:
        """Known answers of one query key (numpy, for sampling and tests)."""
        start, count = self.ranges(torch.tensor([key], device=self.keys.device))
        s, c = int(start[0]), int(count[0])
        return self.answers[s : s + c].cpu().numpy()


# ------------------------------------------------------------------------------------ compiled kernels
_DISTINCT = _DISTINCT_COUNT = None  # the compiled _distinct_buckets and _distinct_in_buckets
_MEMBER = None  # the compiled _member_rows
_LOADED = None  # whether the kernels compiled (None: not tried yet)
_LOCK = threading.Lock()
_READY = threading.Event()  # set once the kernels are loaded and have run (compiled or read from cache)


def load_kernels() -> bool:
    """Compile (or read from numba's cache) :func:`member_rows`' and :func:`count_distinct_codes`'
    kernels, once per process; whether they are available (False without a working numba: the numpy
    forms answer the same). The evaluator loads them with its counting kernel."""
    global _LOADED, _DISTINCT, _DISTINCT_COUNT, _MEMBER
    with _LOCK:
        if _LOADED is None:
            try:
                from numba import njit

                one, none = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
                distinct = njit(nogil=True, cache=True, boundscheck=False)(_distinct_buckets)
                distinct(np.zeros((1, 3), dtype=np.int64), 1, 1, 0, np.zeros(2, dtype=np.int64), none, none)
                distinct_count = njit(nogil=True, cache=True, boundscheck=False)(_distinct_in_buckets)
                distinct_count(one, np.array([0, 1], dtype=np.int64))
                member = njit(nogil=True, cache=True, boundscheck=False)(_member_rows)
                member(np.zeros((1, 3), dtype=np.int64), 0, 1, 1, np.zeros(2, dtype=np.bool_), one)
            except Exception:  # noqa: BLE001 - numba missing or broken: the numpy forms count the same
                _LOADED = False
            else:
                _DISTINCT, _DISTINCT_COUNT, _MEMBER, _LOADED = distinct, distinct_count, member, True
                _READY.set()
    return _LOADED


_NONE = np.zeros(0, dtype=np.int64)
_HASH = np.int64(-7046029254386353131)  # the multiplicative hash of the kernels below (odd, 2^64 / golden ratio)


def _distinct_buckets(triples, num_relations, num_entities, bits, start, buf, pos):  # compiled by numba
    # the code (h * R + r) * E + t of each row (the caller checked that it fits int64) and its bucket,
    # the top ``bits`` bits of its hash. Called twice per array: with ``buf`` empty it counts each
    # bucket's codes into ``start[b + 1]``; then it writes them at ``buf[pos[b]]`` (pos advancing):
    # the arrays are read in place, never concatenated
    shift = 64 - bits
    bmask = (1 << bits) - 1
    scatter = buf.shape[0] > 0
    for i in range(triples.shape[0]):
        k = (triples[i, 0] * num_relations + triples[i, 1]) * num_entities + triples[i, 2]
        b = ((k * _HASH) >> shift) & bmask
        if scatter:
            buf[pos[b]] = k
            pos[b] += 1
        else:
            start[b + 1] += 1
    return 0


def _distinct_in_buckets(buf, start):  # compiled by numba (see load_kernels)
    # the distinct codes of each bucket ``buf[start[b]:start[b + 1]]``, counted in an open-addressing
    # table of ~2x the bucket (a few thousand int64: cache-resident, where one table for all would not be)
    big = 2
    for b in range(start.shape[0] - 1):
        big = max(big, start[b + 1] - start[b])
    size = 2
    while size < 2 * big:
        size *= 2
    table = np.empty(size, np.int64)
    count = 0
    for b in range(start.shape[0] - 1):
        lo, hi = start[b], start[b + 1]
        if hi == lo:
            continue
        s = 2
        while s < 2 * (hi - lo):
            s *= 2
        mask = s - 1
        table[:s] = -1  # codes are >= 0
        for i in range(lo, hi):
            k = buf[i]
            j = ((k * _HASH) >> 17) & mask  # other bits of the hash than the bucket's
            while True:  # linear probing; the table is at most half full
                v = table[j]
                if v == -1:
                    table[j] = k
                    count += 1
                    break
                if v == k:
                    break
                j = (j + 1) & mask
    return count


def _member_rows(triples, ent_col, rel_col, num_relations, table, wanted):  # compiled by numba (see load_kernels)
    n = triples.shape[0]
    mask = table.shape[0] - 1
    m = wanted.shape[0]
    out = np.empty(n, np.int64)  # pages are touched only where written: ~#members
    k = 0
    for i in range(n):
        key = triples[i, ent_col] * num_relations + triples[i, rel_col]
        if table[key & mask]:  # hashed pre-filter, then the exact binary search
            j = np.searchsorted(wanted, key)
            if j < m and wanted[j] == key:
                out[k] = i
                k += 1
    return out[:k].copy()


def member_rows(triples: np.ndarray, side_col: int, num_relations: int, wanted: np.ndarray) -> np.ndarray | None:
    """The rows ``i`` (ascending) of an int64 ``(n, 3)`` triple array whose query key
    ``triples[i, side_col] * R + triples[i, 1]`` is in the sorted unique ``wanted``, in one pass
    without the n-long key and mask arrays of :func:`member_positions` (whose
    temporaries' page faults dominate its cost); None
    until the kernel is loaded (then use that function)."""
    if not (_READY.is_set() and _MEMBER) or triples.dtype != np.int64 or triples.ndim != 2:
        return None
    if not triples.flags.c_contiguous:  # the signature compiled at load (another would compile now)
        return None
    return _MEMBER(triples, int(side_col), 1, int(num_relations), member_table(wanted), wanted)


def count_distinct_codes(sets, num_entities: int, num_relations: int) -> int | None:
    """The number of distinct rows of int64 ``(n, 3)`` triple arrays ``sets`` together (ids in range,
    the code ``(h * R + r) * E + t`` fitting int64: the caller checks): ``len(np.unique(codes))``;
    None until the kernel is loaded (then count another way).

    The codes are hashed into 2^bits buckets of ~4,096 (two passes over each array, read in place:
    no concatenation of the sets, one int64 per triple besides them), then counted bucket by bucket
    in a cache-resident hash table (one table of all codes takes a cache miss per insert; a sort is slower
    still).
    """
    if not (_READY.is_set() and _DISTINCT):
        return None
    n = sum(int(a.shape[0]) for a in sets)
    bits = min(8, max(1, (n // 4096).bit_length()))  # >= 1: a shift by 64 bits is undefined in LLVM
    nr, ne = int(num_relations), int(num_entities)
    start = np.zeros((1 << bits) + 1, np.int64)
    for block in _c_blocks(sets):
        _DISTINCT(block, nr, ne, bits, start, _NONE, _NONE)
    np.cumsum(start, out=start)
    buf, pos = np.empty(n, np.int64), start[:-1].copy()
    for block in _c_blocks(sets):
        _DISTINCT(block, nr, ne, bits, start, buf, pos)
    return int(_DISTINCT_COUNT(buf, start))


def _c_blocks(sets, rows: int = 1 << 18, index: bool = False):
    """The rows of ``(n, 3)`` arrays ``sets`` as C-ordered int64 arrays, the compiled kernels' signature:
    each array itself where it is one, any other (strided, column-major like pandas' ``.values``,
    another dtype) in blocks of ``rows`` rows, never as a copy of a whole set; empty arrays skipped.
    ``index``: ``(i, block)`` pairs, ``i`` the set's position."""
    for i, a in enumerate(sets):
        whole = a.dtype == np.int64 and a.flags.c_contiguous
        step = a.shape[0] if whole else rows
        for lo in range(0, a.shape[0], max(1, step)):
            block = a if whole else np.ascontiguousarray(a[lo:lo + step], dtype=np.int64)
            yield (i, block) if index else block
