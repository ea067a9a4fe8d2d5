"""The adjusted index (M − E)/(opt − E) and the z-score (M − E)/σ where E is close to the optimum
(most of the weight on a task with one candidate). ``opt − E`` formed as a difference kept only E's
absolute rounding: C = [1, 2] with weights [1, 1e-9] gave the index a null variance of 0.99999983
(true 1), flagged exact, worse as the weight shrinks. The base metrics now state ``opt − E``
(``NullMoments.optimum_gap``) from cancellation-free formulas.

Reference: every outcome enumerated in mpmath at 50 digits, with the weights exactly as the metric
normalises them (float64)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kgeval import metrics
from kgeval.metrics import NullMoments
from kgeval.metrics.base import check_weights
from kgeval.metrics.derived import AdjustedIndex, ZScore
from kgeval.metrics.means import PowerMeanRank

mp = pytest.importorskip("mpmath")


def _power(p):
    return lambda r, w: mp.fsum(wi * mp.mpf(ri) ** p for wi, ri in zip(w, r)) ** (1 / mp.mpf(p))


# base key -> M(ranks, normalised weights) in mpmath
BASES = {
    "arithmetic_mean_rank": lambda r, w: mp.fsum(wi * ri for wi, ri in zip(w, r)),
    "inverse_harmonic_mean_rank": lambda r, w: mp.fsum(wi / ri for wi, ri in zip(w, r)),
    "hits_at_1": lambda r, w: mp.fsum(wi * (ri <= 1) for wi, ri in zip(w, r)),
    "hits_at_3": lambda r, w: mp.fsum(wi * (ri <= 3) for wi, ri in zip(w, r)),
    "inverse_arithmetic_mean_rank": lambda r, w: 1 / mp.fsum(wi * ri for wi, ri in zip(w, r)),
    "harmonic_mean_rank": lambda r, w: 1 / mp.fsum(wi / ri for wi, ri in zip(w, r)),
    "geometric_mean_rank": lambda r, w: mp.exp(mp.fsum(wi * mp.log(ri) for wi, ri in zip(w, r))),
    "inverse_geometric_mean_rank": lambda r, w: mp.exp(-mp.fsum(wi * mp.log(ri) for wi, ri in zip(w, r))),
    "power_mean_rank_p2": _power(2),
    "power_mean_rank_p1": _power(1),
    "power_mean_rank_pneg0_5": _power(-0.5),
    "power_mean_rank_pneg2": _power(-2),
}


def _reference(key, cs, weights):
    """(E, Var, opt − E) of base ``key`` by enumeration (mpmath)."""
    w = check_weights(np.asarray(weights, dtype=np.float64), len(cs))
    f = BASES[key]
    with mp.workdps(50):
        wm = [mp.mpf(float(x)) for x in w]
        wm = [x / mp.fsum(wm) for x in wm]  # the metrics divide by Σw (≈ 1 after normalisation)
        values = [f(r, wm) for r in itertools.product(*[range(1, c + 1) for c in cs])]
        mean = mp.fsum(values) / len(values)
        var = mp.fsum((x - mean) ** 2 for x in values) / len(values)
        return mean, var, 1 - mean


CASES = [([1, 2], [1.0, s]) for s in (1e-6, 1e-9, 1e-12)]
CASES += [([1, 5, 7], [1.0, 1e-9, 3e-9]), ([1, 4, 6], [1.0, 0.5, 0.25])]


def _rel(got, ref):
    return abs((mp.mpf(got) - ref) / ref)


@pytest.mark.parametrize("key", list(BASES))
@pytest.mark.parametrize("cs,weights", CASES, ids=[f"{c}-{w[1]:g}" for c, w in CASES])
def test_gap_and_index_variance_against_enumeration(key, cs, weights):
    base = metrics.get(key)
    mean, var, gap = _reference(key, cs, weights)
    nm = base.null_moments(cs, weights)
    assert nm.exact and nm.optimum_gap is not None
    if gap == 0:  # hits@3 with C ≤ 3: M = 1 always, the index is 0 (its convention)
        assert nm.optimum_gap == 0 and AdjustedIndex(base).null_moments(cs, weights) == NullMoments(0.0, 0.0, True, 1.0)
        return
    assert _rel(nm.optimum_gap, gap) <= 1e-13, (nm.optimum_gap, gap)
    index = AdjustedIndex(base).null_moments(cs, weights)
    assert index.mean == 0
    # before: 1.7e-7 off at weight 1e-9 (MR, MRR), 1.8e-4 at 1e-12, 2e-3 for HMR
    assert _rel(index.variance, var / gap**2) <= 1e-13, (index.variance, var / gap**2)


@pytest.mark.parametrize("key", list(BASES))
@pytest.mark.parametrize("cs,weights", CASES[1:3], ids=["1e-9", "1e-12"])
def test_adjusted_value_and_z_near_the_optimum(key, cs, weights):
    """The index and the z-score of observed ranks against (M − E)/(opt − E) and (M − E)/σ with the
    metric's own M (as float) and the exact E, σ: perfect ranks and one miss of the small-weight task."""
    base = metrics.get(key)
    _, var, gap = _reference(key, cs, weights)
    if gap == 0:
        return  # deterministic (hits@3 with C ≤ 3): see above
    index, z = AdjustedIndex(base), ZScore(base)
    sign = 1 if base.increasing else -1
    for ranks in ([1] * len(cs), [1] + [2] * (len(cs) - 1)):
        m = base(ranks, cs, weights)
        with mp.workdps(50):
            dev = mp.mpf(m) - (1 - gap)  # M − E with M exactly the float the metric returns
            want_index = dev / gap
            want_z = sign * dev / mp.sqrt(var)
        got_index, got_z = index(ranks, cs, weights), z(ranks, cs, weights)
        if ranks[-1] == 1:
            assert got_index == 1.0  # perfect ranks: exactly 1 (also before)
        assert abs(got_index - want_index) <= 1e-13 * max(1, abs(want_index)), (ranks, got_index, want_index)
        # before: z of perfect MR ranks at weight 1e-9 was 1.7e-7 off
        assert abs(got_z - want_z) <= 1e-13 * abs(want_z), (ranks, got_z, want_z)


