"""Power-mean null moments by enumeration (Π Cᵢ ≤ 2¹⁶ outcomes) where Var ≪ E²: a C = 1 task of large
weight beside a small one. The variance of the enumerated means kept only their float rounding while
flagged exact (p = −2, C = [1, 65,536], weights [1, 1e-12]: 5% off; [1, 60,000], [1, 1e-9]: 2e-7).
Reference: every outcome in mpmath at 40 digits (two passes: mean, then squared deviations)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kgeval.metrics.means import PowerMeanRank

mp = pytest.importorskip("mpmath")


def _reference(cs, weights, p):
    w = np.asarray(weights, dtype=np.float64)
    with mp.workdps(40):
        wm = [mp.mpf(float(x)) for x in w]
        total = mp.fsum(wm)
        wm = [x / total for x in wm]
        pm = mp.mpf(p)
        cols = [[wi * mp.mpf(j) ** pm for j in range(1, c + 1)] for c, wi in zip(cs, wm)]
        values = [mp.fsum(t) ** (1 / pm) for t in itertools.product(*cols)]
        mean = mp.fsum(values) / len(values)
        var = mp.fsum((x - mean) ** 2 for x in values) / len(values)
        return float(mean), float(var), float(var / mean**2)


CASES = [  # C, weights, p
    ([1, 20_000], [1.0, 1e-9], -2.0),
    ([1, 20_000], [1.0, 1e-12], -3.0),
    ([1, 20_000], [1.0, 1e-12], -0.5),
    ([1, 20_000], [1.0, 1e-12], 0.5),
    ([1, 1, 4_000], [1.0, 3.0, 1e-8], 2.0),
    ([1, 3, 50], [1e6, 1.0, 1e-3], -1.0),
    ([2, 5, 7], [1.0, 1e-6, 1e-6], 1e-7),  # p → 0: r^p − 1 must keep its digits
    ([3, 5, 7], [1e-6, 1.0, 1e6], 100.0),  # X/μ far from 1 (large |p|): ln X − ln μ
    ([20, 30, 40], [1e-3, 1.0, 1e3], -100.0),
]


@pytest.mark.parametrize("cs,ws,p", CASES, ids=[f"{c}-{w}-{p:g}" for c, w, p in CASES])
def test_enumerated_moments_keep_their_digits(cs, ws, p):
    mean, var, ratio = _reference(cs, ws, p)
    got = PowerMeanRank(p).null_moments(cs, ws)
    assert got.exact
    assert got.mean == pytest.approx(mean, rel=1e-13, abs=0)
    assert got.variance == pytest.approx(var, rel=1e-12, abs=0), ratio


def test_overflowing_powers_are_flagged_when_the_variance_is_below_rounding():
    """|p·ln r| > 600 keeps the rounded means (no overflow): exact only where Var/E² is large enough."""
    cs, ws, p = [1, 300], [1.0, 1e-9], -300.0
    mean, var, ratio = _reference(cs, ws, p)
    assert ratio < 1e-20
    got = PowerMeanRank(p).null_moments(cs, ws)
    assert got.mean == pytest.approx(mean, rel=1e-14, abs=0)
    assert not got.exact
    cs, ws, p = [2, 3, 400], [1.0, 1.0, 1.0], -150.0  # Var/E² ~ 0.2: the rounded means suffice
    mean, var, _ = _reference(cs, ws, p)
    got = PowerMeanRank(p).null_moments(cs, ws)
    assert got.exact
    assert got.variance == pytest.approx(var, rel=1e-12, abs=0)
