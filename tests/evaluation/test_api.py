"""Public API: evaluate() -> Results, protocol record, adapters."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from eval_graphs import E, small_graph

import kgeval
from kgeval.evaluation import FunctionScorer, PyKEENScorer, evaluate_ranks



def test_evaluate_returns_results_with_protocol_and_extra():
    pytest.importorskip("kgeval.results")
    scorer, train, test = small_graph()
    res = kgeval.evaluate(scorer, torch.as_tensor(test), filter_triples={"train": train}, progress=False, macro=True,
                          query_metrics_k=(1, 10))
    flat = res.to_flat_dict()
    assert "tail.precision_at_10" in flat and "both.random_recall_at_1" in flat
    # query-level metrics are opt-in
    plain = kgeval.evaluate(scorer, test, filter_triples={"train": train}, progress=False).to_flat_dict()
    assert not any("precision_at" in k for k in plain)
    assert len(res.rank_table) == 2 * len(test)
    proto = json.loads(json.dumps(res.protocol))  # JSON-serialisable
    assert proto["filter"]["sets"] == [{"name": "evaluation", "num_triples": len(test)}, {"name": "train", "num_triples": len(train)}]
    assert proto["averaging"] == "macro" and proto["sides"] == ["head", "tail"]
    assert 0 < res.get_metric("both.realistic.inverse_harmonic_mean_rank") <= 1


def test_unfiltered_and_sampled_protocol_records():
    scorer, train, test = small_graph(1)
    out = evaluate_ranks(scorer, test, filter_triples=train, filtered=False, progress=False, sides="tail")
    assert out.protocol["filter"] is None and out.protocol["sides"] == ["tail"]
    out = evaluate_ranks(scorer, test, filter_triples=train, num_negatives=4, seed=7, progress=False)
    json.dumps(out.protocol.to_dict())
    assert out.protocol["sampling"]["seed"] == 7 and out.protocol["query_metrics"] is None
    assert np.all(out.rank_table.num_candidates == 5)


def test_function_scorer_and_distmult_agree():
    scorer, train, test = small_graph(2)
    fs = FunctionScorer(lambda h, r, t: (scorer.entity[h] * scorer.relation[r] * scorer.entity[t]).sum(-1), E)
    a = evaluate_ranks(scorer, test, filter_triples=train, progress=False).rank_table
    b = evaluate_ranks(fs, test, filter_triples=train, progress=False).rank_table
    assert np.array_equal(a.optimistic, b.optimistic) and np.array_equal(a.pessimistic, b.pessimistic)


class FakePyKEENModel:
    """Duck-typed stand-in for a PyKEEN model (predict_t / predict_h / score_hrt); real PyKEEN models
    are tested in tests/interop."""

    def __init__(self, scorer):
        self.s = scorer
        self.num_entities, self.num_relations = scorer.num_entities, scorer.num_relations
        self.training = True

    def eval(self):
        self.training = False

    def parameters(self):
        return iter([self.s.entity])

    def score_t(self, hr_batch, *, tails=None, slice_size=None, mode=None):
        return self.s.score_tails(hr_batch[:, 0], hr_batch[:, 1], entities=tails)

    def score_h(self, rt_batch, *, heads=None, slice_size=None, mode=None):
        return self.s.score_heads(rt_batch[:, 0], rt_batch[:, 1], entities=heads)

    predict_t, predict_h = score_t, score_h  # no inverse triples: PyKEEN's predict_* add eval mode only

    def score_hrt(self, hrt_batch, mode=None):
        return self.s.score_triples(hrt_batch[:, 0], hrt_batch[:, 1], hrt_batch[:, 2])[:, None]


def test_pykeen_adapter():
    scorer, train, test = small_graph(3)
    model = FakePyKEENModel(scorer)
    wrapped = PyKEENScorer(model)
    assert not model.training
    ref = evaluate_ranks(scorer, test, filter_triples=train, progress=False, restrict_entities=range(1, E)).rank_table
    for s in (wrapped, model):  # a bare model is wrapped automatically
        got = evaluate_ranks(s, test, filter_triples=train, progress=False, restrict_entities=range(1, E)).rank_table
        assert np.array_equal(got.optimistic, ref.optimistic) and np.array_equal(got.num_candidates, ref.num_candidates)


def test_consistency_check_is_quiet_for_inverse_relation_models():
    """Head prediction of an inverse-relation model scores (t, r⁻¹, ?); the check must compare
    like with like (it warned on every batch when it compared with score_triples(h, r, t))."""
    import warnings

    from kgeval.models import get_model

    torch.manual_seed(0)
    model = get_model("complex", 12, 3, dim=8, inverse_relations=True)
    tri = np.array([[0, 0, 1], [2, 1, 3], [4, 2, 5], [6, 0, 7]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = kgeval.evaluate(model, tri, progress=False, check_consistency=True)
    assert res.protocol["consistency_check"]["mismatches"] == 0
