"""Order-statistic and dispersion metrics: median, inverse median, standard deviation,
variance, median absolute deviation, count.

Median expectation under the null. With Sₓ = #{i : rᵢ ≤ x} (a sum of independent
Bernoulli(pᵢ(x) = min(x, Cᵢ)/Cᵢ)), the k-th order statistic satisfies
P(X₍ₖ₎ > x) = P(Sₓ ≤ k − 1), hence

    E[X₍ₖ₎] = Σ_{x=0}^{max C − 1} P(Sₓ ≤ k − 1).

The median is X₍₍ₙ₊₁₎/₂₎ for odd n and the mean of X₍ₙ/₂₎ and X₍ₙ/₂₊₁₎ for even n (PyKEEN's
closed form uses the upper median for even n, which is wrong). P(Sₓ ≤ m) is computed

- exactly by symmetry when all Cᵢ are equal: E[median] = (C + 1)/2 (r ↦ C + 1 − r preserves the null);
- exactly with a Poisson-binomial dynamic programme when n · max C · (n/2) is small
  (≤ 3·10⁷ operations);
- otherwise with the refined normal approximation (skewness-corrected,
  G(t) = Φ(t) + γ(1 − t²)φ(t)/6, t = (m + ½ − μ)/σ), whose μ, σ², κ₃ are suffix sums over
  the sorted Cᵢ: O(n log n + max C), never PyKEEN's Θ(max C · n²). Its error is measured in the
  tests (relative error below 10⁻³ from n ≈ 100 on).

Above max C = 2²⁰ the sum over x is not materialised: x < 2²⁰ one by one, the rest by
Gauss–Legendre quadrature (see :func:`_order_stat_mean`; approximate, memory independent of C).
"""

from __future__ import annotations

import math

import numpy as np

from .base import UNKNOWN, Metric, NullMoments, ValueRange, wmean

INF = math.inf
_DP_BUDGET = 3e7
_SUM_MAX = 2**20  # E[X₍ₖ₎] sums over every x below this, see _order_stat_mean
MAD_SCALE = 1.482602218505602  # 1/Φ⁻¹(3/4): makes the MAD a consistent estimator of σ (scipy's scale="normal")


def weighted_median(x: np.ndarray, w: np.ndarray | None) -> float:
    """Median; weighted: the value where cumulative weight crosses ½ (midpoint of the two
    neighbours when it hits ½ exactly, so unit weights give the ordinary median)."""
    if w is None:
        return float(np.median(x))
    order = np.argsort(x, kind="stable")
    xs, cw = x[order], np.cumsum(w[order])
    total = cw[-1]
    i = int(np.searchsorted(cw, 0.5 * total - 1e-12 * total))
    if abs(cw[i] - 0.5 * total) <= 1e-12 * total and i + 1 < xs.size:
        return float(0.5 * (xs[i] + xs[i + 1]))
    return float(xs[i])


def _survival_at(x: np.ndarray, c: np.ndarray, k: int) -> tuple[np.ndarray, bool]:
    """P(X₍ₖ₎ > x) = P(Sₓ ≤ k − 1) at the points ``x`` (any reals in [0, max C]), and whether exact.

    Exact Poisson-binomial DP when n · len(x) · k ≤ budget, else the refined normal
    approximation, whose μ, σ², κ₃ are suffix sums over the sorted Cᵢ read with searchsorted:
    memory O(n + len(x)), independent of C."""
    n = c.size
    if n * x.size * k <= _DP_BUDGET:
        # pmf[x, j] = P(Sₓ = j) for j < k; mass beyond k − 1 is dropped (not needed)
        pmf = np.zeros((x.size, k), dtype=np.float64)
        pmf[:, 0] = 1.0
        for ci in c:
            p = np.minimum(x / float(ci), 1.0)[:, None]
            shifted = np.concatenate([np.zeros((x.size, 1)), pmf[:, :-1]], axis=1)
            pmf = pmf * (1 - p) + shifted * p
        return pmf.sum(axis=1), True
    if c.max() <= 2**22:  # distinct values and counts without sorting n (n may be 10⁷)
        counts = np.bincount(c)
        vals = np.flatnonzero(counts)
        counts = counts[vals]
    else:
        vals, counts = np.unique(c, return_counts=True)
    vals, counts = vals.astype(np.float64), counts.astype(np.float64)
    idx = np.searchsorted(vals, x, side="right")
    n_le = np.append(0.0, np.cumsum(counts))[idx]  # #{Cᵢ ≤ x}
    t1, t2, t3 = (np.append(np.cumsum((counts * vals**-p)[::-1])[::-1], 0.0)[idx] for p in (1, 2, 3))  # Σ_{Cᵢ > x} Cᵢ^(−p)
    mu = n_le + x * t1
    var = np.maximum(x * t1 - x * x * t2, 0.0)
    k3 = x * t1 - 3 * x * x * t2 + 2 * x**3 * t3
    out = np.empty(x.size, dtype=np.float64)
    det = var <= 1e-300
    out[det] = (mu[det] <= k - 1 + 1e-9).astype(np.float64)
    s = np.sqrt(var[~det])
    t = (k - 1 + 0.5 - mu[~det]) / s
    gamma = k3[~det] / s**3
    out[~det] = np.clip(_normal_cdf(t) + gamma * (1 - t * t) * _normal_pdf(t) / 6.0, 0.0, 1.0)
    return out, False


