"""Resampling units, per-unit sufficient statistics and bootstrap confidence intervals."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import RankTable, Results
from kgeval.errors import InvalidInputError
from kgeval.metrics import get
from kgeval.significance.bootstrap import confidence_intervals
from kgeval.significance.units import evaluation_units, metric_on_units, unit_statistics

DECOMPOSABLE = ["mrr", "mr", "hits@1", "hits@10", "gmr", "igmr", "hmr", "iamr"]


def _table(n=300, seed=0, weights=False):
    rng = np.random.default_rng(seed)
    c = rng.integers(20, 500, size=2 * n)
    opt = np.minimum(rng.geometric(0.08, size=2 * n), c)
    pess = np.minimum(opt + rng.integers(0, 2, size=2 * n), c)
    w = rng.uniform(0.5, 2.0, size=2 * n) if weights else None
    return RankTable.from_ranks(opt, pess, num_candidates=c, side=np.r_[np.zeros(n, int), np.ones(n, int)],
                                triple_index=np.r_[np.arange(n), np.arange(n)], weights=w)


def test_units_pair_the_head_and_tail_task_of_a_triple():
    t = RankTable.from_ranks([1, 2, 3, 4, 5], side=[0, 1, 0, 1, 0], triple_index=[7, 7, -1, 3, -1])
    u = evaluation_units(t)
    assert u[0] == u[1] and len({u[0], u[2], u[3], u[4]}) == 4  # -1 rows are units of their own


@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("rank_type", ["optimistic", "pessimistic", "realistic"])
def test_unit_statistics_reproduce_the_metric_and_its_resamples(rank_type, weights):
    t = _table(weights=weights)
    res = Results(t)
    rng = np.random.default_rng(1)
    pick = rng.integers(0, 300, size=300)
    for name in DECOMPOSABLE:
        m = get(name)
        s = unit_statistics(t, m, rank_type)
        assert s.value() == pytest.approx(res[f"both.{rank_type}.{name}"], rel=1e-12, abs=0)
        mult = np.bincount(pick, minlength=300)
        assert s.value(mult) == pytest.approx(metric_on_units(t, m, rank_type, pick), rel=1e-12, abs=0)
    assert unit_statistics(t, get("median_rank"), rank_type) is None


def test_interval_is_deterministic_contains_the_value_and_unpacks():
    res = Results(_table())
    a = res.confidence_interval("mrr", num_resamples=2000, seed=4)
    low, high = a
    assert (low, high) == tuple(res.confidence_interval("mrr", num_resamples=2000, seed=4))
    assert a.method == "bca" and a.confidence == 0.95
    assert low < res["mrr"] < high
    z = res.confidence_interval("z_mrr", num_resamples=2000, seed=4)  # affine map of the base interval
    assert z.low < res["z_mrr"] < z.high
    med = res.confidence_interval("median_rank", num_resamples=200, seed=4, method="percentile")
    assert med.low <= res["median_rank"] <= med.high


def test_bca_equals_scipys_own_on_a_plain_mean():
    """The exact-jackknife BCa must agree with scipy's generic BCa (same resamples)."""
    from scipy import stats

    r = np.minimum(np.random.default_rng(2).geometric(0.1, size=400), 300)
    res = Results(RankTable.from_ranks(r, num_candidates=np.full(400, 300)))
    mine = res.confidence_interval("mrr", num_resamples=3000, seed=9)
    ref = stats.bootstrap((1.0 / r,), np.mean, n_resamples=3000, method="BCa", rng=np.random.default_rng(9))
    assert mine.low == pytest.approx(ref.confidence_interval.low, rel=1e-9)
    assert mine.high == pytest.approx(ref.confidence_interval.high, rel=1e-9)


def test_coverage_by_simulation():
    """95% intervals cover the true MRR / hits@10 / MR / GMR in roughly 95% of simulated tables
    (cheap version: 150 tables, wide band; benchmarks/significance.py runs the full check)."""
    rng = np.random.default_rng(11)
    support = np.arange(1, 201)
    prob = 0.9 ** support
    prob /= prob.sum()
    truth = {"mrr": prob @ (1 / support), "hits@10": prob[:10].sum(), "mr": prob @ support,
             "gmr": np.exp(prob @ np.log(support))}
    hits = dict.fromkeys(truth, 0)
    runs = 150
    for _ in range(runs):
        r = rng.choice(support, size=300, p=prob)
        res = Results(RankTable.from_ranks(r, num_candidates=np.full(300, 200)))
        cis = confidence_intervals(res, list(truth), num_resamples=400, seed=int(rng.integers(2**31)))
        for k, v in truth.items():
            hits[k] += cis[k].low <= v <= cis[k].high
    for k in truth:
        assert 0.85 <= hits[k] / runs <= 0.995, (k, hits[k] / runs)


def test_degenerate_table_gives_the_point_interval():
    res = Results(RankTable.from_ranks(np.ones(50, int), num_candidates=np.full(50, 10)))
    ci = res.confidence_interval("mrr", num_resamples=200, seed=0)
    assert (ci.low, ci.high) == (1.0, 1.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(confidence=1.0), "confidence"), (dict(confidence=0), "confidence"), (dict(num_resamples=0), "num_resamples"),
    (dict(method="studentized"), "method must be"), (dict(seed=-1), "seed"),
])
def test_bad_arguments_are_named(kwargs, match):
    res = Results(_table(n=20))
    with pytest.raises(InvalidInputError, match=match):
        res.confidence_interval("mrr", **kwargs)


