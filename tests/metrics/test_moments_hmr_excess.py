"""HMR (= 1/MRR) exact null moments for many tasks: the Laplace quadrature integrates
L(t) − e^{−μt} ≈ e^{−μt}·t²Var[X]/2, so ln L + μt must keep its relative accuracy.

References: exact binomial sums (C = 2), mpmath quadrature at 30 digits (mixed C, weighted), and
brute-force enumeration (few tasks, where nodes with t·w > 1 take the direct ln φ path).
"""

from __future__ import annotations


import numpy as np
import pytest

from kgeval import metrics
from kgeval.metrics import laplace


@pytest.mark.parametrize("n", [10**5, 10**6])
def test_hmr_many_tasks_against_binomial(n):
    """n tasks with C = 2: X = (K + (n − K)/2)/n, K ~ Binomial(n, 1/2); HMR = 1/X. Var[HMR] was
    3.3e-5 off at n = 10⁶ (1.6e-7 at 10⁵, E 4.8e-12) although flagged exact. Measured now: Var
    ≤ 4.1e-15 (h = 0.25 left it 1.05e-12 high at both n, the same +1.05e-12 as against mpmath and exact
    fractions: the quadrature step's error), E ≤ 8e-16."""
    from scipy.stats import binom

    k = np.arange(n + 1)
    pmf = binom.pmf(k, n, 0.5).astype(np.longdouble)
    x = 1.0 / ((k * np.longdouble(1) + (n - k) * np.longdouble(0.5)) / n)
    e = np.sum(pmf * x)
    v = float(np.sum(pmf * (x - e) ** 2))
    e = float(e)
    nm = metrics.get("harmonic_mean_rank").null_moments(np.full(n, 2))
    assert nm.exact
    assert abs(nm.mean - e) <= 1e-14 * e
    # Var/E² ≈ 1/(10n), but the variance is not E[1/X²] − E[1/X]² (which kept ~1e-9 of it): it comes
    # from the residual integrals (laplace.power_mean_variance)
    assert abs(nm.variance - v) <= 2e-14 * v


def _mp_inverse_moments(cs, counts, ws):
    """E[1/X], E[1/X²] by mpmath quadrature of L(t) = Π φ_C(t·w)^count (30 digits)."""
    import mpmath as mp

    with mp.workdps(30):
        terms = [(c, mp.mpf(n), mp.mpf(w)) for c, n, w in zip(cs, counts, ws)]
        inv = [[mp.mpf(1) / j for j in range(1, c + 1)] for c in cs]

        def log_l(t):
            return mp.fsum(n * mp.log(mp.fsum(mp.exp(-t * w * y) for y in ys) / c) for (c, n, w), ys in zip(terms, inv))

        mu = mp.fsum(n * w * mp.fsum(ys) / c for (c, n, w), ys in zip(terms, inv))
        # L(t) ≈ e^{−μt}: split the range at multiples of 1/μ for the tanh-sinh rule
        pts = [0] + [k / mu for k in (1, 3, 10, 30, 100)] + [mp.inf]
        e1 = mp.quad(lambda t: mp.exp(log_l(t)), pts)
        e2 = mp.quad(lambda t: t * mp.exp(log_l(t)), pts)
        return float(e1), float(e2 - e1 * e1), float(e1 * e1)


