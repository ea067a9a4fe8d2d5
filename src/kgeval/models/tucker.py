"""TuckER (Balazevic et al., 2019): ``f(h, r, t) = W x_1 h x_2 r x_3 t``."""

from __future__ import annotations

import torch
from torch import nn

from .._validation import check_bool, check_positive_int
from ..errors import InvalidInputError
from .base import Model, check_nonnegative, matmul_into


class TuckER(Model):
    """Tucker decomposition, ``f(h, r, t) = sum_{k,l} BN1(BN0(h) W_r)_l t_l``, ``W_r = sum_m r_m W[m]``.

    ``W`` is a shared core tensor of shape ``(relation_dim, dim, dim)``; entities have
    width ``dim`` and relations ``relation_dim`` (default: ``dim``). As in the original code,
    the head embedding passes through batch norm ``BN0`` and input dropout, the per-query
    matrix ``W_r`` through dropout, and the intermediate through ``BN1`` and dropout.

    Tail queries: ``x = BN1(BN0(h) W_r)`` then one matmul ``x @ E^T``. Head queries: in
    evaluation mode batch norm is affine (``BN(x) = s * x + b``), so
    ``f = ((s0 * h) . v) + b0 . v + b1 . t`` with ``v = W_r (s1 * t)`` -- again one matmul.
    In training mode head queries use the same affine form with the running statistics
    (batch statistics over all candidate heads would need a ``batch x entities x dim``
    tensor); train with ``inverse_relations=True`` (recommended) to only use tail queries.
    Intermediates are ``batch x dim x dim`` (the per-query core slice), never per entity.
    """

    name = "tucker"
    #: preparing queries is a product with the core tensor: run it on the caller's threads
    light_prepare = False

    def __init__(self, num_entities, num_relations, *, dim=200, inverse_relations=False, relation_dim=None,
                 input_dropout=0.2, hidden_dropout1=0.4, hidden_dropout2=0.5, batch_norm=True):
        super().__init__(num_entities, num_relations, dim=dim, inverse_relations=inverse_relations)
        relation_dim = dim if relation_dim is None else relation_dim
        relation_dim = check_positive_int("relation_dim", relation_dim)
        drops = {}
        for key, value in (("input_dropout", input_dropout), ("hidden_dropout1", hidden_dropout1),
                           ("hidden_dropout2", hidden_dropout2)):
            value = check_nonnegative(key, value)
            if value >= 1:
                raise InvalidInputError(f"{key} must be in [0, 1), got {value!r}")
            drops[key] = value
        self.relation_dim = relation_dim
        self.batch_norm = check_bool("batch_norm", batch_norm)
        self.hparams = {"relation_dim": relation_dim, **drops, "batch_norm": self.batch_norm}
        self.entity = nn.Embedding(num_entities, dim)
        self.relation = nn.Embedding(self.num_relation_embeddings, relation_dim)
        self.core = nn.Parameter(torch.empty(relation_dim, dim, dim))
        nn.init.xavier_normal_(self.entity.weight)
        nn.init.xavier_normal_(self.relation.weight)
        nn.init.uniform_(self.core, -1.0, 1.0)
        self.input_dropout = nn.Dropout(drops["input_dropout"])
        self.hidden_dropout1 = nn.Dropout(drops["hidden_dropout1"])
        self.hidden_dropout2 = nn.Dropout(drops["hidden_dropout2"])
        self.bn0 = nn.BatchNorm1d(dim) if self.batch_norm else None
        self.bn1 = nn.BatchNorm1d(dim) if self.batch_norm else None

    def entity_embeddings(self, idx):
        return self.entity(idx)

    def relation_embeddings(self, idx):
        return self.relation(idx)

    def _core_slices(self, r: torch.Tensor) -> torch.Tensor:
        """``W_r`` for each relation in the batch: (batch, dim, dim)."""
        w = self.relation(r) @ self.core.view(self.relation_dim, -1)
        return self.hidden_dropout1(w.view(-1, self.dim, self.dim))

    def _bn(self, bn, x):
        if bn is None:
            return x
        if self.training and x.shape[0] == 1:  # batch statistics undefined for one row
            return self._affine(bn, x)
        return bn(x)

    @staticmethod
    def _bn_affine_params(bn):
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        return scale, bn.bias - bn.running_mean * scale

    def _affine(self, bn, x):
        scale, shift = self._bn_affine_params(bn)
        return x * scale + shift

    def _tail_queries(self, h_rows, r):
        x = self.input_dropout(self._bn(self.bn0, h_rows))
        x = torch.bmm(x.unsqueeze(1), self._core_slices(r)).squeeze(1)
        return self.hidden_dropout2(self._bn(self.bn1, x))

    def _tail_query(self, h_rows, r):  # _tails_from is a product with these (Model.prepare_tails builds them once)
        return self._tail_queries(h_rows, r)

    def _tails_from(self, h_rows, r, cand_rows, out=None):
        return matmul_into(self._tail_query(h_rows, r), cand_rows, out)

    def _score_triples(self, h, r, t):
        return (self._tail_queries(self.entity(h), r) * self.entity(t)).sum(-1)

    def _relations_from(self, h, t):
        # eval mode (batch norm affine, dropout off): f = sum_m r_m [BN0(h) W[m] (s1 o t)] + b1 . t, one product
        # of the (pair, m) values against the forward relation rows; training mode: the triples one by one
        if self.training:
            return super()._relations_from(h, t)
        x, t_rows = self._bn(self.bn0, self.entity(h)), self.entity(t)
        u, offset = t_rows, torch.zeros(t_rows.shape[0], dtype=t_rows.dtype, device=t_rows.device)
        if self.bn1 is not None:
            s1, b1 = self._bn_affine_params(self.bn1)
            u, offset = t_rows * s1, (t_rows * b1).sum(-1)
        v = torch.einsum("bi,mij,bj->bm", x, self.core, u)
        return v @ self.relation.weight[: self.num_relations].t() + offset.unsqueeze(1)

    def _heads_from(self, r, t_rows, cand_rows, out=None):
        t_emb = t_rows
        u = t_emb
        if self.bn1 is not None:
            s1, b1 = self._bn_affine_params(self.bn1)
            u = t_emb * s1
        v = torch.bmm(self._core_slices(r), self.hidden_dropout2(u).unsqueeze(-1)).squeeze(-1)
        heads = cand_rows
        if self.bn0 is None:
            return matmul_into(v, heads, out)
        s0, b0 = self._bn_affine_params(self.bn0)
        offset = (v * b0).sum(-1) + (t_emb * b1).sum(-1)
        return self.input_dropout(v * s0) @ heads.t() + offset.unsqueeze(1)
