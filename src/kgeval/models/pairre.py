"""PairRE (Chao et al., 2021): ``f(h, r, t) = -||h o r_h - t o r_t||_p`` with unit-norm ``h, t``."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .base import Model, check_norm, chunked_pairwise


class PairRE(Model):
    """Paired relation vectors, ``f(h, r, t) = -||h' o r_h - t' o r_t||_p``, ``x' = x / ||x||_2``.

    Each relation holds two vectors ``r_h, r_t`` (stored side by side, width ``2 * dim``).
    For ``p=2`` the 1-to-all scores are matmuls: for tail queries with ``a = h' o r_h``,
    ``||a - t' o r_t||^2 = ||a||^2 + (t'^2) . (r_t^2) - 2 (a o r_t) . t'`` (two matmuls
    against ``E'`` and ``E'^2``), and symmetrically for head queries. ``p=1`` (the paper's
    choice and PyKEEN's default) is evaluated in bounded chunks.
    """

    name = "pairre"

    def __init__(self, num_entities, num_relations, *, dim=200, inverse_relations=False, p=1):
        super().__init__(num_entities, num_relations, dim=dim, inverse_relations=inverse_relations)
        self.p = check_norm(p)
        self.hparams = {"p": self.p}
        self.entity = nn.Embedding(num_entities, dim)
        self.relation = nn.Embedding(self.num_relation_embeddings, 2 * dim)
        nn.init.xavier_uniform_(self.entity.weight)
        nn.init.xavier_uniform_(self.relation.weight)

    @property
    def one_to_all_is_cheap(self) -> bool:  # the L1 path broadcasts (batch, chunk, dim) blocks
        return self.p == 2

    def entity_embeddings(self, idx):
        return self.entity(idx)

    def relation_embeddings(self, idx):
        return self.relation(idx)

    def _ent(self, x):
        return F.normalize(x, dim=-1)

    def _rel(self, r):
        w = self.relation(r)
        return w[..., : self.dim], w[..., self.dim:]

    def _one_to_all(self, fixed, fixed_scale, cand_scale, cand_rows):
        """``-||fixed o fixed_scale - e' o cand_scale||_p`` for every candidate row ``e``."""
        a = fixed * fixed_scale  # (b, d)
        ents = self._ent(cand_rows)  # (n, d)
        if self.p == 2:
            sq = (a * a).sum(-1, keepdim=True) + (cand_scale * cand_scale) @ (ents * ents).t() \
                - 2.0 * (a * cand_scale) @ ents.t()
            return -sq.clamp_min(1e-12).sqrt()

        def block(lo, hi):
            diff = a.unsqueeze(1) - ents[lo:hi].unsqueeze(0) * cand_scale.unsqueeze(1)
            return -diff.abs().sum(-1)

        return chunked_pairwise(block, a.shape[0], ents.shape[0], self.dim)

    def _tails_from(self, h_rows, r, cand_rows, out=None):  # out: ignored (not a plain product)
        r_h, r_t = self._rel(r)
        return self._one_to_all(self._ent(h_rows), r_h, r_t, cand_rows)

    def _heads_from(self, r, t_rows, cand_rows, out=None):
        r_h, r_t = self._rel(r)
        return self._one_to_all(self._ent(t_rows), r_t, r_h, cand_rows)

    def _relations_from(self, h, t):
        # p=2: ||h' o r_h - t' o r_t||^2 = h'^2 . r_h^2 + t'^2 . r_t^2 - 2 (h' o t') . (r_h o r_t): one product
        hn, tn = self._ent(self.entity(h)), self._ent(self.entity(t))
        w = self.relation.weight[: self.num_relations]
        r_h, r_t = w[:, : self.dim], w[:, self.dim:]
        if self.p == 2:
            sq = torch.cat([hn * hn, tn * tn, -2.0 * hn * tn], -1) @ torch.cat([r_h * r_h, r_t * r_t, r_h * r_t], -1).t()
            return -sq.clamp_min(1e-12).sqrt()

        def block(lo, hi):
            diff = hn.unsqueeze(1) * r_h[lo:hi].unsqueeze(0) - tn.unsqueeze(1) * r_t[lo:hi].unsqueeze(0)
            return -diff.abs().sum(-1)
        return chunked_pairwise(block, hn.shape[0], w.shape[0], self.dim)

    def _score_triples(self, h, r, t):
        r_h, r_t = self._rel(r)
        diff = self._ent(self.entity(h)) * r_h - self._ent(self.entity(t)) * r_t
        return -torch.linalg.vector_norm(diff, ord=self.p, dim=-1)
