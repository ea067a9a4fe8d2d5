"""Seeded Monte Carlo checks of every closed form and approximation of the null moments.

Two simulations per configuration: the library's own ``metric.monte_carlo`` and an
independent vectorised numpy simulation with its own metric formulas. Tolerances come from
the sample size: |mean − E| ≤ 5·sd/√N and |s² − Var| ≤ 5·SE(s²) with
SE(s²) = √((m₄ − s⁴)/N) (plus, for delta-method variances at small n, the measured
approximation error). Also: the weighted GMR/IGMR series path of ``log_power_moment``
against direct summation.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from scipy import stats

from kgeval import metrics
from kgeval.metrics.moments import log_power_moment

Z = 5.0


def _cfg(name, n, lo, hi, weighted, seed):
    rng = np.random.default_rng(seed)
    c = rng.integers(lo, hi + 1, n)
    w = rng.uniform(0.1, 3.0, n) if weighted else None
    return name, c, w


CONFIGS = [
    _cfg("n1000-C5000", 1000, 2, 5000, False, 1),
    _cfg("n1000-C5000-weighted", 1000, 2, 5000, True, 2),
    _cfg("n40-C30-weighted", 40, 1, 30, True, 3),
    _cfg("n25-C12", 25, 2, 12, False, 4),
]
CONFIG_IDS = [c[0] for c in CONFIGS]

# independent formulas on sample matrices R (N, n) with normalised weights a (n,)
FORMULAS = {
    "arithmetic_mean_rank": lambda R, a: R @ a,
    "inverse_harmonic_mean_rank": lambda R, a: (1.0 / R) @ a,
    "hits_at_1": lambda R, a: (R <= 1) @ a,
    "hits_at_10": lambda R, a: (R <= 10) @ a,
    "geometric_mean_rank": lambda R, a: np.exp(np.log(R) @ a),
    "inverse_geometric_mean_rank": lambda R, a: np.exp(-(np.log(R) @ a)),
    "power_mean_rank_p1": lambda R, a: R @ a,
    "harmonic_mean_rank": lambda R, a: 1.0 / ((1.0 / R) @ a),
    "inverse_arithmetic_mean_rank": lambda R, a: 1.0 / (R @ a),
    "power_mean_rank_p2": lambda R, a: np.sqrt((R**2) @ a),
    "power_mean_rank_pneg0_5": lambda R, a: ((R**-0.5) @ a) ** -2.0,
    "median_rank": lambda R, a: np.median(R, axis=1),  # unweighted only
}
# relative slack for delta-method variances on the small configurations (first-order Var has an
# O(1/n) error). Measured (Var_delta − Var_MC)/Var_MC with 200,000 samples (MC noise ~0.3–0.5%):
#   n = 25, C ≤ 12:            HMR −6.9e-2, IAMR −9.7e-2, p=2 −1.9e-2, p=−0.5 −2.3e-2
#   n = 40, C ≤ 30, weighted:  HMR −4.8e-2, IAMR −8.9e-2, p=2 −1.8e-2, p=−0.5 −1.4e-2
# Expectations (second order) were within 5.5e-4 relative everywhere (at the MC noise level).
# At n = 1000, C ≤ 5000 (40,000 samples, MC noise ~0.7%): HMR −4.4e-2 (unweighted) / −2.1e-2 (weighted):
# 1/r is dominated by rare rank-1 events, so the first-order variance of 1/MRR stays ~4% low even there;
# p=−0.5 +0.6e-2 / +1.1e-2, p=2 −0.1e-2 / +0.9e-2 (within noise). The slack applies to every size.
APPROX_VAR_SLACK = {
    "harmonic_mean_rank": 0.10,
    "inverse_arithmetic_mean_rank": 0.14,
    "power_mean_rank_p2": 0.03,
    "power_mean_rank_pneg0_5": 0.035,
}
ITEMS = [
    pytest.param(key, cfg, id=f"{key}-{cfg[0]}")
    for cfg in CONFIGS
    for key in FORMULAS
    if not (key == "median_rank" and cfg[2] is not None)
]


def _norm(n, w):
    return np.full(n, 1.0 / n) if w is None else np.asarray(w) / np.sum(w)


def _sample_ranks(c, num, seed):
    rng = np.random.default_rng(seed)
    # r ~ U{1..C}: integers(1, C+1) -- a different generator call than the library's sampler
    return rng.integers(1, np.asarray(c)[None, :] + 1, size=(num, len(c))).astype(np.float64)


def _check(sample, e, v, approx_slack=0.0, label=""):
    N = sample.size
    m = float(sample.mean())
    s2 = float(sample.var(ddof=1))
    m4 = float(np.mean((sample - m) ** 4))
    se_mean = math.sqrt(s2 / N)
    se_var = math.sqrt(max(m4 - s2 * s2, 0.0) / N)
    assert abs(m - e) <= Z * se_mean + 1e-15, f"{label} mean {m} vs E {e} (se {se_mean})"
    assert abs(s2 - v) <= Z * se_var + approx_slack * v + 1e-30, f"{label} var {s2} vs Var {v} (se {se_var})"


@pytest.mark.parametrize(("key", "cfg"), ITEMS)
def test_independent_simulation(key, cfg):
    _, c, w = cfg
    m = metrics.get(key)
    N = 4000 if c.size >= 1000 else 40000
    R = _sample_ranks(c, N, seed=zlib.crc32(key.encode()) % 1000 + 17)
    sample = FORMULAS[key](R, _norm(c.size, w))
    e = m.expected_value(c, w)
    if key == "median_rank":  # no closed variance: only the expectation
        se = sample.std(ddof=1) / math.sqrt(N)
        assert abs(sample.mean() - e) <= Z * se
        return
    exact = m.null_moments(np.asarray(c), None if w is None else _norm(c.size, w)).exact
    _check(sample, e, m.variance(c, w), 0.0 if exact else APPROX_VAR_SLACK.get(key, 0.0), key)


@pytest.mark.parametrize(("key", "cfg"), [p for p in ITEMS if p.values[1][1].size < 1000 or p.values[0] in (
    "inverse_harmonic_mean_rank", "geometric_mean_rank", "harmonic_mean_rank", "median_rank")])
def test_library_monte_carlo(key, cfg):
    _, c, w = cfg
    m = metrics.get(key)
    N = 600 if c.size >= 1000 else 3000
    est = m.monte_carlo(c, w, num_samples=N, seed=11)
    assert est.num_samples == N and est.seed == 11
    e = m.expected_value(c, w)
    half = est.mean_ci[1] - est.mean
    assert half == pytest.approx(1.959963984540054 * math.sqrt(est.variance / N), rel=1e-9, abs=0)  # ≥ 9.6e-5
    assert abs(est.mean - e) <= Z * math.sqrt(est.variance / N)
    if key == "median_rank":
        return
    v = m.variance(c, w)
    # a wide chi-square interval (two-sided 1e-6) for the variance, plus the delta-method slack
    dof = N - 1
    lo = dof * est.variance / stats.chi2.ppf(1 - 5e-7, dof)
    hi = dof * est.variance / stats.chi2.ppf(5e-7, dof)
    slack = APPROX_VAR_SLACK.get(key, 0.0)
    assert lo * (1 - slack) <= v <= hi * (1 + slack), (lo, v, hi)
    assert est.variance_ci[0] < est.variance < est.variance_ci[1]


def test_library_sampler_is_uniform_and_seeded():
    """The library's sampler draws rᵢ uniformly from 1..Cᵢ: MR of one task is the rank itself."""
    m = metrics.get("mr")
    x = m.sample_values([6], num_samples=6000, seed=3)
    assert set(np.unique(x)) == {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}
    counts = np.bincount(x.astype(int), minlength=7)[1:]
    assert stats.chisquare(counts).pvalue > 1e-4
    np.testing.assert_array_equal(x, m.sample_values([6], num_samples=6000, seed=3))
    assert not np.array_equal(x, m.sample_values([6], num_samples=6000, seed=4))
    # two tasks with different C: each coordinate in its own range (MR·2 − r₁ ranges check)
    hits = metrics.get("hits@1").sample_values([1, 1000], num_samples=200, seed=0)
    assert np.all(hits >= 0.5)  # the C = 1 task always has rank 1


