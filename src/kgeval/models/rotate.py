"""RotatE (Sun et al., 2019): ``f(h, r, t) = -||h o r - t||_2`` with ``|r_i| = 1``."""

from __future__ import annotations

import math

import torch
from torch import nn

from .base import Model, neg_l2_distance


class RotatE(Model):
    """Rotation in the complex plane, ``f(h, r, t) = -||h o r - t||_2``, ``r_i = exp(i theta_i)``.

    Entities are stored as real ``[re | im]`` (width ``2 * dim``); relations as phases
    ``theta`` (so ``|r_i| = 1`` holds by construction, no constraint step needed). Because
    rotations are isometries, ``||h o r - t|| = ||h - t o conj(r)||``: head queries rotate
    ``t`` back and then, like tail queries, use one matmul via
    ``||q - e||^2 = ||q||^2 + ||e||^2 - 2 q.e``.
    """

    name = "rotate"

    def __init__(self, num_entities, num_relations, *, dim=200, inverse_relations=False):
        super().__init__(num_entities, num_relations, dim=dim, inverse_relations=inverse_relations)
        self.entity = nn.Embedding(num_entities, 2 * dim)
        self.relation = nn.Embedding(self.num_relation_embeddings, dim)  # phases
        nn.init.xavier_uniform_(self.entity.weight)
        nn.init.uniform_(self.relation.weight, 0.0, 2 * math.pi)

    def entity_embeddings(self, idx):
        return self.entity(idx)

    def relation_embeddings(self, idx):
        return self.relation(idx)

    def _rotate(self, x, phase, conjugate=False):
        re, im = x[..., : self.dim], x[..., self.dim:]
        c, s = torch.cos(phase), torch.sin(phase)
        if conjugate:
            s = -s
        return torch.cat([re * c - im * s, re * s + im * c], dim=-1)

    def _tails_from(self, h_rows, r, cand_rows, out=None):  # out: ignored (not a plain product)
        return neg_l2_distance(self._rotate(h_rows, self.relation(r)), cand_rows)

    def _heads_from(self, r, t_rows, cand_rows, out=None):
        return neg_l2_distance(self._rotate(t_rows, self.relation(r), conjugate=True), cand_rows)

    def _relations_from(self, h, t):
        # |r_i| = 1: ||h o r - t||^2 = ||h||^2 + ||t||^2 - 2 Re<h o r, t>, and Re<h o r, t> = p . cos - q . sin
        # with h conj(t) = p + iq: one product against the forward relations' [cos | sin]
        hr, tr = self.entity(h), self.entity(t)
        a, b, e, f = hr[..., : self.dim], hr[..., self.dim:], tr[..., : self.dim], tr[..., self.dim:]
        phase = self.relation.weight[: self.num_relations]
        dot = torch.cat([a * e + b * f, a * f - b * e], dim=-1) @ torch.cat([torch.cos(phase), torch.sin(phase)], -1).t()
        sq = (hr * hr).sum(-1, keepdim=True) + (tr * tr).sum(-1, keepdim=True) - 2.0 * dot
        return -sq.clamp_min(1e-12).sqrt()

    def _score_triples(self, h, r, t):
        diff = self._rotate(self.entity(h), self.relation(r)) - self.entity(t)
        return -torch.linalg.vector_norm(diff, ord=2, dim=-1)
