"""Exact null moments of reciprocal means (IAMR = 1/MR, HMR = 1/MRR) by Laplace transforms.

For X = Σ wᵢ f(rᵢ) > 0 (weights normalised) with independent rᵢ ~ U{1..Cᵢ}:

    E[X⁻¹] = ∫₀^∞ L(t) dt,   E[X⁻²] = ∫₀^∞ t L(t) dt,   L(t) = E[e^{−tX}] = Πᵢ φ_{Cᵢ}(t wᵢ)

with φ_C(s) = (1/C) Σ_{j≤C} e^{−s f(j)}: independence makes L a product over tasks, for ANY
weights. Tasks are grouped into distinct (Cᵢ, wᵢ) pairs; each costs O(1) per quadrature node:

- f(j) = j (IAMR): φ_C(s) = e^{−s}(1 − e^{−sC}) / (C(1 − e^{−s})), a geometric sum;
- f(j) = 1/j (HMR): C·φ_C(u) = G(u, C) = Σ_{j≤C} e^{−u/j} (:func:`reciprocal_exp_sum`). With at most 8
  distinct weights and C ≤ 2²⁰ one cumulative sum over j per node and weight serves all
  C (the fast path for unweighted results with many distinct C); otherwise, or where it is the
  cheaper (#weights · max C > max(64 · #pairs, 2¹⁶), e.g. full ranking: few distinct C, all large), O(1)
  per pair and node.

Quadrature: t = eʸ makes the integrand analytic in the strip |Im y| < π/2, where the
trapezoid rule on the infinite line (nodes y₀ + (k + ½)h, which is also the midpoint rule)
converges like exp(−π²/h). h = 0.2: Var ≤ 5e-15 relative, E ≤ 2e-15, against exact fractions,
mpmath enumeration and binomial sums (p = −3 … −0.5, HMR, IAMR); a coarser step keeps E but not
the variances' residual integrals, which need the smaller step (errors per step in
benchmarks/results/engineering-notes-2026-11-28.md). We integrate the residual
L(t) − e^{−μt} (O(t²) at 0; μ = E[X]) and add ∫e^{−μt} = 1/μ, ∫t e^{−μt} = 1/μ². The range is
cut where the neglected parts are below 10⁻¹⁸ relative: below t₀ the residual is at most
t²E[X²]/2, and above t₁ = (100 + 2 ln(μ/x_min))/x_min, L(t) ≤ e^{−t·x_min} with
x_min = Σ wᵢ min f. Variances come from the residual integrals, Var = R_{2β} − 2μ^β R_β − R_β²
(:func:`power_mean_variance`), never as E[X^{2β}] − E[X^β]², which loses every digit where
Var ≪ E² (a C = 1 task of large weight). Tests: brute-force enumeration (1e-10), Monte Carlo,
both paths, mpmath and exact fractions at Var/E² down to 1e-17 (tests/metrics/test_moments_small_variance.py).
"""

from __future__ import annotations

import math

import numpy as np

# the per-node terms and G(u, C) live in their own modules; the names tests and benchmarks reach
# through this module (monkeypatched switches, caches) stay importable from here
from .laplace_terms import (  # noqa: F401
    _central_coef,
    _excess_identity,
    _excess_reciprocal,
    _log_l_identity,
    _log_l_prefix,
    _log_phi_prefix,
    _pair_sum,
)
from .moments import _DIRECT_EXPONENT, power_mean, power_moment, power_variance
from .reciprocal_sums import _H_CACHE, _harmonic, _log_phi_reciprocal, reciprocal_exp_sum  # noqa: F401

_H = 0.2  # trapezoid step in y = ln t
_PREFIX_MAX = 2**20  # cumulative-sum path up to this C (its time and memory grow as nodes × max C)
# f(j) = 1/j has both paths: a cumulative sum over j ≤ max C per node and weight, or O(1) per node
# and (C, w) pair (series / Euler–Maclaurin), which costs about as much as _PAIR_COST cumulative-sum
# cells. The cheaper one is taken, so the cost is O(nodes × pairs) and never grows with C. The pair
# path is also the more accurate one at large C: a float64 cumulative sum's rounding grows with C.
# (Timings and errors of both paths: benchmarks/results/engineering-notes-2026-11-28.md.)
_PAIR_COST = 64
# ... except up to 2¹⁶ cells per node, where the cumulative sum is cheap anyway: the series path
# would import scipy.special, and the shipped null-model tables (max C ≤ 40,943, WN18RR) were
# computed by the cumulative sums; the pair path differs from them by ~1e-12 relative
_PREFIX_SMALL = 2**16


