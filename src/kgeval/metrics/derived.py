"""Chance-adjusted metrics: generic wrappers over any base metric with null moments.

For a base metric M with null expectation E and variance σ² (Hoyt, Berrendorf et al., 2022,
"A Unified Framework for Rank-based Evaluation Metrics for Link Prediction in Knowledge
Graphs", §4):

- expectation normalisation  M* = M / E                (AMR = MR / E[MR]; for MR, GMR, HMR)
- adjusted index             M* = (M − E) / (opt − E)  (AMRI, adjusted MRR, adjusted hits@k…)
- z-score                    z  = ±(M − E) / σ         (signed so that larger is better)

Each is ``(M − shift) / scale`` with constants taken from the base's :class:`NullMoments`
only (PyKEEN's ``get_coefficients`` idea), so one ``NullMoments`` per base metric serves
every wrapper, and the wrapper's own moments follow exactly:
E[M*] = (E − shift) / scale, Var[M*] = σ² / scale² (E[index] = E[z] = 0, Var[z] = 1, E[M/E] = 1).

A degenerate denominator (opt = E or σ = 0) means M is deterministic under the null and
equals E, so the wrapper is 0 (PyKEEN's convention too).

Where E is close to the optimum (most of the weight on tasks with one candidate), ``opt − E`` and
``M − E`` would keep only E's absolute rounding (C = [1, 2], weights [1, 1e-9]: the index's null
variance came out 0.99999983 instead of 1, flagged exact). The base metrics state ``opt − E``
from a cancellation-free formula (:attr:`NullMoments.optimum_gap`); the index divides by it, and
the index and the z-score centre M as ``(M − opt) + (opt − E)``. Without it (an old table, an
approximate method) they fall back to ``opt − E`` and ``M − E``.
"""

from __future__ import annotations

import math

from ..errors import NoClosedFormError
from .base import UNKNOWN, Metric, NullMoments, ValueRange

#: wrapper kinds: "norm" = M/E, "index" = (M−E)/(opt−E), "z" = z-score
KINDS = ("norm", "index", "z")


def wrapper_key(kind: str, base_key: str, increasing: bool) -> str:
    """The key of a wrapper, following PyKEEN: ``adjusted_<key>`` for M/E and for the index of
    an increasing metric, ``adjusted_<key>_index`` for the index of a decreasing one, ``z_<key>``."""
    if kind == "z":
        return f"z_{base_key}"
    if kind == "index" and not increasing:
        return f"adjusted_{base_key}_index"
    return f"adjusted_{base_key}"


def _ratio(num: float, den: float) -> float:
    return 0.0 if den == 0 else num / den


class DerivedMetric(Metric):
    """Base for wrappers: ``(M − shift) / scale`` of ``self.base``; subclasses give
    :meth:`coefficients` from the base's null moments."""

    kind = ""
    needs_candidates = True

    def __init__(self, base: Metric):
        self.base = base
        self.key = wrapper_key(self.kind, base.key, base.increasing)
        self.supports_weights = base.supports_weights

    def coefficients(self, base: NullMoments) -> tuple[float, float] | None:
        """``(shift, scale)`` from the base metric's null moments; None if they are unknown."""
        raise NotImplementedError

    def adjust(self, value: float, base: NullMoments) -> float:
        """The wrapper of a base value, given the base's null moments (computed once by the caller)."""
        coef = self.coefficients(base)
        if coef is None:
            raise NoClosedFormError(f"{self.key}: the null moments of {self.base.key} are not known here")
        return _ratio(self._shifted(value, coef[0], base), coef[1])

    def _shifted(self, value: float, shift: float, base: NullMoments) -> float:
        """``value − shift``; the wrappers centred on E override it (see :func:`_centred`)."""
        return value - shift

    def moments(self, base: NullMoments) -> NullMoments:
        """The wrapper's null moments from the base's (affine map: exact when the base's are)."""
        coef = self.coefficients(base)
        if coef is None:
            return UNKNOWN
        shift, scale = coef
        var = None if base.variance is None else _ratio(base.variance, scale * scale)
        mean = _ratio(base.mean - shift, scale)
        return NullMoments(mean, var, base.exact, None if self.optimum is None else self.optimum - mean)

    def _null_moments(self, c, w) -> NullMoments:
        return self.moments(self.base._null_moments(c, w))

    def _compute(self, ranks, num_candidates, weights) -> float:
        return self.adjust(self.base._compute(ranks, num_candidates, weights), self.base._null_moments(num_candidates, weights))

    def _tie_expectation(self, lo, hi, c, w) -> float | None:
        value = self.base._tie_expectation(lo, hi, c, w)
        base = self.base._null_moments(c, w)
        return None if value is None or self.coefficients(base) is None else self.adjust(value, base)


def _gap(metric: Metric, base: NullMoments) -> float | None:
    """``opt − E`` of ``metric`` from its null moments: the cancellation-free ``optimum_gap`` where
    stated, else the difference (None without an optimum or E)."""
    if metric.optimum is None or base.mean is None:
        return None
    return metric.optimum - base.mean if base.optimum_gap is None else base.optimum_gap


def _centred(metric: Metric, value: float, base: NullMoments) -> float:
    """``value − E`` as ``(value − opt) + (opt − E)`` where the base states ``opt − E``: near the
    optimum ``value − opt`` is exact and ``value − E`` kept only E's rounding (perfect ranks with
    E = 1 + 5e-10: z and index off by ~1e-7 relative)."""
    if metric.optimum is None or base.optimum_gap is None:
        return value - base.mean
    return (value - metric.optimum) + base.optimum_gap


class ExpectationNormalized(DerivedMetric):
    kind = "norm"
    value_range = ValueRange(0, math.inf, True, False)

    def __init__(self, base: Metric):
        super().__init__(base)
        self.name = f"Adjusted {base.name}"
        self.increasing = base.increasing
        self.description = f"{base.key} / E[{base.key}] (expectation-normalised; 1 = random)"

    def coefficients(self, base):
        return None if base.mean is None else (0.0, base.mean)


class AdjustedIndex(DerivedMetric):
    kind = "index"
    increasing = True
    value_range = ValueRange(-math.inf, 1, False, True)
    optimum = 1.0

    def __init__(self, base: Metric):
        super().__init__(base)
        self.name = f"Adjusted {base.name} Index"
        self.description = f"({base.key} − E) / ({base.optimum:g} − E): 1 = perfect, 0 = random"

    def coefficients(self, base):
        gap = _gap(self.base, base)
        return None if gap is None else (base.mean, gap)

    def _shifted(self, value, shift, base):
        return _centred(self.base, value, base)


class ZScore(DerivedMetric):
    kind = "z"
    increasing = True

    def __init__(self, base: Metric):
        super().__init__(base)
        self.name = f"z-{base.name}"
        self.description = f"±({base.key} − E) / σ, signed so that larger is better"

    def coefficients(self, base):
        if base.mean is None or base.variance is None:
            return None
        sd = math.sqrt(max(base.variance, 0.0))
        return base.mean, (sd if self.base.increasing else -sd)

    def _shifted(self, value, shift, base):
        return _centred(self.base, value, base)
