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
(:func:`.counting.check_nan`) before raising or not. A sum (vectorised, reassociated) instead of
counting ``s != s``: measured 0.10 vs 0.14 ns per pair on one core, 209 x 10^4 blocks in cache.
Rows shorter than 2^24 columns are counted in float32 lanes (exact there), 0.085 vs 0.114 ns per
score for int64 counts (2,500 x 384 float32 blocks; float64 scores 0.122 vs 0.142).

Why a compiled loop: torch needs two comparisons, two buffers and two sums per block, plus a
NaN scan and a masking write (measured at 10^5 entities, 1,024 x 4,096 blocks: 2.1 ms per block
for gt/eq/sum vs 0.59 ms for this kernel, against 3.5 ms for the block's matmul on 2 threads).
The kernel runs on the calling thread (``nogil``): the evaluator's bookkeeping is single-threaded
by design (see :func:`kgeval._threads.bookkeeping_threads`).

When it is used: :func:`use_kernel` (``KGEVAL_COUNT_KERNEL=auto|numba|torch``; the torch path is
the reference the tests compare to; without numba installed the torch path is used).
"""

from __future__ import annotations

import os
import threading

import numpy as np
import torch

from ..errors import InvalidInputError
from .counting import tolerance_bounds

__all__ = ["fused_counts", "FusedCounts", "use_kernel", "kernel_ready", "MIN_PAIRS", "MIN_PAIRS_ALONE",
           "count_distinct_codes", "member_rows", "fingerprint_codes", "chain_dots"]

_KERNEL = None  # the compiled function once numba has been imported (False: not importable)
_DISTINCT = _DISTINCT_COUNT = None  # the compiled _distinct_buckets and _distinct_in_buckets, loaded with it
_MEMBER = None  # the compiled _member_rows, loaded with it
_FINGERPRINT = None  # the compiled _fingerprint, loaded with it
_CHAIN = None  # the compiled _chain_dots, loaded with it
_LOADER: threading.Thread | None = None  # the background load, once started
_LOCK = threading.Lock()
_READY = threading.Event()  # set once the kernel is loaded and has run (compiled or read from cache)


def _after_fork_in_child() -> None:
    """A child forked while the kernel loaded on a thread: that thread and its lock are gone."""
    global _LOCK, _LOADER
    _LOCK = threading.Lock()
    if not _READY.is_set():
        _LOADER = None


os.register_at_fork(after_in_child=_after_fork_in_child)


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
                fingerprint = njit(nogil=True, cache=True, boundscheck=False)(_fingerprint)
                fingerprint(np.zeros(3, dtype=np.int64), 1, 1, np.zeros(6, dtype=np.int64), np.zeros(2, dtype=np.int64))
                chain = njit(nogil=True, cache=True, boundscheck=False)(_chain_dots)  # IEEE: no fastmath
                q = np.zeros((1, 1), dtype=np.float32)
                chain(q, q, one, one.copy(), 1, np.zeros(1, dtype=np.float32))
            except Exception:  # noqa: BLE001 - numba missing or broken: the torch path counts the same
                _KERNEL = False
            else:
                global _DISTINCT, _DISTINCT_COUNT, _MEMBER, _CHAIN, _FINGERPRINT
                _KERNEL, _DISTINCT, _DISTINCT_COUNT, _MEMBER, _CHAIN, _FINGERPRINT = (
                    kernel, distinct, distinct_count, member, chain, fingerprint)
                _READY.set()
    return _KERNEL


def _load_in_background() -> None:
    """Start loading the kernel on a daemon thread (once): ~0.5 s of importing numba and reading
    its cache, hidden behind the first batches' scoring, which count with torch meanwhile."""
    global _LOADER
    with _LOCK:
        if _LOADER is not None or _KERNEL is not None:
            return
        _LOADER = threading.Thread(target=_load, name="kgeval-count-kernel", daemon=True)
        _LOADER.start()


def kernel_ready() -> bool:
    """Whether the kernel is loaded (without waiting for a background load)."""
    return _READY.is_set()


#: evaluations scoring at least this many (task, candidate) pairs are "large": under "auto" the
#: second large evaluation of a process loads the kernel (a loop of them: validation, trials,
#: benchmarks), as does one of :data:`MIN_PAIRS_ALONE`. Importing numba and loading the cached kernel
#: costs ~0.5 s of one core once per process (measured 0.19 s + 0.38 s, on a background thread), and
#: the evaluation running meanwhile loses about that much wall time to it (the import holds the GIL
#: and a core); the kernel saves ~0.5-1 ns per pair (10^4 entities: 65 ms of torch counting per 10^8
#: pairs vs 16 ms) and lets score blocks be walked by several threads (:func:`.full._walkers`).
MIN_PAIRS = 1 << 26

#: ... and one evaluation of at least this many pairs loads it at once: there the load pays for itself
#: within the evaluation. Measured, fresh processes, DistMult, one evaluation (2 cores):
#: FB15k-237-sized (14,541 entities, 20,466 test triples, dim 200: 6.0e8 pairs) 2.5-2.6 s loading vs
#: 2.8-3.6 s with torch counting; WN18RR-sized (40,943, 3,134, dim 200: 2.6e8) 1.40-1.44 s vs
#: 0.87-0.91 s; 10^4 entities, 5,000 test triples (1e8) 0.91 s vs 0.27 s (dim 64), 0.93 vs 0.62 (dim 200)
MIN_PAIRS_ALONE = 1 << 29

#: ... and once this process's "auto" CPU evaluations have scored this many pairs in all, the next
#: loads it whatever its size (a validation loop of small evaluations): the torch path has then cost
#: about what the load does (2^30 pairs x ~0.57 ns = 0.6 s; measured at 10^4 entities, 3,000 test
#: triples, 6e7 pairs: 105 ms with torch counting vs 71 ms with the kernel, against a 44 ms floor)
MIN_PAIRS_SEEN = 1 << 30
_PAIRS_SEEN = 0  # pairs of this process's evaluations under "auto" on the CPU so far
_LARGE_SEEN = 0  # ... and how many of them scored at least MIN_PAIRS


def use_kernel(device: torch.device, pairs: int) -> bool:
    """Whether an evaluation scoring ``pairs`` (task, candidate) pairs on ``device`` counts with the
    kernel: ``KGEVAL_COUNT_KERNEL`` (read at each call) = ``auto`` (default: on the CPU once loaded;
    loaded, when numba imports, by an evaluation of :data:`MIN_PAIRS_ALONE` pairs, by the second of
    :data:`MIN_PAIRS`, or once the process's evaluations have scored :data:`MIN_PAIRS_SEEN` in all;
    the kernel loads in the background and blocks are counted by torch until it is ready),
    ``numba`` (always on the CPU, loaded now) or ``torch`` (never)."""
    mode = os.environ.get("KGEVAL_COUNT_KERNEL", "auto").strip().lower() or "auto"
    if mode not in ("auto", "torch", "numba"):
        raise InvalidInputError(f"KGEVAL_COUNT_KERNEL must be 'auto', 'numba' or 'torch', got {mode!r}")
    if mode == "torch" or device.type != "cpu":
        return False
    if mode == "auto":
        global _PAIRS_SEEN, _LARGE_SEEN
        _PAIRS_SEEN += int(pairs)
        _LARGE_SEEN += int(pairs >= MIN_PAIRS)
        if pairs < MIN_PAIRS_ALONE and _LARGE_SEEN < 2 and _PAIRS_SEEN < MIN_PAIRS_SEEN:
            return _READY.is_set()  # only when an earlier evaluation of this process loaded it
        _load_in_background()  # batches count with torch until the kernel is ready (same counts, see tests)
        return _KERNEL is not False
    if not _load():
        raise InvalidInputError("KGEVAL_COUNT_KERNEL=numba but numba cannot be imported (pip install numba)")
    return True


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
    # integer below it): 16 lanes per instruction, where numba widens integer counts to int64 (measured
    # 0.085 vs 0.110 ns per score on a 2,500 x 384 block); wider rows count in integers
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
    next blocks' matmul ~2x slower on the 2-core machine (measured at 10^5 entities: scoring 0.9 s
    -> 1.8 s for 0.1 s less counting).
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
    block costs one kernel call (measured ~30-50 us of conversions and small torch ops per block
    otherwise, ~3-5% of a 1,024 x 1,024 block's product). Build it with :meth:`start` (None where the
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
        elif isinstance(known[0], np.ndarray):  # int64 already (full.known_by_column(as_numpy=True))
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
    without the n-long key and mask arrays of :func:`.filter_index.member_positions` (measured 10⁶
    triples against 5,000 keys: ~2 ms vs ~9 ms, most of it the temporaries' page faults); None
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
    in a cache-resident hash table: measured 7-8 ms for 1.1e6 triples (10% repeated) vs 38 ms for one
    16 MiB table of all codes (every insert a cache miss) and ~65 ms for a sort; 140 vs 400 ms for 1.1e7.
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


#: the multipliers of :func:`_fingerprint`'s two finalisers, as int64: splitmix64's (Stafford's Mix13) ...
_MIX1 = np.int64(-4658895280553007687)  # 0xbf58476d1ce4e5b9
_MIX2 = np.int64(-7723592293110705685)  # 0x94d049bb133111eb
#: ... and MurmurHash3's fmix64
_FMIX1 = np.int64(-49064778989728563)  # 0xff51afd7ed558ccd
_FMIX2 = np.int64(-4265267296055464877)  # 0xc4ceb9fe1a85ec53


def _fingerprint(flat, num_relations, num_entities, lohi, out):  # compiled by numba (see _load)
    # out[0] += sum of mix1(code), out[1] += sum of mix2(code) over the rows, wrapping mod 2^64 (mix1:
    # splitmix64's output, mix2: MurmurHash3's fmix64, each three xor-shifts and two multiplies); the
    # shifts are logical (masked), as numpy's fallback in .known_cache computes them bit for bit.
    # lohi[2c], lohi[2c + 1]: the least and greatest id of column c seen (the caller's range check,
    # in the same pass: the sums of ids out of range are discarded by it). ``flat``: the rows of a
    # C-ordered (n, 3) array, one after the other: the constant stride 3 lets LLVM vectorise the
    # interleaved reads (measured 0.75 ms per 10^6 triples vs 2.9 ms indexing the 2-d array)
    a = out[0]
    b = out[1]
    h0, h1, r0, r1, t0, t1 = lohi[0], lohi[1], lohi[2], lohi[3], lohi[4], lohi[5]
    for i in range(flat.shape[0] // 3):
        h, r, t = flat[3 * i], flat[3 * i + 1], flat[3 * i + 2]
        h0 = min(h0, h)
        h1 = max(h1, h)
        r0 = min(r0, r)
        r1 = max(r1, r)
        t0 = min(t0, t)
        t1 = max(t1, t)
        k = (h * num_relations + r) * num_entities + t
        z = k + _HASH  # splitmix64's output for state k
        z = (z ^ ((z >> 30) & 0x3FFFFFFFF)) * _MIX1
        z = (z ^ ((z >> 27) & 0x1FFFFFFFFF)) * _MIX2
        a += z ^ ((z >> 31) & 0x1FFFFFFFF)
        y = k ^ _FMIX2  # MurmurHash3's fmix64 of k xor a constant (fmix64(0) = 0)
        y = (y ^ ((y >> 33) & 0x7FFFFFFF)) * _FMIX1
        y = (y ^ ((y >> 33) & 0x7FFFFFFF)) * _FMIX2
        b += y ^ ((y >> 33) & 0x7FFFFFFF)
    out[0] = a
    out[1] = b
    lohi[0], lohi[1], lohi[2], lohi[3], lohi[4], lohi[5] = h0, h1, r0, r1, t0, t1
    return 0


def fingerprint_codes(sets, num_entities: int, num_relations: int, lohi: np.ndarray | None = None,
                      ) -> tuple[int, int] | None:
    """The two 64-bit sums of :mod:`.known_cache`'s fingerprint over the rows of int64 ``(n, 3)``
    arrays ``sets`` (codes fitting int64: the caller checks), read in place in one pass (~0.8 ms for
    10⁶ triples vs ~15 ms in numpy); None until the kernel is loaded. ``lohi`` (int64, 6 per set):
    each set's least and greatest head, relation and tail id, filled in the same pass."""
    if not (_READY.is_set() and _FINGERPRINT):
        return None
    out = np.zeros(2, np.int64)
    if lohi is None:  # ranges of no interest: one scratch row for every set
        big = np.iinfo(np.int64)
        lohi = np.tile(np.array([big.max, big.min] * 3, np.int64), len(sets))
    for i, block in _c_blocks(sets, index=True):
        _FINGERPRINT(block.reshape(-1), int(num_relations), int(num_entities), lohi[6 * i:6 * i + 6], out)
    return int(out[0]), int(out[1])


def _chain_dots(q, c, rows, cols, chain, out):  # compiled by numba (see _load), without fastmath
    # four tasks at a time: their chains are independent, so the CPU overlaps them (each fused
    # multiply-add waits on the previous one of its own chain); measured 0.22 vs 0.58 ms for 4,096
    # tasks at d = 64, bit for bit the same sums. The last group repeats the last task where it runs
    # short (computed again, written once).
    d = q.shape[1]
    n = rows.shape[0]
    last = n - 1
    for t in range(0, n, 4):
        u1, u2, u3 = min(t + 1, last), min(t + 2, last), min(t + 3, last)
        i0, i1, i2, i3 = rows[t], rows[u1], rows[u2], rows[u3]
        j0, j1, j2, j3 = cols[t], cols[u1], cols[u2], cols[u3]
        s0 = s1 = s2 = s3 = np.float32(0.0)
        for k0 in range(0, d, chain):
            a0 = a1 = a2 = a3 = np.float32(0.0)
            for k in range(k0, min(d, k0 + chain)):
                # a fused multiply-add: the float32 product is exact in float64 (48 bits), one rounding
                # of the sum to 53 bits, then to 24 (the double rounding differs from one in rare ties)
                a0 = np.float32(np.float64(q[i0, k]) * np.float64(c[j0, k]) + np.float64(a0))
                a1 = np.float32(np.float64(q[i1, k]) * np.float64(c[j1, k]) + np.float64(a1))
                a2 = np.float32(np.float64(q[i2, k]) * np.float64(c[j2, k]) + np.float64(a2))
                a3 = np.float32(np.float64(q[i3, k]) * np.float64(c[j3, k]) + np.float64(a3))
            if k0 == 0:
                s0, s1, s2, s3 = a0, a1, a2, a3
            else:  # float32 + float32: one rounding each
                s0, s1, s2, s3 = s0 + a0, s1 + a1, s2 + a2, s3 + a3
        out[t], out[u1], out[u2], out[u3] = s0, s1, s2, s3


def chain_dots(q: np.ndarray, c: np.ndarray, rows: np.ndarray, cols: np.ndarray, chain: int) -> np.ndarray | None:
    """``s[t] = q[rows[t]] . c[cols[t]]`` in float32 as chains of ``chain`` fused multiply-adds each,
    the chains' sums added in order (:mod:`.predicted`):

        s = (a_0 + a_1) + a_2 + ...,   a_m = fma(q_k, c_k, ... fma(q_{m b}, c_{m b}, 0)),  k < (m + 1) b

    ``q``, ``c``: C-contiguous float32 (the signature compiled at load); None until the kernel is
    loaded or for other arrays (then score the pairs instead)."""
    if not (_READY.is_set() and _CHAIN):
        return None
    if any(a.dtype != np.float32 or a.ndim != 2 or not a.flags.c_contiguous for a in (q, c)):
        return None
    out = np.empty(rows.shape[0], dtype=np.float32)
    _CHAIN(q, c, np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(cols, dtype=np.int64),
           int(chain), out)
    return out
