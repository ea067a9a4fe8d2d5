"""Protocol presets inside kgeval: the relative tie tolerance and the NaN-as--inf rule against a brute
force in plain numpy (both counting back ends, whole rows and column chunks), the rounded mean rank, the
preset's option semantics, the protocol record and the short keys under a preset."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import kgeval
from kgeval import RankTable, presets
from kgeval.data import get_dataset
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.evaluation import EvaluationOptions, FunctionScorer, Tuning, evaluate_ranks


def _brute(scores, true_idx, mask, atol, rtol, nan_low):
    """(better, tied others) per task by the definition, one candidate at a time in Python floats."""
    better, tied = [], []
    for row, ans, m in zip(scores, true_idx, mask):
        s = float(row[ans])
        if nan_low and math.isnan(s):
            s = -math.inf
        tol = 0.0 if math.isinf(s) else atol + rtol * abs(s)
        b = t = 0
        for j, (x, keep) in enumerate(zip(row.tolist(), m)):
            if j == ans or not keep:
                continue
            if math.isnan(x):
                if nan_low and s == -math.inf:
                    t += 1
                continue
            if x > s + tol:
                b += 1
            elif x >= s - tol or (math.isinf(s) and x == s):
                t += 1
        better.append(b)
        tied.append(t)
    return np.array(better), np.array(tied)


def _table(seed, ne=9, nr=3, special=True):
    rng = np.random.default_rng(seed)
    s = np.round(rng.normal(size=(ne, nr, ne)) * 4) / 4  # exact ties on a grid
    s = s * 10.0 ** rng.integers(-2, 3, size=s.shape)  # several magnitudes: rtol matters
    s = s + np.where(rng.random(s.shape) < 0.3, rng.uniform(-1e-7, 1e-7, s.shape), 0)  # near ties
    if special:
        u = rng.random(s.shape)
        s = np.where(u < 0.06, np.nan, np.where(u < 0.1, np.inf, np.where(u < 0.14, -np.inf, s)))
    return torch.from_numpy(s.astype(np.float32))


@pytest.mark.parametrize("kernel", ["torch", "numba"])
@pytest.mark.parametrize("atol,rtol,nan_policy", [(0.0, 1e-3, "worst"), (1e-5, 1e-4, "minus_inf"),
                                                  (0.0, 0.0, "minus_inf"), (1e-3, 0.0, "worst")])
@pytest.mark.parametrize("chunk", [None, 4])
def test_counts_match_the_brute_force(kernel, atol, rtol, nan_policy, chunk):
    if kernel == "numba":
        pytest.importorskip("numba")
    table = _table(0)
    ne, nr = table.shape[0], table.shape[1]
    rng = np.random.default_rng(1)
    triples = np.stack([rng.integers(0, ne, 30), rng.integers(0, nr, 30), rng.integers(0, ne, 30)], 1)
    known = np.stack([rng.integers(0, ne, 40), rng.integers(0, nr, 40), rng.integers(0, ne, 40)], 1)
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], ne, num_relations=nr)
    out = evaluate_ranks(scorer, triples, filter_triples=known, tie_tolerance=atol, tie_rtol=rtol,
                         nan_policy=nan_policy, entity_chunk_size=chunk, progress=False, check_consistency=False,
                         tuning=Tuning(kernel=kernel))
    t = out.rank_table
    allk = {tuple(x) for x in np.concatenate([triples, known]).tolist()}
    for side in (0, 1):
        rows = np.stack([table[:, r, tt].numpy() if side == 0 else table[h, r, :].numpy() for h, r, tt in triples])
        ans = triples[:, 0] if side == 0 else triples[:, 2]
        mask = np.array([[((e, r, tt) if side == 0 else (h, r, e)) not in allk for e in range(ne)]
                         for h, r, tt in triples])
        b, tie = _brute(rows, ans, mask, atol, rtol, nan_policy == "minus_inf")
        true = rows[np.arange(len(ans)), ans]
        sel = t.side == side
        ob = t.optimistic[sel][np.argsort(t.triple_index[sel])] - 1
        ot = t.pessimistic[sel][np.argsort(t.triple_index[sel])] - 1 - ob
        ok = ~np.isnan(true) if nan_policy == "worst" else np.ones(len(ans), bool)  # worst: NaN true ranks last
        np.testing.assert_array_equal(ob[ok], b[ok])
        np.testing.assert_array_equal(ot[ok], tie[ok])


def test_rtol_zero_keeps_the_absolute_rule():
    """tie_rtol=0 is the earlier rule exactly (same thresholds object path)."""
    from kgeval.evaluation.ties import TieRule, tolerance_bounds

    true = torch.tensor([1.0, -2.0, float("inf")], dtype=torch.float32)
    hi, lo = tolerance_bounds(true, 1e-3)
    hi2, lo2 = tolerance_bounds(true, TieRule(1e-3, 0.0))
    assert torch.equal(hi, hi2) and torch.equal(lo, lo2)
    same, _ = tolerance_bounds(true, 0.0)
    assert same is true  # exact: the true scores themselves, no copy


def test_rounded_mean_rank_is_libkges_formula():
    opt = np.array([1, 2, 2, 5, 3])
    pes = np.array([1, 3, 4, 5, 8])
    t = RankTable.from_ranks(optimistic=opt, pessimistic=pes)
    ties_incl = pes - opt + 1  # LibKGE's num_ties counts the true answer
    expect = (opt - 1) + ties_incl // 2 + 1  # its 0-based rank + num_ties // 2, plus one
    np.testing.assert_array_equal(t.ranks("rounded_mean"), expect)
    r = kgeval.Results(t, rank_types=["rounded_mean"])
    assert r["both.rounded_mean.mrr"] == pytest.approx(np.mean(1 / expect))
    assert r["both.rounded_mean_rank.hits@3"] == pytest.approx(np.mean(expect <= 3))  # LibKGE's spelling


def test_preset_options_and_explicit_values():
    o = EvaluationOptions(protocol="LibKGE")
    assert (o.protocol, o.tie_tolerance, o.tie_rtol, o.nan_policy) == ("libkge", 1e-5, 1e-4, "minus_inf")
    assert EvaluationOptions(protocol="libkge", nan_policy="raise").nan_policy == "raise"
    back = o.replace(protocol="kgeval")
    assert (back.tie_tolerance, back.tie_rtol, back.nan_policy) == (0.0, 0.0, "raise")
    assert EvaluationOptions.from_dict(o.to_dict()) == o  # a saved options dict reads back as saved
    assert EvaluationOptions(protocol="ogb").filtered is False
    with pytest.raises(UnknownNameError, match="libkge"):
        EvaluationOptions(protocol="libkg")
    with pytest.raises(InvalidInputError, match="tie_rtol"):
        EvaluationOptions(tie_rtol=-1)
    with pytest.raises(InvalidInputError, match="tie_rtol"):
        EvaluationOptions(tie_rtol=1e-4, query_metrics_k=(1,))


def test_every_preset_cites_its_source():
    for p in presets.PRESETS.values():
        assert p.rank_type in ("realistic", "pessimistic", "rounded_mean")
        EvaluationOptions(protocol=p.name)  # valid options
        if p.name != "kgeval":
            assert p.sources and all(len(s.commit) == 40 and s.path and s.lines for s in p.sources)


def test_short_keys_follow_the_preset():
    ds = get_dataset("nations")
    rng = np.random.default_rng(0)
    table = torch.from_numpy((np.round(rng.normal(size=(14, 55, 14)) * 2) / 2).astype(np.float32))
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], 14, num_relations=55)
    kw = dict(filter_triples={"train": ds.training, "valid": ds.validation}, progress=False)
    lib = kgeval.evaluate(scorer, ds.testing, protocol="libkge", **kw)
    tk = kgeval.evaluate(scorer, ds.testing, protocol="torchkge", **kw)
    assert lib.protocol["preset"] == "libkge" and lib.preset == "libkge"
    assert lib["mrr"] == lib["both.rounded_mean.inverse_harmonic_mean_rank"] != lib["both.realistic.mrr"]
    assert tk["hits@10"] == tk["both.pessimistic.hits@10"] and tk["tail.mr"] == tk["tail.pessimistic.mr"]
    assert "both.rounded_mean.inverse_harmonic_mean_rank" in lib.to_flat_dict()
    assert "protocol preset: libkge" in lib.evaluation_protocol.describe()
    assert "rank type: rounded_mean" in lib.summary_table()
    again = kgeval.Results.from_json(lib.to_json())
    assert again["mrr"] == lib["mrr"] and again.rank_type == "rounded_mean"


def test_workflow_filter_sets_per_preset():
    from kgeval.workflow.evaluation import testing_filter_sets, validation_filter_sets

    ds = get_dataset("nations")
    assert list(validation_filter_sets(ds)) == ["training"]
    assert list(validation_filter_sets(ds, preset="libkge")) == ["training", "testing"]  # filtered with test
    assert list(testing_filter_sets(ds, preset="pykeen")) == ["training", "validation"]
    assert list(testing_filter_sets(ds, filter_validation_when_testing=False, preset="libkge")) == ["training"]
