"""accepts_keyword caches a scoring method's parameters per function without keeping the function alive."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import torch

from kgeval.evaluation import evaluate_ranks
from kgeval.evaluation.scorers import accepts_keyword


def _closure_scorer(ne: int):
    """A scorer class made per call (an HPO trial's wrapper, say) whose methods close over its embeddings."""
    emb = torch.randn(ne, 4, generator=torch.Generator().manual_seed(ne))

    class Scorer:
        num_entities, num_relations = ne, 2

        def score_tails(self, h, r, entities=None):
            return emb[h] @ (emb if entities is None else emb[entities]).T

        def score_heads(self, r, t):
            return emb[t] @ emb.T

    return Scorer(), weakref.ref(emb)


def test_a_scorer_made_per_trial_is_freed_after_its_evaluation():
    """Before, the parameter cache (functools.lru_cache of 256 functions) kept every evaluated scorer
    class's methods, and with them whatever they close over: a trial's 50 x 4 embedding table (a model, a
    GPU tensor...) stayed alive after the scorer was gone, for up to 256 later trials."""
    refs = []
    for ne in (50, 60):
        scorer, ref = _closure_scorer(ne)
        out = evaluate_ranks(scorer, np.array([[0, 0, 1], [2, 1, 3]]), progress=False, filtered=False)
        assert out.protocol.num_tasks == 4
        refs.append(ref)
        del scorer, out
    gc.collect()
    assert [r() is None for r in refs] == [True, True]


def test_parameters_are_those_of_each_method():
    scorer, _ = _closure_scorer(10)
    assert accepts_keyword(scorer.score_tails, "entities") and not accepts_keyword(scorer.score_heads, "entities")
    assert accepts_keyword(scorer.score_tails, "entities")  # the cached answer
    assert not accepts_keyword(scorer.score_tails, "out")