def test_needs_a_rank_table(tmp_path):
    res = Results(_table(n=20))
    back = Results.load_json(res.save_json(tmp_path / "r.json"))
    with pytest.raises(InvalidInputError, match="rank table"):
        back.confidence_interval("mrr")


def test_a_single_triple_is_a_named_error():
    """scipy raised a raw ValueError (the report's per-relation CIs hit it for one-triple relations)."""
    res = Results(RankTable.from_ranks([2, 3], num_candidates=[10, 10], side=[0, 1], triple_index=[0, 0]))
    with pytest.raises(InvalidInputError, match="at least 2 evaluation triples, got 1"):
        res.confidence_interval("mrr", num_resamples=200)


def test_normal_interval_stays_inside_the_metric_range():
    # 49 of 50 ranks are 1: value ± z·se left the range (MR [0.46, 2.70], hits@10 [0.94, 1.019],
    # GMR [0.925, 1.22]); no ranking has MR < 1 or hits@10 > 1
    ranks = np.ones(50, dtype=int)
    ranks[0] = 30
    res = Results(RankTable.from_ranks(ranks, num_candidates=100), rank_types=["realistic"])
    for name in ("hits@10", "mrr", "mr", "gmr", "amri", "igmr"):
        metric = get(name)
        key = f"both.realistic.{name}"
        low, high = res.confidence_interval(key, method="normal", num_resamples=2000, seed=0)
        base = getattr(metric, "base", metric)
        rng_ = base.value_range
        b_low, b_high = res.confidence_interval(f"both.realistic.{base.key}", method="normal", num_resamples=2000,
                                                seed=0)
        assert rng_.lower <= b_low < b_high <= rng_.upper, (name, b_low, b_high)
        assert low < high and low <= res.get_metric(key) <= high, (name, low, high)
    # the clipped side of MR is exactly the bound, the other side untouched (centre + z·se)
    low, high = res.confidence_interval("both.realistic.mr", method="normal", num_resamples=2000, seed=0)
    assert low == 1.0 and high > res.get_metric("both.realistic.mr")
    assert res.confidence_interval("both.realistic.amri", method="normal", num_resamples=2000, seed=0)[1] <= 1.0


# ------------------------------------------------------------------ too few resamples (were point intervals)
@pytest.mark.parametrize("method, confidence, need", [
    ("percentile", 0.95, 40), ("normal", 0.95, 40), ("percentile", 0.99, 200), ("percentile", 0.8, 10),
    ("bca", 0.95, 200), ("bca", 0.9, 100),
])
def test_too_few_resamples_are_refused_stating_the_minimum(method, confidence, need):
    """num_resamples=1 (or 2) gave [0.4575, 0.4575] on a Nations run, the point estimate itself: an
    interval claiming certainty; a few more gave the extreme resamples as bounds."""
    from kgeval.significance.bootstrap import min_resamples

    assert min_resamples(confidence, method) == need
    res = Results(_table(n=200))
    for n in (1, 2, need - 1):
        with pytest.raises(InvalidInputError, match=f"^num_resamples must be at least {need} .*got {n}$"):
            res.confidence_interval("mrr", method=method, confidence=confidence, num_resamples=n, seed=0)
    low, high = res.confidence_interval("mrr", method=method, confidence=confidence, num_resamples=need, seed=0)
    value = res.get_metric("both.realistic.mrr")
    assert low < value < high


def test_a_bca_tail_beyond_the_resamples_is_refused_not_the_extreme_resample():
    """Nine ranks 1 and one rank 1000: BCa's bias correction and acceleration move the lower tail to
    level 0.00025, below 1/200: with 200 resamples the lower bound was the smallest resample."""
    ranks = np.ones(10, int)
    ranks[0] = 1000
    res = Results(RankTable.from_ranks(ranks, num_candidates=2000))
    with pytest.raises(InvalidInputError, match=r"too few for this BCa interval .* needs at least \d+ resamples"):
        res.confidence_interval("mrr", num_resamples=200, seed=0)
    low, high = res.confidence_interval("mrr", method="percentile", num_resamples=200, seed=0)
    assert low < high


def test_bca_with_every_resample_on_one_side_is_refused_not_a_point():
    """Resamples with spread but all above the estimate have no bias correction (z0 = -inf): the
    interval became (value, value), as if every resample had one value."""
    from kgeval.significance.bootstrap import _bca

    dist = np.linspace(0.5, 0.9, 200)[None]
    with pytest.raises(InvalidInputError, match="all 200 resamples lie on one side"):
        _bca(np.array([0.4]), dist, np.linspace(0.3, 0.5, 10)[None], 0.95)
    # one value (beside the estimate by rounding): the caller's degenerate point (v, v)
    lows, highs = _bca(np.array([0.4]), np.full((1, 200), 0.4 + 1e-16), np.full((1, 10), 0.4), 0.95)
    assert np.isnan(lows[0]) and np.isnan(highs[0])