def test_monte_carlo_fallback_for_metrics_without_closed_form():
    """Weighted median: no analytic expectation; num_samples= gives a Monte Carlo estimate that
    agrees with an independent weighted-median simulation."""
    from kgeval.errors import NoClosedFormError

    c = np.array([5, 9, 20, 7, 13])
    w = np.array([1.0, 2.0, 0.5, 3.0, 1.5])
    m = metrics.get("median_rank")
    with pytest.raises(NoClosedFormError):
        m.expected_value(c, w)
    est = m.expected_value(c, w, num_samples=4000, seed=5)
    R = _sample_ranks(c, 20000, seed=99)
    a = w / w.sum()
    order = np.argsort(R, axis=1, kind="stable")
    xs = np.take_along_axis(R, order, axis=1)
    cw = np.cumsum(a[order], axis=1)
    rows = np.arange(len(R))
    idx = (cw < 0.5 - 1e-12).sum(axis=1)  # first position where the cumulative weight reaches ½
    meds = xs[rows, idx]
    # hitting ½ exactly (e.g. 1/8 + 3/8 here): the midpoint of the two neighbours
    exact_half = np.abs(cw[rows, idx] - 0.5) <= 1e-12
    meds = np.where(exact_half, 0.5 * (meds + xs[rows, np.minimum(idx + 1, c.size - 1)]), meds)
    assert exact_half.any()
    se = math.sqrt(meds.var() / 4000 + meds.var() / 20000)
    assert abs(est - meds.mean()) <= Z * se


