"""The fused CPU counting kernel: one read of each score block counts, masks and checks for NaN.

For task ``t`` on query row ``i = task_q[t]`` with thresholds ``hi[t] = s_t + tol`` and
``lo[t] = s_t - tol`` (``s_t`` its true score):

    better[t] += #{j : S[i, j] > hi[t]} - #{known (i, c) : S[i, c] > hi[t]}
    tied[t]   += #{j : lo[t] <= S[i, j] <= hi[t]} - #{known (i, c) : lo[t] <= S[i, c] <= hi[t]}

NaN compares neither greater nor equal, exactly as in the torch path (:func:`.counting.count`),
and the known answers are *subtracted* (O(#known) reads) instead of being overwritten with NaN,
so the block is never written and never copied. The NaN check rides on the same pass: each row's
first task also sums the row, which is NaN when the row holds a NaN (or both +inf and -inf, or
overflows both ways); it reports how many rows look so, and the caller makes the exact check
(:func:`.counting.check_nan`) before raising or not. A sum (vectorised, reassociated) is cheaper
than counting ``s != s``. Rows shorter than 2^24 columns are counted in float32 lanes (exact there,
wider vectors than integer counts).

Why a compiled loop: torch needs two comparisons, two buffers and two sums per block, plus a
NaN scan and a masking write; one fused read costs a fraction of that (numbers in
``benchmarks/results/evaluation-notes.md``).
The kernel runs on the calling thread (``nogil``): the evaluator's bookkeeping is single-threaded
by design (see :attr:`.options.Tuning.bookkeeping_threads`).

When it is used: :func:`use_kernel`, by :attr:`.options.Tuning.kernel` (``auto|numba|torch``; the torch
path is the reference the tests compare to; without numba installed the torch path is used), decided
once per evaluation.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from ..errors import InvalidInputError
from .counting import tolerance_bounds

__all__ = ["fused_counts", "FusedCounts", "use_kernel", "kernel_ready", "warm_kernel",
           "count_distinct_codes", "member_rows"]

_KERNEL = None  # the compiled function once numba has been imported (False: not importable)
_DISTINCT = _DISTINCT_COUNT = None  # the compiled _distinct_buckets and _distinct_in_buckets, loaded with it
_MEMBER = None  # the compiled _member_rows, loaded with it
_LOCK = threading.Lock()
_READY = threading.Event()  # set once the kernel is loaded and has run (compiled or read from cache)


def _load():
    global _KERNEL
    with _LOCK:
        if _KERNEL is None:
            try:
                from numba import njit

                # reassoc (only): the NaN sum may be vectorised; comparisons keep IEEE semantics
                kernel = njit(nogil=True, cache=True, boundscheck=False, fastmath={"reassoc"})(_count_rows)
                one, none = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
                t = np.zeros(1, dtype=np.float32)
                for thresholds in (t, t.astype(np.float64)):  # tolerance 0 / > 0 (float64 thresholds)
                    kernel(np.zeros((1, 1), dtype=np.float32), np.zeros(1, dtype=np.int64), thresholds, thresholds,
                           none, none, one, one.copy())  # the usual signatures: compiled (or read from cache) now
                distinct = njit(nogil=True, cache=True, boundscheck=False)(_distinct_buckets)
                distinct(np.zeros((1, 3), dtype=np.int64), 1, 1, 0, np.zeros(2, dtype=np.int64), none, none)
                distinct_count = njit(nogil=True, cache=True, boundscheck=False)(_distinct_in_buckets)
                distinct_count(one, np.array([0, 1], dtype=np.int64))
                member = njit(nogil=True, cache=True, boundscheck=False)(_member_rows)
                member(np.zeros((1, 3), dtype=np.int64), 0, 1, 1, np.zeros(2, dtype=np.bool_), one)
            except Exception:  # noqa: BLE001 - numba missing or broken: the torch path counts the same
                _KERNEL = False
            else:
                global _DISTINCT, _DISTINCT_COUNT, _MEMBER
                _KERNEL, _DISTINCT, _DISTINCT_COUNT, _MEMBER = kernel, distinct, distinct_count, member
                _READY.set()
    return _KERNEL


def warm_kernel() -> bool:
    """Load the compiled counting kernels now (importing numba and reading its cache, once per process).

    Callers that evaluate repeatedly (a validation loop, early stopping, hyper-parameter trials,
    benchmarks) call it once, so that small evaluations under ``Tuning(kernel="auto")`` count with the
    kernel too; ranks are the same either way.

    Returns
    -------
    bool
        whether the kernels are available (False without a working numba: the torch path counts).

    Examples
    --------
    >>> from kgeval.evaluation import warm_kernel
    >>> warm_kernel() in (True, False)
    True
    """
    return bool(_load())


def kernel_ready() -> bool:
    """Whether the kernel is loaded."""
    return _READY.is_set()


def use_kernel(device: torch.device, pairs: int, tuning) -> bool:
    """Whether an evaluation scoring ``pairs`` (task, candidate) pairs on ``device`` counts with the
    kernel, decided once at its start (never switched mid-run), by ``tuning.kernel``:

    - ``"torch"``: never; accelerators never either;
    - ``"numba"``: always (loaded now; a named error without numba);
    - ``"auto"``: when the kernel is already loaded (:func:`warm_kernel`), or when this evaluation
      scores at least ``tuning.kernel_min_pairs`` pairs (then loaded now, when numba imports)."""
    if tuning.kernel == "torch" or device.type != "cpu":
        return False
    if tuning.kernel == "numba":
        if not _load():
            raise InvalidInputError("KGEVAL_COUNT_KERNEL=numba (Tuning.kernel) but numba cannot be imported "
                                    "(pip install numba)")
        return True
    if _READY.is_set():
        return True
    return pairs >= tuning.kernel_min_pairs and bool(_load())


_SEGMENT = 1 << 24  # rows shorter than this are counted in float32 (exact below 2^24)


def _count_rows(S, task_q, lo, hi, krow, kcol, better, tied):  # compiled by numba (see _load)
    nq, w = S.shape
    nt = task_q.shape[0]
    start = np.zeros(nq + 1, np.int64)  # tasks of row i: start[i]:start[i + 1] (task_q is sorted)
    for t in range(nt):
        start[task_q[t] + 1] += 1
    for i in range(nq):
        start[i + 1] += start[i]
    nan_rows = 0
    # counts in float32 where they are exact (below 2^24 columns: every partial sum, in any order, is an
    # integer below it): 16 lanes per instruction, where numba widens integer counts to int64; wider
    # rows count in integers
    in_float = w < _SEGMENT
    one, zero = np.float32(1.0), np.float32(0.0)
    for t in range(nt):
        i = task_q[t]
        h = hi[t]
        lw = lo[t]
        first = t == start[i]  # the row's first task also looks for NaN: a NaN anywhere makes the sum NaN
        z = zero
        if in_float:
            bf = zero
            gf = zero
            if first:
                for j in range(w):
                    s = S[i, j]
                    bf += one if s > h else zero
                    gf += one if s >= lw else zero
                    z += s  # (reassociated: vectorised; +inf and -inf in one row also give NaN, see below)
            else:
                for j in range(w):
                    s = S[i, j]
                    bf += one if s > h else zero
                    gf += one if s >= lw else zero
            b = int(bf)
            g = int(gf)
        else:
            b = 0
            g = 0
            if first:
                for j in range(w):
                    s = S[i, j]
                    b += s > h
                    g += s >= lw
                    z += s
            else:
                for j in range(w):
                    s = S[i, j]
                    b += s > h
                    g += s >= lw
        if first and z != z:
            nan_rows += 1
        better[t] += b
        tied[t] += g - b
    for k in range(krow.shape[0]):  # known answers: subtract what the pass above counted for them
        i = krow[k]
        s = S[i, kcol[k]]
        for t in range(start[i], start[i + 1]):
            gt = s > hi[t]
            better[t] -= gt
            tied[t] -= (s >= lo[t]) - gt
    return nan_rows


def fused_counts(scores: torch.Tensor, true: torch.Tensor, task_q: torch.Tensor, tol: float,
                 known: tuple[torch.Tensor, torch.Tensor] | None):
    """``(better, tied, rows that may hold NaN: check them)`` of every task against its row ``scores[task_q[t]]``,
    the ``known`` ``(row, column)`` pairs (unique) excluded; None when the kernel does not apply
    (not loaded yet, not on the CPU, not float32/float64): then use the torch path. The caller
    decides whether to use the kernel at all (:func:`use_kernel`).

    ``task_q`` must be sorted (tasks grouped by query row, as the evaluator batches them). One
    thread: splitting blocks over two threads (a thread pool, the kernel releases the GIL) made the
    next blocks' matmul about twice slower on a 2-core machine.
    """
    counts = FusedCounts.start(true, task_q, tol)  # a single block: FusedCounts of one add
    nan_rows = None if counts is None else counts.add(scores, known)
    if nan_rows is None:
        return None
    return (*counts.result(), nan_rows)


class FusedCounts:
    """``better`` / ``tied`` of one batch's tasks summed over any number of score blocks of the same
    rows (:func:`fused_counts` is one block; a chunk walker adds its share of the batch's column
    chunks): the per-batch work -- thresholds, task rows, the two count arrays -- is done once, so a
    block costs one kernel call (no per-block conversions and small torch ops). Build it with :meth:`start` (None where the
    kernel does not apply: not loaded, not on the CPU, not float32/float64)."""

    def __init__(self, true: torch.Tensor, task_q: torch.Tensor, tol: float):
        # the same thresholds as the torch path (:func:`.counting.tolerance_bounds`)
        hi, lo = tolerance_bounds(true.detach().reshape(-1), tol)
        self.hi, self.lo = hi.contiguous().numpy(), lo.contiguous().numpy()
        self.task_q = task_q.detach().to(torch.int64).contiguous().numpy()
        self.better = np.zeros(self.task_q.shape[0], dtype=np.int64)
        self.tied = np.zeros(self.task_q.shape[0], dtype=np.int64)

    @classmethod
    def start(cls, true: torch.Tensor, task_q: torch.Tensor, tol: float) -> "FusedCounts | None":
        if not _READY.is_set() or not _KERNEL or true.device.type != "cpu" or task_q.device.type != "cpu":
            return None
        if true.dtype not in (torch.float32, torch.float64):
            return None
        return cls(true, task_q, tol)

    def rows(self, t0: int, t1: int, r0: int) -> tuple:
        """The tasks ``t0:t1``, whose query rows start at row ``r0``, as :meth:`add` takes them for a
        block of those rows only (a row block of the batch: row ``r0`` is its row 0)."""
        return t0, t1, self.task_q[t0:t1] - r0

    def add(self, scores: torch.Tensor, known: tuple[torch.Tensor, torch.Tensor] | None,
            rows: tuple | None = None) -> int | None:
        """Add the counts against ``scores`` (the rows of ``task_q``, or with ``rows`` (:meth:`rows`)
        the rows of those tasks only; ``known``: its ``(row, column)`` pairs, unique, rows relative to
        ``scores``; tensors or int64 numpy arrays); returns how many rows may hold NaN (check them), or
        None when the kernel does not take this block (other device or dtype: count it another way)."""
        if scores.device.type != "cpu" or scores.dtype not in (torch.float32, torch.float64):
            return None
        if known is None:
            krow = kcol = _NONE
        elif isinstance(known[0], np.ndarray):  # int64 already (blocks.known_by_column(as_numpy=True))
            krow, kcol = known
        else:
            krow, kcol = known[0].detach().to(torch.int64).numpy(), known[1].detach().to(torch.int64).numpy()
        S = scores.detach().contiguous()  # the compiled loop is specialised for C-contiguous rows
        if rows is None:
            return int(_KERNEL(S.numpy(), self.task_q, self.lo, self.hi, krow, kcol, self.better, self.tied))
        t0, t1, task_q = rows  # views: the kernel adds into these tasks' counts in place
        return int(_KERNEL(S.numpy(), task_q, self.lo[t0:t1], self.hi[t0:t1], krow, kcol, self.better[t0:t1],
                           self.tied[t0:t1]))

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self.better), torch.from_numpy(self.tied)


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


def _distinct_in_buckets(buf, start):  # compiled by numba (see _load)
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


def _member_rows(triples, ent_col, rel_col, num_relations, table, wanted):  # compiled by numba (see _load)
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
    without the n-long key and mask arrays of :func:`.filter_index.member_positions` (whose
    temporaries' page faults dominate its cost); None
    until the kernel is loaded (then use that function)."""
    if not (_READY.is_set() and _MEMBER) or triples.dtype != np.int64 or triples.ndim != 2:
        return None
    if not triples.flags.c_contiguous:  # the signature compiled at load (another would compile now)
        return None
    from .filter_index import member_table

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
