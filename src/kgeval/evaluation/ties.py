"""The tie rule of one evaluation: which candidates count as better than or tied with the true answer.

:class:`TieRule` holds the tolerance ``atol + rtol * |s|`` around a true score ``s`` (the rule of
``torch.isclose(score, s, rtol, atol)``, applied exactly in float64; an infinite ``s`` ties with equal
scores only) and whether a NaN true score reads as -inf (``nan_policy="minus_inf"``, LibKGE's rule).
:func:`tolerance_bounds` turns it into per-task thresholds, the one input of both counting back ends
(:func:`count` here, the compiled kernel in :mod:`.counting`); with both tolerances 0 the thresholds are
the true scores themselves and the comparison is exact in the scores' own dtype, as fast as before the
relative tolerance existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["TieRule", "tie_rule", "count", "tolerance_bounds"]


@dataclass(frozen=True)
class TieRule:
    """The tie tolerance ``atol + rtol * |true score|`` and whether a NaN true score reads as -inf."""

    atol: float = 0.0
    rtol: float = 0.0
    nan_low: bool = False

    @property
    def exact(self) -> bool:
        return self.atol == 0 and self.rtol == 0


def _rule(tol) -> TieRule:
    return tol if isinstance(tol, TieRule) else TieRule(float(tol))


def count(scores: torch.Tensor, true: torch.Tensor, tol, buf: torch.Tensor | None = None):
    """``(#scores > true, #scores tied with true)`` per row; ``true`` broadcasts against ``scores``;
    ``tol``: an absolute tolerance or a :class:`TieRule`.

    The comparisons write into a float buffer and are summed as floats: summing a bool tensor is
    ~10x slower in torch on CPU. Float sums of 0/1 are exact below 2**24 columns (float64 beyond).
    """
    dtype = torch.float32 if scores.shape[-1] < (1 << 24) else torch.float64
    if buf is None or buf.dtype != dtype or buf.numel() < scores.numel():
        buf = torch.empty(scores.shape, dtype=dtype, device=scores.device)
    else:
        buf = buf.view(-1)[: scores.numel()].view(scores.shape)
    rule = _rule(tol)
    if rule.exact:
        true = tolerance_bounds(true, rule)[0]  # itself unless a NaN reads as -inf
        better = torch.gt(scores, true, out=buf).sum(-1)
        tied = torch.eq(scores, true, out=buf).sum(-1)
    else:
        hi, lo = tolerance_bounds(true, rule)
        better = torch.gt(scores, hi, out=buf).sum(-1)
        tied = torch.ge(scores, lo, out=buf).sum(-1) - better  # t - tol <= s <= t + tol
    return better.long(), tied.long()


def tolerance_bounds(true: torch.Tensor, tol) -> tuple[torch.Tensor, torch.Tensor]:
    """``(true + tol, true - tol)`` in float64, whatever the scores' dtype (``(true, true)`` for tol 0:
    exact comparison in the scores' own dtype); ``tol``: a number or a :class:`TieRule` (per-task
    ``atol + rtol |true|``, 0 where ``true`` is infinite; NaN true scores as -inf under ``nan_low``).

    In float32 the sum is rounded to the float32 grid: with ``ulp / 2 < tol < ulp`` (e.g. tol 1e-6
    and scores in [16, 32), whose spacing is 1.9e-6) ``s + tol`` rounded up to ``s + ulp``, and a
    candidate one ulp above the true score counted as tied instead of better. float32 scores are
    exact in float64, and the float64 sum is off by at most 2^-53 relative: comparisons then follow
    the definition ``score > s + tol``. (On devices without float64 the scores' dtype is used.)
    """
    rule = _rule(tol)
    if rule.nan_low and bool(torch.isnan(true).any()):
        true = torch.where(torch.isnan(true), torch.full_like(true, float("-inf")), true)
    if rule.exact:
        return true, true
    t = true if true.dtype == torch.float64 or true.device.type == "mps" else true.double()
    if rule.rtol == 0:
        return t + rule.atol, t - rule.atol
    width = torch.where(torch.isfinite(t), rule.atol + rule.rtol * t.abs(), torch.zeros_like(t))
    return t + width, t - width


def tie_rule(opts) -> TieRule:
    """The :class:`TieRule` of :class:`~kgeval.evaluation.EvaluationOptions` ``opts``."""
    return TieRule(opts.tie_tolerance, opts.tie_rtol, opts.nan_policy == "minus_inf")
