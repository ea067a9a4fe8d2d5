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

from .. import filtering
from ..errors import InvalidInputError
from .counting import tolerance_bounds

__all__ = ["fused_counts", "FusedCounts", "use_kernel", "kernel_ready", "warm_kernel"]

_KERNEL = None  # the compiled function once numba has been imported (False: not importable)
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
                if not filtering.load_kernels():  # the filter index's kernels, loaded with this one
                    raise ImportError("numba's filter kernels did not load")
            except Exception:  # noqa: BLE001 - numba missing or broken: the torch path counts the same
                _KERNEL = False
            else:
                _KERNEL = kernel
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


_NONE = np.zeros(0, dtype=np.int64)
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
