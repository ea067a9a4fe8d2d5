"""A plain scorer (no ``torch.nn.Module``, no ``prepare_*``): DistMult over given embeddings.

It implements only the scorer protocol of :mod:`kgeval.evaluation.scorers` (``entities=``,
``out=``, candidates, single triples), so tests and benchmarks can evaluate a scorer that takes
none of the built-in models' fast paths.
"""

from __future__ import annotations

import torch

from .._tensor import matmul_into

__all__ = ["DistMultScorer"]


class DistMultScorer:
    """DistMult as a plain scorer: ``score(h, r, t) = sum_i e_h[i] * w_r[i] * e_t[i]``.

    All-entity scoring is one matrix product ``(e_h * w_r) @ E^T``; used by the tests (with
    integer embeddings, so every score is exact) and the benchmarks.

    Examples
    --------
    >>> import torch
    >>> s = DistMultScorer(torch.eye(3), torch.ones(2, 3))
    >>> s.score_tails(torch.tensor([0]), torch.tensor([1])).tolist()
    [[1.0, 0.0, 0.0]]
    """

    #: stateless: several threads may score at once (the evaluator's chunk walkers)
    concurrent_scoring = True

    def __init__(self, entity_embeddings, relation_embeddings):
        self.entity = torch.as_tensor(entity_embeddings)
        self.relation = torch.as_tensor(relation_embeddings, dtype=self.entity.dtype, device=self.entity.device)
        self.num_entities = int(self.entity.shape[0])
        self.num_relations = int(self.relation.shape[0])
        self.device = self.entity.device

    def _targets(self, entities):
        if entities is None:
            return self.entity
        if isinstance(entities, slice):
            return self.entity[entities]
        return self.entity.index_select(0, entities)

    def score_tails(self, heads, relations, entities=None, out=None):
        return matmul_into(self.entity[heads] * self.relation[relations], self._targets(entities), out)

    def score_heads(self, relations, tails, entities=None, out=None):
        return matmul_into(self.entity[tails] * self.relation[relations], self._targets(entities), out)

    def score_tail_candidates(self, heads, relations, candidates):
        q = self.entity[heads] * self.relation[relations]
        return torch.einsum("bd,bmd->bm", q, self.entity[candidates])

    def score_head_candidates(self, relations, tails, candidates):
        q = self.entity[tails] * self.relation[relations]
        return torch.einsum("bd,bmd->bm", q, self.entity[candidates])

    def score_triples(self, heads, relations, tails):
        return (self.entity[heads] * self.relation[relations] * self.entity[tails]).sum(-1)