# the weighted case's mpmath quadrature takes ~12 s: with the slow tests (the unweighted one stays in the fast suite)
@pytest.mark.parametrize("weighted", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_hmr_mixed_many_tasks_against_mpmath(weighted):
    """2·10⁵ tasks, C from 1 to 300 (direct and H_C^{(k)} central moments), one or three weights.
    Before: Var[HMR] 1.0e-5 (unweighted) and 1.2e-6 (weighted) relative off, E 1e-11; now Var
    ≤ 3.5e-15 (both; 1.05e-12 with the quadrature step h = 0.25), E 0."""
    cs = [1, 2, 3, 7, 40, 64, 65, 300]
    counts = [10_000, 60_000, 40_000, 30_000, 20_000, 15_000, 15_000, 10_000]
    if weighted:
        rel = [1.0, 3.0, 0.5]
        cs, counts, ws_raw = zip(*[(c, n // 3 + (k == 0) * (n % 3), rel[k]) for c, n in zip(cs, counts) for k in range(3)])
    else:
        ws_raw = [1.0] * len(cs)
    total = sum(n * w for n, w in zip(counts, ws_raw))
    ws = [w / total for w in ws_raw]
    c_tasks = np.repeat(np.asarray(cs), counts)
    w_tasks = np.repeat(np.asarray(ws), counts)
    e, v, _ = _mp_inverse_moments(cs, counts, ws)
    nm = metrics.get("harmonic_mean_rank").null_moments(c_tasks, w_tasks if weighted else None)
    assert nm.exact
    assert abs(nm.mean - e) <= 1e-13 * e
    assert abs(nm.variance - v) <= 2e-14 * v


def _enumerate(cs, ws):
    grids = np.meshgrid(*[1.0 / np.arange(1, c + 1) for c in cs], indexing="ij")
    x = sum(w * g for w, g in zip(ws, grids)).ravel()
    return float(np.mean(1 / x)), float(np.mean(1 / x**2))


@pytest.mark.parametrize(
    "cs, ws",
    [
        ((2, 3, 70), (0.5, 0.3, 0.2)),  # cumulative sums (≤ 8 weights); nodes with t·w > 1
        ((2, 3, 2, 3, 2, 4, 2, 3, 5, 70), tuple(np.linspace(1, 2, 10))),  # 10 weights: pair path
        ((100, 100, 7), None),
    ],
)
def test_hmr_few_tasks_against_enumeration(cs, ws):
    w = np.full(len(cs), 1.0 / len(cs)) if ws is None else np.asarray(ws) / np.sum(ws)
    e1, e2 = _enumerate(cs, w)
    got = laplace.inverse_moments(np.asarray(cs), None if ws is None else w, "reciprocal")
    assert abs(got[0] - e1) <= 1e-12 * e1
    assert abs(got[1] - e2) <= 1e-12 * e2


def test_central_coef_matches_direct_sums():
    """μ_k(C)/k! from H_C^{(k)} (C > 64) agrees with direct sums in extended precision."""
    cs = np.array([65, 100, 1000, 14541])
    m1 = np.array([float(np.sum(1 / np.arange(1, c + 1, dtype=np.longdouble)) / c) for c in cs])
    coef = laplace._central_coef(cs, m1)
    fact = 1.0
    for k in range(1, coef.shape[0] + 1):
        fact *= k
        for i, c in enumerate(cs):
            d = 1 / np.arange(1, c + 1, dtype=np.longdouble) - np.longdouble(m1[i])
            ref = float(np.mean(d**k)) / fact
            scale = float(np.mean(np.abs(d) ** k)) / fact
            assert abs(coef[k - 1, i] - ref) <= 1e-14 * scale, (k, c)


@pytest.mark.parametrize("p", [-0.1, -0.25, -0.5, -1.0, -2.0])
def test_central_series_against_direct_sums(p):
    """Σ_{k≥2} (−s)^k μ_k/k! (the per-pair excess before log1p) against E[e^{−sD} − 1 + sD] summed
    in extended precision, D = j^p − m₁, C > 64 (binomial expansions of the raw moments)."""
    from kgeval.metrics.moments import power_moment

    cs = np.array([65, 1000, 14541, 100000])
    m1 = power_moment(cs, p)
    coef = laplace._central_coef(cs, m1, p)
    for i, c in enumerate(cs):
        d = np.arange(1, c + 1, dtype=np.longdouble) ** np.longdouble(p) - np.longdouble(m1[i])
        for s in (1e-3, 0.1, 1.0):
            ref = float(np.mean(np.expm1(-np.longdouble(s) * d) + np.longdouble(s) * d))
            got = sum(coef[k - 1, i] * (-s) ** k for k in range(2, coef.shape[0] + 1))
            assert abs(got - ref) <= 1e-13 * ref, (c, s)


@pytest.mark.parametrize("p, var_tol", [(-0.5, 2e-14), (-2.0, 2e-14)])
def test_power_mean_many_tasks_against_binomial(p, var_tol):
    """Power means (Σ rᵢ^p / n)^{1/p} go through the same quadrature (f = j^p, cumulative sums):
    10⁶ tasks with C = 2 had Var 3.4e-4 (p = −0.5) and 1.5e-4 (p = −2) off the exact binomial
    sums, E 2e-11, flagged exact. Measured now: Var ≤ 3.2e-15 (with the quadrature step h = 0.25: 3.8e-11
    at p = −0.5, 1.2e-13 at p = −2), E ≤ 5e-16."""
    from scipy.stats import binom

    n = 10**6
    k = np.arange(n + 1)
    pmf = binom.pmf(k, n, 0.5).astype(np.longdouble)
    x = (k * np.longdouble(1) + (n - k) * np.longdouble(2.0) ** p) / n
    m = x ** (1 / np.longdouble(p))
    e = np.sum(pmf * m)
    v = float(np.sum(pmf * (m - e) ** 2))
    e = float(e)
    got_e, got_v, exact = laplace.power_mean_null(np.full(n, 2), None, p)
    assert exact
    assert abs(got_e - e) <= 1e-14 * e
    assert abs(got_v - v) <= var_tol * v
