"""Null moments whose cost no longer grows with max C (benchmarks/results_build.py): each faster
path against the O(max C) one it replaces, on inputs small enough for both, and memory that
stays O(n + nodes) at 10⁶–10⁷ candidates (it was nodes × max C: 69 MB for HMR, 131 MB for the
median at 10⁶ candidates and 5,000 tasks)."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from kgeval import metrics
from kgeval.metrics import laplace, moments, order
from kgeval.metrics.asymptotics import EXACT_MAX


def rel(x, y) -> float:
    return abs(float(x) - float(y)) / abs(float(y))


# ---------------------------------------------------------------------------- HMR: pair path vs cumulative sum
HMR_CASES = [
    # (num_candidates, weights): few distinct C (full ranking), many distinct C, ≤ 8 distinct weights
    (3000 - np.random.default_rng(0).integers(0, 20, 500), None),
    (np.random.default_rng(1).integers(1, 10_000, 300), None),
    (np.random.default_rng(2).integers(500, 8000, 200), np.random.default_rng(3).choice([0.5, 1.0, 2.0], 200)),
    (np.array([10_000, 9_999, 7, 1]), None),
]


@pytest.mark.parametrize(("c", "w"), HMR_CASES, ids=["full-ranking", "many-C", "3-weights", "tiny-C"])
def test_hmr_pair_path_matches_cumulative_sum(c, w, monkeypatch):
    """The O(1)-per-(C, w)-pair evaluation (now taken when cheaper) against the cumulative sums
    over j ≤ max C (the path every unweighted result took before), both forced: ≤ 1e-12."""
    w = None if w is None else w / w.sum()
    monkeypatch.setattr(laplace, "_PAIR_COST", math.inf)  # never prefer pairs: cumulative sums
    prefix = laplace.inverse_moments(c, w, "reciprocal")
    monkeypatch.setattr(laplace, "_PREFIX_MAX", 0)  # no cumulative sums at all: pairs
    pairs = laplace.inverse_moments(c, w, "reciprocal")
    assert rel(pairs[0], prefix[0]) <= 1e-12 and rel(pairs[1], prefix[1]) <= 1e-12


def test_hmr_path_choice_and_result_unchanged_by_it(monkeypatch):
    """Few distinct large C take the pair path, many distinct small C the cumulative sums
    (checked by making the other one fail); the public moments agree with the forced other path."""
    full = 200_000 - np.random.default_rng(4).integers(0, 20, 2000)  # 20 pairs, max C 2·10⁵
    many = np.random.default_rng(5).integers(1, 14_541, 5000)  # thousands of pairs, max C 14,541
    hmr = metrics.get("hmr")

    def fail(*args, **kwargs):
        raise AssertionError("the cumulative sum over j <= max C was taken")

    with monkeypatch.context() as m:
        m.setattr(laplace, "_log_l_prefix", fail)
        big = hmr.null_moments(full, None)
    with monkeypatch.context() as m:
        m.setattr(laplace, "_log_l_prefix", fail)
        with pytest.raises(AssertionError, match="cumulative sum"):
            hmr.null_moments(many, None)
    with monkeypatch.context() as m:
        m.setattr(laplace, "_PAIR_COST", math.inf)
        forced = hmr.null_moments(full, None)
    # the float64 cumulative sum is the less accurate one here: against the same sums in extended
    # precision it is off by 5.5e-12 (mean) / 1.1e-11 (E[X⁻²]), the pair path by 3.5e-14 / 9e-14
    assert rel(big.mean, forced.mean) <= 1e-10 and rel(big.variance, forced.variance) <= 1e-9
    assert big.exact and forced.exact


# ---------------------------------------------------------------------------- median: cells vs every x
def _direct(c, k) -> float:
    s, _ = order._Survival(c, k)(np.arange(int(c.max()), dtype=np.float64))
    return float(s.sum())


MEDIAN_CASES = [
    # (name, C, DP budget): the same evaluation of s on both sides (exact DP / normal approximation)
    ("dp-n7", np.random.default_rng(6).integers(10_000, 60_000, 7), 1e12),
    ("dp-n4", np.random.default_rng(7).integers(5000, 30_000, 4), 1e12),
    ("normal-near-equal", 20_000 - np.random.default_rng(8).integers(0, 20, 5000), 0),
    ("normal-spread", np.random.default_rng(9).integers(10_000, 60_000, 301), 0),
    ("normal-from-1", np.random.default_rng(9).integers(1, 60_000, 301), 0),
    ("normal-thinned", np.random.default_rng(10).integers(10, 60_000, 8000), 0),
]


@pytest.mark.parametrize(("name", "c", "budget"), MEDIAN_CASES, ids=[m[0] for m in MEDIAN_CASES])
def test_median_cells_match_sum_over_every_x(name, c, budget, monkeypatch):
    """The Euler–Maclaurin / Gauss–Legendre cells over x ≥ 2¹² (taken for the normal
    approximation above 2¹⁶ candidates) against the sum over every x (the path below, and before
    for all C ≤ 2²⁰), forced as in test_median_huge_candidates_bounded_memory_and_close_to_exact.
    Tolerances: 1e-10 with every breakpoint Cᵢ a cell edge (measured ≤ 6.6e-12), 1e-9 with them
    thinned (more than 4,096 distinct Cᵢ; measured ≤ 1.1e-9 at 10⁵ distinct Cᵢ, not here)."""
    monkeypatch.setattr(order, "_DP_BUDGET", budget)
    tol = 1e-9 if name.endswith("thinned") else 1e-10
    worst = 0.0
    n = c.size
    for k in sorted({(n + 1) // 2, n // 2 + 1, max(1, n // 10)}):
        direct = _direct(c, k)
        monkeypatch.setattr(order, "_SUM_MAX", order._HEAD)  # force the cells
        cells, exact = order._order_stat_mean(c, k)
        monkeypatch.setattr(order, "_SUM_MAX", 2**20)
        assert not exact
        assert rel(cells, direct) <= tol, (k, cells, direct)
        worst = max(worst, rel(cells, direct))
    print(f"{name}: worst relative difference {worst:.1e}")


def test_median_cells_resolve_the_drop_at_millions_of_candidates():
    """5,001 near-equal C of 4·10⁶: against the sum over all 4·10⁶ x (in chunks). The rule this
    replaced (x < 2²⁰ summed, one 24-point Gauss–Legendre segment over the rest) was 1.3% low
    here (1,973,553 instead of 2,000,196), since s drops from 1 to 0 over ≈ M/140 around M/2."""
    n_cand = 4 * 10**6
    c = n_cand - np.random.default_rng(13).integers(0, 20, 5001)
    k = 2501
    surv = order._Survival(c, k)
    direct = sum(float(surv(np.arange(s, min(n_cand, s + 2**20), dtype=np.float64))[0].sum())
                 for s in range(0, n_cand, 2**20))
    value, exact = order.median_expectation(c)
    assert not exact and rel(value, direct) <= 1e-12, (value, direct)


def test_median_normal_path_takes_cells_above_direct_max(monkeypatch):
    """5,000 near-equal C of 10⁵: no evaluation of s at every x (was 10⁵ points per order statistic)."""
    c = 100_000 - np.random.default_rng(11).integers(0, 20, 5000)
    sizes = []
    real = order._Survival.__call__

    def spy(self, x):
        sizes.append(x.size)
        return real(self, x)

    monkeypatch.setattr(order._Survival, "__call__", spy)
    value, exact = order.median_expectation(c)
    assert not exact and max(sizes) < 100_000
    assert abs(value - (100_000 - 9.5 + 1) / 2) <= 0.5  # near (C̄ + 1)/2: all Cᵢ within 20 of each other


def test_normal_cdf_vectorised_matches_erfc_loop(monkeypatch):
    t = np.concatenate([np.linspace(-45, 12, 40_001), [0.0, -40.0, 9.0, -1e-300]])
    vec = order._normal_cdf(t)
    monkeypatch.setattr(order, "_ERFC_LOOP_MAX", math.inf)
    loop = order._normal_cdf(t)
    normal = loop > 1e-290  # subnormal results keep fewer digits in either
    assert np.all(np.abs(vec - loop)[normal] <= 1e-12 * loop[normal])  # measured ≤ 2.4e-13 (t ≈ −36)
    assert np.all(np.abs(vec - loop)[~normal] <= 1e-290)


# ---------------------------------------------------------------------------- power sums above EXACT_MAX
@pytest.mark.parametrize("a", [-2.0, -1.0, -1e-4, 1e-4, 0.5, 2.0])
def test_power_sum_head_by_euler_maclaurin_matches_prefix(a):
    """Above EXACT_MAX the null moments' Σ_{j≤EXACT_MAX} j^a is one Euler–Maclaurin number, no
    longer an exact prefix array: against that array (still used for tie ranges), ≤ 1e-17."""
    c = np.array([EXACT_MAX + 1, 200_000, 10**7])
    ours = moments.power_sums(c, a)  # low = 1 everywhere: the Euler–Maclaurin head
    ranged = moments.power_sums(c, a, low=np.array([1, 2, 1]))  # low ≠ 1 somewhere: the prefix array
    assert rel(ours[0], ranged[0]) <= 1e-17 and rel(ours[2], ranged[2]) <= 1e-17
    assert rel(ours[1] - 1, ranged[1]) <= 1e-17  # 1^a = 1: the only term 2..C lacks


# ---------------------------------------------------------------------------- memory
@pytest.mark.parametrize("num_candidates", [10**6, 10**7])
def test_memory_does_not_grow_with_candidates(num_candidates):
    """5,000 tasks (a full-ranking test set): the moments of every wrapped base metric stay
    below 16 MB of traced memory (measured ≤ 8 MB; nodes × max C was 69 MB for HMR and
    the sum over every x 131 MB for the median at 10⁶)."""
    c = num_candidates - np.random.default_rng(12).integers(0, 20, 5000)
    for key in ("hmr", "iamr", "median_rank", "gmr", "igmr", "mrr", "mr", "hits@10"):
        tracemalloc.start()
        metrics.get(key).null_moments(c, None)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 16 * 2**20, (key, peak / 2**20)
