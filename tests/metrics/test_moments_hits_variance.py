"""hits@k null variance Σ wᵢ² pᵢ(1 − pᵢ), pᵢ = min(k, Cᵢ)/Cᵢ, where k is just below C: 1 − pᵢ computed
as 1 − min(k, C)/C kept only the rounding of pᵢ (C = 10¹² + 1, k = 10¹²: 2.2e-5 relative; C = 2⁶²,
k = C − 1: 0 flagged exact, making the z-score 0). The reference is exact rational arithmetic."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kgeval.metrics.means import HitsAtK


def _reference(cs, k, ws=None):
    ws = [1] * len(cs) if ws is None else ws
    total = sum(Fraction(w) for w in ws)
    mean = var = Fraction(0)
    for c, w in zip(cs, ws):
        p = Fraction(min(k, c), c)
        wn = Fraction(w) / total
        mean += wn * p
        var += wn * wn * p * (1 - p)
    return mean, var


@pytest.mark.parametrize(
    "cs,k,ws",
    [
        ([10**12 + 1], 10**12, None),
        ([2**62], 2**62 - 1, None),
        ([10**15, 10**6, 3], 10**15 - 1, [1.0, 1e-6, 1e6]),
        ([10**6 + 1, 10**6 + 1, 5], 10**6, None),
    ],
)
def test_variance_when_k_is_just_below_c(cs, k, ws):
    mean, var = _reference(cs, k, ws)
    got = HitsAtK(k).null_moments(cs, ws)
    assert got.exact
    assert got.mean == pytest.approx(float(mean), rel=1e-15, abs=0)
    assert got.variance == pytest.approx(float(var), rel=1e-13, abs=0)
