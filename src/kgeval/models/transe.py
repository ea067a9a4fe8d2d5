"""TransE (Bordes et al., 2013): ``f(h, r, t) = -||h + r - t||_p``."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .._validation import check_bool
from .base import Model, check_norm, neg_l1_distance, neg_l2_distance


class TransE(Model):
    """Translation model, ``f(h, r, t) = -||h + r - t||_p`` with ``p`` in {1, 2}.

    1-to-all: tail queries use ``q = h + r`` against all ``t``; head queries use
    ``q = t - r`` against all ``h`` (``h + r - t = h - (t - r)``). ``p=2`` is one matmul via
    ``||q - e||^2 = ||q||^2 + ||e||^2 - 2 q.e``; ``p=1`` has no such identity and is
    evaluated in bounded chunks (slower, same result).

    ``normalize_entities=True`` (PyKEEN's default constraint) projects entity embeddings
    onto the unit L2 sphere after every optimiser step.
    """

    name = "transe"

    def __init__(self, num_entities, num_relations, *, dim=50, inverse_relations=False, p=2,
                 normalize_entities=True):
        super().__init__(num_entities, num_relations, dim=dim, inverse_relations=inverse_relations)
        self.p = check_norm(p)
        self.normalize_entities = check_bool("normalize_entities", normalize_entities)
        self.hparams = {"p": self.p, "normalize_entities": self.normalize_entities}
        self.entity = nn.Embedding(num_entities, dim)
        self.relation = nn.Embedding(self.num_relation_embeddings, dim)
        nn.init.xavier_uniform_(self.entity.weight)
        nn.init.xavier_uniform_(self.relation.weight)
        with torch.no_grad():
            self.relation.weight.copy_(F.normalize(self.relation.weight, dim=-1))
        self.post_parameter_update()

    def post_parameter_update(self) -> None:
        if self.normalize_entities:
            with torch.no_grad():
                self.entity.weight.copy_(F.normalize(self.entity.weight, dim=-1))

    def entity_embeddings(self, idx):
        return self.entity(idx)

    def relation_embeddings(self, idx):
        return self.relation(idx)

    def _pairwise(self, q, candidates):
        return neg_l2_distance(q, candidates) if self.p == 2 else neg_l1_distance(q, candidates)

    def _tails_from(self, h_rows, r, cand_rows, out=None):  # out: ignored (not a plain product)
        return self._pairwise(h_rows + self.relation(r), cand_rows)

    def _heads_from(self, r, t_rows, cand_rows, out=None):
        return self._pairwise(t_rows - self.relation(r), cand_rows)

    def _relations_from(self, h, t):  # -||(h - t) - (-r)||_p for every forward relation r
        return self._pairwise(self.entity(h) - self.entity(t), -self.relation.weight[: self.num_relations])

    def _score_triples(self, h, r, t):
        return -torch.linalg.vector_norm(self.entity(h) + self.relation(r) - self.entity(t), ord=self.p, dim=-1)
