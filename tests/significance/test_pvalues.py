"""p-values against chance: exact methods = full enumeration, validity by simulation, log space, errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kgeval.errors import InvalidInputError
from kgeval.metrics import get
from kgeval.significance.pvalues import EXACT_HITS_MAX_TASKS, format_p, null_p_value

SMALL = [np.array([3, 5, 2]), np.array([4, 4, 4, 1]), np.array([5, 2, 3, 4])]


def _enumerate(metric, c):
    """Every rank vector of the null model with its probability, and the metric's value on it."""
    m = get(metric)
    for ranks in itertools.product(*(range(1, int(ci) + 1) for ci in c)):
        yield m(np.array(ranks), c), 1.0 / np.prod(c.astype(float))


def _brute_p(metric, observed, c):
    m = get(metric)
    better = (lambda v: v >= observed - 1e-12) if m.increasing else (lambda v: v <= observed + 1e-12)
    return sum(p for v, p in _enumerate(metric, c) if better(v))


@pytest.mark.parametrize("c", SMALL, ids=str)
@pytest.mark.parametrize("metric", ["hits@1", "hits@2", "mr"])
def test_exact_methods_equal_full_enumeration(metric, c):
    values = sorted({round(v, 12) for v, _ in _enumerate(metric, c)})
    for observed in values:
        got = null_p_value(metric, observed, c, method="exact")
        assert got.method.startswith("exact")
        assert got.value == pytest.approx(_brute_p(metric, observed, c), rel=1e-9, abs=1e-12)


def test_fractional_observations_are_resolved_against_the_model():
    """Ties give 1.5 expected hits out of 3, or a realistic rank sum of 6.5: the p-value is that of
    the worse neighbouring integer (1 hit, sum 7), never the better one (conservative)."""
    c = np.array([3, 5, 2])
    assert null_p_value("hits@1", 1.5 / 3, c).value == pytest.approx(_brute_p("hits@1", 1 / 3, c))
    assert null_p_value("mr", 6.5 / 3, c).value == pytest.approx(_brute_p("mr", 7 / 3, c))
    assert null_p_value("mr", 6.5 / 3, c).value > _brute_p("mr", 6 / 3, c)


@pytest.mark.parametrize("metric", ["hits@10", "mr", "mrr", "gmr"])
def test_null_p_values_are_valid_by_simulation(metric):
    """Under the null, P(p <= alpha) <= alpha (+ Monte Carlo error), and close to alpha for large n."""
    rng = np.random.default_rng(3)
    c = rng.choice([20, 50, 100, 400], size=200)  # few distinct C: the exact MR method stays cheap
    m = get(metric)
    ps = np.array([null_p_value(m, m(rng.integers(1, c + 1), c), c).value for _ in range(400)])
    for alpha in (0.05, 0.2):
        rate = np.mean(ps <= alpha)
        assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / ps.size)
        assert rate >= alpha - 4 * math.sqrt(alpha * (1 - alpha) / ps.size)


def test_exact_and_normal_agree_for_many_tasks():
    rng = np.random.default_rng(0)
    c = rng.choice(np.arange(100, 1000, 50), size=1000)
    for metric, sign in (("hits@10", 1), ("mr", -1)):
        mom = get(metric).null_moments(c, None)
        value = round((mom.mean + sign * 1.5 * math.sqrt(mom.variance)) * c.size) / c.size  # z ~ 1.5, attainable
        exact, normal = null_p_value(metric, value, c), null_p_value(metric, value, c, method="normal")
        assert exact.method.startswith("exact") and normal.method == "normal approximation"
        assert normal.z == pytest.approx(1.5, abs=0.2) and exact.value == pytest.approx(normal.value, abs=0.03)


def test_p_value_decreases_as_the_value_improves():
    c = np.full(50, 100)
    for metric, values in (("mrr", [0.05, 0.1, 0.3]), ("mr", [50.0, 40.0, 20.0]), ("hits@10", [0.1, 0.2, 0.5])):
        ps = [null_p_value(metric, v, c).log10 for v in values]
        assert ps[0] > ps[1] > ps[2]


def test_astronomically_good_values_keep_a_finite_logarithm():
    c = np.full(20_000, 15_000)
    for metric, value in (("mrr", 0.9), ("hits@10", 0.95), ("mr", 2.0)):
        p = null_p_value(metric, value, c)
        assert math.isfinite(p.log10) and p.log10 < -300, (metric, p)
        assert "e-" in str(p)


def test_weighted_tables_use_the_normal_approximation():
    c = np.array([10, 20, 30, 40])
    p = null_p_value("hits@10", 0.5, c, weights=[1, 2, 3, 4])
    assert p.method == "normal approximation" and 0 < p.value < 1
    # equal weights are no weights
    assert null_p_value("hits@10", 0.5, c, weights=[2, 2, 2, 2]).method.startswith("exact")


def test_degenerate_null_is_p_one():
    p = null_p_value("mrr", 1.0, np.ones(5, dtype=int))
    assert p.value == 1.0 and p.method.startswith("degenerate")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(metric="mrr", value=1.5), "not a possible value"),
        (dict(metric="mrr", value=float("nan")), "finite number"),
        (dict(metric="z_mrr", value=3.0), "base metrics"),
        (dict(metric="mrr", value=0.3, method="exact"), "no exact null distribution"),
        (dict(metric="median_rank", value=3.0), "no null-model moments"),
        (dict(metric="mrr", value=0.5, method="best"), "method must be"),
        (dict(metric="nosuch", value=0.5), "nosuch"),
    ],
)
def test_bad_input_is_named(kwargs, match):
    with pytest.raises((InvalidInputError, KeyError), match=match):
        null_p_value(kwargs.pop("metric"), kwargs.pop("value"), np.array([10, 20]), **kwargs)


