"""GMR / IGMR null variance E²·expm1(Σ ln E[rᵢ^{2aᵢ}] − 2 ln E[rᵢ^{aᵢ}]) at many tasks or tiny exponents aᵢ:
the difference of the two sums of logs kept only their absolute accuracy (~1e-19 per task) while the
spread is ~a²·Var[ln r], so the variance lost ~n²·1e-19 relative (10⁶ unweighted tasks of 14,541
candidates: 2.2e-6; 10⁵: 1.2e-8; C = [1, 10⁶] with weights [1, 1e-6]: 5.8e-7), flagged exact.
Reference: the product formula in mpmath at 40 digits, with Σ_{j≤C} j^a exactly
(direct sums, or ζ(−a) plus the asymptotic expansion for large C)."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import metrics

mp = pytest.importorskip("mpmath")


def _power_sum(c: int, a):
    """Σ_{j≤c} j^a: directly up to 2,000, else ζ(−a) + c^{a+1}/(a+1) + c^a/2 + Σₖ B₂ₖ/(2k)!·(d/dc)^{2k−1} c^a
    (the asymptotic expansion: its k-th term is ~(2k/(2π·2000))^{2k}, 12 terms suffice at 40 digits)."""
    if c <= 2000:
        return mp.fsum(mp.mpf(j) ** a for j in range(1, c + 1))
    cm = mp.mpf(c)
    total = mp.zeta(-a) + cm ** (a + 1) / (a + 1) + cm**a / 2
    falling = a  # a(a−1)…(a−2k+2)
    for k in range(1, 13):
        if k > 1:
            falling *= (a - 2 * k + 3) * (a - 2 * k + 2)
        total += mp.bernoulli(2 * k) / mp.factorial(2 * k) * falling * cm ** (a - 2 * k + 1)
    return total


def _reference(groups, sign):
    """(E, Var) of GMR^sign for tasks given as (C, weight, count), weights relative."""
    with mp.workdps(40):
        total = mp.fsum(mp.mpf(float(w)) * n for _, w, n in groups)
        l1 = l2 = mp.mpf(0)
        for c, w, n in groups:
            if c == 1:
                continue
            a = sign * mp.mpf(float(w)) / total
            l1 += n * mp.log(_power_sum(c, a) / c)
            l2 += n * mp.log(_power_sum(c, 2 * a) / c)
        return float(mp.exp(l1)), float(mp.exp(2 * l1) * mp.expm1(l2 - 2 * l1))


CASES = {  # groups of (C, weight, count)
    "1e6 tasks, C = 2": [(2, 1.0, 10**6)],
    "1e5 tasks, C = 14541": [(14_541, 1.0, 10**5)],
    "C = [1, 1e6], weights [1, 1e-6]": [(1, 1.0, 1), (10**6, 1e-6, 1)],
    "mixed C, 1e5 tasks": [(2, 1.0, 40_000), (3, 1.0, 30_000), (70_000, 1.0, 20_000), (10**6, 1.0, 10_000)],
    "weights 1e-6..1e6": [(5, 1e-6, 3), (65_536, 1e6, 1), (2**40, 1e-3, 2), (1, 1e3, 4)],
}


@pytest.mark.parametrize("key,sign", [("geometric_mean_rank", 1), ("inverse_geometric_mean_rank", -1)])
@pytest.mark.parametrize("name", list(CASES))
def test_variance_against_the_product_formula(name, key, sign):
    groups = CASES[name]
    c = np.concatenate([np.full(n, ci, dtype=np.int64) for ci, _, n in groups])
    w = np.concatenate([np.full(n, wi) for _, wi, n in groups])
    weights = None if np.all(w == w[0]) else w
    mean, var = _reference(groups, sign)
    got = metrics.get(key).null_moments(c, weights)
    assert got.exact
    assert got.mean == pytest.approx(mean, rel=1e-12, abs=0)
    # measured ≤ 4.4e-12 at 10⁶ tasks (twice E's relative error: Var ∝ E²), ~1e-15 otherwise
    assert got.variance == pytest.approx(var, rel=1e-11 if c.size >= 10**6 else 1e-12, abs=0)


@pytest.mark.parametrize("c", [2, 3, 33, 1000, 65_536, 65_537, 10**6, 2**62])
@pytest.mark.parametrize("a", [1e-9, -1e-6, 3e-3, -0.02, 0.5 / 13.8, 0.2])
def test_per_task_spread(c, a):
    """ln E[r^{2a}] − 2 ln E[r^a] on both sides of the series / direct switch (|a|·ln C = 1/2) and
    of EXACT_MAX, to 1e-13 relative."""
    from kgeval.metrics.moments import log_moment_spread

    with mp.workdps(40):
        am = mp.mpf(a)
        want = mp.log(_power_sum(c, 2 * am) / c) - 2 * mp.log(_power_sum(c, am) / c)
    got = log_moment_spread(np.array([c]), a)[0]
    assert float(got) == pytest.approx(float(want), rel=1e-13, abs=0)
