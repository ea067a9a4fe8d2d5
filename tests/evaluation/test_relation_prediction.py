"""Relation prediction (``sides="relation"``) against brute force: every relation of every task scored one by one
through ``score_triples`` in plain numpy, the ranks counted by hand; and against TorchKGE's evaluator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kgeval
from kgeval.errors import InvalidInputError
from kgeval.evaluation import FunctionScorer
from kgeval.models import from_embeddings, get_model


def _graph(seed: int, e: int = 9, r: int = 6):
    rng = np.random.default_rng(seed)
    train = np.unique(np.stack([rng.integers(0, e, 60), rng.integers(0, r, 60), rng.integers(0, e, 60)], 1), axis=0)
    test = np.unique(np.stack([rng.integers(0, e, 15), rng.integers(0, r, 15), rng.integers(0, e, 15)], 1), axis=0)
    # pairs with several relations: known other relations of a test pair, to filter
    h, _, t = test[0]
    extra = np.array([[h, x, t] for x in range(r) if x != test[0, 1]][:2])
    return np.unique(np.concatenate([train, extra]), axis=0), test, e, r


def _integer_models(e: int, r: int, seed: int):
    """Integer embeddings: exact scores, many exact ties (a score_relations product and score_triples agree)."""
    rng = np.random.default_rng(seed)
    ent, rel = rng.integers(-1, 2, size=(e, 3)).astype(np.float64), rng.integers(-1, 2, size=(r, 3)).astype(np.float64)
    yield "distmult", from_embeddings("distmult", ent, rel)
    yield "complex", from_embeddings("complex", rng.integers(-1, 2, size=(e, 4)).astype(np.float64),
                                     rng.integers(-1, 2, size=(r, 4)).astype(np.float64))
    yield "transe", from_embeddings("transe", ent, rel, p=1)
    for name in ("rotate", "tucker", "pairre"):  # no product form: the score_triples fallback
        yield name, get_model(name, e, r, dim=4, seed=seed).eval()  # TuckER: no dropout in the brute force either


def _brute(model, test, known: set, allowed, filtered: bool):
    """{triple index: (optimistic, pessimistic, num_candidates)} scoring each relation alone."""
    out = {}
    for i, (h, rel, t) in enumerate(test.tolist()):
        if rel not in allowed:
            continue
        cands = [x for x in allowed if x == rel or not filtered or (h, x, t) not in known]
        with torch.no_grad():
            scores = [float(model.score_triples(torch.tensor([h]), torch.tensor([x]), torch.tensor([t]))[0])
                      for x in cands]
        s = scores[cands.index(rel)]
        better = sum(v > s for v in scores)
        tied = sum(v == s for v in scores) - 1
        out[i] = (1 + better, 1 + better + tied, len(cands))
    return out


def _table(results):
    tab = results.rank_table
    sel = tab.side == 2
    return {int(i): (int(o), int(p), int(c)) for i, o, p, c in zip(tab.triple_index[sel], tab.optimistic[sel],
                                                                   tab.pessimistic[sel], tab.num_candidates[sel])}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("filtered", [True, False])
def test_every_model_family_matches_brute_force(seed, filtered):
    train, test, e, r = _graph(seed)
    known = {tuple(x) for x in train.tolist()} | {tuple(x) for x in test.tolist()}
    for name, model in _integer_models(e, r, seed):
        results = kgeval.evaluate(model, test, filter_triples=train, sides="relation", filtered=filtered,
                                  progress=False)
        assert _table(results) == _brute(model, test, known, list(range(r)), filtered), name
        assert results.sides == ["relation"]


def test_restriction_macro_and_entity_sides_together():
    train, test, e, r = _graph(2)
    known = {tuple(x) for x in train.tolist()} | {tuple(x) for x in test.tolist()}
    model = dict(_integer_models(e, r, 2))["distmult"]
    allowed = [0, 2, 3, 5]
    res = kgeval.evaluate(model, test, filter_triples=train, sides=["head", "tail", "relation"],
                          restrict_relations=allowed, macro=True, progress=False)
    want = _brute(model, test, known, allowed, True)
    assert _table(res) == want
    tab = res.rank_table
    rel = tab.side == 2
    # macro: 1 / #relation tasks sharing the pair (h, t)
    pairs = [tuple(test[i, [0, 2]]) for i in tab.triple_index[rel]]
    assert np.allclose(tab.weight[rel], [1 / pairs.count(p) for p in pairs])
    # "both" stays head + tail; relation tasks have their own keys and null model
    entity_only = kgeval.evaluate(model, test, filter_triples=train, restrict_relations=allowed, macro=True,
                                  progress=False)
    assert res.get_metric("both.realistic.mrr") == pytest.approx(entity_only.get_metric("both.realistic.mrr"))
    c = tab.num_candidates[rel].astype(float)
    expected = np.average([np.mean(1 / np.arange(1, k + 1)) for k in c], weights=tab.weight[rel])
    assert res.get_metric("relation.realistic.mrr") == pytest.approx(np.average(
        2 / (tab.optimistic[rel] + tab.pessimistic[rel]), weights=tab.weight[rel]))
    assert res.null_model["relation"]["inverse_harmonic_mean_rank"]["expected_value"] == pytest.approx(expected)
    assert "relation candidates: the 4 allowed relations" in res.evaluation_protocol.describe()


def test_inverse_relation_model_ranks_forward_relations_only():
    train, test, e, r = _graph(3)
    model = get_model("distmult", e, r, dim=4, inverse_relations=True, seed=0)
    res = kgeval.evaluate(model, test, filter_triples=train, sides="relation", filtered=False, progress=False)
    assert set(res.rank_table.num_candidates.tolist()) == {r}


def test_torchkge_relation_prediction_agrees():
    """TorchKGE ranks a relation by #{score >= true} (pessimistic) over every relation, the pair's other known
    relations set to -inf: kgeval's pessimistic filtered ranks, on the same scores."""
    pytest.importorskip("torchkge")
    from torchkge.data_structures import KnowledgeGraph
    from torchkge.evaluation import RelationPredictionEvaluator

    train, test, e, r = _graph(4)
    rng = np.random.default_rng(4)
    table = torch.as_tensor(rng.integers(0, 4, size=(e, r, e)).astype(np.float32))  # many exact ties

    class TableModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))

        def inference_prepare_candidates(self, h_idx, t_idx, r_idx, entities=True):
            return h_idx, t_idx, r_idx, torch.arange(r).expand(h_idx.shape[0], -1)

        def inference_scoring_function(self, h, t, rels):
            return table[h[:, None], rels, t[:, None]]

    full = np.concatenate([train, test])
    kg = KnowledgeGraph(kg={"heads": torch.as_tensor(full[:, 0]), "tails": torch.as_tensor(full[:, 2]),
                            "relations": torch.as_tensor(full[:, 1])},
                        ent2ix={i: i for i in range(e)}, rel2ix={i: i for i in range(r)})
    _, kg_test = kg.split_kg(sizes=(len(train), len(test)))
    ev = RelationPredictionEvaluator(TableModel(), kg_test)
    ev.evaluate(b_size=8, verbose=False)
    scorer = FunctionScorer(lambda h, rel, t: table[h, rel, t], e, num_relations=r)
    ours = kgeval.evaluate(scorer, test, filter_triples=train, sides="relation", progress=False)
    tab = ours.rank_table
    order = np.argsort(tab.triple_index)
    np.testing.assert_array_equal(ev.filt_rank_true_rels.numpy(), tab.pessimistic[order])
    np.testing.assert_array_equal(ev.rank_true_rels.numpy(), kgeval.evaluate(
        scorer, test, filter_triples=train, sides="relation", filtered=False, progress=False)
        .rank_table.pessimistic[np.argsort(tab.triple_index)])


def test_bad_input_is_named():
    train, test, e, r = _graph(5)
    model = dict(_integer_models(e, r, 5))["distmult"]
    with pytest.raises(InvalidInputError, match="no evaluation triple is left"):
        kgeval.evaluate(model, test[test[:, 1] != 0], sides="relation", restrict_relations=[0], progress=False)
    with pytest.raises(InvalidInputError, match="relation id"):
        kgeval.evaluate(model, np.array([[0, r + 3, 1]]), sides="relation", progress=False)
