"""Relation prediction agrees with TorchKGE 0.17.7's ``RelationPredictionEvaluator`` on the same embeddings
(DistMult, ComplEx, TransE L1 and L2) where its protocol matches kgeval's.

TorchKGE's rank is ``#{relations scoring >= the true one}`` (ties against the model: kgeval's *pessimistic*
rank) over all relations; filtered, the other relations of ``(h, t)`` in its ``KnowledgeGraph.dict_of_rels``
are scored ``-inf``. With the same known triples as kgeval's filter and finite scores, the filtered ranks are
kgeval's filtered pessimistic ranks, the unfiltered ones its unfiltered pessimistic ranks. Integer embeddings
make exact ties frequent, so the two tie rules would differ were they not both pessimistic here. Where the
protocols differ (``directed=False``, -inf or NaN true scores, realistic ranks): docs/guide/relation-prediction.md.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kgeval
from kgeval.evaluation import evaluate_ranks
from kgeval.models import from_embeddings

pytest.importorskip("torchkge")
from torchkge.data_structures import KnowledgeGraph  # noqa: E402
from torchkge.evaluation import RelationPredictionEvaluator  # noqa: E402
from torchkge.models import ComplExModel, DistMultModel, TransEModel  # noqa: E402

E, R, D = 12, 7, 3


def _ints(rng, *shape):
    return torch.as_tensor(rng.integers(-2, 3, size=shape), dtype=torch.float32)


def _models(name: str, rng):
    """``(TorchKGE model, kgeval model)`` holding the same integer embeddings."""
    if name == "complex":
        parts = [_ints(rng, n, D) for n in (E, E, R, R)]
        tk = ComplExModel(D, E, R)
        for emb, w in zip((tk.re_ent_emb, tk.im_ent_emb, tk.re_rel_emb, tk.im_rel_emb), parts):
            emb.weight.data = w.clone()
        return tk, from_embeddings("complex", torch.cat(parts[:2], 1), torch.cat(parts[2:], 1))
    ent, rel = _ints(rng, E, D), _ints(rng, R, D)
    if name == "distmult":
        tk = DistMultModel(D, E, R)
        model = from_embeddings("distmult", ent, rel)
    else:
        p = int(name[-1])
        tk = TransEModel(D, E, R, dissimilarity_type=f"L{p}")  # L2: the squared distance, the same order
        model = from_embeddings("transe", ent, rel, p=p)
    tk.ent_emb.weight.data, tk.rel_emb.weight.data = ent.clone(), rel.clone()
    return tk, model


def _kg(triples, full=None):
    t = torch.as_tensor(triples, dtype=torch.long)
    kw = {} if full is None else {"dict_of_heads": full.dict_of_heads, "dict_of_tails": full.dict_of_tails,
                                  "dict_of_rels": full.dict_of_rels}
    return KnowledgeGraph(kg={"heads": t[:, 0], "tails": t[:, 2], "relations": t[:, 1]},
                          ent2ix={i: i for i in range(E)}, rel2ix={i: i for i in range(R)}, **kw)


@pytest.mark.parametrize("name", ["distmult", "complex", "transe-l1", "transe-l2"])
@pytest.mark.parametrize("seed", [0, 1])
def test_ranks_equal_torchkge_relation_prediction(name, seed):
    rng = np.random.default_rng(seed)
    allt = np.unique(rng.integers(0, [E, R, E], size=(160, 3)), axis=0)
    allt = allt[rng.permutation(len(allt))]
    train, test = allt[:110], allt[110:]
    tk, model = _models(name, rng)
    evaluator = RelationPredictionEvaluator(tk, _kg(test, full=_kg(allt)), directed=True)
    evaluator.evaluate(b_size=16, verbose=False)  # dict_of_rels of the whole graph: train + test are known
    for filtered, theirs in ((True, evaluator.filt_rank_true_rels), (False, evaluator.rank_true_rels)):
        out = evaluate_ranks(model, test, filter_triples=[train], sides="relation", filtered=filtered,
                             progress=False)
        tab = out.rank_table
        assert np.array_equal(tab.triple_index, np.arange(len(test)))
        assert np.array_equal(tab.pessimistic, theirs.numpy()), (filtered, name)
        assert (tab.pessimistic > tab.optimistic).any()  # ties: the tie rule mattered
    res = kgeval.evaluate(model, test, filter_triples=[train], sides="relation", progress=False)
    mrr, filt_mrr = evaluator.mrr()
    mr, filt_mr = evaluator.mean_rank()
    assert res["relation.pessimistic.mrr"] == pytest.approx(filt_mrr, rel=1e-6)
    assert res["relation.pessimistic.mr"] == pytest.approx(filt_mr, rel=1e-6)
    assert res["relation.pessimistic.hits@3"] == pytest.approx(evaluator.hit_at_k(3)[1], rel=1e-6)
