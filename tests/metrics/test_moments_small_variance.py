"""Null variances far below E² (Var/E² down to 1e-17): one task of large weight with C = 1 beside
one of small weight. Var[g(X)] = E[X^{2β}] − E[X^β]² kept nothing of them (the quadrature's E
has ~1e-16 relative error, of the size of the variance itself) while flagged exact: HMR with
C = [1, 20,000], weights [1, 1e-6] gave 5.4 times the true variance, the power mean p = −2 with
C = [1, 70,000], weights [1, 1e-5] 15% too much. The reference is the exact uniform distribution of
the one random rank, summed in mpmath at 40 digits (two passes: mean, then squared deviations)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from kgeval import metrics
from kgeval.metrics.means import PowerMeanRank

mp = pytest.importorskip("mpmath")


def _reference(c: int, weights, f, g):
    """(E, Var) of g(w₁·f(1) + w₂·f(r)), r ~ U{1..c}, weights normalised as the metric does (float)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    with mp.workdps(40):
        w1, w2 = mp.mpf(float(w[0])), mp.mpf(float(w[1]))
        values = [g(w1 * f(mp.mpf(1)) + w2 * f(mp.mpf(j))) for j in range(1, c + 1)]
        mean = mp.fsum(values) / c
        var = mp.fsum((x - mean) ** 2 for x in values) / c
        return float(mean), float(var), float(var / mean**2)


CASES = [  # metric, f, g, C of the random task, its weight beside weight 1 (C = 1)
    ("harmonic_mean_rank", lambda x: 1 / x, lambda x: 1 / x, 20_000, 1e-6),  # Var/E² = 8e-17
    ("harmonic_mean_rank", lambda x: 1 / x, lambda x: 1 / x, 70_000, 1e-4),
    ("inverse_arithmetic_mean_rank", lambda x: x, lambda x: 1 / x, 20_000, 1e-10),
    ("power_mean_rank_pneg2", lambda x: x**-2, lambda x: x ** mp.mpf(-0.5), 70_000, 1e-5),  # > 2¹⁶ outcomes
    ("power_mean_rank_pneg1", lambda x: 1 / x, lambda x: 1 / x, 70_000, 1e-3),
    ("power_mean_rank_pneg0_5", lambda x: x**-0.5, lambda x: x**-2, 70_000, 1e-3),
]


@pytest.mark.parametrize("key,f,g,c,small", CASES, ids=[f"{k}-{c}-{s:g}" for k, _, _, c, s in CASES])
def test_tiny_variances_keep_their_digits(key, f, g, c, small):
    metric = metrics.get(key)
    mean, var, ratio = _reference(c, [1.0, small], f, g)
    assert ratio < 1e-9  # the trap: E[X^{2β}] − E[X^β]² cancels by E²/Var
    got = metric.null_moments([1, c], [1.0, small])
    assert got.exact
    assert got.mean == pytest.approx(mean, rel=1e-14, abs=0)
    # measured ≤ 5.1e-15 (quadrature step h = 0.2; h = 0.25 left 3.8e-11 at p = −0.5, 1.05e-12 for HMR,
    # IAMR, p = −1, 1.2e-13 at p = −2, all too high)
    assert got.variance == pytest.approx(var, rel=2e-14, abs=0)


def test_small_cases_against_fractions():
    """A few tasks, every outcome enumerated in exact rational arithmetic (HMR and IAMR always take the
    quadrature): small weights beside a C = 1 task, and ordinary weights."""
    for cs, ws in (([1, 3, 4], [1.0, 1e-7, 2e-7]), ([1, 2, 5], [1.0, 1e-5, 1e-5]), ([2, 3, 5], [1.0, 2.0, 0.5])):
        w = np.asarray(ws) / np.sum(ws)
        wf = [Fraction(float(x)) for x in w]
        grids = np.meshgrid(*[np.arange(1, c + 1) for c in cs], indexing="ij")
        outcomes = np.stack([x.ravel() for x in grids], axis=-1).tolist()
        for key, f in (("harmonic_mean_rank", lambda j: Fraction(1, j)), ("inverse_arithmetic_mean_rank", Fraction)):
            values = [1 / sum(wi * f(j) for wi, j in zip(wf, row)) for row in outcomes]
            mean = sum(values) / len(values)
            var = sum((x - mean) ** 2 for x in values) / len(values)
            got = metrics.get(key).null_moments(cs, ws)
            assert got.exact
            assert got.mean == pytest.approx(float(mean), rel=1e-14, abs=0), (key, cs)
            # measured ≤ 4.2e-15 (1.05e-12 with the quadrature step h = 0.25)
            assert got.variance == pytest.approx(float(var), rel=2e-14, abs=0), (key, cs, float(var / mean**2))


def test_power_mean_quadrature_variance_is_not_below_zero_or_noise():
    """p = −2 with one dominant C = 1 task: Var must scale with the small weight squared (w₂²·Var[r⁻²]/4
    to leading order), not sit at the rounding floor of E²: weights [1, 1e-6] gave Var = 0 flagged
    exact, [1, 1e-5] 4.4e-16 (true 3.86e-16)."""
    c = 70_000
    j = np.arange(1, c + 1, dtype=np.float64)
    var_f = np.var(j**-2.0)
    for small in (1e-4, 1e-5, 1e-6):
        got = PowerMeanRank(-2.0).null_moments([1, c], [1.0, small])
        w2 = small / (1 + small)
        leading = w2**2 * var_f / 4  # X ≈ 1, g'(1) = −1/2
        assert got.variance == pytest.approx(leading, rel=10 * small + 1e-9, abs=0)