def _pairs(c: np.ndarray, w: np.ndarray | None):
    """Distinct (C, w) pairs with positive weight and their multiplicities."""
    n = c.size
    if w is None:
        cv, cnt = np.unique(c, return_counts=True)
        return cv, np.full(cv.shape, 1.0 / n), cnt.astype(np.float64)
    keep = w > 0
    ck, wk = c[keep], w[keep]
    order = np.lexsort((wk, ck))
    ck, wk = ck[order], wk[order]
    first = np.ones(ck.size, dtype=bool)
    first[1:] = (ck[1:] != ck[:-1]) | (wk[1:] != wk[:-1])
    starts = np.flatnonzero(first)
    return ck[starts], wk[starts], np.diff(np.append(starts, ck.size)).astype(np.float64)


def inverse_moments(num_candidates, weights, transform: str) -> tuple[float, float]:
    """``(E[1/X], E[1/X²])`` for X = Σ wᵢ f(rᵢ), f = identity (``'identity'``) or 1/j (``'reciprocal'``)."""
    p = {"identity": 1.0, "reciprocal": -1.0}[transform]
    return tuple(power_moments(num_candidates, weights, p, (-1.0, -2.0)))


def inverse_mean_variance(num_candidates, weights, transform: str) -> tuple[float, float]:
    """``(E[1/X], Var[1/X])`` (:func:`inverse_moments`), the variance without cancellation
    (:func:`power_mean_variance`)."""
    p = {"identity": 1.0, "reciprocal": -1.0}[transform]
    return power_mean_variance(num_candidates, weights, p, -1.0)


def power_mean_variance(num_candidates, weights, p: float, beta: float) -> tuple[float, float] | None:
    """``(E[X^β], Var[X^β])`` for β < 0, X = Σ wᵢ rᵢ^p; None where :func:`power_moments` is.

    The variance is not ``E[X^{2β}] − E[X^β]²``: where it is small against E[X^β]² (a task of
    large weight with C = 1 beside tasks of small weight: Var/E² ~ 1e-16) that difference keeps
    nothing of it (HMR with C = [1, 20,000], weights [1, 1e-6]: 4.4 times the true variance; the
    power mean p = −2 with C = [1, 70,000], weights [1, 1e-5]: 15% off). With m = μ^β and the
    residual integrals R_β = E[X^β] − μ^β (:func:`power_moments`; μ^{2β} = m²):

        Var = R_{2β} − 2·m·R_β − R_β²

    in which R_{2β} and 2mR_β are both ≈ m²σ²/μ² times β(2β−1) and β(β−1): they cancel by a
    factor (2β−1)/β (3 for HMR, 4 for p = −2), not E²/Var.
    """
    out = power_mean_terms(num_candidates, weights, p, beta)
    return None if out is None else (out[0] ** beta + out[1], out[2])


def power_mean_terms(num_candidates, weights, p: float, beta: float) -> tuple[float, float, float] | None:
    """``(μ, R_β, Var[X^β])`` of :func:`power_mean_variance`: E[X^β] = μ^β + R_β, μ = E[X]. With μ − 1
    from a cancellation-free sum, ``1 − E[X^β] = −expm1(β·log1p(μ − 1)) − R_β`` keeps its digits where
    E[X^β] is close to 1 (the adjusted index's ``opt − E``)."""
    out = _residual_moments(num_candidates, weights, p, (beta, 2 * beta))
    if out is None:
        return None
    mu, (r1, r2) = out
    m = mu**beta
    return mu, r1, max(r2 - 2 * m * r1 - r1 * r1, 0.0)


def power_moments(num_candidates, weights, p: float, betas) -> list[float] | None:
    """``E[X^β]`` for each β < 0 in ``betas``, X = Σ wᵢ rᵢ^p; None where no exact path applies.

    For β < 0 (Γ(−β) > 0) E[X^β] = (1/Γ(−β)) ∫₀^∞ t^{−β−1} L(t) dt, and subtracting the same
    identity for μ^β: E[X^β] = μ^β + (1/Γ(−β)) ∫ (L(t) − e^{−μt}) t^{−β−1} dt (β = −1, −2 are
    HMR/IAMR). φ is closed for p = 1, O(1) per pair for p = −1 (:func:`reciprocal_exp_sum`);
    other p need the cumulative-sum path (≤ 8 distinct weights, C ≤ 2²⁰), else None.
    """
    out = _residual_moments(num_candidates, weights, p, betas)
    if out is None:
        return None
    mu, residuals = out
    return [mu**b + r for b, r in zip(betas, residuals)]


