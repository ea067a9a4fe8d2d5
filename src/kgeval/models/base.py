"""The :class:`Model` base class: a ``torch.nn.Module`` that is also a kgeval scorer.

A scorer answers three questions, all with "larger = more plausible":

- ``score_tails(heads, relations, entities=None) -> (batch, num_candidates)`` for ``(h, r, ?)``
- ``score_heads(relations, tails, entities=None) -> (batch, num_candidates)`` for ``(?, r, t)``
- ``score_triples(heads, relations, tails) -> (batch,)``

``entities`` restricts the candidate columns (``None`` = all entities in id order, a
``slice`` or an index tensor = exactly those entities in that order). Subclasses implement
``_score_tails``/``_score_heads``/``_score_triples`` on validated index tensors; the 1-to-all
paths use matrix products so that no ``batch x entities x dim`` tensor is ever built (the
L1-distance variants, which have no such identity, are evaluated in bounded chunks instead,
see :func:`chunked_pairwise`).

A batch scored against many candidate slices (the evaluator's entity chunks) can be prepared once:
``score_prepared(prepare_tails(heads, relations), entities, out)`` gives the scores of
``score_tails`` bit for bit without re-checking the ids and rebuilding the query vectors per slice;
the prepared queries (:class:`PreparedQueries`) also give any contiguous range of their rows
prepared (``prepared.rows(a, b)``: the evaluator's row groups of a batch). Product models define
``_tail_query`` / ``_head_query`` next to ``_tails_from`` / ``_heads_from`` (which are then
``matmul_into(query, candidates, out)``); the others are prepared up to their rows.

With ``inverse_relations=True`` the model holds ``2R`` relation embeddings: relation
``r + R`` is the inverse of ``r`` and head prediction ``(?, r, t)`` is answered as tail
prediction ``(t, r + R, ?)`` (PyKEEN's approach). ``score_triples`` always scores the triple
as given, so ``score_heads(r, t)[:, h] == score_triples(t, r + R, h)`` in that mode.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from .._tensor import matmul_into, state_digest  # public here too (models and their users import them)
from .._validation import check_positive_int
from ..errors import InvalidInputError

# Upper bound on the number of floats of one (batch, chunk, dim) block in the chunked paths.
CHUNK_ELEMENTS = 1 << 22

Candidates = "torch.Tensor | slice | None"


def chunked_pairwise(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], batch: int, n: int, dim: int
) -> torch.Tensor:
    """Evaluate ``fn(lo, hi) -> (batch, hi - lo)`` over candidate blocks and concatenate.

    Used where no matmul identity exists (L1 distances): each block materialises at most
    ``CHUNK_ELEMENTS`` floats, so memory stays bounded for any number of entities.
    """
    step = max(1, CHUNK_ELEMENTS // max(1, batch * dim))
    if step >= n:
        return fn(0, n)
    return torch.cat([fn(lo, min(n, lo + step)) for lo in range(0, n, step)], dim=1)


def neg_l2_distance(queries: torch.Tensor, candidates: torch.Tensor, candidate_sq: torch.Tensor | None = None):
    """``-||q_i - c_j||_2`` for all pairs via ``||q||^2 + ||c||^2 - 2 q.c`` (one matmul).

    ``queries``: (b, d), ``candidates``: (n, d) -> (b, n). The clamp guards against tiny
    negative values from cancellation; its floor keeps the sqrt gradient finite at 0.
    """
    q_sq = (queries * queries).sum(-1, keepdim=True)
    if candidate_sq is None:
        candidate_sq = squared_norms(candidates)
    sq = q_sq + candidate_sq.unsqueeze(0) - 2.0 * queries @ candidates.t()
    return -sq.clamp_min(1e-12).sqrt()


def squared_norms(rows: torch.Tensor) -> torch.Tensor:
    """``(rows * rows).sum(-1)``, in blocks of ``CHUNK_ELEMENTS`` for a large table (a whole-table
    temporary would double the memory of a memory-mapped entity table, see :mod:`.embeddings`)."""
    n, d = rows.shape
    if n * d <= CHUNK_ELEMENTS:
        return (rows * rows).sum(-1)
    step = max(1, CHUNK_ELEMENTS // max(1, d))
    out = torch.empty(n, dtype=rows.dtype, device=rows.device)
    for lo in range(0, n, step):
        block = rows[lo:lo + step]
        out[lo:lo + step] = (block * block).sum(-1)
    return out


def neg_l1_distance(queries: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """``-||q_i - c_j||_1`` for all pairs (no matmul identity for L1).

    ``torch.cdist(p=1)`` computes it without a ``(b, n, d)`` tensor and is ~3x faster than
    broadcasting on CPU; it is still called in candidate chunks to bound any workspace.
    """
    b, d = queries.shape

    def block(lo: int, hi: int) -> torch.Tensor:
        return -torch.cdist(queries, candidates[lo:hi], p=1)

    return chunked_pairwise(block, b, candidates.shape[0], d)


class PreparedQueries:
    """Queries prepared once (:meth:`Model.prepare_tails` / :meth:`Model.prepare_heads`, an entity
    shard's ``prepare_*_from``): ``prepared(candidates, out)`` scores them all, as
    ``fn(candidates, out, *tensors)``; row ``i`` of every tensor belongs to query ``i``, so
    :meth:`rows` gives a range of the queries prepared without preparing anything again."""

    __slots__ = ("_fn", "_tensors")

    def __init__(self, fn: Callable, *tensors: torch.Tensor):
        self._fn, self._tensors = fn, tensors

    def __call__(self, candidates, out: torch.Tensor | None = None) -> torch.Tensor:
        return self._fn(candidates, out, *self._tensors)

    def rows(self, a: int, b: int) -> "PreparedQueries":
        """The queries ``a:b`` (views of these rows: the same query numbers; their scores are those
        rows of the whole batch's up to the product's rounding, which may depend on the row count)."""
        return PreparedQueries(self._fn, *(t[a:b] for t in self._tensors))

    def on(self, candidates_of: Callable) -> "PreparedQueries":
        """These queries scored against ``candidates_of(candidates)`` (e.g. the rows of candidate ids)."""
        fn = self._fn
        return PreparedQueries(lambda cand, out, *ts: fn(candidates_of(cand), out, *ts), *self._tensors)


def _product(cand_rows: torch.Tensor, out, q: torch.Tensor) -> torch.Tensor:
    return matmul_into(q, cand_rows, out)


def _defined_together(cls, method: str, query: str) -> bool:
    """Whether the class that defines ``method`` for ``cls`` (first in the MRO) also defines ``query``:
    then ``method`` is ``matmul_into(query(...), candidates, out)`` by that class's contract, and a
    subclass that overrides ``method`` alone is never bypassed by a prepared ``query``."""
    for klass in cls.__mro__:
        if method in vars(klass):
            return query in vars(klass)
    return False


def _as_index(values, name: str, upper: int, device) -> torch.Tensor:
    """Validate a 1-d integer index tensor with values in ``[0, upper)``."""
    if not isinstance(values, torch.Tensor):
        try:
            values = torch.as_tensor(values)
        except Exception as exc:
            raise InvalidInputError(f"{name} must be a 1-d integer tensor, got {type(values).__name__}") from exc
    if values.dim() != 1:
        raise InvalidInputError(f"{name} must be 1-dimensional, got shape {tuple(values.shape)}")
    if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
        raise InvalidInputError(f"{name} must hold integer ids, got dtype {values.dtype}")
    values = values.to(device=device, dtype=torch.long)
    if values.numel() and (int(values.min()) < 0 or int(values.max()) >= upper):
        raise InvalidInputError(
            f"{name} ids must lie in [0, {upper}), got range [{int(values.min())}, {int(values.max())}]"
        )
    return values


class Model(nn.Module):
    """Base class of all kgeval embedding models (see the module docstring for the contract)."""

    #: registry name, lower case
    name: ClassVar[str] = ""
    #: whether 1-to-all scoring is a cheap matmul (sLCWA then gathers negatives from it)
    one_to_all_is_cheap: ClassVar[bool] = True
    #: scorer capability: preparing a batch of queries (:meth:`prepare_tails`) is light (an elementwise
    #: product or a gather), so the evaluator's walkers may run it on one thread; a model whose
    #: preparation is a heavy product (TuckER's core tensor) sets False and keeps the caller's threads
    light_prepare: ClassVar[bool] = True

    def __init__(self, num_entities: int, num_relations: int, *, dim: int, inverse_relations: bool = False):
        super().__init__()
        num_entities, num_relations, dim = (check_positive_int(label, value) for label, value in (
            ("num_entities", num_entities), ("num_relations", num_relations), ("dim", dim)))
        if not isinstance(inverse_relations, bool):
            raise InvalidInputError(f"inverse_relations must be True or False, got {inverse_relations!r}")
        self.num_entities = num_entities
        self.num_relations = num_relations
        self.dim = dim
        self.inverse_relations = inverse_relations
        #: relation embeddings held: R, or 2R with inverse relations
        self.num_relation_embeddings = 2 * num_relations if inverse_relations else num_relations
        #: model-specific constructor keywords, stored in saved files (set by subclasses)
        self.hparams: dict[str, Any] = {}
        #: labels of the training data's entity / relation ids, set by load_model when recorded
        self.entity_labels: list[str] | None = None
        self.relation_labels: list[str] | None = None

    # ------------------------------------------------------------------ public scorer API
    @property
    def concurrent_scoring(self) -> bool:
        """Whether several threads may score at once (the evaluator's chunk walkers): in eval mode
        (training-mode dropout / batch norm would update state from several threads)."""
        return not self.training

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def score_tails(self, heads, relations, entities=None, out=None) -> torch.Tensor:
        """Scores of ``(h, r, e)`` for every candidate ``e``: shape (batch, num_candidates).

        ``out``: an optional tensor of that shape the scores may be written into (the result is
        then ``out`` itself); models whose last step is not a matrix product ignore it.
        """
        return self.score_prepared(self.prepare_tails(heads, relations), entities, out)

    def score_heads(self, relations, tails, entities=None, out=None) -> torch.Tensor:
        """Scores of ``(e, r, t)`` for every candidate ``e``: shape (batch, num_candidates).

        With inverse relations this is ``score_tails(tails, relations + R, entities)``; ``out`` as there.
        """
        return self.score_prepared(self.prepare_heads(relations, tails), entities, out)

    def prepare_tails(self, heads, relations):
        """The tail queries ``(h, r)`` prepared once for scoring against several candidate slices with
        :meth:`score_prepared`: ids checked, query entity rows gathered and, for a model whose scores
        are a product ``q @ candidates.T`` (DistMult, ComplEx, TuckER), the query vectors ``q`` built.
        The evaluator scores a batch chunk by chunk; rebuilding the queries per chunk cost ~10% of a
        1,024 x 4,096 DistMult block. The scores are bit for bit those of :meth:`score_tails`."""
        h = _as_index(heads, "heads", self.num_entities, self.device)
        r = _as_index(relations, "relations", self.num_relation_embeddings, self.device)
        self._same_length(h, r)
        return self._prepared("tails", h, r)

    def prepare_heads(self, relations, tails):
        """The head queries ``(r, t)`` prepared once, as :meth:`prepare_tails`."""
        r = _as_index(relations, "relations", self.num_relations, self.device)
        t = _as_index(tails, "tails", self.num_entities, self.device)
        self._same_length(r, t)
        if self.inverse_relations:
            return self._prepared("tails", t, r + self.num_relations)
        return self._prepared("heads", t, r)

    def score_prepared(self, prepared, entities=None, out=None) -> torch.Tensor:
        """Scores of prepared queries (:meth:`prepare_tails` / :meth:`prepare_heads`) against
        ``entities`` (as in :meth:`score_tails`); ``out`` as there."""
        return prepared(self._candidates(entities), out)

    def _prepared(self, side: str, anchor: torch.Tensor, r: torch.Tensor):
        """``(candidate spec, out) -> scores`` of the queries ``(anchor, r)`` predicting ``side``
        ("tails": anchor = heads; "heads": anchor = tails), by the same arithmetic as
        ``_score_tails`` / ``_score_heads``."""
        score = "_score_tails" if side == "tails" else "_score_heads"
        if getattr(type(self), score) is not getattr(Model, score):  # a subclass scoring its own way: per call
            method = getattr(self, score)
            if side == "tails":
                return PreparedQueries(lambda cand, out, a, rr: method(a, rr, cand, out), anchor, r)
            return PreparedQueries(lambda cand, out, rr, a: method(rr, a, cand, out), r, anchor)
        weight = self.entity.weight
        return self._query_scorer(side, self.entity(anchor), r).on(lambda cand: self._rows(weight, cand))

    def _query_scorer(self, side: str, rows: torch.Tensor, r: torch.Tensor) -> PreparedQueries:
        """``(candidate rows, out) -> scores`` of the queries with entity rows ``rows`` (heads for
        "tails", tails for "heads"): ``_tails_from`` / ``_heads_from`` with the query vectors built
        once where the class defining them also defines ``_tail_query`` / ``_head_query``."""
        rows_fn, query_fn = ("_tails_from", "_tail_query") if side == "tails" else ("_heads_from", "_head_query")
        args = (rows, r) if side == "tails" else (r, rows)
        if _defined_together(type(self), rows_fn, query_fn):
            return PreparedQueries(_product, getattr(self, query_fn)(*args))
        method = getattr(self, rows_fn)
        return PreparedQueries(lambda cand_rows, out, *ts: method(*ts, cand_rows, out=out), *args)

    def score_triples(self, heads, relations, tails) -> torch.Tensor:
        """Scores of the given triples: shape (batch,)."""
        h = _as_index(heads, "heads", self.num_entities, self.device)
        r = _as_index(relations, "relations", self.num_relation_embeddings, self.device)
        t = _as_index(tails, "tails", self.num_entities, self.device)
        self._same_length(h, r, t)
        return self._score_triples(h, r, t)

    def score_relations(self, heads, tails) -> torch.Tensor:
        """Scores of ``(h, r, t)`` for every relation ``r``: shape (batch, num_relations), the forward relations
        only with inverse relations (relation prediction, :mod:`kgeval.evaluation.relations`).

        One product where the interaction allows (``_relations_from``), else ``score_triples`` of the
        expanded triples; in blocks of pairs of at most ``CHUNK_ELEMENTS`` floats of temporaries.

        Examples
        --------
        >>> import numpy as np
        >>> from kgeval.models import from_embeddings
        >>> m = from_embeddings("distmult", np.ones((3, 2)), np.array([[1.0, 0.0], [2.0, 2.0]]))
        >>> m.score_relations([0], [1]).tolist()
        [[1.0, 4.0]]
        """
        h = _as_index(heads, "heads", self.num_entities, self.device)
        t = _as_index(tails, "tails", self.num_entities, self.device)
        self._same_length(h, t)
        width = self.num_relations * max(self.dim, int(getattr(self, "relation_dim", 0) or 0))
        step = max(1, CHUNK_ELEMENTS // max(1, width))  # pairs per block
        if step >= h.shape[0]:
            return self._relations_from(h, t)
        return torch.cat([self._relations_from(h[lo:lo + step], t[lo:lo + step]) for lo in range(0, h.shape[0], step)])

    def _relations_from(self, h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``(len(h), num_relations)`` scores of the pairs ``(h, t)`` (ids): ``_score_triples`` of each
        ``(h, r, t)``; product models override it with one product against the forward relation rows."""
        nr = self.num_relations
        r = torch.arange(nr, device=h.device).repeat(h.shape[0])
        return self._score_triples(h.repeat_interleave(nr), r, t.repeat_interleave(nr)).view(-1, nr)

    def factors(self, heads: torch.Tensor, relations: torch.Tensor, tails: torch.Tensor) -> list[torch.Tensor]:
        """Embedding tensors of a batch of triples, for L2/N3 regularisation.

        Default: the raw head, relation and tail embedding rows. ComplEx overrides this
        with complex moduli (N3 as in Lacroix et al., 2018).
        """
        return [self.entity_embeddings(heads), self.relation_embeddings(relations), self.entity_embeddings(tails)]

    def post_parameter_update(self) -> None:
        """Hook called after every optimiser step (e.g. TransE's unit-norm constraint)."""

    # ------------------------------------------------------------------ persistence
    def config(self) -> dict[str, Any]:
        from .._version import __version__

        return {
            "name": self.name,
            "num_entities": self.num_entities,
            "num_relations": self.num_relations,
            "dim": self.dim,
            "inverse_relations": self.inverse_relations,
            "kwargs": dict(self.hparams),
            "kgeval_version": __version__,
        }

    def save(self, path, *, entity_labels=None, relation_labels=None) -> None:
        """Write a plain dict ``{"format", "config", "state_dict"[, "labels"]}`` with ``torch.save``.

        Only tensors and primitives are stored, so :func:`kgeval.models.load_model` can
        read it back with ``weights_only=True`` (no code is executed on load). The labels of
        the training dataset's ids, when given, let a later evaluation check that it uses the
        same label -> id maps. ``sha256`` (:func:`state_digest`) lets loading detect changed
        weights even outside a run directory. The file is replaced atomically.
        """
        from .._json import atomic_path, torch_save

        state = {k: v.detach().cpu() for k, v in self.state_dict().items()}
        blob = {"format": "kgeval-model", "config": self.config(), "state_dict": state,
                "sha256": state_digest(state)}
        if entity_labels is not None or relation_labels is not None:
            blob["labels"] = {"entities": None if entity_labels is None else [str(x) for x in entity_labels],
                              "relations": None if relation_labels is None else [str(x) for x in relation_labels]}
        with atomic_path(path) as tmp:
            torch_save(blob, tmp)  # a full disk is named, not torch's opaque RuntimeError

    def extra_repr(self) -> str:
        return (
            f"num_entities={self.num_entities}, num_relations={self.num_relations}, dim={self.dim}, "
            f"inverse_relations={self.inverse_relations}"
            + "".join(f", {k}={v!r}" for k, v in self.hparams.items())
        )

    # ------------------------------------------------------------------ helpers for subclasses
    def _candidates(self, entities):
        """Normalise ``entities`` to ``None`` (all), a ``slice`` or a validated index tensor."""
        if entities is None:
            return None
        if isinstance(entities, slice):
            start, stop, step = entities.indices(self.num_entities)
            if step != 1:
                return torch.arange(start, stop, step, device=self.device)
            return slice(start, max(start, stop))
        return _as_index(entities, "entities", self.num_entities, self.device)

    @staticmethod
    def _rows(weight: torch.Tensor, candidates) -> torch.Tensor:
        """Rows of an embedding matrix selected by a candidate spec."""
        if candidates is None:
            return weight
        if isinstance(candidates, slice):
            return weight[candidates]
        return weight.index_select(0, candidates)

    @staticmethod
    def _same_length(*tensors: torch.Tensor) -> None:
        if len({t.shape[0] for t in tensors}) > 1:
            raise InvalidInputError(f"index tensors must have equal lengths, got {[t.shape[0] for t in tensors]}")

    def entity_embeddings(self, idx: torch.Tensor) -> torch.Tensor:  # pragma: no cover - overridden
        raise NotImplementedError

    def relation_embeddings(self, idx: torch.Tensor) -> torch.Tensor:  # pragma: no cover - overridden
        raise NotImplementedError

    def _score_tails(self, h: torch.Tensor, r: torch.Tensor, cand, out=None) -> torch.Tensor:
        return self._tails_from(self.entity(h), r, self._rows(self.entity.weight, cand), out=out)

    def _score_heads(self, r: torch.Tensor, t: torch.Tensor, cand, out=None) -> torch.Tensor:
        return self._heads_from(r, self.entity(t), self._rows(self.entity.weight, cand), out=out)

    # The 1-to-all scores from the query entity's embedding rows and the candidates' rows: the
    # built-in models implement these (``_score_tails``/``_score_heads`` above look both up in
    # ``self.entity``); an entity shard (:meth:`shard`) passes rows it received from other ranks.
    # ``out`` as in :meth:`score_tails` (:func:`matmul_into`; may be ignored).
    def _tails_from(self, h_rows: torch.Tensor, r: torch.Tensor, cand_rows: torch.Tensor, out=None) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover

    def _heads_from(self, r: torch.Tensor, t_rows: torch.Tensor, cand_rows: torch.Tensor, out=None) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover

    def shard(self, rank: int, world: int):
        """This model's entity shard for rank ``rank`` of ``world`` (``distributed="entities"``).

        The shard (:class:`kgeval.models.EntityShard`) holds a copy of the entity rows
        ``[n * rank // world, n * (rank + 1) // world)`` and the model's other parameters (relations,
        TuckER's core and batch norms); once it exists the full model can be dropped.
        """
        from .shard import shard_model

        return shard_model(self, rank, world)

    def _score_triples(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


def check_norm(p) -> int:
    if p not in (1, 2) or isinstance(p, bool):
        raise InvalidInputError(f"p (the distance norm) must be 1 or 2, got {p!r}")
    return int(p)


def check_nonnegative(name: str, value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"{name} must be a finite non-negative number, got {value!r}")
    return value
