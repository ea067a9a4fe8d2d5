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
"""

from __future__ import annotations

import numpy as np
import torch

from .._csr import csr_pairs
from ..ranks import SIDE_HEAD, SIDE_TAIL
from .count_kernel import member_rows


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
    from .count_kernel import count_distinct_codes

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
