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
  the sorted Cᵢ: O(n + distinct C) once, then O(1) per point x, never PyKEEN's Θ(max C · n²).
  Its error is measured in the tests (relative error below 10⁻³ from n ≈ 100 on).

The sum over x is materialised only while it is exact and cheap (the DP within its budget, max C
≤ 2²⁰) or small (max C ≤ 2¹⁶). Otherwise x < 2¹² are summed one by one and the rest by
Euler–Maclaurin with Gauss–Legendre cells (see :func:`_order_stat_mean`; approximate, cost and
memory independent of C).
"""

from __future__ import annotations

import math

import numpy as np

from .base import UNKNOWN, Metric, NullMoments, ValueRange, wmean

INF = math.inf
_DP_BUDGET = 3e7
_SUM_MAX = 2**20  # E[X₍ₖ₎] may sum over every x below this, see _order_stat_mean
_DIRECT_MAX = 2**16  # ... and does so for the normal approximation only up to this max C
_HEAD = 2**12  # beyond, x below this are summed one by one and the rest integrated
_CELLS = 4096  # least number of Gauss–Legendre cells over [_HEAD, max C]
_ERFC_LOOP_MAX = 2**14  # Φ by math.erfc per point up to this many, else scipy.special.ndtr
MAD_SCALE = 1.482602218505602  # 1/Φ⁻¹(3/4): makes the MAD a consistent estimator of σ (scipy's scale="normal")


def weighted_median(x: np.ndarray, w: np.ndarray | None) -> float:
    """Median; weighted: the value where cumulative weight crosses ½ (midpoint of the two
    neighbours when it hits ½ exactly, so unit weights give the ordinary median)."""
    if w is None:
        return float(np.median(x))
    keep = w > 0
    if not keep.all():  # a task of weight 0 counts nowhere, so it is never the midpoint partner either
        x, w = x[keep], w[keep]
    if np.all(w == w[0]):  # equal weights: the ordinary median, with no cumulative-sum rounding
        return float(np.median(x))
    order = np.argsort(x, kind="stable")
    xs, cw = x[order], np.cumsum(w[order].astype(np.longdouble))
    total = cw[-1]
    # a cumulative weight within the summation's rounding (< n·eps relative) of ½ is ½
    tol = total * max(1e-12, 2 * xs.size * float(np.finfo(cw.dtype).eps))
    i = int(np.searchsorted(cw, 0.5 * total - tol))
    if abs(cw[i] - 0.5 * total) <= tol and i + 1 < xs.size:
        return float(0.5 * (xs[i] + xs[i + 1]))
    return float(xs[i])


class _Survival:
    """x ↦ P(X₍ₖ₎ > x) = P(Sₓ ≤ k − 1) for one (c, k); the per-task work is done once here.

    Called on arrays of points (any reals in [0, max C]); returns ``(values, exact)``. Exact
    Poisson-binomial DP when n · len(x) · k ≤ budget, else the refined normal approximation,
    whose μ, σ², κ₃ are suffix sums over the sorted distinct Cᵢ read with searchsorted: memory
    O(distinct C + len(x)), independent of C.
    """

    def __init__(self, c: np.ndarray, k: int):
        self.c, self.k = c, k
        if c.max() <= max(2**16, 4 * c.size):  # distinct values without sorting n (n may be 10⁷), memory O(n)
            counts = np.bincount(c)
            vals = np.flatnonzero(counts)
            counts = counts[vals]
        else:
            vals, counts = np.unique(c, return_counts=True)
        self.vals, counts = vals.astype(np.float64), counts.astype(np.float64)
        self.n_le = np.append(0.0, np.cumsum(counts))  # #{Cᵢ ≤ x} at index searchsorted(vals, x, 'right')
        # Σ_{Cᵢ > x} Cᵢ^(−p), p = 1, 2, 3, at the same index
        self.tails = [np.append(np.cumsum((counts * self.vals**-p)[::-1])[::-1], 0.0) for p in (1, 2, 3)]

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, bool]:
        c, k = self.c, self.k
        if c.size * x.size * k <= _DP_BUDGET:
            # pmf[x, j] = P(Sₓ = j) for j < k; mass beyond k − 1 is dropped (not needed)
            pmf = np.zeros((x.size, k), dtype=np.float64)
            pmf[:, 0] = 1.0
            for ci in c:
                p = np.minimum(x / float(ci), 1.0)[:, None]
                shifted = np.concatenate([np.zeros((x.size, 1)), pmf[:, :-1]], axis=1)
                pmf = pmf * (1 - p) + shifted * p
            return pmf.sum(axis=1), True
        idx = np.searchsorted(self.vals, x, side="right")
        t1, t2, t3 = (t[idx] for t in self.tails)
        mu = self.n_le[idx] + x * t1
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


def _survival_at(x: np.ndarray, c: np.ndarray, k: int) -> tuple[np.ndarray, bool]:
    """P(X₍ₖ₎ > x) at the points ``x``, and whether exact (see :class:`_Survival`)."""
    return _Survival(c, k)(x)


def _normal_cdf(t: np.ndarray) -> np.ndarray:
    """Φ. Outside (−40, 9) Φ is exactly 0 or 1 in float64: only the window needs erfc. Many
    points: scipy.special.ndtr (vectorised; a Python loop over math.erfc is slow there). Few
    (≤ 2¹⁴): math.erfc per point, sparing the import of scipy.special, which costs more than the
    loop (scipy.stats would cost more than the whole default result)."""
    out = (t > 0).astype(np.float64)
    mid = (t > -40.0) & (t < 9.0)
    if np.count_nonzero(mid) <= _ERFC_LOOP_MAX:
        out[mid] = [0.5 * math.erfc(-v / math.sqrt(2.0)) for v in t[mid].tolist()]
    else:
        from scipy.special import ndtr  # lazy: a slow import that most results never need

        out[mid] = ndtr(t[mid])
    return out


def _normal_pdf(t: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)


def _order_stat_mean(c: np.ndarray, k: int) -> tuple[float, bool]:
    """E[X₍ₖ₎] and whether it is exact (:func:`_order_stat_mean_gap`)."""
    return _order_stat_mean_gap(c, k)[:2]


def _order_stat_mean_gap(c: np.ndarray, k: int) -> tuple[float, bool, float | None]:
    """E[X₍ₖ₎] = Σ_{x=0}^{max C − 1} s(x), s(x) = P(X₍ₖ₎ > x), whether it is exact, and
    E[X₍ₖ₎] − 1 as Σ_{x≥1} s(x) (s(0) = 1) where every x is summed (else None): near E = 1 (most
    tasks with C = 1) the difference E − 1 kept only the sum's rounding.

    The sum runs over every x when max C ≤ :data:`_SUM_MAX` and either the exact DP covers all
    of them (n · max C · k ≤ budget: cost bounded by the budget) or max C ≤ :data:`_DIRECT_MAX`.
    Otherwise (the normal approximation at large C, or max C > _SUM_MAX; flagged approximate)
    x < a = :data:`_HEAD` are summed one by one and the rest is

        Σ_{x=a}^{M−1} s(x) = ∫_a^M s + s(a)/2 + (s'(M⁻) − s'(a⁺))/12 + Σ_b (s'(b⁻) − s'(b⁺))/12 + …

    (Euler–Maclaurin over the pieces between the breakpoints b = Cᵢ, where s' jumps; s(M) = 0),
    with the one-sided s' by differences of s at neighbouring integers. The integral is 24-point
    Gauss–Legendre on cells: ``max(4096, 4√n)`` (at most 2¹⁶) equal cells of [a, M] refined by
    the breakpoints (s is a polynomial between them for the DP). A cell whose ends are both
    exactly 0 or both exactly 1 (s is monotone) contributes its length times that value without
    nodes. The cells are finer than the drop of s (width ≈ M/(2√n)), so the rule resolves it.
    With more than 4096 distinct Cᵢ in (a, M) the breakpoints are thinned by quantile and their
    jump terms dropped (kinks inside cells). Against the sum over every x with the same s
    (tests/metrics/test_null_moments_scaling.py): ≤ 2e-13 relative for the DP, ≤ 7e-12 for the
    normal form, ≤ 1.1e-9 with thinned breakpoints; far below the normal approximation's own error.
    Cost and memory O(n + cells · 24), not O(M).
    """
    max_c = int(c.max())
    surv = _Survival(c, k)
    direct = max_c <= _SUM_MAX and (c.size * max_c * k <= _DP_BUDGET or max_c <= _DIRECT_MAX)
    if direct:
        s, exact = surv(np.arange(max_c, dtype=np.float64))
        return float(s.sum()), exact, float(s[1:].sum())
    a = min(_HEAD, _SUM_MAX, max_c)
    head, _ = surv(np.arange(a, dtype=np.float64))
    cells = int(min(max(_CELLS, 4 * math.isqrt(c.size)), 2**16))
    brk = np.unique(c[(c > a) & (c < max_c)]).astype(np.float64)
    thinned = brk.size > _CELLS
    if thinned:  # keep the extremes, thin the rest (kinks inside a cell: small error)
        brk = np.quantile(brk, np.linspace(0, 1, _CELLS + 1))
    edges = np.unique(np.concatenate([np.linspace(float(a), float(max_c), cells + 1), brk]))
    # s at the edges, and at the integer neighbours the derivative terms need (a + 1, M − 1, b ± 1)
    kinks = np.empty(0) if thinned else brk
    probe = np.concatenate([edges, [a + 1.0, max_c - 1.0], kinks - 1.0, kinks, kinks + 1.0])
    s_probe, _ = surv(probe)
    s_edge = s_probe[: edges.size]
    s_a1, s_m1 = s_probe[edges.size : edges.size + 2]
    before, at, after = s_probe[edges.size + 2 :].reshape(3, -1)
    # Euler–Maclaurin: ∫ + s(a)/2 (s(M) = 0) + (s'(M⁻) − s'(a⁺))/12 + Σ_b (s'(b⁻) − s'(b⁺))/12
    # with one-sided differences for s' (their error is O(s''), s'' ≈ n/M²)
    total = float(head.sum()) + 0.5 * float(s_edge[0])
    total += ((0.0 - s_m1) - (s_a1 - s_edge[0])) / 12.0 + float(np.sum(2 * at - before - after)) / 12.0
    lo, hi, width = s_edge[:-1], s_edge[1:], np.diff(edges)
    flat = (lo == hi) & ((lo == 0.0) | (lo == 1.0))
    total += float(np.sum(width[flat] * lo[flat]))
    if not flat.all():
        gx, gw = np.polynomial.legendre.leggauss(24)
        left, half = edges[:-1][~flat, None], 0.5 * width[~flat, None]
        s_nodes, _ = surv((left + half * (gx[None, :] + 1.0)).ravel())
        total += float(np.dot((half * gw[None, :]).ravel(), s_nodes))
    return float(total), False, None


def median_expectation(c: np.ndarray) -> tuple[float, bool]:
    """E[median] under rᵢ ~ U{1..Cᵢ}; returns (value, exact)."""
    return median_expectation_gap(c)[:2]


def median_expectation_gap(c: np.ndarray) -> tuple[float, bool, float | None]:
    """(E[median], exact, 1 − E[median]), the last without cancellation where every point is
    summed (see :func:`_order_stat_mean_gap`), else None."""
    n = c.size
    if np.all(c == c[0]):  # r ↦ C + 1 − r maps the null to itself: the median is symmetric about (C+1)/2
        return (float(c[0]) + 1.0) / 2.0, True, (1.0 - float(c[0])) / 2.0
    if n % 2 == 1:
        mean, exact, above = _order_stat_mean_gap(c, (n + 1) // 2)
        return mean, exact, None if above is None else -above
    lo, e1, a1 = _order_stat_mean_gap(c, n // 2)
    hi, e2, a2 = _order_stat_mean_gap(c, n // 2 + 1)
    return 0.5 * (lo + hi), e1 and e2, None if a1 is None or a2 is None else -0.5 * (a1 + a2)


class MedianRank(Metric):
    """The (weighted) median of the ranks; lower is better.

    Examples
    --------
    >>> MedianRank()([1, 2, 4, 100])  # the mean of the two middle ranks
    3.0
    """

    key = "median_rank"
    name = "Median Rank"
    increasing = False
    value_range = ValueRange(1, INF, True, False)
    optimum = 1.0
    description = "median of the ranks (mean of the two middle ones for even n)"

    def _compute(self, ranks, num_candidates, weights) -> float:
        return weighted_median(ranks, weights)

    def _null_moments(self, c, w) -> NullMoments:
        """E only (exact in the tractable cases, see :func:`median_expectation`); none for the
        weighted median."""
        if w is not None:
            return UNKNOWN
        mean, exact, gap = median_expectation_gap(c)
        return NullMoments(mean, None, exact, gap)


class InverseMedianRank(Metric):
    key = "inverse_median_rank"
    name = "Inverse Median Rank"
    increasing = True
    value_range = ValueRange(0, 1, False, True)
    optimum = 1.0
    description = "1 / median rank"

    def _compute(self, ranks, num_candidates, weights) -> float:
        return 1.0 / weighted_median(ranks, weights)


class StandardDeviation(Metric):
    key = "standard_deviation"
    name = "Standard Deviation of the Ranks"
    value_range = ValueRange(0, INF, True, False)
    description = "population standard deviation √(Σ wᵢ (rᵢ − MR)² / W)"

    def _compute(self, ranks, num_candidates, weights) -> float:
        return math.sqrt(Variance()._compute(ranks, num_candidates, weights))


class Variance(Metric):
    key = "variance"
    name = "Variance of the Ranks"
    value_range = ValueRange(0, INF, True, False)
    description = "population variance Σ wᵢ (rᵢ − MR)² / W"

    def _compute(self, ranks, num_candidates, weights) -> float:
        m = wmean(ranks, weights)
        return max(wmean((ranks - m) ** 2, weights), 0.0)


class MedianAbsoluteDeviation(Metric):
    key = "median_absolute_deviation"
    name = "Median Absolute Deviation (MAD)"
    value_range = ValueRange(0, INF, True, False)
    description = "1.4826 · median |rᵢ − median(r)| (normal-consistent scale, as PyKEEN/scipy)"

    def _compute(self, ranks, num_candidates, weights) -> float:
        med = weighted_median(ranks, weights)
        return MAD_SCALE * weighted_median(np.abs(ranks - med), weights)


class Count(Metric):
    key = "count"
    name = "Count"
    value_range = ValueRange(0, INF, True, False)
    description = "number of ranking tasks (weights do not change it)"

    def _compute(self, ranks, num_candidates, weights) -> float:
        return float(ranks.size)

    def _null_moments(self, c, w) -> NullMoments:
        return NullMoments(float(c.size), 0.0, True)

    def _tie_expectation(self, lo, hi, c, w) -> float | None:
        return float(lo.size)
