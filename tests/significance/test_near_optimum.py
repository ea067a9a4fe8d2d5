"""z-scores, bootstrap bounds of wrappers and saved null models where E is close to the optimum
(most of the weight on tasks with one candidate). ``M − E`` formed directly keeps only E's absolute
rounding there; like the wrappers (tests/metrics/test_adjusted_near_optimum.py) these centre M as
``(M − opt) + (opt − E)`` with ``NullMoments.optimum_gap``.

Reference: every outcome enumerated in mpmath at 50 digits, with the weights exactly as the metric
normalises them (float64)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kgeval import RankTable, Results, metrics
from kgeval.errors import InvalidInputError
from kgeval.metrics import NullMoments
from kgeval.metrics.base import check_weights
from kgeval.metrics.derived import AdjustedIndex, ZScore
from kgeval.significance.candidates import CandidateHistogram, NullProtocol
from kgeval.significance.null_model import NullModel
from kgeval.significance.pvalues import null_p_value

mp = pytest.importorskip("mpmath")

# base key -> M(ranks, normalised weights) in mpmath
BASES = {
    "arithmetic_mean_rank": lambda r, w: mp.fsum(wi * ri for wi, ri in zip(w, r)),
    "inverse_harmonic_mean_rank": lambda r, w: mp.fsum(wi / ri for wi, ri in zip(w, r)),
    "hits_at_1": lambda r, w: mp.fsum(wi * (ri <= 1) for wi, ri in zip(w, r)),
    "inverse_arithmetic_mean_rank": lambda r, w: 1 / mp.fsum(wi * ri for wi, ri in zip(w, r)),
    "harmonic_mean_rank": lambda r, w: 1 / mp.fsum(wi / ri for wi, ri in zip(w, r)),
    "geometric_mean_rank": lambda r, w: mp.exp(mp.fsum(wi * mp.log(ri) for wi, ri in zip(w, r))),
    "inverse_geometric_mean_rank": lambda r, w: mp.exp(-mp.fsum(wi * mp.log(ri) for wi, ri in zip(w, r))),
}
CASES = [([1, 2], [1.0, 1e-9]), ([1, 2], [1.0, 1e-12]), ([1, 5, 7], [1.0, 1e-9, 3e-9])]
IDS = ["1e-9", "1e-12", "3tasks"]


def _reference(key, cs, weights):
    """(E, σ) of base ``key`` by enumeration (mpmath, 50 digits)."""
    w = check_weights(np.asarray(weights, dtype=np.float64), len(cs))
    with mp.workdps(50):
        wm = [mp.mpf(float(x)) for x in w]
        wm = [x / mp.fsum(wm) for x in wm]
        values = [BASES[key](r, wm) for r in itertools.product(*[range(1, c + 1) for c in cs])]
        mean = mp.fsum(values) / len(values)
        return mean, mp.sqrt(mp.fsum((x - mean) ** 2 for x in values) / len(values))


def _want_z(base, value, mean, sd):
    with mp.workdps(50):
        return (1 if base.increasing else -1) * (mp.mpf(value) - mean) / sd


@pytest.mark.parametrize("key", list(BASES))
@pytest.mark.parametrize("cs,weights", CASES, ids=IDS)
def test_p_value_z_against_enumeration(key, cs, weights):
    """null_p_value's z of perfect ranks and of one miss: before, value − E directly (perfect MR ranks
    at weight 1e-9: z 1.7e-7 relative off, 1.8e-4 at 1e-12)."""
    base = metrics.get(key)
    mean, sd = _reference(key, cs, weights)
    for ranks in ([1] * len(cs), [1] + [2] * (len(cs) - 1)):
        value = base(ranks, cs, weights)
        got = null_p_value(base, value, cs, weights, method="normal").z
        want = _want_z(base, value, mean, sd)
        assert abs(got - want) <= 1e-13 * abs(want), (ranks, got, want)
        assert got == pytest.approx(ZScore(base)(ranks, cs, weights), rel=1e-15, abs=0)  # the z_ wrapper's


@pytest.mark.parametrize("key", ["arithmetic_mean_rank", "inverse_harmonic_mean_rank", "geometric_mean_rank",
                                 "harmonic_mean_rank"])
@pytest.mark.parametrize("cs,weights", CASES[:2], ids=IDS[:2])
def test_saved_results_z_against_enumeration(key, cs, weights, tmp_path):
    """Results loaded without a rank table: z from the saved null moments (results/inference.py)."""
    base = metrics.get(key)
    mean, sd = _reference(key, cs, weights)
    for ranks in ([1] * len(cs), [1] + [2] * (len(cs) - 1)):
        res = Results(RankTable.from_ranks(ranks=ranks, num_candidates=cs, weights=weights, side="tail"))
        back = Results.load_json(res.save_json(tmp_path / "r.json"))
        assert back.rank_table is None
        value = back[f"tail.realistic.{key}"]
        got = back.p_value(f"tail.realistic.{key}", method="normal").z
        want = _want_z(base, value, mean, sd)
        assert abs(got - want) <= 1e-13 * abs(want), (ranks, got, want)


@pytest.mark.parametrize("key", ["arithmetic_mean_rank", "inverse_harmonic_mean_rank", "harmonic_mean_rank"])
@pytest.mark.parametrize("cs,weights", CASES[:2], ids=IDS[:2])
def test_bootstrap_bounds_of_wrappers_against_enumeration(key, cs, weights):
    """The wrappers' bootstrap bounds are the base's bounds mapped through (b − E)/(opt − E) and
    (b − E)/σ (significance/units.affine_of): before, b − E directly (a bound at the optimum gave
    the index 1 ± 2e-7 at weight 1e-9)."""
    base = metrics.get(key)
    mean, sd = _reference(key, cs, weights)
    res = Results(RankTable.from_ranks(ranks=[1, 2], num_candidates=cs, weights=weights, side="tail"))
    b = res.confidence_interval(f"tail.realistic.{key}", method="percentile", num_resamples=200, seed=3)
    assert b.low != b.high and base.optimum in (b.low, b.high)  # one bound at the optimum
    for wrapper in (AdjustedIndex(base), ZScore(base)):
        ci = res.confidence_interval(f"tail.realistic.{wrapper.key}", method="percentile", num_resamples=200, seed=3)
        with mp.workdps(50):
            if isinstance(wrapper, AdjustedIndex):
                ends = [(mp.mpf(x) - mean) / (base.optimum - mean) for x in (b.low, b.high)]
            else:
                ends = [_want_z(base, x, mean, sd) for x in (b.low, b.high)]
        for got, want in zip((ci.low, ci.high), sorted(ends)):
            assert abs(got - want) <= 1e-13 * max(1, abs(want)), (wrapper.key, got, want)


def test_bootstrap_bounds_of_deterministic_wrappers():
    """hits@3 with every C ≤ 3 is 1 under the null: opt − E = σ = 0 and the wrappers are 0 by
    convention. The bounds were (b − E)/0 in Python floats: ZeroDivisionError out of bootstrap."""
    res = Results(RankTable.from_ranks(ranks=[1, 2, 3], num_candidates=[3, 3, 3], side="tail"))
    for key in ("tail.realistic.adjusted_hits_at_3", "tail.realistic.z_hits_at_3"):
        ci = res.confidence_interval(key, method="percentile", num_resamples=100, seed=1)
        assert res[key] == 0.0 and (ci.low, ci.high) == (0.0, 0.0)


def _model() -> NullModel:
    """Unweighted, near the optimum: 2·10⁶ head tasks of one candidate, one tail task of two."""
    hist = {"head": CandidateHistogram.of(np.ones(2_000_000, dtype=np.int64)),
            "tail": CandidateHistogram.of(np.array([2]))}
    hist["both"] = hist["head"] + hist["tail"]
    return NullModel("toy", NullProtocol(), hist, num_entities=3, identity={}, source="files")


def test_null_model_dict_round_trip_keeps_optimum_gap():
    """NullModel.to_dict wrote expected_value / variance / exact only: a reloaded model lost opt − E
    and the z-score of perfect MR ranks came out 9.5e-11 relative off (the index of one miss 1.9e-10)."""
    model = _model()
    d = model.to_dict()
    back = NullModel.from_dict(d)
    n1 = 2_000_000
    for key, f in (("arithmetic_mean_rank", lambda r: r), ("inverse_harmonic_mean_rank", lambda r: 1 / r)):
        base = metrics.get(key)
        nm = back.moments(f"both.{key}")
        assert nm == model.moments(f"both.{key}") and nm.optimum_gap is not None
        with mp.workdps(50):  # the one random task: r ∈ {1, 2}; the others rank 1
            vals = [(n1 * f(mp.mpf(1)) + f(mp.mpf(r))) / (n1 + 1) for r in (1, 2)]
            mean = mp.fsum(vals) / 2
            sd = mp.sqrt(mp.fsum((v - mean) ** 2 for v in vals) / 2)
        assert abs((nm.optimum_gap - (1 - mean)) / (1 - mean)) <= 1e-13
        for value in (1.0, float(vals[1])):
            want_z = _want_z(base, value, mean, sd)
            got_z = ZScore(base).adjust(value, nm)
            assert abs(got_z - want_z) <= 1e-13 * abs(want_z), (key, value, got_z, want_z)
            with mp.workdps(50):
                want_i = (mp.mpf(value) - mean) / (1 - mean)
            got_i = AdjustedIndex(base).adjust(value, nm)
            assert abs(got_i - want_i) <= 1e-13 * max(1, abs(want_i)), (key, value, got_i, want_i)
    assert back.num_candidates("tail").tolist() == [2] and back.num_tasks("head") == n1
    assert back.protocol == model.protocol and back.dataset == "toy"


def test_null_model_old_dicts_load_and_bad_dicts_are_named():
    model = _model()
    d = model.to_dict()
    for m in d["moments"].values():  # written before optimum_gap existed
        m.pop("optimum_gap", None)
    back = NullModel.from_dict(d)
    nm = back.moments("both.arithmetic_mean_rank")
    assert nm.optimum_gap is None and nm.mean == model.moments("both.arithmetic_mean_rank").mean
    # the wrappers fall back to opt − E
    assert AdjustedIndex(metrics.get("mr")).adjust(1.5, nm) == (1.5 - nm.mean) / (1 - nm.mean)
    assert NullMoments.from_dict(d["moments"]["both.arithmetic_mean_rank"]) == nm
    with pytest.raises(InvalidInputError, match="NullModel"):
        NullModel.from_dict({"dataset": "x"})