def _residual_moments(num_candidates, weights, p: float, betas) -> tuple[float, list[float]] | None:
    """``(μ, [R_β])``: μ = E[X] (as summed here) and R_β = E[X^β] − μ^β for each β in ``betas``,
    each integral to its own relative accuracy (the cuts and the stop below are set against the
    residual's size, ~ μ^β · Var[X]/μ², not against μ^β); see :func:`power_moments`."""
    c = np.asarray(num_candidates, dtype=np.int64)
    cv, wv, cnt = _pairs(c, weights)
    num_w = np.unique(wv).size
    few = num_w <= 8 and cv.max() <= _PREFIX_MAX
    if p not in (1.0, -1.0) and not few:
        return None
    if p == -1.0 and few and num_w * float(cv.max()) > max(_PAIR_COST * cv.size, _PREFIX_SMALL):
        few = False  # O(1) per pair and node is cheaper than a cumulative sum over j ≤ max C
    if p == 1.0:
        mean_f, var_f, f_min = (cv + 1.0) / 2.0, (cv.astype(np.float64) ** 2 - 1) / 12.0, np.ones(cv.shape)
    else:
        mean_f, var_f = power_moment(cv, p), power_variance(cv, p)
        f_min = np.ones(cv.shape) if p > 0 else cv.astype(np.float64) ** p
    mu = float(np.sum(cnt * wv * mean_f))
    m2 = float(np.sum(cnt * wv * wv * var_f)) + mu * mu
    x_min = float(np.sum(cnt * wv * f_min))
    if not (x_min > 0 and 0 < m2 < math.inf):  # j^p under- or overflows (|p| large): no quadrature
        return None
    # cut where the neglected parts are < 1e-18 relative: residual ≤ t²E[X²]/2 below t₀, L ≤ e^{−t·x_min} above t₁;
    # relative to the residual, of size ~ μ^β·Var[X]/μ² (``spread``), which the variance is computed from
    spread = max((m2 - mu * mu) / (mu * mu), 1e-300)
    t0 = min((2 * (2 - b) * 1e-18 * mu**b * math.gamma(-b) / m2) ** (1 / (2 - b)) for b in betas)
    t1 = max(100.0 - math.log(min(spread, 1.0)) + 2.0 * (1 - b) * math.log(max(mu / x_min, 1.0)) for b in betas) / x_min
    if not (0 < t0 < t1 < math.inf):
        return None
    t = np.exp(np.arange(math.log(t0) + _H / 2, math.log(t1) + _H, _H))
    # L is decreasing (X > 0): once L(t)·t₁^{|β|}/|β| and e^{−μt} are below 1e-18 of the
    # answer, the remaining nodes cannot matter; stop there (saves most large-u work). The
    # answer: the residual's size (μ^β·spread), not μ^β (against μ^β the neglected tail is a large
    # part of a residual with Var/E² ~ 1e-16)
    stop = min(math.log(1e-18 * min(spread, 1.0)) + b * math.log(mu) + math.lgamma(-b) + math.log(-b) + b * math.log(t1)
               for b in betas)
    log_l_of, excess_of = _integrands(p, few, cv, wv, cnt, mean_f)
    log_l = np.full(t.shape, -np.inf)
    excess = np.zeros(t.shape)
    for start in range(0, t.size, 16):
        sl = slice(start, start + 16)
        if excess_of is not None:
            excess[sl] = excess_of(t[sl])
            log_l[sl] = excess[sl] - mu * t[sl]
        else:
            log_l[sl] = log_l_of(t[sl])
            excess[sl] = log_l[sl] + mu * t[sl]
        last = min(start + 15, t.size - 1)
        if log_l[last] < stop and -mu * t[last] < stop:
            break
    far = excess >= 0.5
    if excess_of is not None and far.any():
        log_l[far] = log_l_of(t[far])
    resid = np.where(far, np.exp(log_l) - np.exp(-mu * t), np.exp(-mu * t) * np.expm1(np.minimum(excess, 0.5)))
    return mu, [_H * float(np.sum(resid * t ** (-b))) / math.gamma(-b) for b in betas]


