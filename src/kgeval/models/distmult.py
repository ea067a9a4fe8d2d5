"""DistMult (Yang et al., 2015): ``f(h, r, t) = sum_i h_i r_i t_i``."""

from __future__ import annotations

from torch import nn

from .base import Model, matmul_into


class DistMult(Model):
    """Diagonal bilinear model, ``f(h, r, t) = <h, r, t> = sum_i h_i r_i t_i``.

    1-to-all is one matmul: tails ``(h * r) @ E^T``, heads ``(r * t) @ E^T``. Symmetric in
    ``h`` and ``t`` by construction (it cannot model antisymmetric relations).
    """

    name = "distmult"

    def __init__(self, num_entities, num_relations, *, dim=200, inverse_relations=False):
        super().__init__(num_entities, num_relations, dim=dim, inverse_relations=inverse_relations)
        self.entity = nn.Embedding(num_entities, dim)
        self.relation = nn.Embedding(self.num_relation_embeddings, dim)
        nn.init.xavier_normal_(self.entity.weight)
        nn.init.xavier_normal_(self.relation.weight)

    def entity_embeddings(self, idx):
        return self.entity(idx)

    def relation_embeddings(self, idx):
        return self.relation(idx)

    # _tails_from / _heads_from are products with these query vectors (Model.prepare_tails builds them once)
    def _tail_query(self, h_rows, r):
        return h_rows * self.relation(r)

    def _head_query(self, r, t_rows):
        return self.relation(r) * t_rows

    def _tails_from(self, h_rows, r, cand_rows, out=None):
        return matmul_into(self._tail_query(h_rows, r), cand_rows, out)

    def _heads_from(self, r, t_rows, cand_rows, out=None):
        return matmul_into(self._head_query(r, t_rows), cand_rows, out)

    def _score_triples(self, h, r, t):
        return (self.entity(h) * self.relation(r) * self.entity(t)).sum(-1)

    def _relations_from(self, h, t):  # relation prediction: (h * t) @ R^T over the forward relations
        return (self.entity(h) * self.entity(t)) @ self.relation.weight[: self.num_relations].t()
