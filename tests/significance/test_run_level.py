"""The run level of kgeval.compare: Welch's t-test on the per-run values of replicated models."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from kgeval import RankTable
from kgeval.metrics import get as get_metric
from kgeval.significance import paired
from kgeval.significance.compare import _run_row

MR = get_metric("mr")


def _constant_runs(k: int, want_rounding: bool):
    """A table whose MR, repeated in k runs, has a sample variance of exactly 0 (want_rounding=False)
    or of rounding noise only (True): numpy's mean of k equal floats need not be that float."""
    for n in range(2, 400):
        table = RankTable.from_ranks(np.arange(1, n + 1) % 7 + 1, num_candidates=10)
        value = MR(table.ranks("realistic"), table.num_candidates, None)
        if (np.full(k, value).var(ddof=1) != 0) == want_rounding:
            return table
    raise AssertionError("no such table")  # pragma: no cover


def test_runs_without_spread_give_the_same_answer_whatever_the_rounding():
    """Models whose every run has one value (seeds that rank alike): Welch's t is undefined. A set of
    3 equal values whose mean rounds off has a 'variance' of ~1e-32, which gave p = 1e-28 and
    Cohen's d = 7e13 instead of the undefined test of the exactly-zero case."""
    noisy, exact = _constant_runs(3, True), _constant_runs(3, False)
    assert np.full(3, MR(noisy.ranks("realistic"), noisy.num_candidates, None)).var(ddof=1) > 0  # the trap
    for a, b in ((noisy, exact), (exact, noisy)):
        tasks_a = RankTable.from_ranks(a.ranks("realistic"), num_candidates=10)
        tasks_b = RankTable.from_ranks(b.ranks("realistic"), num_candidates=10)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no scipy precision-loss warning either
            row = _run_row(paired.PairedTasks([tasks_a] * 3, [tasks_b] * 2, "realistic"), MR, 0.95)
        va, vb = (MR(t.ranks("realistic"), t.num_candidates, None) for t in (a, b))
        assert va != vb
        assert (row["value_a"], row["value_b"], row["difference"]) == (va, vb, va - vb)
        assert math.isnan(row["p_value"]) and "undefined" in row["p_method"]
        assert math.isnan(row["effect_size"])
        assert row["ci_low"] == row["ci_high"] == row["difference"]


def test_runs_of_one_constant_value_on_both_sides_are_not_different():
    noisy = _constant_runs(3, True)
    row = _run_row(paired.PairedTasks([noisy] * 3, [noisy] * 2, "realistic"), MR, 0.95)
    assert row["p_value"] == 1.0 and row["difference"] == 0.0 and row["ci_low"] == row["ci_high"] == 0.0


def test_welch_row_matches_scipy_with_unequal_numbers_of_runs():
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(3)
    tables = [RankTable.from_ranks(rng.integers(1, 20, size=50), num_candidates=20) for _ in range(5)]
    row = _run_row(paired.PairedTasks(tables[:3], tables[3:], "realistic"), MR, 0.9)
    xa, xb = ([MR(t.ranks("realistic"), t.num_candidates, None) for t in ts] for ts in (tables[:3], tables[3:]))
    ref = ttest_ind(xa, xb, equal_var=False)
    ci = ref.confidence_interval(0.9)
    pooled = math.sqrt((2 * np.var(xa, ddof=1) + np.var(xb, ddof=1)) / 3)
    assert row["p_value"] == ref.pvalue and (row["ci_low"], row["ci_high"]) == (ci.low, ci.high)
    assert row["effect_size"] == (np.mean(xa) - np.mean(xb)) / pooled
    assert row["p_method"] == "welch t" and row["num_units"] == 5