def _integrands(p: float, few: bool, cv, wv, cnt, mean_f):
    """``(log_l_of, excess_of)``: functions of the nodes t giving ln L(t), and ln L(t) + μt summed
    from per-pair terms (None where only ln L is available) for :func:`_residual_moments`."""
    if p == 1.0:
        log_l_of = lambda tt: _log_l_identity(tt, cv, wv, cnt)  # noqa: E731
    elif few:
        log_l_of = lambda tt: _log_l_prefix(tt, cv, wv, cnt, p)  # noqa: E731
    else:
        log_l_of = lambda tt: _pair_sum(tt, cv, wv, cnt, _log_phi_reciprocal)  # noqa: E731
    # The residual L − e^{−μt} = e^{−μt}·expm1(excess), excess = ln L + μt ≈ t²Var[X]/2: where it is
    # small, ln L + μt keeps only ln L's absolute accuracy, and ln L sums terms of size ~ n·ln n
    # (large errors in Var with many tasks, see benchmarks/results/engineering-notes-2026-11-28.md).
    # For f = j the excess is summed from non-negative per-pair terms instead
    # (:func:`_excess_identity`); ln L directly where the excess is large (there excess − μt would cancel).
    # For f = j^p, p < 0 (1/j: HMR; power means) likewise from per-pair terms ln E[e^{−s(Y − E Y)}] ≥ 0
    # (:func:`_excess_reciprocal`).
    if p == 1.0:
        excess_of = lambda tt: _excess_identity(tt, cv, wv, cnt)  # noqa: E731
    elif p < 0 and (p == -1.0 or few):  # other p < 0 always take the cumulative sums (few)
        coef = _central_coef(cv, mean_f, p)
        log_phi = (lambda tt: _log_phi_prefix(tt, cv, wv, p)) if few else None  # noqa: E731
        excess_of = lambda tt: _excess_reciprocal(tt, cv, wv, cnt, mean_f, coef, log_phi)  # noqa: E731
    else:
        excess_of = None
    return log_l_of, excess_of


#: the quadrature's E[X^β] degrades as |β| = 1/|p| grows (Var ~3e-14 relative at p = −0.5, ~1e-5 at
#: −0.1 against enumeration; Γ(−β) overflows below p ≈ −0.012)
_QUAD_EXACT_P = -0.5  # p ≤ this: exact (E ~1e-15; Var ≤ 5e-15 for p = −3 … −0.5)
_QUAD_MAX_P = -0.1  # p ≤ this: quadrature, flagged approximate above _QUAD_EXACT_P; else none


def power_mean_null(num_candidates, weights, p: float) -> tuple[float, float, bool] | None:
    """(E, Var, exact) of :func:`power_mean_null_gap`."""
    out = power_mean_null_gap(num_candidates, weights, p)
    return None if out is None else out[:3]


def power_mean_null_gap(num_candidates, weights, p: float) -> tuple[float, float, bool, float | None] | None:
    """(E, Var, exact, 1 − E) of the power mean M = X^{1/p}, X = Σ wᵢ rᵢ^p, or None (then the caller
    uses the delta method, flagged approximate). ``1 − E`` (the optimum minus E) is computed without
    forming that difference (None where it is not).

    - one task with positive weight: M is that rank: ((C+1)/2, (C²−1)/12);
    - Π Cᵢ ≤ 2¹⁶ outcomes: enumeration (all equally likely);
    - p ≤ −0.1: Laplace quadrature with β = 1/p and 2/p (:func:`power_moments`), when its φ is
      cheap; exact for p ≤ −0.5, approximate (≤ 1.3e-5 relative against enumeration) between.
    """
    c = np.asarray(num_candidates, dtype=np.int64)
    w = np.full(c.size, 1.0 / c.size) if weights is None else np.asarray(weights, dtype=np.float64)
    c, w = c[w > 0], w[w > 0] / w[w > 0].sum()
    if c.size == 1:
        cf = float(c[0])
        return (cf + 1) / 2, (cf * cf - 1) / 12, True, (1 - cf) / 2
    # log2 of the outcome count: the product itself overflows to inf for many tasks
    if float(np.log2(c.astype(np.float64)).sum()) <= 16:
        # tasks with one candidate have rank 1 (1^p = 1): one column of weight Σ their wᵢ, so at
        # most 17 axes (numpy's meshgrid takes at most 32, an array 64; 40 tasks raised there)
        fixed, rnd = c == 1, c > 1
        cols = [np.arange(1, ci + 1, dtype=np.float64) for ci in c[rnd]] + ([np.ones(1)] if fixed.any() else [])
        wc = np.append(w[rnd], w[fixed].sum()) if fixed.any() else w
        return _enumerated(cols, wc, p)
    if p <= _QUAD_MAX_P:  # closer to 0, Γ(−1/p) overflowed (OverflowError) and the integral lost digits
        terms = power_mean_terms(c, w, p, 1.0 / p)  # the variance from residuals: no cancellation
        if terms is not None:
            mu, r1, var = terms
            # μ − 1 = Σ wᵢ (E[rᵢ^p] − 1): each term ≤ 0 and, for p ≤ −0.1, 0 or below −0.03
            below = float(np.sum(w * (power_moment(c, p) - 1.0)))
            gap = -math.expm1(math.log1p(below) / p) - r1 if below > -1 else None
            return mu ** (1.0 / p) + r1, var, p <= _QUAD_EXACT_P, gap
    return None


