"""Counting candidates better than / tied with the true answer, the NaN rule, the consistency check
and the compiled counting kernel: one implementation shared by full, chunked and sampled ranking.

With ``s`` the true score of a task and ``tol = atol + rtol |s|`` its tie tolerance (:class:`TieRule`;
``torch.isclose``'s rule, applied exactly; 0 for an infinite ``s``, which ties with equal scores only):

    better = #{c : score(c) > s + tol},   tied = #{c : s - tol <= score(c) <= s + tol}

NaN scores compare neither greater nor equal, so they count in neither. Two back ends: the torch
reference (:class:`Counter`: filtered candidates are set to NaN in a writable copy before counting)
and the compiled kernel (:class:`FusedCounts`: one read of each CPU score block counts, subtracts the
known answers and sums each row to detect NaN), decided once per evaluation (:func:`use_kernel`).

The NaN rule (the same for every ranking path): ``nan_policy="raise"`` raises
:class:`~kgeval.errors.NaNScoresError` when the true score or a candidate's is NaN; ``"worst"`` ranks
a NaN true score last and lets a NaN candidate lose to every non-NaN true score; ``"minus_inf"``
(LibKGE's) reads every NaN as -inf: the thresholds of a NaN true score are those of -inf, and a task whose
true score is -inf ties with every candidate not counted better (the -inf and NaN ones). A filtered known
answer is no candidate: a NaN there is ignored, as a sampled ranking never scores it.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch

from .. import filtering
from ..errors import InvalidInputError, NaNScoresError
from ..ranks import SIDE_NAMES
from .ties import TieRule, _rule, count, tie_rule, tolerance_bounds  # noqa: F401 (their former module)

__all__ = ["TieRule", "Counter", "count", "apply_nan_policy", "check_nan", "ConsistencyCheck", "fused_counts", "FusedCounts",
           "use_kernel", "kernel_ready", "warm_kernel"]

_BLOCK_ELEMS = 1 << 18  # scores per counting block on CPU (1 MiB of float32: the buffer stays in cache)


class Counter:
    """Counts tasks against score rows in cache-sized blocks, reusing one comparison buffer."""

    def __init__(self, tol, fused: bool = False):
        #: the :class:`TieRule` (a number: an absolute tolerance)
        self.tol = _rule(tol)
        #: count CPU blocks with the compiled kernel (:class:`FusedCounts`, see :func:`use_kernel`)
        self.fused = fused
        self._local = threading.local()  # one comparison buffer per thread (chunk walkers, see full.py)

    @property
    def buf(self) -> torch.Tensor | None:
        return getattr(self._local, "buf", None)

    @buf.setter
    def buf(self, value: torch.Tensor | None) -> None:
        self._local.buf = value

    def _block_rows(self, nrows: int, ncols: int, device: torch.device) -> int:
        """Rows per block; the buffer grows to a block (allocated once, not per batch)."""
        # cache-sized blocks on CPU; on accelerators big blocks (few kernel launches) are better
        block = max(1, (_BLOCK_ELEMS if device.type == "cpu" else 1 << 26) // max(1, ncols))
        need = min(nrows, block) * ncols
        if self.buf is None or self.buf.numel() < need or self.buf.device != device:
            self.buf = torch.empty(need, dtype=torch.float32, device=device)
        return block

    def rows(self, scores, true, task_q, first, rest):
        """``better`` / ``tied`` of every task against its query row ``scores[task_q]``: ``first`` (one task per
        row, None when each row has one) compares in place; only ``rest`` needs gathered copies of rows."""
        nq, ncols = scores.shape
        dev = scores.device
        block = self._block_rows(nq, ncols, dev)
        first_t = true if first is None else true[first]
        fb = torch.empty(nq, dtype=torch.long, device=dev)
        ft = torch.empty(nq, dtype=torch.long, device=dev)
        for i in range(0, nq, block):
            j = min(nq, i + block)
            fb[i:j], ft[i:j] = count(scores[i:j], first_t[i:j, None], self.tol, self.buf)
        if first is None:
            return fb, ft
        better = torch.empty(true.shape[0], dtype=torch.long, device=dev)
        tied = torch.empty(true.shape[0], dtype=torch.long, device=dev)
        better[first], tied[first] = fb, ft
        for i in range(0, rest.numel(), block):
            sel = rest[i : i + block]
            # advanced indexing: index_select of whole float rows is far slower on the CPU
            better[sel], tied[sel] = count(scores[task_q[sel]], true[sel][:, None], self.tol, self.buf)
        return better, tied

    def pairs(self, scores, true):
        """``better`` / ``tied`` of row ``i`` of ``scores`` against ``true[i]`` (sampled ranking)."""
        nq, ncols = scores.shape
        block = self._block_rows(nq, ncols, scores.device)
        better = torch.empty(nq, dtype=torch.long, device=scores.device)
        tied = torch.empty(nq, dtype=torch.long, device=scores.device)
        for i in range(0, nq, block):
            j = min(nq, i + block)
            better[i:j], tied[i:j] = count(scores[i:j], true[i:j, None], self.tol, self.buf)
        return better, tied


def apply_nan_policy(better, tied, true, ncand, policy: str):
    """Policy ``"worst"``: a NaN true score ranks last (``better = ncand - 1``, ``tied = 0``); ``"minus_inf"``:
    a true score of -inf or NaN (counted as -inf) ties with every candidate not better than it."""
    if policy == "minus_inf":
        low = torch.isnan(true) | (true == float("-inf"))
        if bool(low.any()):
            tied = torch.where(low, ncand - 1 - better, tied)
    if policy == "worst":
        bad = torch.isnan(true)
        if bool(bad.any()):
            better = torch.where(bad, ncand - 1, better)
            tied = torch.where(bad, torch.zeros_like(tied), tied)
    return better, tied


def check_nan(policy: str, side: int, scores, true, rows_triples: np.ndarray, task_q, task0: int = 0,
              known=None) -> None:
    """Policy ``"raise"``: raise :class:`~kgeval.errors.NaNScoresError` when a task's true score or a
    score of its query row is NaN, naming the first offending triple and side (``task0``: the batch
    index of the first task here, when these are a part of the batch's tasks). ``known``: the
    ``(row, column)`` pairs of ``scores`` holding filtered known answers, which are no candidates: a NaN
    there is ignored (see the module docstring)."""
    if policy != "raise":
        return
    suspicious = torch.isnan(scores.sum(1))  # a NaN anywhere makes the row sum NaN (or inf - inf)
    if not bool(suspicious.any()) and not bool(torch.isnan(true).any()):
        return
    nan = torch.isnan(scores)
    if known is not None and known[0].numel():
        nan[known[0], known[1]] = False  # a new tensor: the scores are not written
    bad_tasks = nan.any(1)[task_q] | torch.isnan(true)
    if bool(bad_tasks.any()):
        j = int(bad_tasks.nonzero()[0])
        raise nan_error(side, task0 + j, rows_triples[j])


def nan_error(side: int, task: int, triple) -> NaNScoresError:
    """The error of ``nan_policy="raise"`` for the batch's task ``task`` (its triple ``triple``)."""
    h, r, t = (int(x) for x in triple)
    return NaNScoresError(
        f"NaN scores for triple {task} of the batch ({h}, {r}, {t}), {SIDE_NAMES[side]} prediction; "
        "pass nan_policy='worst' to rank NaN scores last"
    )


def score_tolerance(scale: float, dtype: torch.dtype = torch.float32) -> tuple[float, float]:
    """``(relative, absolute)`` tolerance for one score computed two ways (in a batch and alone, or on two
    ranks): ``rel = max(1e-5, 32 eps(dtype))``, ``abs = max(1e-6, rel x scale)`` (``scale``: a mean |score|)."""
    rel = max(1e-5, 32 * torch.finfo(dtype).eps) if dtype.is_floating_point else 1e-5
    return rel, max(1e-6, rel * scale)


class ConsistencyCheck:
    """Re-scores a few tasks alone and counts those whose in-batch score differs."""

    def __init__(self, side_order=()):
        self.checked = 0
        self.mismatches = 0
        self.first_mismatch = ""
        self._lock = threading.Lock()  # checks may come from several threads
        # first_mismatch is the first of the earliest side in ``side_order`` (the evaluation's sides), as
        # when the sides are ranked one after the other
        self._rank = {side: i for i, side in enumerate(side_order)}
        self._first_at: int | None = None

    def check(self, side_scorer, rows_triples: np.ndarray, true: torch.Tensor, picks, scale: float | None = None):
        # the absolute tolerance follows the score scale (mean |score| of the checked rows, else of the true
        # scores): a score that cancels to near zero differs by the float32 rounding of its large terms
        if scale is None:
            scale = float(torch.nan_to_num(true.abs().double(), nan=0.0, posinf=0.0).mean()) if true.numel() else 0.0
        # half precision rounds ~1e-3 (float16) to ~1e-2 (bfloat16) apart between a batch and a single row
        dtype = getattr(side_scorer, "returned_dtype", None) or true.dtype  # before widening half precision
        rel_tol, abs_tol = score_tolerance(scale, dtype)
        for j in picks:
            h, r, t = (int(x) for x in rows_triples[j])
            alone = side_scorer.alone(h, r, t)
            inbatch = float(true[j])
            same = (math.isnan(alone) and math.isnan(inbatch)) or alone == inbatch or math.isclose(
                alone, inbatch, rel_tol=rel_tol, abs_tol=abs_tol
            )
            with self._lock:
                self.checked += 1
                if same:
                    continue
                self.mismatches += 1
                at = self._rank.get(side_scorer.side, len(self._rank))
                if self._first_at is None or at < self._first_at:
                    self._first_at = at
                    cause = ("scores overflow the float range (an infinite score ties with every other one of "
                             "its sign: the model's weights are too large)"
                             if math.isinf(alone) or math.isinf(inbatch) else
                             "scores depend on the batch (a scorer with state or randomness, e.g. dropout?)")
                    self.first_mismatch = (
                        f"consistency check failed: triple ({h}, {r}, {t}) scores {inbatch!r} inside a batch "
                        f"({SIDE_NAMES[side_scorer.side]} prediction) but {alone!r} alone; {cause}"
                    )


# ------------------------------------------------ the compiled kernel (numba)
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


def fused_counts(scores: torch.Tensor, true: torch.Tensor, task_q: torch.Tensor, tol,
                 known: tuple[torch.Tensor, torch.Tensor] | None):
    """``(better, tied, rows that may hold NaN: check them)`` of every task against its row ``scores[task_q[t]]``,
    the ``known`` ``(row, column)`` pairs (unique) excluded; None when the kernel does not apply (not
    loaded, not on the CPU, not float32/float64): then use the torch path. ``task_q`` must be sorted."""
    counts = FusedCounts.start(true, task_q, tol)  # a single block: FusedCounts of one add
    nan_rows = None if counts is None else counts.add(scores, known)
    if nan_rows is None:
        return None
    return (*counts.result(), nan_rows)


class FusedCounts:
    """``better`` / ``tied`` of one batch's tasks summed over any number of score blocks of the same
    rows (:func:`fused_counts` is one block; a chunk walker adds its share of the batch's column
    chunks): the per-batch work -- thresholds, task rows, the two count arrays -- is done once, so a
    block costs one kernel call (no per-block conversions and small torch ops)."""

    def __init__(self, true: torch.Tensor, task_q: torch.Tensor, tol):
        # the same thresholds as the torch path (:func:`.counting.tolerance_bounds`)
        hi, lo = tolerance_bounds(true.detach().reshape(-1), tol)
        self.hi, self.lo = hi.contiguous().numpy(), lo.contiguous().numpy()
        self.task_q = task_q.detach().to(torch.int64).contiguous().numpy()
        self.better = np.zeros(self.task_q.shape[0], dtype=np.int64)
        self.tied = np.zeros(self.task_q.shape[0], dtype=np.int64)

    @classmethod
    def start(cls, true: torch.Tensor, task_q: torch.Tensor, tol) -> "FusedCounts | None":
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
