"""Resampling units and their sufficient statistics (kgeval.significance.units): exactness, weights,
the ``expected`` rank type and the generic path."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import RankTable
from kgeval.errors import InvalidInputError
from kgeval.metrics import default_metrics, get
from kgeval.metrics.derived import DerivedMetric
from kgeval.results import Results
from kgeval.significance.units import evaluation_units, metric_on_units, unit_statistics, unit_tasks

C = 300


def _table(seed=0, n_triples=60, weight=None):
    rng = np.random.default_rng(seed)
    n = 2 * n_triples
    opt = np.minimum(rng.geometric(0.05, size=n), C)
    pes = np.minimum(opt + rng.integers(0, 3, size=n), C)
    ti = np.repeat(np.arange(n_triples) * 7, 2)
    ti[-3:] = -1  # the last three tasks: unknown triples, each its own unit
    w = rng.uniform(0.2, 3.0, size=n) if isinstance(weight, str) else weight
    return RankTable(optimistic=opt, pessimistic=pes, num_candidates=np.full(n, C), side=np.tile([0, 1], n_triples),
                     triple_index=ti, weight=w)


def test_units_number_triples_then_unknown_tasks():
    t = RankTable.from_ranks([1, 2, 3, 4, 5, 6], triple_index=[5, 9, 5, -1, 9, -1], side=[0, 0, 1, 0, 1, 1])
    assert evaluation_units(t).tolist() == [0, 1, 0, 2, 1, 3]
    assert evaluation_units(RankTable.from_ranks([1, 2, 3])).tolist() == [0, 1, 2]


@pytest.mark.parametrize("weight", [None, "random"])
def test_observed_value_is_results_value_exactly_for_every_decomposable_metric(weight):
    table = _table(weight=weight)
    results = Results(table)
    metrics = [m for m in default_metrics() if not isinstance(m, DerivedMetric)]
    metrics += [get("power_mean_rank_p2"), get("power_mean_rank_pneg0_5")]
    ones = np.ones(int(evaluation_units(table).max()) + 1)
    seen = set()
    for m in metrics:
        for rt in ("realistic", "optimistic", "pessimistic", "expected"):
            st = unit_statistics(table, m, rt)
            if st is None:
                continue
            seen.add(m.key)
            expected = results.get_metric(f"both.{rt}.{m.key}")
            assert st.value() == expected, (m.key, rt)  # bit for bit, not approximately
            np.testing.assert_allclose(st.value(np.stack([ones, 3 * ones])), expected, rtol=1e-12)
    assert {"inverse_harmonic_mean_rank", "arithmetic_mean_rank", "geometric_mean_rank", "hits_at_10",
            "inverse_geometric_mean_rank", "harmonic_mean_rank", "inverse_arithmetic_mean_rank",
            "power_mean_rank_p2"} <= seen
    assert unit_statistics(table, get("median_rank"), "realistic") is None
    assert unit_statistics(table, get("gmr"), "expected") is None  # a product with exponents wᵢ/W


def test_huge_weights_are_rescaled_before_summing():
    """Weights of 1e308 each overflowed the unit sums (inf/inf = NaN) and gave a point interval."""
    plain, huge = _table(seed=2), _table(seed=2, weight=np.full(120, 1e308))
    for key in ("mrr", "gmr"):
        a, b = unit_statistics(plain, get(key), "realistic"), unit_statistics(huge, get(key), "realistic")
        np.testing.assert_allclose(b.sums / b.weights, a.sums / a.weights, rtol=1e-12)
    ci_plain = Results(plain).confidence_interval("mrr", num_resamples=300, seed=1)
    ci_huge = Results(huge).confidence_interval("mrr", num_resamples=300, seed=1)
    assert ci_huge.low < ci_huge.high
    np.testing.assert_allclose(tuple(ci_huge), tuple(ci_plain), rtol=1e-9)


def test_resampled_values_equal_the_metric_on_the_duplicated_table():
    table = _table(seed=3, weight="random")
    units = evaluation_units(table)
    k = int(units.max()) + 1
    drawn = np.random.default_rng(1).integers(0, k, size=k)
    mult = np.bincount(drawn, minlength=k)
    for key in ("mrr", "hits@10", "mr", "gmr", "igmr", "hmr", "iamr"):
        for rt in ("realistic", "expected"):
            st = unit_statistics(table, get(key), rt)
            if st is not None:
                assert st.value(mult) == pytest.approx(metric_on_units(table, get(key), rt, drawn), rel=1e-12, abs=0)
    # the generic path on every unit once is the table's own value, for any metric and rank type
    every = np.arange(k)
    results = Results(table)
    for key, rt in (("median_rank", "realistic"), ("gmr", "expected"), ("standard_deviation", "pessimistic")):
        assert metric_on_units(table, get(key), rt, every) == pytest.approx(results[f"{rt}.{key}"], rel=1e-12)


def test_unit_tasks_lists_each_listed_unit_with_its_tasks():
    units = np.array([0, 1, 0, 2, 1, 3])
    assert unit_tasks(units, [0, 0, 3]).tolist() == [0, 2, 0, 2, 5]


def test_expected_rank_type_and_one_unit():
    res = Results(_table(seed=4))
    ci = res.confidence_interval("expected.mrr", num_resamples=300, seed=0)
    assert ci.low < res["expected.mrr"] < ci.high
    one = Results(RankTable.from_ranks([3, 5], num_candidates=10, triple_index=[0, 0], side=[0, 1]))
    with pytest.raises(InvalidInputError, match="at least 2 evaluation triples"):
        one.confidence_interval("mrr", num_resamples=200, seed=0)


def test_head_and_tail_of_a_triple_are_resampled_together():
    """Head and tail ranks equal within each triple: resampling triples (not tasks) must widen the
    interval by about √2 (n/2 independent pairs instead of n independent tasks)."""
    r = np.minimum(np.random.default_rng(5).geometric(0.05, size=400), C)
    ranks, side, ti = np.repeat(r, 2), np.tile([0, 1], 400), np.repeat(np.arange(400), 2)
    paired = Results(RankTable.from_ranks(ranks, num_candidates=C, side=side, triple_index=ti))
    alone = Results(RankTable.from_ranks(ranks, num_candidates=C, side=side))
    for key in ("mrr", "mr"):
        wide = paired.confidence_interval(key, method="normal", num_resamples=3000, seed=2)
        narrow = alone.confidence_interval(key, method="normal", num_resamples=3000, seed=2)
        assert 1.3 < (wide.high - wide.low) / (narrow.high - narrow.low) < 1.55, key