def test_power_mean_quadrature_path_gap():
    """More than 2¹⁶ outcomes: the p < 0 quadrature, opt − E = −expm1(log1p(μ − 1)/p) − R."""
    c, small = 70_000, 1e-9
    w = check_weights(np.array([1.0, small]), 2)
    for p in (-0.5, -2.0):
        with mp.workdps(40):
            w1, w2 = mp.mpf(float(w[0])), mp.mpf(float(w[1]))
            w1, w2 = w1 / (w1 + w2), w2 / (w1 + w2)
            pm = mp.mpf(p)
            mean = mp.fsum((w1 + w2 * mp.mpf(j) ** pm) ** (1 / pm) for j in range(1, c + 1)) / c
        nm = PowerMeanRank(p).null_moments([1, c], [1.0, small])
        assert nm.exact
        assert _rel(nm.optimum_gap, 1 - mean) <= 1e-13, p  # 1 − E was ~1e-10 relative off here


def test_median_gap():
    """Unweighted median with 40 tasks of one candidate and 41 of two: E = 1 + 2⁻⁴¹ (the median is
    above 1 only when all 41 of the latter miss); opt − E as 1 − E kept ~1e-4 of it."""
    c = np.array([1] * 40 + [2] * 41)
    nm = metrics.get("median_rank").null_moments(c)
    assert nm.optimum_gap == pytest.approx(-(2.0**-41), rel=1e-13, abs=0)
    index = metrics.get("adjusted_median_rank_index")
    assert index(np.ones(81), c) == 1.0
    ranks = np.ones(81)
    ranks[40:] = 2
    assert index(ranks, c) == pytest.approx((1 - 2.0**-41) / -(2.0**-41), rel=1e-13, abs=0)


def test_hits_gap_where_k_is_just_below_c():
    """hits@k with k = C − 1 on a huge C: 1 − min(k, C)/C cancels like the variance did."""
    c = 2**40 + 1
    nm = metrics.get("hits_at_1099511627776").null_moments([c])
    assert nm.optimum_gap == pytest.approx(1 / c, rel=1e-15, abs=0)


def test_serialisation_round_trip_and_old_dicts():
    nm = metrics.get("mrr").null_moments([1, 2], [1.0, 1e-9])
    d = nm.to_dict()
    assert d["optimum_gap"] == nm.optimum_gap
    assert NullMoments.from_dict(d) == nm
    old = {"expected_value": nm.mean, "variance": nm.variance, "exact": True}  # written before the field
    loaded = NullMoments.from_dict(old)
    assert loaded.optimum_gap is None and loaded.mean == nm.mean
    # the wrappers fall back to 1 − E there: the old (cancelling) value, not an error
    index = AdjustedIndex(metrics.get("mrr"))
    assert index.adjust(0.5, loaded) == (0.5 - nm.mean) / (1 - nm.mean)
    assert NullMoments.from_dict({}) == NullMoments()
