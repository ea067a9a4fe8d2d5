"""kgeval.compare: corrections, exact permutation p-values, alignment checks and type-I error."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kgeval import RankTable, compare
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.metrics import get as get_metric
from kgeval.results import Results
from kgeval.significance import paired
from kgeval.significance.align import ProtocolMismatchError, TaskMismatchError
from kgeval.significance.corrections import correct

C = 200


def _table(rng, n_triples, p=0.05, *, order=None):
    ti = np.repeat(np.arange(n_triples), 2)
    side = np.tile([0, 1], n_triples)
    ranks = np.minimum(rng.geometric(p, size=2 * n_triples), C)
    rows = np.arange(2 * n_triples) if order is None else order
    return RankTable.from_ranks(ranks[rows], num_candidates=C, side=side[rows], triple_index=ti[rows])


def _records(df):
    return df.to_dict("records") if hasattr(df, "to_dict") else df


# ---------------------------------------------------------------------------- corrections
def test_holm_and_bh_match_hand_computed_values():
    p = [0.01, 0.04, 0.03, 0.005, float("nan")]
    # Holm: sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06
    np.testing.assert_allclose(correct(p, "holm"), [0.03, 0.06, 0.06, 0.02, np.nan])
    # BH: 0.005*4/1=0.02, 0.01*4/2=0.02, 0.03*4/3=0.04, 0.04*4/4=0.04, running min from the top
    np.testing.assert_allclose(correct(p, "bh"), [0.02, 0.04, 0.04, 0.02, np.nan])
    np.testing.assert_allclose(correct(p, None), p)
    np.testing.assert_allclose(correct([0.5, 0.9], "holm"), [1.0, 1.0])  # capped at 1
    with pytest.raises(UnknownNameError):
        correct(p, "bonferonni")


# ---------------------------------------------------------------------------- exact p-value
def test_exact_permutation_p_equals_full_enumeration():
    rng = np.random.default_rng(3)
    n = 9
    a, b = _table(rng, n), _table(rng, n, p=0.08)
    mrr = get_metric("mrr")
    ra, rb = a.ranks("realistic"), b.ranks("realistic")
    observed = abs(mrr(ra) - mrr(rb))
    hits = 0
    for swap in itertools.product([False, True], repeat=n):  # swap both tasks of a triple between A and B
        s = np.repeat(swap, 2)
        xa, xb = np.where(s, rb, ra), np.where(s, ra, rb)
        hits += abs(mrr(xa) - mrr(xb)) >= observed - 1e-12
    row = _records(compare(a, b, metrics=["mrr"], seed=0, num_resamples=50))[0]
    assert row["p_method"] == "exact"
    assert row["p_value"] == pytest.approx(hits / 2**n, abs=1e-15)
    assert row["num_units"] == n


def test_task_order_does_not_matter_and_results_inputs_work():
    rng = np.random.default_rng(5)
    a = _table(rng, 40)
    rng2 = np.random.default_rng(6)
    b = _table(rng2, 40)
    order = np.random.default_rng(7).permutation(80)
    b_shuffled = RankTable(**{k: v[order] for k, v in b.to_columns().items()})
    one = _records(compare(a, b, seed=1, num_resamples=200))
    two = _records(compare(Results(a), ("other", Results(b_shuffled)), seed=1, num_resamples=200))
    for x, y in zip(one, two):
        assert y["model_b"] == "other"
        for key in ("value_a", "value_b", "difference", "ci_low", "ci_high", "p_value", "effect_size"):
            assert x[key] == pytest.approx(y[key], rel=1e-12, abs=0)


def test_values_and_direction_match_results():
    rng = np.random.default_rng(8)
    a, b = _table(rng, 30), _table(rng, 30, p=0.1)
    rows = {r["metric"]: r for r in _records(compare(a, b, test="bootstrap", seed=2, num_resamples=300))}
    ra, rb = Results(a), Results(b)
    for name in ("mrr", "hits@10", "mr", "gmr"):
        assert rows[name]["value_a"] == pytest.approx(ra[name])
        assert rows[name]["value_b"] == pytest.approx(rb[name])
        assert rows[name]["difference"] == pytest.approx(ra[name] - rb[name])
        assert rows[name]["ci_low"] <= rows[name]["ci_high"]
    assert rows["mrr"]["higher_is_better"] and not rows["mr"]["higher_is_better"]


def test_seeded_runs_repeat_and_baseline_pairs():
    rng = np.random.default_rng(9)
    tabs = [_table(rng, 50) for _ in range(3)]
    first = _records(compare(*tabs, metrics=["mrr"], seed=4, num_resamples=300))
    assert [(r["model_a"], r["model_b"]) for r in first] == [("model1", "model2"), ("model1", "model3"),
                                                              ("model2", "model3")]
    assert first == _records(compare(*tabs, metrics=["mrr"], seed=4, num_resamples=300))
    vs = _records(compare(*tabs, metrics=["mrr"], seed=4, num_resamples=300, baseline="model2"))
    assert [(r["model_a"], r["model_b"]) for r in vs] == [("model1", "model2"), ("model3", "model2")]


def test_median_only_by_bootstrap_and_bad_input_is_named():
    rng = np.random.default_rng(10)
    a, b = _table(rng, 20), _table(rng, 20)
    row = _records(compare(a, b, metrics=["median_rank"], test="bootstrap", seed=0, num_resamples=100))[0]
    assert row["value_a"] == pytest.approx(Results(a)["median_rank"])
    with pytest.raises(InvalidInputError, match="bootstrap"):
        compare(a, b, metrics=["median_rank"], test="permutation")
    with pytest.raises(UnknownNameError):
        compare(a, b, test="t-test")
    with pytest.raises(InvalidInputError, match="confidence"):
        compare(a, b, confidence=1.5)
    with pytest.raises(InvalidInputError, match="num_resamples"):
        compare(a, b, num_resamples=0)
    with pytest.raises(UnknownNameError):
        compare(a, b, baseline="nobody")


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(confidence=0.0), InvalidInputError, "confidence"),
    (dict(confidence=1.0), InvalidInputError, "confidence"),
    (dict(confidence=float("nan")), InvalidInputError, "confidence"),
    (dict(confidence=-0.5), InvalidInputError, "confidence"),
    (dict(num_resamples=-3), InvalidInputError, "num_resamples"),
    (dict(num_resamples=2.5), InvalidInputError, "num_resamples"),
    (dict(num_resamples=True), InvalidInputError, "num_resamples"),
    (dict(metrics=["mrrr"]), UnknownNameError, "mrrr"),
    (dict(metrics=["both.realistic.mrr"]), UnknownNameError, "side= and rank_type="),
    (dict(metrics=[]), InvalidInputError, "at least one"),
    (dict(metrics=3), InvalidInputError, "metric names"),
    (dict(metrics=[None]), InvalidInputError, "string"),
    (dict(metrics=["amr"]), InvalidInputError, "base metric"),
    (dict(rank_type="expected"), UnknownNameError, "rank type"),
    (dict(side="middle"), InvalidInputError, "side"),
    (dict(seed=-1), InvalidInputError, "seed"),
    (dict(correction="bonferonni"), UnknownNameError, "correction"),
    (dict(baseline=7), InvalidInputError, "out of range"),
])
def test_bad_arguments_are_named_errors(kwargs, error, match):
    rng = np.random.default_rng(13)
    a, b = _table(rng, 25), _table(rng, 25)
    with pytest.raises(error, match=match):
        compare(a, b, **kwargs)


def test_bad_models_are_named_errors(tmp_path):
    rng = np.random.default_rng(14)
    a = _table(rng, 25)
    for item in (tmp_path, tmp_path / "missing", None, 3, [1, 2], Results(a, protocol={}).protocol):
        with pytest.raises(InvalidInputError):
            compare(a, item)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInputError, match="not a kgeval run directory"):
        compare(tmp_path / "file", a)


def test_different_datasets_are_refused():
    from kgeval.significance.align import Model, check_protocols

    rng = np.random.default_rng(15)
    t = _table(rng, 10)
    one = Model("one", [t], {}, {"reference": "fb15k237", "hashes": {"test": "aa"}})
    other = Model("other", [t], {}, {"reference": "wn18rr", "hashes": {"test": "bb"}})
    with pytest.raises(ProtocolMismatchError, match="different datasets"):
        check_protocols(one, other)
    check_protocols(one, Model("same", [t], {}, dict(one.dataset)))
    check_protocols(one, Model("unknown", [t]))  # nothing recorded: nothing to refuse
    with pytest.raises(ProtocolMismatchError, match=r"^different number of entities \(\d+ vs \d+\)"):
        compare(Results(t, protocol={"num_entities": 10}), Results(t, protocol={"num_entities": 11}))


def test_different_tasks_or_protocols_are_refused():
    rng = np.random.default_rng(11)
    a = _table(rng, 20)
    with pytest.raises(TaskMismatchError):
        compare(a, _table(rng, 21))
    moved = RankTable(**{**a.to_columns(), "triple_index": a.triple_index + 1})
    with pytest.raises(TaskMismatchError, match="triple_index"):
        compare(a, moved)
    with pytest.raises(ProtocolMismatchError, match="candidates"):
        compare(a, RankTable(**{**a.to_columns(), "num_candidates": np.full(40, C + 1)}))
    with pytest.raises(ProtocolMismatchError, match=r"^different filtering \(filtered vs unfiltered\) \((yes vs no|no vs yes)\)"):
        compare(Results(a, protocol={"filtered": True}), Results(a, protocol={"filtered": False}))


# ---------------------------------------------------------------------------- type-I error
def _exchangeable_differences(rng, n_units, reps):
    """Per-unit MRR differences of two models whose ranks are i.i.d. from one distribution."""
    ra = np.minimum(rng.geometric(0.05, size=(reps, n_units, 2)), C)
    rb = np.minimum(rng.geometric(0.05, size=(reps, n_units, 2)), C)
    return (1.0 / ra - 1.0 / rb).sum(axis=2), np.full(n_units, 2.0)


@pytest.mark.parametrize("test,n_units", [("exact", 12), ("monte carlo", 60), ("wilcoxon", 60),
                                          pytest.param("bootstrap", 150, marks=pytest.mark.slow)])  # ~5 s
def test_rejection_rate_of_exchangeable_models_is_nominal(test, n_units):
    rng = np.random.default_rng(12345)
    reps = 1000
    diffs, w = _exchangeable_differences(rng, n_units, reps)
    ps = []
    for d in diffs:
        if test in ("exact", "monte carlo"):
            ps.append(paired.permutation_test(d, num_resamples=199, rng=rng)[0])
        elif test == "wilcoxon":
            ps.append(paired.wilcoxon_test(d, w)[0])
        else:
            m = rng.multinomial(n_units, np.full(n_units, 1 / n_units), size=199)
            boot = (m @ d) / (m @ w)
            ps.append(paired.bootstrap_p_value(boot, d.sum() / w.sum()))
    rate = np.mean(np.asarray(ps) <= 0.05)
    assert 0.03 <= rate <= 0.07, rate


# ------------------------------------------------------------ type-I error through compare's engine
TYPE1_METRICS = ("mrr", "hits@10", "mr", "gmr")


def _exchangeable_jobs(rng, reps, n_triples):
    """(pair, metric) jobs of ``reps`` independent pairs of exchangeable models, as compare builds them."""
    jobs = []
    for _ in range(reps):
        tasks = paired.PairedTasks([_table(rng, n_triples)], [_table(rng, n_triples)], "realistic")
        jobs += [paired.Job(tasks, m, tasks.unit_sums(m)) for m in map(get_metric, TYPE1_METRICS)]
    return jobs


def _compare_p_values(jobs, test, num_resamples, seed):
    from kgeval.significance.compare import _resample

    if test == "wilcoxon":
        return np.array([paired.wilcoxon_test(j.sums[0] - j.sums[1], j.sums[2])[0] for j in jobs])
    return np.array([t[0] for _, t in _resample(jobs, test, num_resamples, seed)])


@pytest.mark.parametrize("test,n_triples", [("permutation", 10), ("permutation", 40), ("bootstrap", 10),
                                            pytest.param("bootstrap", 40, marks=pytest.mark.slow),  # ~3 s each
                                            pytest.param("wilcoxon", 40, marks=pytest.mark.slow)])
def test_compare_rejection_rate_of_exchangeable_models(test, n_triples):
    """The share of p <= 0.05 for 400 independent pairs of exchangeable models, per metric, through
    compare's resampling (every job of one call shares the draws, as the rows of one table do).
    A wide band (binomial sd 0.011 at 0.05): catches a liberal test (the centred percentile
    bootstrap, used for every metric before the bootstrap-t, rejects 0.085 (MRR) and 0.078 (MR) of
    these pairs at 10 triples) or one that never rejects. Conservative cells are expected: the
    exact permutation test of hits@10 at 10 triples (a discrete statistic, ~0.015), the bootstrap-t
    of MRR at 10 triples (~0.015). benchmarks/compare.py has the full table (2,000 repetitions)."""
    jobs = _exchangeable_jobs(np.random.default_rng(2024), 400, n_triples)
    p = _compare_p_values(jobs, test, 199, seed=7).reshape(-1, len(TYPE1_METRICS))
    rates = dict(zip(TYPE1_METRICS, np.mean(p <= 0.05, axis=0)))
    for metric, rate in rates.items():
        assert 0.01 <= rate <= 0.075, (metric, rates)


def test_shared_draws_match_single_jobs_and_brute_force():
    """Every column of one shared call equals the same job resampled alone with the same generator
    (the sharing mixes nothing), and the studentized deviations equal a direct computation from
    the drawn unit indices."""
    rng = np.random.default_rng(16)
    a, b = _table(rng, 30), _table(rng, 30, p=0.08)
    tasks = paired.PairedTasks([a], [b], "realistic")
    metrics = [get_metric(m) for m in ("mrr", "hits@10", "gmr", "median_rank")]
    jobs = [paired.Job(tasks, m, tasks.unit_sums(m)) for m in metrics]
    diffs, t = paired.paired_bootstrap(jobs, 30, num_resamples=50, rng=np.random.default_rng(1), studentize=True)
    idx = np.concatenate([i.copy() for i, _ in paired.bootstrap_draws(30, 50, np.random.default_rng(1))])
    for k, job in enumerate(jobs):
        alone = paired.paired_bootstrap([job], 30, num_resamples=50, rng=np.random.default_rng(1))[:, 0]
        np.testing.assert_allclose(diffs[:, k], alone, rtol=1e-12)
        brute = [np.subtract(*tasks.values(job.metric, row)) for row in idx]
        np.testing.assert_allclose(diffs[:, k], brute, rtol=1e-9, atol=1e-12)
        if job.sums is None:
            assert np.isnan(t[:, k]).all()
            continue
        sa, sb, w = job.sums[:3]
        d = sa - sb
        dhat = d.sum() / w.sum()
        for row, value in zip(idx, t[:, k]):
            dstar = d[row].sum() / w[row].sum()
            se = np.sqrt(np.sum((d[row] - dstar * w[row]) ** 2)) / w[row].sum()
            assert value == pytest.approx((dstar - dhat) / se, rel=1e-9)
        assert paired.observed_t(job.sums) == pytest.approx(dhat / (np.sqrt(np.sum((d - dhat * w) ** 2)) / w.sum()))
    cols = np.column_stack([j.sums[0] - j.sums[1] for j in jobs[:3]])
    together = paired.sign_flip_p_values(cols, num_resamples=300, rng=np.random.default_rng(2))[0]
    for k in range(3):
        assert together[k] == paired.permutation_test(cols[:, k], num_resamples=300, rng=np.random.default_rng(2))[0]


def test_bootstrap_rows_say_how_their_p_value_was_made():
    rng = np.random.default_rng(17)
    a, b = _table(rng, 40), _table(rng, 40, p=0.3)
    rows = _records(compare(a, b, metrics=["mrr", "median_rank"], test="bootstrap", seed=3, num_resamples=400))
    assert [r["p_method"] for r in rows] == ["bootstrap-t", "bootstrap"]
    assert rows[0]["p_value"] == pytest.approx(1 / 401)  # B is clearly better (mean rank ~3 vs ~20)
    assert rows[0]["ci_high"] < 0 < rows[0]["ci_low"] + 1  # its MRR difference A - B is negative
    # a model against itself: no difference, p = 1
    same = _records(compare(a, a, metrics=["mrr", "gmr"], test="bootstrap", seed=3, num_resamples=100))
    assert [r["p_value"] for r in same] == [1.0, 1.0]


def test_evaluations_of_other_triples_at_the_same_positions_are_refused(tmp_path):
    """Unfiltered evaluations of two test sets with the same relation at every position (so the same
    task identities, relations and candidate counts) were paired task by task, the unrelated triples
    compared as if they were the same; the protocol's tasks_sha256 tells them apart. The same
    triples given as int32 or as a tensor are the same tasks; the digest survives a results file;
    in the candidates mode other given negatives are other tasks."""
    import torch

    import kgeval
    from kgeval.models import from_embeddings

    rng = np.random.default_rng(21)
    ne, nr = 40, 3
    model = from_embeddings("distmult", rng.standard_normal((ne, 8), dtype=np.float32),
                            rng.standard_normal((nr, 8), dtype=np.float32))
    a = np.unique(rng.integers(0, [ne, nr, ne], size=(50, 3)), axis=0)
    b = a.copy()
    b[:, 0] = (b[:, 0] + 1) % ne  # other heads, the same relations
    run = lambda t, **kw: kgeval.evaluate(model, t, filtered=False, progress=False, **kw)  # noqa: E731
    ra, rb = run(a), run(b)
    assert np.array_equal(ra.rank_table.relation, rb.rank_table.relation)
    assert np.array_equal(ra.rank_table.num_candidates, rb.rank_table.num_candidates)
    with pytest.raises(TaskMismatchError, match="different triples"):
        compare(ra, rb)
    with pytest.raises(TaskMismatchError, match="different triples"):
        compare(ra, run(a[::-1].copy()))  # the same triples in another order: positions differ
    same = compare(("a", ra), ("a as int32 tensor", run(torch.as_tensor(a.astype(np.int32)))))
    assert len(same) > 0
    ra.save_json(tmp_path / "a.json")
    loaded = Results.load_json(tmp_path / "a.json", ra.rank_table)
    assert loaded.protocol["tasks_sha256"] == ra.protocol["tasks_sha256"]
    with pytest.raises(TaskMismatchError, match="different triples"):
        compare(loaded, rb)
    negs = (a[:, 2:3] + np.arange(1, 6)) % ne  # never the true tail
    given = lambda n: kgeval.evaluate(model, a, candidates={"tail_neg": n}, progress=False)  # noqa: E731
    with pytest.raises(TaskMismatchError, match="different triples"):
        compare(given(negs), given((negs + 5) % ne))
    assert len(compare(given(negs), given(negs.copy()))) > 0


# ---------------------------------------------------------------------------- effect size direction
@pytest.mark.parametrize("test", ["permutation", "bootstrap", "wilcoxon"])
def test_effect_size_is_signed_like_the_difference(test):
    # IAMR = 1/MR, HMR = 1/MRR, IGMR and power means with p < 0 shrink as their additive-scale mean
    # grows: their effect sizes came out with the opposite sign of A − B (A better by every metric,
    # iamr difference +0.23 but d_z −1.25; igmr +0.31 but −1.88; hmr −6.1 but +1.59)
    rng = np.random.default_rng(1)
    a, b = _table(rng, 40, p=0.3), _table(rng, 40, p=0.05)
    names = ["mr", "mrr", "gmr", "igmr", "hmr", "iamr", "hits@10", "power_mean_rank_pneg0_5", "power_mean_rank_p2"]
    rows = _records(compare(a, b, metrics=names, test=test, seed=0, num_resamples=200))
    assert len(rows) == len(names)
    for row in rows:
        assert row["difference"] != 0 and abs(row["effect_size"]) > 0.5, row
        assert np.sign(row["effect_size"]) == np.sign(row["difference"]), row


# ---------------------------------------------------------------------------- bootstrap without spread
@pytest.mark.parametrize("n", [1, 3])
def test_bootstrap_p_value_is_undefined_without_spread(n):
    # one triple, or the same difference in every triple: every resample reproduces the observed
    # difference, and the bootstrap tests claimed p = 1 / (R + 1) (0.000999 from a single triple)
    a = RankTable.from_ranks(np.ones(n, dtype=int), num_candidates=C)
    b = RankTable.from_ranks(np.full(n, 2), num_candidates=C)
    rows = _records(compare(a, b, metrics=["mrr", "mr", "median_rank"], test="bootstrap", seed=0,
                            num_resamples=999))
    for row in rows:
        assert row["difference"] != 0
        assert np.isnan(row["p_value"]) and np.isnan(row["p_corrected"]), row
        assert "undefined" in row["p_method"], row
    # the permutation test still gives its exact 2^(1-n) for the same data
    perm = _records(compare(a, b, metrics=["mrr"], seed=0))[0]
    assert perm["p_value"] == pytest.approx(2.0 ** (1 - n))


def test_bootstrap_p_value_with_spread_is_unchanged():
    rng = np.random.default_rng(7)
    a, b = _table(rng, 30, p=0.2), _table(rng, 30, p=0.1)
    for row in _records(compare(a, b, metrics=["mrr", "median_rank"], test="bootstrap", seed=0, num_resamples=500)):
        assert 0 < row["p_value"] <= 1 and row["p_method"] in ("bootstrap-t", "bootstrap")


@pytest.mark.parametrize("metrics", [("mrr", "mrr"), ("mrr", "hits@10", "inverse_harmonic_mean_rank"),
                                     ("hits@10", "HITS_AT_10")])
def test_a_metric_named_twice_is_refused(metrics):
    """A repeated metric was a second row and a second test in the correction: --metric mrr --metric mrr
    gave p corrected = 2 x p (Holm over two identical p-values), 0.010 for a p of 0.005."""
    rng = np.random.default_rng(5)
    a, b = _table(rng, 30), _table(rng, 30, p=0.08)
    with pytest.raises(InvalidInputError, match="name each metric once"):
        compare(a, b, metrics=metrics, num_resamples=50, seed=0)
    once = _records(compare(a, b, metrics=("mrr",), num_resamples=50, seed=0))
    assert once[0]["p_corrected"] == once[0]["p_value"]  # one test: nothing to correct


# ---------------------------------------------------------------------------- too few resamples
@pytest.mark.parametrize("test", ["permutation", "bootstrap", "wilcoxon"])
def test_too_few_resamples_for_the_interval_are_refused(test):
    """compare(num_resamples=1) gave ci_low == ci_high (0.039, beside a difference of 0.0455 on
    Nations): the interval of one paired resample, whatever the test."""
    rng = np.random.default_rng(7)
    a, b = _table(rng, 60), _table(rng, 60, p=0.08)
    for n in (1, 2, 39):
        with pytest.raises(InvalidInputError, match=f"^num_resamples must be at least 40 .*got {n}$"):
            compare(a, b, metrics=["mrr"], test=test, num_resamples=n, seed=0)
    with pytest.raises(InvalidInputError, match="^num_resamples must be at least 200 .*0.99"):
        compare(a, b, metrics=["mrr"], test=test, num_resamples=199, confidence=0.99, seed=0)
    row = _records(compare(a, b, metrics=["mrr"], test=test, num_resamples=40, seed=0))[0]
    assert row["ci_low"] < row["difference"] < row["ci_high"]


def test_monte_carlo_p_values_never_go_below_one_over_draws_plus_one():
    """(b + 1) / (R + 1): 5 random sign patterns cannot give a p below 1/6, however large the effect."""
    d = np.full(40, 1.0)  # every unit favours A: no flipped pattern is as extreme (but the identity)
    p, how = paired.sign_flip_p_values(d[:, None], num_resamples=5, rng=np.random.default_rng(0))
    assert how == "monte carlo" and p[0] == 1 / 6
    t = np.zeros(5)
    assert paired.bootstrap_t_p_value(t, 10.0) == 1 / 6
    assert paired.bootstrap_p_value(np.array([1.0, 1.1, 0.9, 1.05, 0.95]), 1.0) == 1 / 6