def test_task_level_bootstrap_of_replicated_models_resamples_the_reported_value():
    """A replicated model's value is the mean of its replicates' values; the bootstrap resampled
    g(mean of the replicates' unit sums) instead, which for GMR is the geometric mean of the
    replicates' GMRs: 3 DistMult vs 2 ComplEx seeds on Nations reported GMR 3.1819 - 3.2682 while
    every resample was centred on 3.1782 - 3.2682. Each column must equal the metric recomputed
    on the resampled tables and averaged over the replicates."""
    rng = np.random.default_rng(5)

    def table(p):
        n = 40
        return RankTable.from_ranks(np.minimum(rng.geometric(p, size=2 * n), 50), num_candidates=50,
                                    side=np.tile([0, 1], n), triple_index=np.repeat(np.arange(n), 2))

    tasks = paired.PairedTasks([table(0.05), table(0.2), table(0.5)], [table(0.1), table(0.3)], "realistic")
    metrics = [get_metric(m) for m in ("gmr", "hmr", "igmr", "mrr", "mr")]
    jobs = [paired.Job(tasks, m, tasks.unit_sums(m)) for m in metrics]
    for studentize in (False, True):
        out = paired.paired_bootstrap(jobs, 40, num_resamples=30, rng=np.random.default_rng(1), studentize=studentize)
        diffs = out[0] if studentize else out
        idx = np.concatenate([i.copy() for i, _ in paired.bootstrap_draws(40, 30, np.random.default_rng(1))])
        for k, job in enumerate(jobs):
            brute = [np.subtract(*tasks.values(job.metric, row)) for row in idx]
            np.testing.assert_allclose(diffs[:, k], brute, rtol=1e-9, atol=1e-12)
    # all units once: the reported difference itself
    ones = np.ones((1, 40))
    for job in jobs:
        va, vb = tasks.values(job.metric)
        sa_reps, sb_reps = job.sums[4]
        w = job.sums[2]
        value_a = np.mean([job.sums[3](ones @ s / (ones @ w)) for s in sa_reps])
        assert value_a == pytest.approx(va, rel=1e-12)


def test_a_single_run_gives_an_undefined_row_that_says_why():
    one = RankTable.from_ranks([1, 2, 3], num_candidates=10)
    row = _run_row(paired.PairedTasks([one], [one, one], "realistic"), MR, 0.95)
    assert math.isnan(row["p_value"]) and "fewer than 2 runs" in row["p_method"]


MRR = get_metric("mrr")


def _reordered_runs(num: int = 500, size: int = 300):
    """Tables holding one multiset of ranks at other positions, grouped by their MRR: mathematically
    one value, which the float64 sum in another order rounds to neighbouring floats."""
    ranks = np.random.default_rng(0).integers(1, 1000, size=num).astype(float)
    by_value: dict[float, list] = {}
    for s in range(size):
        table = RankTable.from_ranks(np.random.default_rng(s).permutation(ranks), num_candidates=1000)
        by_value.setdefault(MRR(table.ranks("realistic"), table.num_candidates, None), []).append(table)
    values = sorted(by_value)
    assert len(values) >= 3 and all(len(by_value[v]) >= 8 for v in values[:3])  # the trap: 1-ulp differences
    return values, by_value


def test_runs_that_agree_to_rounding_are_not_different():
    """Replicates whose MRRs are one value rounded differently (per-seed values agreeing to ~1e-16
    relative) are the same model: Welch's t on the rounding noise gave t = -3.5, p = 0.026 (3 seeds
    each) and t = -3.0, p = 0.010 (10 seeds each)."""
    from scipy.stats import ttest_ind

    values, by = _reordered_runs()
    lo, mid, hi = (by[v] for v in values[:3])
    for a, b in (([lo[0], lo[1], mid[0]], [mid[1], hi[0], hi[0]]), (lo[:8] + mid[:2], mid[2:4] + hi[:8])):
        xa, xb = ([MRR(t.ranks("realistic"), t.num_candidates, None) for t in ts] for ts in (a, b))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy's precision-loss warning
            assert ttest_ind(xa, xb, equal_var=False).pvalue < 0.05  # the trap: rounding noise looks significant
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            row = _run_row(paired.PairedTasks(a, b, "realistic"), MRR, 0.95)
        assert row["p_value"] == 1.0 and row["p_method"] == "welch t", row
        assert math.isnan(row["effect_size"])
        assert row["ci_low"] == row["ci_high"] == row["difference"]
        assert abs(row["difference"]) < 1e-15 * values[0]


def test_a_model_constant_to_rounding_beside_a_constant_one_is_untestable():
    """One model's runs exactly equal, the other's equal up to one ulp, their values really different:
    no spread on either side, so no test (before: p = 1.6e-31, Cohen's d = 2.0e15)."""
    values, by = _reordered_runs()
    other = RankTable.from_ranks(np.random.default_rng(9).integers(1, 1000, size=500), num_candidates=1000)
    for a, b in (([other] * 3, by[values[0]][:2] + by[values[1]][:1]), (by[values[0]][:1] + by[values[1]][:2], [other] * 4)):
        row = _run_row(paired.PairedTasks(a, b, "realistic"), MRR, 0.95)
        assert abs(row["difference"]) > 1e-6
        assert math.isnan(row["p_value"]) and "undefined" in row["p_method"], row
        assert math.isnan(row["effect_size"])


