"""Power-mean metrics: ``M = g(M_p(f(r₁), …, f(rₙ)))`` (Hoyt, Berrendorf et al., 2022, Tables 2 and 3).

Arithmetic-mean family (``M = g(Σ wᵢ f(rᵢ))``, weights normalised):

==============================  ==========  =========  =========================
metric                          f(r)        g(x)       E / Var under the null
==============================  ==========  =========  =========================
hits@k                          I[r ≤ k]    x          closed (Bernoulli pᵢ = min(k,Cᵢ)/Cᵢ)
arithmetic mean rank (MR)       r           x          closed ((C+1)/2, (C²−1)/12)
inverse harmonic mean (MRR)     1/r         x          closed (H(C)/C, (C·H₂(C) − H(C)²)/C²)
inverse arithmetic mean (IAMR)  r           1/x        exact by quadrature (Laplace transform)
harmonic mean rank (HMR)        1/r         1/x        exact by quadrature (Laplace transform)
power mean rank (p ≠ 0)         r^p         x^(1/p)    exact for p = 1, one task, ≤ 2¹⁶ outcomes and
                                                       p < 0 (quadrature); else delta method (*)
==============================  ==========  =========  =========================

(*) delta method, flagged approximate: worst measured relative error for n = 2…12 is
E 8%, Var 33% (p ∈ [0.25, 3]); at n = 200, Var 0.3% (p = 2). For p < 0 it is reached only with
> 8 distinct weights or C > 2¹⁶ and is poor (p = −2: Var 15% at n = 200); see
``tests/metrics/test_moments_powermean.py``. Where its second-order term exceeds a quarter of
g(μ) (few tasks, p < 0, large C: E off by a factor 20) or the power sums overflow, the moments
are unknown rather than reported. The p < 0 quadrature is exact for p ≤ −0.5 and flagged
approximate for −0.5 < p ≤ −0.1 (it loses digits as |1/p| grows). Large C: moments come from O(1)-memory sums
(:mod:`.asymptotics`).

Geometric-mean family (``p → 0``): ``GMR = Π rᵢ^{aᵢ}`` with ``aᵢ = wᵢ/W`` (or 1/n) and
``IGMR = 1/GMR = Π rᵢ^{−aᵢ}``. Independence makes their moments products of per-task
power moments, so both have closed forms:

    E[GMR^s]   = Π E[rᵢ^{s·aᵢ}],   Var = E[GMR²] − E[GMR]²  (s = ±1)

computed in log space with prefix sums (see :mod:`.moments`); Var as E²·expm1(Σ ln(1 + Var[rᵢ^{s·aᵢ}]/E[rᵢ^{s·aᵢ}]²))
with each term from central moments of ln r (:func:`~kgeval.metrics.moments.log_moment_spread`).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidInputError
from .base import UNKNOWN, Metric, NullMoments, ValueRange, wmean, wsum_sq
from .laplace import power_mean_null_gap, power_mean_terms
from .moments import (
    log_moment_spread,
    log_power_moment,
    log_power_moment_accurate,
    power_mean,
    power_moment,
    power_variance,
)

INF = math.inf


def _fmt_p(p: float) -> str:
    """p in the key: its shortest exact positional form (``2``, ``neg0_5``, ``0_0000001``), which
    the registry reads back to the same float (``:g`` kept six digits: 2.0000001 became ``2``)."""
    return np.format_float_positional(p, trim="-").replace("-", "neg").replace(".", "_")


class TransformedMean(Metric):
    """``M = g(Σ wᵢ f(rᵢ))``. Subclasses set :meth:`f` (= j^``exponent``); a non-identity
    ``g`` gets second-order delta-method moments: E[g(X)] ≈ g(μ) + ½g''(μ)σ², Var ≈ g'(μ)²σ²."""

    needs_candidates = False
    #: whether g is the identity (then moments and tie-expectation are exact)
    identity_post = True

    #: f(j) = j^exponent (hits@k overrides the task moments instead)
    exponent: float = 1.0

    def f(self, r: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def task_mean(self, c: np.ndarray) -> np.ndarray:
        """E[f(rᵢ)] per task (:func:`~kgeval.metrics.moments.power_moment`: O(1) memory in C)."""
        return power_moment(c, self.exponent)

    def task_var(self, c: np.ndarray) -> np.ndarray:
        return power_variance(c, self.exponent)

    def task_gap(self, c: np.ndarray) -> np.ndarray:
        """f(1) − E[f(rᵢ)] per task (f(1) = 1 for every f here): 0 for C = 1, and for C ≥ 2 bounded
        away from 0 relative to E[f], so the difference keeps its digits (subclasses override it
        where it would not). Their weighted mean is the optimum minus E for an identity g, all terms
        of one sign: the adjusted index's ``opt − E`` without the cancellation of ``1 − E``."""
        return 1.0 - self.task_mean(c)

    def range_mean(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """E[f(r)] for r uniform on lo..hi, per task."""
        return power_moment(hi, self.exponent, low=lo)

    # g and its derivatives (identity by default)
    def g(self, x):
        return x

    def dg(self, x):
        return 1.0

    def d2g(self, x):
        return 0.0

    def _compute(self, ranks, num_candidates, weights) -> float:
        return float(self.g(wmean(self.f(ranks), weights)))

    def _null_moments(self, c, w) -> NullMoments:
        mu = wmean(self.task_mean(c), w)
        var = wsum_sq(self.task_var(c), w)
        if self.identity_post:
            return NullMoments(mu, var, True, wmean(self.task_gap(c), w))
        return NullMoments(float(self.g(mu) + 0.5 * self.d2g(mu) * var), float(self.dg(mu) ** 2 * var), False)

    def _tie_expectation(self, lo, hi, c, w) -> float | None:
        if not self.identity_post:
            return None
        return wmean(self.range_mean(lo, hi), w)


class _Reciprocal:
    """g(x) = 1/x (IAMR = 1/MR, HMR = 1/MRR).

    Null moments are exact for any weights through the Laplace identities E[1/X] = ∫L(t)dt and
    E[1/X²] = ∫t·L(t)dt, see :func:`~kgeval.metrics.laplace.inverse_mean_variance`: E to ~1e-15,
    Var to ~5e-15 relative (measured against exact binomial sums, mpmath quadrature and exact fractions,
    for HMR and IAMR alike; tests/metrics/test_moments_hmr_excess.py, test_moments_small_variance.py)."""

    identity_post = False
    inverse_kind = "identity"

    def g(self, x):
        return 1.0 / x

    def dg(self, x):
        return -1.0 / x**2

    def d2g(self, x):
        return 2.0 / x**3

    def _null_moments(self, c, w) -> NullMoments:
        if wsum_sq(self.task_var(c), w) == 0:  # X is deterministic (all Cᵢ = 1): exact, no quadrature noise
            return NullMoments(float(self.g(wmean(self.task_mean(c), w))), 0.0, True, 0.0)
        # Var without E[1/X²] − E[1/X]² cancelling; E[1/X] = 1/μ + R
        mu, resid, var = power_mean_terms(c, w, self.exponent, -1.0)
        # 1 − E[1/X] = (μ − 1)/μ − R with μ − 1 = −Σ wᵢ(1 − E[f(rᵢ)]) summed without cancellation
        # (for IAMR R ≤ (μ − 1)/μ, of second order in the spread near μ = 1; for HMR both terms ≤ 0)
        gap = -wmean(self.task_gap(c), w) / mu - resid
        return NullMoments(float(1.0 / mu + resid), float(var), True, float(gap))


class _Identity:
    exponent = 1.0

    def f(self, r):
        return r

    # float64 before any arithmetic: C near 2⁶³ must not overflow int64
    def task_mean(self, c):
        return (np.asarray(c, dtype=np.float64) + 1) / 2.0

    def task_var(self, c):
        c = np.asarray(c, dtype=np.float64)
        return (c * c - 1) / 12.0

    def range_mean(self, lo, hi):
        return (np.asarray(lo, dtype=np.float64) + hi) / 2.0

    def task_gap(self, c):
        return (1.0 - np.asarray(c, dtype=np.float64)) / 2.0


class _Inverse:
    exponent = -1.0

    def f(self, r):
        return 1.0 / r


class ArithmeticMeanRank(_Identity, TransformedMean):
    """Mean rank (MR): the weighted arithmetic mean of the ranks; lower is better.

    Examples
    --------
    >>> ArithmeticMeanRank()([1, 2, 4])  # (1 + 2 + 4) / 3
    2.333...
    """

    key = "arithmetic_mean_rank"
    name = "Mean Rank (MR)"
    increasing = False
    value_range = ValueRange(1, INF, True, False)
    optimum = 1.0
    description = "MR = Σ wᵢ rᵢ / Σ wᵢ; E = Σ wᵢ(Cᵢ+1)/2 / W; Var = Σ wᵢ²(Cᵢ²−1)/12 / W²"


class InverseArithmeticMeanRank(_Reciprocal, _Identity, TransformedMean):
    key = "inverse_arithmetic_mean_rank"
    name = "Inverse Arithmetic Mean Rank (IAMR)"
    increasing = True
    value_range = ValueRange(0, 1, False, True)
    optimum = 1.0
    description = "IAMR = 1/MR; exact null moments by Laplace-transform quadrature"


class InverseHarmonicMeanRank(_Inverse, TransformedMean):
    """Mean reciprocal rank (MRR): the weighted mean of 1 / rank; higher is better.

    Examples
    --------
    >>> InverseHarmonicMeanRank()([1, 2, 4])  # (1 + 1/2 + 1/4) / 3
    0.583...
    """

    key = "inverse_harmonic_mean_rank"
    name = "Mean Reciprocal Rank (MRR)"
    increasing = True
    value_range = ValueRange(0, 1, False, True)
    optimum = 1.0
    description = "MRR = Σ wᵢ/rᵢ / W; E = Σ wᵢ H(Cᵢ)/Cᵢ / W; Var = Σ wᵢ²(Cᵢ H₂(Cᵢ) − H(Cᵢ)²)/Cᵢ² / W²"


class HarmonicMeanRank(_Reciprocal, _Inverse, TransformedMean):
    inverse_kind = "reciprocal"
    key = "harmonic_mean_rank"
    name = "Harmonic Mean Rank (HMR)"
    increasing = False
    value_range = ValueRange(1, INF, True, False)
    optimum = 1.0
    description = "HMR = 1/MRR; exact null moments by Laplace-transform quadrature"


class HitsAtK(TransformedMean):
    """hits@k = Σ wᵢ I[rᵢ ≤ k] / W; pᵢ = min(k, Cᵢ)/Cᵢ, E = Σ wᵢ pᵢ / W, Var = Σ wᵢ² pᵢ(1−pᵢ) / W²."""

    name = "Hits @ K"
    increasing = True
    value_range = ValueRange(0, 1, True, True)
    optimum = 1.0

    def __init__(self, k: int = 10):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidInputError(f"hits@k needs a whole number k >= 1, got {k!r}")
        self.k = int(k)
        # no rank exceeds 2**62 (see check_candidates): a larger k counts every task, and numpy
        # cannot compare against a Python int beyond int64
        self._k = min(self.k, 2**62)
        self.key = f"hits_at_{self.k}"
        self.name = f"Hits @ {self.k}"
        self.description = HitsAtK.__doc__

    def f(self, r):
        return (r <= self._k).astype(np.float64)

    def task_mean(self, c):
        return np.minimum(c, self._k) / np.asarray(c, dtype=np.float64)

    def range_mean(self, lo, hi):
        lo = np.asarray(lo, dtype=np.float64)
        return np.clip(np.minimum(hi, self._k) - lo + 1, 0, None) / (hi - lo + 1)

    def task_var(self, c):
        # 1 − p as (C − min(k, C))/C: 1 − min(k, C)/C cancels where k is just below C
        # (C = 10¹² + 1, k = 10¹²: Var 2.2e-5 off; C = 2⁶², k = C − 1: 0 instead of 2.2e-19)
        c = np.asarray(c)
        hit = np.minimum(c, self._k)
        cf = c.astype(np.float64)
        return (hit / cf) * ((c - hit) / cf)

    def task_gap(self, c):
        # 1 − p as (C − min(k, C))/C, as in task_var
        c = np.asarray(c)
        return (c - np.minimum(c, self._k)) / c.astype(np.float64)


class PowerMeanRank(TransformedMean):
    """Generalised (power / Hölder) mean rank M_p = (Σ wᵢ rᵢ^p / W)^(1/p) (Hoyt, Berrendorf et al., 2022, Table 3).

    p = 1 is MR, p = −1 is HMR, p → 0 the GMR (use :class:`GeometricMeanRank`).
    """

    increasing = False
    value_range = ValueRange(1, INF, True, False)
    optimum = 1.0

    def __init__(self, p: float = 2.0):
        try:
            p = float(p)
        except (TypeError, ValueError):
            raise InvalidInputError(f"power mean needs a numeric p, got {p!r}") from None
        if not math.isfinite(p) or p == 0:
            raise InvalidInputError(f"power mean needs a finite p != 0 (use geometric_mean_rank for p = 0), got {p}")
        self.p = self.exponent = p
        self.key = f"power_mean_rank_p{_fmt_p(p)}"
        self.name = f"Power Mean Rank (p={p:g})"
        self.identity_post = p == 1.0
        self.description = PowerMeanRank.__doc__

    def f(self, r):
        return r**self.p

    def _compute(self, ranks, num_candidates, weights) -> float:
        return float(power_mean(ranks, weights, self.p))  # no overflow for large |p| (see power_mean)

    def _null_moments(self, c, w) -> NullMoments:
        """Exact where :func:`~kgeval.metrics.laplace.power_mean_null` applies (one task, small
        enumerations, p < 0 by quadrature), else the delta method (see the module table). Where
        the power sums overflow (large p: Σ j^p beyond float range) the moments are unknown, not
        inf or NaN; :meth:`monte_carlo` still estimates them."""
        with np.errstate(over="ignore", invalid="ignore"):
            exact = None if self.identity_post else power_mean_null_gap(c, w, self.p)
            if exact is None:
                moments = super()._null_moments(c, w)
                if not moments.exact and self._delta_invalid(c, w):
                    return UNKNOWN
            else:
                gap = None if exact[3] is None or not math.isfinite(exact[3]) else float(exact[3])
                moments = NullMoments(float(exact[0]), float(exact[1]), bool(exact[2]), gap)
        if not (math.isfinite(moments.mean) and math.isfinite(moments.variance)):
            return UNKNOWN
        return moments

    #: the delta method's second-order term relative to g(μ) above this: the expansion is not an
    #: approximation (the term stays ≤ 0.13 where its errors are the documented E 8%, Var 33%;
    #: far above, its mean can lie above every possible value)
    _DELTA_MAX_TERM = 0.25

    def _delta_invalid(self, c, w) -> bool:
        mu, var = wmean(self.task_mean(c), w), wsum_sq(self.task_var(c), w)
        return not abs(0.5 * self.d2g(mu) * var) <= self._DELTA_MAX_TERM * abs(self.g(mu))

    def g(self, x):
        return x ** (1.0 / self.p)

    def dg(self, x):
        q = 1.0 / self.p
        return q * x ** (q - 1)

    def d2g(self, x):
        q = 1.0 / self.p
        return q * (q - 1) * x ** (q - 2)


class _GeometricBase(Metric):
    """GMR^s with s = +1 (GMR) or −1 (IGMR); exact moments as products of power moments."""

    sign = 1.0

    @staticmethod
    def _exponents(n: int, w):
        return 1.0 / n if w is None else w

    def _compute(self, ranks, num_candidates, weights) -> float:
        return float(math.exp(self.sign * wmean(np.log(ranks), weights)))

    def _null_moments(self, c, w) -> NullMoments:
        a = np.asarray(self._exponents(c.size, w))
        # Σ ln E[rᵢ^{±aᵢ}], each log to its own relative accuracy (all of one sign), so that 1 − E =
        # −expm1(log1) keeps its digits near E = 1 (tiny aᵢ on the random tasks), where the logs of
        # log_power_moment kept ~1e-19 absolute (3e-10 relative of ln E[r^{1e-9}] at C = 2)
        log1 = np.sum(log_power_moment_accurate(c, self.sign * a))
        # Var = E[M²] − E[M]² = E[M]² · expm1(Σ ln E[rᵢ^{2aᵢ}] − 2 ln E[rᵢ^{aᵢ}]), each term ≥ 0 from
        # log_moment_spread (the difference of the two sums of logs lost ~n²·1e-19 relative)
        spread = np.sum(log_moment_spread(c, self.sign * a))
        gap = -math.expm1(float(log1))
        return NullMoments(float(np.exp(log1)), float(np.exp(2 * log1) * np.expm1(spread)), True, gap)

    def _tie_expectation(self, lo, hi, c, w) -> float | None:
        a = np.asarray(self._exponents(lo.size, w))
        return float(np.exp(np.sum(log_power_moment(hi, self.sign * a, low=lo))))


class GeometricMeanRank(_GeometricBase):
    key = "geometric_mean_rank"
    name = "Geometric Mean Rank (GMR)"
    increasing = False
    value_range = ValueRange(1, INF, True, False)
    optimum = 1.0
    description = "GMR = Π rᵢ^(wᵢ/W); E = Π E[rᵢ^(wᵢ/W)] with E[r^a] = H_{−a}(C)/C"


class InverseGeometricMeanRank(_GeometricBase):
    key = "inverse_geometric_mean_rank"
    name = "Inverse Geometric Mean Rank (IGMR)"
    increasing = True
    value_range = ValueRange(0, 1, False, True)
    optimum = 1.0
    sign = -1.0
    description = "IGMR = 1/GMR = Π rᵢ^(−wᵢ/W); E = Π E[rᵢ^(−wᵢ/W)], Var = Π E[rᵢ^(−2wᵢ/W)] − E²"


__all__ = [
    "TransformedMean",
    "ArithmeticMeanRank",
    "InverseArithmeticMeanRank",
    "InverseHarmonicMeanRank",
    "HarmonicMeanRank",
    "HitsAtK",
    "PowerMeanRank",
    "GeometricMeanRank",
    "InverseGeometricMeanRank",
]
