"""Entity shards of kgeval models, for ``kgeval.evaluate(..., distributed="entities")``.

An :class:`EntityShard` wraps a model built on the rows ``[lo, hi)`` of the entity table only
(``lo = n * rank // world``, ``hi = n * (rank + 1) // world``, see
:func:`kgeval._partition.shard_range`) and speaks the entity-shard scorer protocol
of :mod:`kgeval.evaluation.distributed`. Three ways to get one:

- ``model.shard(rank, world)`` of any built-in model (TransE, DistMult, ComplEx, RotatE, TuckER,
  PairRE): copies the local entity rows, keeps the other parameters;
- :func:`~kgeval.models.shard_embeddings` ``(interaction, entity, relation, rank=, world=)``: like
  :func:`~kgeval.models.from_embeddings`, slicing the entity matrix (a ``np.load(mmap_mode="r")``
  array or a path to a ``.npy`` file is sliced before anything is read);
- ``load_model(path, shard=(rank, world))``: from a saved model file, memory-mapped, copying only
  the local entity rows (what ``kgeval evaluate --distributed entities`` does);
- ``EntityShard(local_model, entity_offset=lo, num_entities=n)``: a built-in model you built
  yourself on the local rows only.
"""

from __future__ import annotations

import torch
from torch import nn

from .._partition import shard_range as _shard_range
from .._tensor import state_digest
from ..errors import InvalidInputError
from .base import Model, _as_index

__all__ = ["EntityShard", "shard_model"]


class EntityShard(nn.Module):
    """The entity rows ``[entity_offset, entity_offset + local.num_entities)`` of a model of
    ``num_entities`` entities; scores queries (whose entity rows come from any rank) against them.

    ``num_entities`` is the whole model's; ``entity_range`` the ``[lo, hi)`` held here. Scoring
    goes through :meth:`score_tails_from` / :meth:`score_heads_from`, which run the model's own
    arithmetic (``Model._tails_from`` / ``_heads_from``) on the given query rows and the local
    candidate rows, so a score equals the unsharded model's for the same inputs.
    """

    def __init__(self, local: Model, *, entity_offset: int, num_entities: int):
        super().__init__()
        if not isinstance(local, Model) or type(local)._tails_from is Model._tails_from:
            raise InvalidInputError(f"EntityShard needs a kgeval built-in model (with _tails_from / _heads_from), "
                                    f"got {type(local).__name__}")
        lo, n = int(entity_offset), int(num_entities)
        if lo < 0 or lo + local.num_entities > n:
            raise InvalidInputError(f"entity rows [{lo}, {lo + local.num_entities}) do not lie in [0, {n})")
        self.local = local
        self.num_entities = n
        self.num_relations = local.num_relations
        self.inverse_relations = local.inverse_relations
        self.name = local.name
        #: ``[lo, hi)``: the global entity ids held here
        self.entity_range = (lo, lo + local.num_entities)

    @property
    def device(self) -> torch.device:
        return self.local.device

    def extra_repr(self) -> str:
        return f"entity_range={self.entity_range}, num_entities={self.num_entities}"

    def replicated_digest(self) -> str:
        """SHA-256 of every parameter except the entity rows (relations, TuckER's core, batch norms)
        and the model's configuration: the same on every rank of one model (checked at the start)."""
        state = {k: v for k, v in self.local.state_dict().items() if k != "entity.weight"}
        cfg = {k: v for k, v in self.local.config().items() if k != "num_entities"}
        return f"{sorted(cfg.items())!r}:{state_digest(state)}"

    def entity_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The embedding rows of the local entities ``ids`` (global ids in ``entity_range``)."""
        lo, hi = self.entity_range
        idx = _as_index(ids, "entity ids", hi, self.device)
        if idx.numel() and int(idx.min()) < lo:
            raise InvalidInputError(f"entity id {int(idx.min())} is not held by this shard {self.entity_range}")
        return self.local.entity.weight.index_select(0, idx - lo)

    def _local(self, entities):
        """Candidate rows of the local entities given as global ids (None = all local, in id order)."""
        lo, hi = self.entity_range
        w = self.local.entity.weight
        if entities is None:
            return w
        if isinstance(entities, slice):
            start, stop, step = entities.indices(self.num_entities)
            if step == 1 and lo <= start and stop <= hi:
                return w[start - lo:max(start, stop) - lo]
            entities = torch.arange(start, stop, step, device=w.device)
        idx = _as_index(entities, "entities", hi, w.device)
        if idx.numel() and int(idx.min()) < lo:
            raise InvalidInputError(f"entity id {int(idx.min())} is not held by this shard {self.entity_range}")
        return w.index_select(0, idx - lo)

    @property
    def concurrent_scoring(self) -> bool:
        """As :attr:`Model.concurrent_scoring` of the local model."""
        return not self.local.training

    @property
    def light_prepare(self) -> bool:
        """As :attr:`Model.light_prepare` of the local model."""
        return bool(getattr(self.local, "light_prepare", False))

    def score_tails_from(self, head_rows: torch.Tensor, relations, entities=None, out=None) -> torch.Tensor:
        """Scores of ``(h_i, r_i, e)``, ``h_i`` given by its entity row, for the local entities ``e``
        (``out``: a block the scores may be written into, as in :meth:`Model.score_tails`)."""
        return self.score_prepared_from(self.prepare_tails_from(head_rows, relations), entities, out)

    def score_heads_from(self, relations, tail_rows: torch.Tensor, entities=None, out=None) -> torch.Tensor:
        """Scores of ``(e, r_i, t_i)``, ``t_i`` given by its entity row, for the local entities ``e``."""
        return self.score_prepared_from(self.prepare_heads_from(relations, tail_rows), entities, out)


    def prepare_tails_from(self, head_rows: torch.Tensor, relations):
        """:meth:`score_tails_from`'s queries prepared once for several local slices
        (:meth:`score_prepared_from`; as :meth:`Model.prepare_tails`, bit for bit the same scores)."""
        m = self.local
        r = _as_index(relations, "relations", m.num_relation_embeddings, m.device)
        return m._query_scorer("tails", head_rows.to(m.device), r)

    def prepare_heads_from(self, relations, tail_rows: torch.Tensor):
        """:meth:`score_heads_from`'s queries prepared once (see :meth:`prepare_tails_from`)."""
        m = self.local
        r = _as_index(relations, "relations", m.num_relations, m.device)
        rows = tail_rows.to(m.device)
        if m.inverse_relations:
            return m._query_scorer("tails", rows, r + m.num_relations)
        return m._query_scorer("heads", rows, r)

    def score_prepared_from(self, prepared, entities=None, out=None) -> torch.Tensor:
        """Scores of prepared queries against the local ``entities`` (as :meth:`score_tails_from`)."""
        return prepared(self._local(entities), out)


def shard_model(model: Model, rank: int, world: int) -> EntityShard:
    """:meth:`Model.shard`: a new model of the same class on the local entity rows only."""
    if not isinstance(model, Model) or type(model)._tails_from is Model._tails_from:
        raise InvalidInputError(f"{type(model).__name__} cannot be sharded: it needs _tails_from / _heads_from")
    lo, hi = _shard_range(model.num_entities, rank, world)
    local = type(model)(hi - lo, model.num_relations, dim=model.dim, inverse_relations=model.inverse_relations,
                        **model.hparams)
    state = {k: (v[lo:hi] if k == "entity.weight" else v) for k, v in model.state_dict().items()}
    local.load_state_dict(state)
    local.to(model.device)
    local.train(model.training)
    return EntityShard(local, entity_offset=lo, num_entities=model.num_entities)
