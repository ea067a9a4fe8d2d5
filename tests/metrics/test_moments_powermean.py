"""Power-mean null moments (issue 7 item 5): exact where tractable, and the delta method's
measured error bound where it is still used."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kgeval import metrics
from kgeval.ranks import RankTable
from kgeval.results import Results


def enumerate_power_mean(c, w, p):
    """E and Var of (Σ wᵢ rᵢ^p)^(1/p) over all Π Cᵢ equally likely rank vectors."""
    w = np.full(len(c), 1.0 / len(c)) if w is None else np.asarray(w, float) / np.sum(w)
    r = np.array(list(itertools.product(*[range(1, ci + 1) for ci in c])), dtype=np.float64)
    m = ((r**p) @ w) ** (1.0 / p)
    return float(m.mean()), float(m.var())


def rel(x, y):
    return abs(x - y) / abs(y)


@pytest.mark.parametrize("p", [-0.5, 2.0, 3.0, -2.0])
def test_single_task_is_the_rank_itself(p):
    """The README claimed 0.4% for n ≤ 6; one task with C = 8, p = −0.5 was 5.2% off."""
    nm = metrics.get("power_mean_rank", p=p).null_moments(np.array([8]), None)
    assert nm.exact and rel(nm.mean, 4.5) <= 1e-15 and rel(nm.variance, 63 / 12) <= 1e-15
    # one positive weight: the same single rank
    nm = metrics.get("power_mean_rank", p=p).null_moments(np.array([8, 5]), np.array([1.0, 0.0]))
    assert nm.exact and rel(nm.mean, 4.5) <= 1e-15


@pytest.mark.parametrize("p", [-2.0, -0.5, 0.5, 2.0])
@pytest.mark.parametrize(("c", "w"), [((3, 5, 2, 6), None), ((7, 4, 9), (1.0, 2.5, 0.3)), ((12, 11, 10, 9), None)])
def test_small_enumerations_exact(p, c, w):
    nm = metrics.get("power_mean_rank", p=p).null_moments(np.array(c), None if w is None else np.array(w) / sum(w))
    e, v = enumerate_power_mean(c, w, p)
    assert nm.exact and rel(nm.mean, e) <= 1e-12 and rel(nm.variance, v) <= 1e-10


@pytest.mark.parametrize("p", [-0.5, -2.0, -1.5])
@pytest.mark.parametrize(("c", "w"), [((300, 400), None), ((90, 40, 30), (1.0, 2.0, 1.0)), ((20, 17, 15, 16, 2), None)])
def test_negative_p_quadrature_against_enumeration(p, c, w):
    """> 2¹⁶ outcomes and p < 0: E[X^{1/p}] = μ^β + ∫(L − e^{−μt}) t^{−β−1} dt / Γ(−β)."""
    assert np.prod(c) > 2**16
    nm = metrics.get("power_mean_rank", p=p).null_moments(np.array(c), None if w is None else np.array(w) / sum(w))
    e, v = enumerate_power_mean(c, w, p)
    assert nm.exact and rel(nm.mean, e) <= 1e-10 and rel(nm.variance, v) <= 1e-10


# Delta method (p > 0 beyond 2¹⁶ outcomes; p < 0 with > 8 distinct weights or C > 2¹⁶).
# Worst measured relative errors against enumeration over n = 2…12 with equal and spread C
# (n = 2: C ≤ 3000, n = 3: C ≤ 150, n = 4: ≤ 60, n = 6: ≤ 15, n = 8: ≤ 8, n = 12: ≤ 4):
#   p = 0.25: E 1.6%, Var 33%;  p = 0.5: E < 1e-15, Var 18%;  p = 2: E 3.9%, Var 20%;  p = 3: E 8.0%, Var 33%
#   p = −0.5: E 70%, Var 177%;  p = −2: E 723%, Var 62%   (only reached through the fallback)
# and at n = 20 / 50 / 200 (C ~ U{10..59}): p = 2 E 2e-4 / 4e-5 / 2e-6, Var 2.6% / 1.1% / 0.26%;
# p = −2 E 5% / 1.9% / 0.12%, Var 59% / 47% / 15%.
DELTA_BOUND = {0.25: (0.016, 0.33), 2.0: (0.039, 0.20), 3.0: (0.080, 0.33)}


@pytest.mark.parametrize("p", sorted(DELTA_BOUND))
@pytest.mark.parametrize("c", [(300, 300), (41, 41, 41), (2, 250, 250), (17, 17, 17, 17)])
def test_delta_method_within_measured_bound(p, c):
    nm = metrics.get("power_mean_rank", p=p).null_moments(np.array(c), None)
    e, v = enumerate_power_mean(c, None, p)
    assert not nm.exact
    be, bv = DELTA_BOUND[p]
    assert rel(nm.mean, e) <= be * 1.05 and rel(nm.variance, v) <= bv * 1.05


def test_negative_p_many_weights_is_flagged_approximate():
    c = np.arange(20, 40)
    w = np.linspace(1, 2, 20)
    nm = metrics.get("power_mean_rank", p=-0.5).null_moments(c, w / w.sum())
    assert not nm.exact


@pytest.mark.parametrize(
    ("ranks", "p", "want"),
    [
        # closed forms: (½(1 + 10^400))^(1/400) = 10·2^(−1/400), and so on
        ([1.0, 10.0], 400.0, 10 * 2 ** (-1 / 400)),
        ([10.0, 20.0], -400.0, 10 * 2 ** (1 / 400)),
        ([100.0, 100_000.0], -200.0, 100 * 2 ** (1 / 200)),
        ([1e5, 3e5], 64.0, 3e5 * (0.5 * (3.0**-64 + 1)) ** (1 / 64)),
        ([1.0, 2.0], 2000.0, 2 * 2 ** (-1 / 2000)),
    ],
)
def test_power_mean_value_without_overflow(ranks, p, want):
    """r^p overflowed or underflowed: p = 400 with ranks [1, 10] gave inf, p = −400 with [10, 20]
    and p = −200 with [100, 10⁵] raised ZeroDivisionError (0.0 to a negative power)."""
    assert metrics.get("power_mean_rank", p=p)(ranks) == pytest.approx(want, rel=1e-14, abs=0)


def test_power_mean_value_for_tiny_p_is_the_limit():
    """1 + p·ln r lost the digits that ^(1/p) amplifies: p = 1e-9 on ranks [2, 3] gave 2.44948994,
    8e-8 above the limit √6 (the geometric mean; the p-term is ~1e-11 relative)."""
    m = metrics.get("power_mean_rank", p=1e-9)
    assert m([2.0, 3.0]) == pytest.approx(6**0.5, rel=1e-10)
    gmr = metrics.get("gmr")
    r, w = np.array([1.0, 4.0, 17.0, 250.0]), np.array([1.0, 2.0, 0.5, 3.0])
    assert m(r, weights=w) == pytest.approx(gmr(r, weights=w), rel=1e-8)


@pytest.mark.parametrize(("c", "p"), [((100, 200), 300.0), ((3, 4), 1500.0)])
def test_large_p_enumeration_is_finite_and_exact(c, p):
    """Enumeration summed j^p in float64: NullMoments(mean=inf, variance=nan, exact=True)."""
    nm = metrics.get("power_mean_rank", p=p).null_moments(np.array(c))
    r = np.array(list(itertools.product(*[range(1, ci + 1) for ci in c])), dtype=np.float64)
    top = r.max(axis=1)  # M = max · (mean (r/max)^p)^(1/p), no overflow
    m = top * np.mean((r / top[:, None]) ** p, axis=1) ** (1 / p)
    assert nm.exact and rel(nm.mean, m.mean()) < 1e-12 and rel(nm.variance, m.var()) < 1e-9


def test_overflowing_power_sums_give_unknown_moments_not_nan():
    """Delta method on overflowing sums: NullMoments(mean=nan, variance=nan) for p = 64, C = 10⁵;
    p = −200 with C = [10⁵, 10⁵] raised ZeroDivisionError in the quadrature (x_min underflowed)."""
    from kgeval.errors import NoClosedFormError

    m = metrics.get("power_mean_rank", p=64)
    nm = m.null_moments(np.array([100_000, 100_000]))
    assert nm.mean is None and nm.variance is None
    with pytest.raises(NoClosedFormError):
        m.expected_value([100_000, 100_000])
    est = m.monte_carlo([100_000, 100_000], num_samples=200)
    assert np.isfinite(est.mean) and 1 <= est.mean <= 100_000
    for mm in (metrics.get("power_mean_rank", p=-200), m):  # no exception, no NaN
        got = mm.null_moments(np.array([100_000, 100_000]))
        assert got.mean is None or np.isfinite(got.mean)


def test_negative_p_near_zero_neither_crashes_nor_claims_exactness():
    """p ∈ (−0.012, 0) raised OverflowError (Γ(−1/p) in the quadrature); p = −0.25 / −0.1 were
    flagged exact with Var off by 9e-10 / 1.3e-5 (C = 50, 60, 70, against enumeration)."""
    c = (50, 60, 70)
    for p, tol in ((-0.01, (0.02, 0.15)), (-1e-6, (0.02, 0.15)), (-0.25, (1e-8, 1e-7)), (-0.1, (1e-8, 1e-4))):
        nm = metrics.get("power_mean_rank", p=p).null_moments(np.array(c))
        e, v = enumerate_power_mean(c, None, p)
        assert not nm.exact and rel(nm.mean, e) <= tol[0] and rel(nm.variance, v) <= tol[1], p
    nm = metrics.get("power_mean_rank", p=-0.5).null_moments(np.array(c))
    e, v = enumerate_power_mean(c, None, -0.5)
    assert nm.exact and rel(nm.mean, e) <= 1e-12 and rel(nm.variance, v) <= 1e-12


@pytest.mark.parametrize(("p", "c"), [(-3.0, (2**21, 2**20)), (-0.5, (2**21, 2**20, 3000)), (-200.0, (10**5, 10**5))])
def test_delta_method_outside_its_validity_gives_unknown_moments(p, c):
    """The delta method's second-order term dwarfed g(μ): p = −3 with C = 2²¹, 2²⁰ gave
    E[M] = 1.15e7, above the largest possible value 2²¹ (true ≈ 5.15e5, Monte Carlo), flagged only
    approximate; p = −0.5 (three tasks, C ≥ 3000) E 124% off; p = −200 E 134 for a true ≈ 3.3e4."""
    from kgeval.errors import NoClosedFormError

    m = metrics.get("power_mean_rank", p=p)
    assert m.null_moments(np.array(c)).mean is None
    with pytest.raises(NoClosedFormError):
        m.expected_value(c)
    table = RankTable.from_ranks([1, 2] + [1] * (len(c) - 2), num_candidates=c)
    res = Results(table, metrics=[m, metrics.ZScore(m)])
    assert res.get_metric(m.key) == m([1, 2] + [1] * (len(c) - 2))
    assert res.value("both", "realistic", metrics.ZScore(m).key) is None  # omitted, not garbage


@pytest.mark.parametrize("p", [2.0, -0.5])
@pytest.mark.parametrize("weighted", [False, True])
def test_enumeration_with_many_single_candidate_tasks(p, weighted):
    """Π Cᵢ ≤ 2¹⁶ with most Cᵢ = 1 chose the enumeration, which built one meshgrid axis per task:
    40 tasks raised numpy's RuntimeError ('only supports up to 32 dimensions'), 70 a ValueError
    (64). Tasks with one candidate are the constant rank 1; the random ones are enumerated."""
    c = [1] * 37 + [2, 3, 1, 4] + [1] * 30
    w = np.linspace(0.5, 2.0, len(c)) if weighted else None
    nm = metrics.get("power_mean_rank", p=p).null_moments(np.array(c), w)
    # the same moments by enumerating the four random tasks with the rest as one constant task
    ww = np.full(len(c), 1.0 / len(c)) if w is None else w / w.sum()
    rnd = np.array(c) > 1
    want = enumerate_power_mean([*np.array(c)[rnd], 1], [*ww[rnd], ww[~rnd].sum()], p)
    assert nm.exact and rel(nm.mean, want[0]) <= 1e-13 and rel(nm.variance, want[1]) <= 1e-10
    # all single-candidate tasks: the rank is 1 with certainty
    nm = metrics.get("power_mean_rank", p=p).null_moments(np.ones(100, dtype=np.int64), w if w is None else np.ones(100))
    assert (nm.mean, nm.variance, nm.exact) == (1.0, 0.0, True)
