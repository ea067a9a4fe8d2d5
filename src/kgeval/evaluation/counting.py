"""Counting candidates better than / tied with the true answer, the NaN rule and the consistency
check: one implementation shared by full, chunked and sampled ranking.

With ``s`` the true score of a task and ``tol`` the tie tolerance:

    better = #{c : score(c) > s + tol},   tied = #{c : s - tol <= score(c) <= s + tol}

NaN scores compare neither greater nor equal, so they count in neither; filtered candidates are
set to NaN before counting (in a score tensor the evaluator owns).

The NaN rule (one for full, chunked, sampled, given-candidates and distributed ranking): the
scores that decide a rank are the true answer's and its candidates'. ``nan_policy="raise"`` raises
:class:`~kgeval.errors.NaNScoresError` when one of them is NaN; ``"worst"`` ranks a NaN true score
last and lets a NaN candidate lose to every non-NaN true score. A filtered known answer is no
candidate: a NaN there is ignored by both policies, as a sampled ranking never scores it (and as an
entity it never drew as a negative). Its own task, where it is the true answer, sees it.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch

from ..errors import NaNScoresError
from ..ranks import SIDE_NAMES

__all__ = ["Counter", "count", "apply_nan_policy", "check_nan", "ConsistencyCheck"]

_BLOCK_ELEMS = 1 << 18  # scores per counting block on CPU (1 MiB of float32: the buffer stays in cache)


def count(scores: torch.Tensor, true: torch.Tensor, tol: float, buf: torch.Tensor | None = None):
    """``(#scores > true, #scores tied with true)`` per row; ``true`` broadcasts against ``scores``.

    The comparisons write into a float buffer and are summed as floats: summing a bool tensor is
    ~10x slower in torch on CPU. Float sums of 0/1 are exact below 2**24 columns (float64 beyond).
    """
    dtype = torch.float32 if scores.shape[-1] < (1 << 24) else torch.float64
    if buf is None or buf.dtype != dtype or buf.numel() < scores.numel():
        buf = torch.empty(scores.shape, dtype=dtype, device=scores.device)
    else:
        buf = buf.view(-1)[: scores.numel()].view(scores.shape)
    if tol == 0:
        better = torch.gt(scores, true, out=buf).sum(-1)
        tied = torch.eq(scores, true, out=buf).sum(-1)
    else:
        hi, lo = tolerance_bounds(true, tol)
        better = torch.gt(scores, hi, out=buf).sum(-1)
        tied = torch.ge(scores, lo, out=buf).sum(-1) - better  # t - tol <= s <= t + tol
    return better.long(), tied.long()


def tolerance_bounds(true: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(true + tol, true - tol)`` in float64, whatever the scores' dtype (``(true, true)`` for tol 0:
    exact comparison in the scores' own dtype).

    In float32 the sum is rounded to the float32 grid: with ``ulp / 2 < tol < ulp`` (e.g. tol 1e-6
    and scores in [16, 32), whose spacing is 1.9e-6) ``s + tol`` rounded up to ``s + ulp``, and a
    candidate one ulp above the true score counted as tied instead of better. float32 scores are
    exact in float64, and the float64 sum is off by at most 2^-53 relative: comparisons then follow
    the definition ``score > s + tol``. (On devices without float64 the scores' dtype is used.)
    """
    if tol == 0:
        return true, true
    t = true if true.dtype == torch.float64 or true.device.type == "mps" else true.double()
    return t + tol, t - tol


class Counter:
    """Counts tasks against score rows in cache-sized blocks, reusing one comparison buffer."""

    def __init__(self, tol: float, fused: bool = False):
        self.tol = tol
        #: count CPU blocks with the compiled kernel (:mod:`.count_kernel`, see :func:`.count_kernel.use_kernel`)
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
        """``better`` / ``tied`` of every task against its query row ``scores[task_q]``.

        ``first`` (one task per query row, or None when every row has exactly one task) compares
        against the matrix rows in place; only the further tasks of shared queries (``rest``) need
        gathered copies of their rows, one block at a time.
        """
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
            # advanced indexing, not index_select: on CPU (torch 2.13) index_select of whole float
            # rows was measured ~100x slower (2.4 s vs 27 ms for 300 rows of 40,943 floats)
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
    """Policy ``"worst"``: a NaN true score ranks last (``better = ncand - 1``, ``tied = 0``)."""
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
        # the absolute tolerance follows the score scale (``scale``: mean |score| of the checked
        # rows, else the batch's mean |true score|): a score that cancels to near zero legitimately
        # differs by float32 rounding of its large terms (measured: DistMult dim 200 gave
        # 0.29939365 in a 64-row batch vs 0.29939747 alone)
        if scale is None:
            scale = float(torch.nan_to_num(true.abs().double(), nan=0.0, posinf=0.0).mean()) if true.numel() else 0.0
        # half-precision scores round ~1e-3 (float16) to ~1e-2 (bfloat16) apart between a batch and a single
        # row: a float16 DistMult's 0.00191 vs 0.00189 was reported as batch-dependent scoring
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