# Φ and φ without scipy.stats, whose import alone cost more than the whole default result
def _normal_cdf(t: np.ndarray) -> np.ndarray:
    # outside (−40, 9) Φ is exactly 0 or 1 in float64: only the window needs erfc, one call each
    out = (t > 0).astype(np.float64)
    mid = (t > -40.0) & (t < 9.0)
    out[mid] = [0.5 * math.erfc(-v / math.sqrt(2.0)) for v in t[mid].tolist()]
    return out


def _normal_pdf(t: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)


def _order_stat_mean(c: np.ndarray, k: int) -> tuple[float, bool]:
    """E[X₍ₖ₎] = Σ_{x=0}^{max C − 1} P(X₍ₖ₎ > x), and whether it is exact.

    Up to :data:`_SUM_MAX` the sum runs over every x. Beyond, x < _SUM_MAX are still summed
    one by one and the rest is Σ_{x=a}^{M−1} s(x) ≈ ∫_a^M s + s(a)/2 (Euler–Maclaurin, s(M) = 0;
    the neglected terms are ≈ (1/12)·Σ jumps of s' ≤ n/(6a) absolute), with the integral by
    24-point Gauss–Legendre on at most 256 segments between the breakpoints Cᵢ (s is a
    polynomial between them): memory independent of C, flagged approximate."""
    max_c = int(c.max())
    if max_c <= _SUM_MAX:
        surv, exact = _survival_at(np.arange(max_c, dtype=np.float64), c, k)
        return float(surv.sum()), exact
    head, _ = _survival_at(np.arange(_SUM_MAX, dtype=np.float64), c, k)
    brk = np.unique(np.concatenate([[float(_SUM_MAX), float(max_c)], c[c > _SUM_MAX].astype(np.float64)]))
    if brk.size > 257:  # keep the extremes, thin the rest (kinks inside a segment: small error)
        brk = np.unique(np.quantile(brk, np.linspace(0, 1, 257)))
    gx, gw = np.polynomial.legendre.leggauss(24)
    a, b = brk[:-1, None], brk[1:, None]
    nodes = (0.5 * (b - a) * gx[None, :] + 0.5 * (a + b)).ravel()
    weights = (0.5 * (b - a) * gw[None, :]).ravel()
    s_nodes, _ = _survival_at(nodes, c, k)
    s_a, _ = _survival_at(np.array([float(_SUM_MAX)]), c, k)
    return float(head.sum() + np.dot(weights, s_nodes) + 0.5 * s_a[0]), False


def median_expectation(c: np.ndarray) -> tuple[float, bool]:
    """E[median] under rᵢ ~ U{1..Cᵢ}; returns (value, exact)."""
    n = c.size
    if np.all(c == c[0]):  # r ↦ C + 1 − r maps the null to itself: the median is symmetric about (C+1)/2
        return (float(c[0]) + 1.0) / 2.0, True
    if n % 2 == 1:
        return _order_stat_mean(c, (n + 1) // 2)
    lo, e1 = _order_stat_mean(c, n // 2)
    hi, e2 = _order_stat_mean(c, n // 2 + 1)
    return 0.5 * (lo + hi), e1 and e2


class MedianRank(Metric):
    key = "median_rank"
    name = "Median Rank"
    increasing = False
    value_range = ValueRange(1, INF, True, False)
    optimum = 1.0
    description = "median of the ranks (mean of the two middle ones for even n)"

    def compute(self, ranks, num_candidates, weights) -> float:
        return weighted_median(ranks, weights)

    def null_moments(self, c, w) -> NullMoments:
        """E only (exact in the tractable cases, see :func:`median_expectation`); none for the
        weighted median."""
        if w is not None:
            return UNKNOWN
        mean, exact = median_expectation(c)
        return NullMoments(mean, None, exact)


class InverseMedianRank(Metric):
    key = "inverse_median_rank"
    name = "Inverse Median Rank"
    increasing = True
    value_range = ValueRange(0, 1, False, True)
    optimum = 1.0
    description = "1 / median rank"

    def compute(self, ranks, num_candidates, weights) -> float:
        return 1.0 / weighted_median(ranks, weights)


class StandardDeviation(Metric):
    key = "standard_deviation"
    name = "Standard Deviation of the Ranks"
    value_range = ValueRange(0, INF, True, False)
    description = "population standard deviation √(Σ wᵢ (rᵢ − MR)² / W)"

    def compute(self, ranks, num_candidates, weights) -> float:
        return math.sqrt(Variance().compute(ranks, num_candidates, weights))


class Variance(Metric):
    key = "variance"
    name = "Variance of the Ranks"
    value_range = ValueRange(0, INF, True, False)
    description = "population variance Σ wᵢ (rᵢ − MR)² / W"

    def compute(self, ranks, num_candidates, weights) -> float:
        m = wmean(ranks, weights)
        return max(wmean((ranks - m) ** 2, weights), 0.0)


class MedianAbsoluteDeviation(Metric):
    key = "median_absolute_deviation"
    name = "Median Absolute Deviation (MAD)"
    value_range = ValueRange(0, INF, True, False)
    description = "1.4826 · median |rᵢ − median(r)| (normal-consistent scale, as PyKEEN/scipy)"

    def compute(self, ranks, num_candidates, weights) -> float:
        med = weighted_median(ranks, weights)
        return MAD_SCALE * weighted_median(np.abs(ranks - med), weights)


class Count(Metric):
    key = "count"
    name = "Count"
    value_range = ValueRange(0, INF, True, False)
    description = "number of ranking tasks (weights do not change it)"

    def compute(self, ranks, num_candidates, weights) -> float:
        return float(ranks.size)

    def null_moments(self, c, w) -> NullMoments:
        return NullMoments(float(c.size), 0.0, True)

    def tie_expectation(self, lo, hi, c, w) -> float | None:
        return float(lo.size)