def test_a_model_constant_to_rounding_has_variance_zero_in_welch():
    """Beside a model with real spread, a model whose runs agree to rounding counts as constant: the
    row is Welch's test with its variance 0 (scipy's from the summary statistics)."""
    from scipy.stats import t as t_dist
    from scipy.stats import ttest_ind_from_stats

    values, by = _reordered_runs()
    flat = by[values[0]][:2] + by[values[1]][:2]
    rng = np.random.default_rng(4)
    spread = [RankTable.from_ranks(rng.integers(1, 1000, size=500), num_candidates=1000) for _ in range(3)]
    xb = np.array([MRR(t.ranks("realistic"), t.num_candidates, None) for t in spread])
    for a, b, sign in ((flat, spread, 1), (spread, flat, -1)):
        row = _run_row(paired.PairedTasks(a, b, "realistic"), MRR, 0.9)
        diff = sign * (values[0] - xb.mean())
        assert row["difference"] == pytest.approx(diff, rel=1e-12, abs=0)
        ref = ttest_ind_from_stats(values[0], 0.0, 4, xb.mean(), xb.std(ddof=1), 3, equal_var=False)
        assert row["p_value"] == pytest.approx(ref.pvalue, rel=1e-9)
        half = t_dist.ppf(0.95, 2) * xb.std(ddof=1) / math.sqrt(3)  # Welch's df: those of the spread model
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((diff - half, diff + half), rel=1e-9)
        assert row["effect_size"] == pytest.approx(diff / math.sqrt(2 * xb.var(ddof=1) / 5), rel=1e-9)


def test_a_model_against_itself_with_its_seeds_reordered_is_not_different():
    """The same three replicates listed in another order: np.mean over replicates in list order left
    per-unit differences of ~1e-17, so the permutation test gave p = 0.87 (bootstrap-t 0.63, Wilcoxon
    0.82) with Cohen's d_z = 0.06, and MR a difference of -5.7e-14. Every test must now say: no
    difference at all."""
    from kgeval.significance.compare import _resample, _task_row

    rng = np.random.default_rng(1)
    tables = [RankTable.from_ranks(rng.integers(1, 500, size=60), num_candidates=500) for _ in range(3)]
    for order in ([2, 0, 1], [1, 2, 0], [2, 1, 0]):
        tasks = paired.PairedTasks(tables, [tables[i] for i in order], "realistic")
        for key in ("mrr", "gmr", "mr", "hmr"):
            metric = get_metric(key)
            job = paired.Job(tasks, metric, tasks.unit_sums(metric))
            assert np.array_equal(job.sums[0], job.sums[1])
            for test in ("permutation", "bootstrap", "wilcoxon"):
                row = _task_row(job, test, 0.95, *_resample([job], test, 500, 0)[0])
                assert row["difference"] == 0.0 and row["p_value"] == 1.0, (order, key, test, row)
                assert row["ci_low"] == row["ci_high"] == 0.0
                assert math.isnan(row["effect_size"]) or row["effect_size"] == 0.0, row  # no spread; Wilcoxon: r = 0
            run = _run_row(tasks, metric, 0.95)
            assert run["difference"] == 0.0 and run["p_value"] == 1.0 and run["effect_size"] == 0.0, run


def test_bootstrap_products_round_every_column_alike():
    """The same column at any position of the resampled product gives the same bits (a BLAS matrix
    product rounded the last of 9-12 columns another way)."""
    from kgeval.significance.paired import _column_products

    rng = np.random.default_rng(0)
    m = rng.multinomial(60, [1 / 60] * 60, size=500).astype(np.float64)
    for ncol in range(2, 16):
        cols = [rng.random(60) for _ in range(ncol)]
        cols[-1] = cols[0].copy()
        y = _column_products(m, np.column_stack(cols))
        assert np.array_equal(y[:, 0], y[:, -1]), ncol
        assert np.allclose(y, m @ np.column_stack(cols), rtol=1e-13, atol=0)