# ---------------------------------------------------------------------------- GMR series path
def _direct_log_moment(c, a, low=None):
    """log E[r^a] per task, r uniform on low..C, by direct longdouble summation."""
    ld = np.longdouble
    out = np.empty(len(c), dtype=ld)
    for i, (ci, ai) in enumerate(zip(c, a)):
        lo = 1 if low is None else int(low[i])
        j = np.arange(lo, int(ci) + 1, dtype=ld)
        out[i] = np.log(np.sum(j ** ld(ai)) / ld(ci - lo + 1))
    return out


SERIES_CASES = {
    "uniform-weights": (300, 2000, lambda rng, n: rng.uniform(0.5, 2.0, n)),
    "skewed-weights": (60, 3000, lambda rng, n: np.r_[50.0, 10.0, rng.uniform(0.01, 1.0, n - 2)]),
    "single-dominant": (20, 500, lambda rng, n: np.r_[1000.0, rng.uniform(0.1, 1.0, n - 1)]),
}


@pytest.mark.parametrize("case", sorted(SERIES_CASES))
@pytest.mark.parametrize("sign", [1.0, -1.0, 2.0, -2.0])
def test_log_power_moment_series_path_vs_direct(case, sign):
    n, maxc, make_w = SERIES_CASES[case]
    rng = np.random.default_rng(len(case))
    c = rng.integers(1, maxc + 1, n)
    w = make_w(rng, n)
    a = sign * w / w.sum()
    assert np.unique(a).size > 8  # the series path
    ours = log_power_moment(c, a)
    ref = _direct_log_moment(c, a)
    np.testing.assert_allclose(np.asarray(ours, float), np.asarray(ref, float), rtol=0, atol=1e-12)
    # and the product (what E[GMR^s] is made of)
    assert abs(float(np.sum(ours) - np.sum(ref))) <= 1e-10
    # with a lower bound (random tie-breaking)
    low = np.minimum(rng.integers(1, maxc + 1, n), c)
    ours_low = log_power_moment(c, a, low=low)
    np.testing.assert_allclose(np.asarray(ours_low, float), np.asarray(_direct_log_moment(c, a, low), float),
                               rtol=0, atol=1e-12)


def test_log_power_moment_few_exponents_path_vs_direct():
    rng = np.random.default_rng(8)
    c = rng.integers(1, 800, 50)
    a = np.array([0.3, -0.7, 0.01, 1.5])[rng.integers(0, 4, 50)]
    assert np.unique(a).size <= 8
    np.testing.assert_allclose(np.asarray(log_power_moment(c, a), float),
                               np.asarray(_direct_log_moment(c, a), float), rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", sorted(SERIES_CASES))
@pytest.mark.parametrize("key", ["geometric_mean_rank", "inverse_geometric_mean_rank"])
def test_weighted_geometric_moments_vs_direct(case, key):
    n, maxc, make_w = SERIES_CASES[case]
    rng = np.random.default_rng(len(case) + 100)
    c = rng.integers(1, maxc + 1, n)
    w = make_w(rng, n)
    a = w / w.sum() * (1 if key == "geometric_mean_rank" else -1)
    l1 = np.sum(_direct_log_moment(c, a))
    l2 = np.sum(_direct_log_moment(c, 2 * a))
    e = float(np.exp(l1))
    var = float(np.exp(2 * l1) * np.expm1(l2 - 2 * l1))
    m = metrics.get(key)
    # abs=0: Var[IGMR] is 5.8e-8 here, and approx's default abs=1e-12 would be 1.7e-5 of it
    assert m.expected_value(c, w) == pytest.approx(e, rel=1e-10, abs=0)
    assert m.variance(c, w) == pytest.approx(var, rel=1e-9, abs=0)
    # sanity: the independent Monte Carlo agrees too
    R = _sample_ranks(c, 20000, seed=7)
    sample = np.exp(np.log(R) @ a)
    _check(sample, e, var, 0.0, key)