def test_format_p():
    assert format_p(math.log10(0.0123)) == "0.0123" and format_p(-6.5) == "3.2e-07" and format_p(-412.3) == "5.0e-413"
    assert EXACT_HITS_MAX_TASKS >= 40_932  # FB15k-237's test tasks get the exact method


def test_mr_tails_far_below_fft_precision_are_exact():
    """P(Σr ≤ n) = Π 1/C and P(Σr ≤ n + 1) = (1 + n)/C^n: tails of 1e-170 through the tilted FFT."""
    n, cand = 100, 50
    c = np.full(n, cand)
    assert null_p_value("mr", 1.0, c).log10 == pytest.approx(-n * math.log10(cand), rel=1e-12)
    got = null_p_value("mr", (n + 1) / n, c, method="exact")
    assert got.method == "exact: convolution"
    assert got.log10 == pytest.approx(math.log10(n + 1) - n * math.log10(cand), rel=1e-9)
    # Σ(rᵢ − 1) = t ≤ 3: C(t + n − 1, t) rank vectors each (stars and bars; C ≥ 4 caps nothing)
    ways = sum(math.comb(t + n - 1, t) for t in range(4))
    want = math.log10(ways) - n * math.log10(cand)
    assert null_p_value("mr", (n + 3) / n, c).log10 == pytest.approx(want, rel=1e-9)


def test_mr_exact_matches_enumeration_in_the_tilted_tail():
    c = np.array([5, 4, 5, 3])
    for observed in (4, 5, 6, 7):  # sums far below the mean of 12.5: the tilted branch
        got = null_p_value("mr", observed / 4, c, method="exact")
        assert got.value == pytest.approx(_brute_p("mr", observed / 4, c), rel=1e-9)


def test_normal_approximation_is_floored_at_the_probability_of_all_ranks_one():
    """MRR = 1 needs every rank to be 1: p = Π 1/C exactly; the normal tail alone says ~1e-739."""
    c = np.full(100, 50)
    for weights in (None, np.arange(1, 101)):
        p = null_p_value("mrr", 1.0, c, weights=weights)
        assert p.method.startswith("normal") and p.log10 == pytest.approx(-100 * math.log10(50))
        assert "least possible p-value" in p.method  # the result says it is the bound, not the normal tail
    assert "least possible" not in null_p_value("mrr", 0.2, c).method  # a value the normal tail reaches


def test_many_distinct_candidate_counts_take_the_fft_tree_and_agree_with_direct_convolution(monkeypatch):
    import kgeval.significance.pvalues as pv

    rng = np.random.default_rng(1)
    c = rng.integers(20, 2000, size=1000)  # ~800 distinct C: above DIRECT_HITS_MAX_GROUPS
    assert np.unique(c).size > pv.DIRECT_HITS_MAX_GROUPS
    mean = get("hits@10").null_moments(c, None).mean
    values = (mean / 2, mean, mean * 1.3, mean * 4, 0.5)  # tilt 0 .. a tail near 1e-1000
    tree = [null_p_value("hits@10", v, c).log10 for v in values]
    monkeypatch.setattr(pv, "DIRECT_HITS_MAX_GROUPS", 10**9)
    direct = [null_p_value("hits@10", v, c).log10 for v in values]
    assert tree == pytest.approx(direct, rel=1e-9, abs=1e-12) and direct[-1] < -300


@pytest.mark.parametrize("inverse, partner", [("iamr", "mr"), ("igmr", "gmr")])
def test_reciprocal_metrics_take_the_p_value_of_the_same_event(inverse, partner):
    # IAMR >= v is MR <= 1/v (IGMR: GMR <= 1/v): one event, one p-value. The normal curve on the
    # reciprocal's own scale was far too thin: IAMR 2.8e-46 where the exact MR p-value is 2.1e-19,
    # IGMR 3.2e-23 where GMR's is 8.3e-10 (and a simulation gives ~2e-5 where IGMR said 4.6e-7)
    rng = np.random.default_rng(0)
    c = rng.integers(2, 500, size=200)
    mean = get(partner).null_moments(c, None).mean
    for frac in (0.95, 0.8, 0.6):
        value = round(mean * frac * c.size) / c.size  # an attainable rank sum for MR
        want = null_p_value(partner, value, c)
        got = null_p_value(inverse, 1 / value, c)
        assert got.log10 == pytest.approx(want.log10, rel=1e-9)
        assert got.method.startswith(want.method) and get(partner).key in got.method
    # weighted: the same event as well (normal approximation of the partner)
    w = rng.uniform(0.5, 2, size=c.size)
    assert null_p_value(inverse, 1 / (mean * 0.9), c, weights=w).log10 == pytest.approx(
        null_p_value(partner, mean * 0.9, c, weights=w).log10, rel=1e-9)


@pytest.mark.parametrize("metric", [pytest.param("iamr", marks=pytest.mark.slow), "igmr"])  # iamr: ~4 s
def test_reciprocal_p_values_are_valid_by_simulation(metric):
    rng = np.random.default_rng(4)
    c = rng.choice([20, 50, 100, 400], size=60)
    m = get(metric)
    ps = np.array([null_p_value(m, m(rng.integers(1, c + 1), c), c).value for _ in range(2000)])
    for alpha in (0.01, 0.05):
        assert np.mean(ps <= alpha) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / ps.size)
