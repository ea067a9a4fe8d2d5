"""ComplEx (Trouillon et al., 2016): ``f(h, r, t) = Re(sum_i h_i r_i conj(t_i))``."""

from __future__ import annotations

import torch
from torch import nn

from .base import Model, matmul_into


class ComplEx(Model):
    """Complex bilinear model, ``f(h, r, t) = Re(<h, r, conj(t)>)`` with ``h, r, t`` in C^dim.

    Embeddings are stored as real tensors ``[re | im]`` of width ``2 * dim``. Writing
    ``h = a + ib``, ``r = c + id``, ``t = e + if``::

        f = (ac - bd) . e + (ad + bc) . f      (tail queries: one matmul against [e | f])
          = a . (ce + df) + b . (cf - de)      (head queries: one matmul against [a | b])
    """

    name = "complex"

    def __init__(self, num_entities, num_relations, *, dim=200, inverse_relations=False):
        super().__init__(num_entities, num_relations, dim=dim, inverse_relations=inverse_relations)
        self.entity = nn.Embedding(num_entities, 2 * dim)
        self.relation = nn.Embedding(self.num_relation_embeddings, 2 * dim)
        nn.init.xavier_normal_(self.entity.weight)
        nn.init.xavier_normal_(self.relation.weight)

    def entity_embeddings(self, idx):
        return self.entity(idx)

    def relation_embeddings(self, idx):
        return self.relation(idx)

    def _split(self, x):
        return x[..., : self.dim], x[..., self.dim:]

    # _tails_from / _heads_from are products with these query vectors (Model.prepare_tails builds them once)
    def _tail_query(self, h_rows, r):
        a, b = self._split(h_rows)
        c, d = self._split(self.relation(r))
        return torch.cat([a * c - b * d, a * d + b * c], dim=-1)

    def _head_query(self, r, t_rows):
        c, d = self._split(self.relation(r))
        e, f = self._split(t_rows)
        return torch.cat([c * e + d * f, c * f - d * e], dim=-1)

    def _tails_from(self, h_rows, r, cand_rows, out=None):
        return matmul_into(self._tail_query(h_rows, r), cand_rows, out)

    def _heads_from(self, r, t_rows, cand_rows, out=None):
        return matmul_into(self._head_query(r, t_rows), cand_rows, out)

    def _score_triples(self, h, r, t):
        a, b = self._split(self.entity(h))
        c, d = self._split(self.relation(r))
        e, f = self._split(self.entity(t))
        return ((a * c - b * d) * e + (a * d + b * c) * f).sum(-1)

    def _relations_from(self, h, t):
        # f = c . (ae + bf) + d . (af - be): one product against the forward relations' [c | d]
        a, b = self._split(self.entity(h))
        e, f = self._split(self.entity(t))
        return torch.cat([a * e + b * f, a * f - b * e], dim=-1) @ self.relation.weight[: self.num_relations].t()

    def factors(self, heads, relations, tails):
        # N3 (Lacroix et al., 2018) regularises the moduli |x_i| of the complex coordinates.
        out = []
        for x in (self.entity(heads), self.relation(relations), self.entity(tails)):
            re, im = self._split(x)
            out.append(torch.sqrt(re * re + im * im + 1e-12))
        return out