#: Var/E² above this: the power means of the outcomes (relative rounding ~ε·ln C each) give Var to
#: ~2ε·ln C·E/σ < 1e-10 relative, so the fallback of :func:`_enumerated` is exact only above it
_ROUNDED_MIN_RATIO = 1e-8


def _enumerated(cols, w, p: float) -> tuple[float, float, bool, float | None]:
    """(E, Var, exact, 1 − E) of M = (Σ wᵢ Yᵢ)^{1/p}, Yᵢ = rᵢ^p uniform over ``cols[i]`` (the ranks),
    over every outcome (1 − E as −(μ^{1/p} − 1) − E[M − μ^{1/p}], None where r^p is not normal).

    M's deviations are computed without forming M: with X = Σ wᵢ Yᵢ, μ = E[X] and the centred
    sum D = X − μ = Σ wᵢ (Zᵢ − E[Zᵢ]), Zᵢ = Yᵢ − 1 = expm1(p·ln rᵢ) (each term to its own relative accuracy),
    M − μ^{1/p} = μ^{1/p}·expm1(log1p(D/μ)/p). The variance of M itself would keep only M's
    rounding where Var ≪ E² (a C = 1 task of large weight). Where r^p is not a normal number
    (|p·ln r| > 600) the means are formed as before (:func:`power_mean`, no overflow) and the
    moments are flagged exact only where Var/E² ≥ :data:`_ROUNDED_MIN_RATIO`.
    """
    grids = np.meshgrid(*cols, indexing="ij")
    ranks = np.stack([g.ravel() for g in grids], axis=-1)
    top = max(float(col[-1]) for col in cols)
    if abs(p) * math.log(top) > _DIRECT_EXPONENT:
        m = power_mean(ranks, w, p)  # no overflow at large |p|
        mean, var = float(m.mean()), float(m.var())
        return mean, var, var >= _ROUNDED_MIN_RATIO * mean * mean, None
    # Yᵢ − 1 = expm1(p·ln rᵢ): also to its own relative accuracy where p is tiny (r^p − 1 kept ~ε/(p·ln r))
    ez = [float(np.mean(np.expm1(p * np.log(col)))) for col in cols]
    d = np.zeros(ranks.shape[0])
    for i, e in enumerate(ez):
        d += w[i] * (np.expm1(p * np.log(ranks[:, i])) - e)
    # μ from the positive terms (1 + Σ wᵢ E[Zᵢ] cancels where μ ≪ 1: p < 0, large ranks); ln μ as
    # log1p(Σ wᵢ E[Zᵢ]) near 1, where 1/p amplifies ln μ's rounding (p → 0)
    mu = float(sum(wi * float(np.mean(col**p)) for wi, col in zip(w, cols)))
    s = float(sum(wi * e for wi, e in zip(w, ez)))
    log_base = (math.log1p(s) if abs(s) <= 0.5 else math.log(mu)) / p
    base = math.exp(log_base)  # μ^{1/p}
    # ln(X/μ): log1p(D/μ) near μ; far from it (X/μ → 0 for large |p|) 1 + D/μ would cancel, and
    # ln X − ln μ from the positive sums keeps the digits
    ratio = d / mu
    log_ratio = np.log1p(np.maximum(ratio, -0.5))
    far = np.abs(ratio) > 0.5
    if far.any():
        log_ratio[far] = np.log(np.sum(w * ranks[far] ** p, axis=-1)) - math.log(mu)
    dev = base * np.expm1(log_ratio / p)  # M − μ^{1/p}, to its own relative accuracy
    mean_dev = float(dev.mean())
    # 1 − E = −(μ^{1/p} − 1) − E[M − μ^{1/p}], each to its own relative accuracy (for p < 0 both ≤ 0
    # by Jensen; for p > 1 the second is of second order in the spread: no cancellation near E = 1)
    return base + mean_dev, float(dev.var()), True, -math.expm1(log_base) - mean_dev
