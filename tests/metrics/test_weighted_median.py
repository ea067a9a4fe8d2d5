"""The weighted median (median rank, inverse median rank, MAD) against brute force.

Two silent errors: a task of weight 0 was taken as the midpoint partner when the cumulative weight
hit exactly ½ (ranks [1, 2, 3], weights [1, 0, 1]: median 1.5 instead of 2, the median of [1, 3]),
and the float64 cumulative sum missed the exact ½ of equal weights on large tables (10⁵ tasks of
weight 1: the lower middle rank instead of the mean of the two middle ones).
"""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import metrics
from kgeval.metrics.order import MAD_SCALE, weighted_median


def _repeated(ranks, weights):
    """The ranks each repeated by its (whole-number) weight: the unweighted reference."""
    return np.repeat(np.asarray(ranks, dtype=np.float64), np.asarray(weights, dtype=np.int64))


@pytest.mark.parametrize(
    "ranks, weights",
    [([1, 2, 3], [1, 0, 1]), ([5, 1, 3], [1, 1, 0]), ([1, 2, 3, 10], [1, 0, 1, 0]), ([4, 4, 7, 2, 9], [0, 2, 2, 0, 0])],
)
def test_zero_weight_tasks_do_not_count(ranks, weights):
    r, w = np.asarray(ranks, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    kept = r[w > 0]
    assert metrics.get("median_rank")(r, weights=w) == np.median(kept)
    assert metrics.get("inverse_median_rank")(r, weights=w) == 1.0 / np.median(kept)
    mad = MAD_SCALE * np.median(np.abs(kept - np.median(kept)))
    assert metrics.get("median_absolute_deviation")(r, weights=w) == pytest.approx(mad, rel=1e-15, abs=0)


def test_whole_number_weights_equal_repeated_ranks():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 9))
        r = rng.integers(1, 12, size=n).astype(np.float64)
        w = rng.integers(0, 4, size=n).astype(np.float64)
        if not w.any():
            w[int(rng.integers(n))] = 1.0
        ref = _repeated(r, w)
        for scale in (1.0, 1 / 3, 7.0):  # relative weights: any scale
            assert weighted_median(r, w * scale / (w * scale).sum()) == np.median(ref), (r, w, scale)


@pytest.mark.parametrize("n", [100_000, 200_001])
def test_equal_weights_on_a_large_table_give_the_ordinary_median(n):
    rng = np.random.default_rng(n)
    r = rng.integers(1, 10**6, size=n).astype(np.float64)
    for value in (1.0, 0.1, 1 / 3):
        w = np.full(n, value)
        assert metrics.get("median_rank")(r, weights=w) == np.median(r)
        assert metrics.get("median_absolute_deviation")(r, weights=w) == metrics.get("median_absolute_deviation")(r)


def test_exact_half_of_unequal_weights_on_a_large_table():
    """Weights 1, 3, 1, 3, … on the lower half of the ranks and 3, 1, 3, 1, … on the upper half:
    the cumulative weight is exactly ½ between the two middle ranks (float64 summation missed it)."""
    half = 100_000
    r = np.arange(1, 2 * half + 1, dtype=np.float64)
    w = np.concatenate([np.tile([1.0, 3.0], half // 2), np.tile([3.0, 1.0], half // 2)])
    assert metrics.get("median_rank")(r, weights=w) == half + 0.5
