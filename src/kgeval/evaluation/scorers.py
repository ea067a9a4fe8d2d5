"""The scorer protocol and adapters.

A *scorer* is any object with

- ``num_entities: int``;
- ``score_tails(heads, relations) -> Tensor (batch, num_entities)``: score of ``(h_i, r_i, e)``
  for every entity ``e``; larger = more plausible;
- ``score_heads(relations, tails) -> Tensor (batch, num_entities)``: score of ``(e, r_i, t_i)``.

Optional extras, used by the evaluator when present:

- an ``entities`` keyword on ``score_tails`` / ``score_heads``: ``entities`` is a 1-d int64
  tensor of entity ids (or a ``slice``) and the result has one column per listed entity, in
  that order. Used to score only the entities of a restriction instead of masking full rows.
  A scorer whose ``entities=`` only slices whole rows declares ``entity_subsets = False``:
  it is then used like a scorer without the keyword (whole rows, no entity chunks).
- ``score_tail_candidates(heads, relations, candidates)`` /
  ``score_head_candidates(relations, tails, candidates)``: ``candidates`` is a ``(batch, m)``
  int64 tensor, the result ``(batch, m)`` holds the score of each listed candidate. Used by
  sampled evaluation, so only the sampled candidates are scored.
- ``score_triples(heads, relations, tails) -> Tensor (batch,)``: used by the consistency check.
- ``score_head_triples(heads, relations, tails) -> Tensor (batch,)``: the score head prediction
  gives the true triple, when it differs from ``score_triples`` (models answering ``(?, r, t)``
  through an inverse relation); used by the consistency check of head prediction.
- ``score_bytes: float``: working memory per score entry beyond the score matrix itself (a
  scorer that broadcasts ``batch x entities x dim`` declares ``dim * itemsize``); the batch
  size planner adds it to its per-score cost.
- ``num_relations: int``: enables the relation-id range check.

Returned scores may be float16/bfloat16 (widened to float32) and on any device (moved to the
evaluation device). The evaluator writes into a returned score tensor only when it holds the
tensor's whole storage and the storage is none of the scorer's own tensors; otherwise (``expand``
views, slices, cached buffers) it works on a copy.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import torch

from .._tensor import matmul_into
from ..errors import InvalidInputError
from ..interop.pykeen import PyKEENScorer, is_pykeen_model

__all__ = ["Scorer", "FunctionScorer", "DistMultScorer", "PyKEENScorer", "accepts_entities", "accepts_keyword", "as_scorer"]


@runtime_checkable
class Scorer(Protocol):
    num_entities: int

    def score_tails(self, heads: torch.Tensor, relations: torch.Tensor) -> torch.Tensor: ...

    def score_heads(self, relations: torch.Tensor, tails: torch.Tensor) -> torch.Tensor: ...


def accepts_entities(method) -> bool:
    """Whether a scoring method takes an ``entities=`` keyword (entity-subset scoring)."""
    return accepts_keyword(method, "entities")


def accepts_keyword(method, keyword: str) -> bool:
    """Whether a scoring method takes the keyword ``keyword`` (e.g. ``out=``, a reusable score block)."""
    func = getattr(method, "__func__", None)  # a bound method: its function's parameters, looked up once
    if func is not None and getattr(method, "__self__", None) is not None and inspect.isfunction(func):
        return keyword in _parameters(func)
    return keyword in _signature_parameters(method)


def _signature_parameters(method) -> frozenset:
    try:
        return frozenset(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return frozenset()


_PARAMETERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # function -> its parameter names


def _parameters(func) -> frozenset:
    """The parameter names of a plain function (cached: ``inspect.signature`` took ~0.1 ms per call,
    four calls per evaluation, ~0.5% of a 10^4-entity evaluation). Weakly: a cached function (and what it
    closes over, e.g. a scorer class made per trial and its model) is freed with its class."""
    params = _PARAMETERS.get(func)
    if params is None:
        params = _PARAMETERS[func] = _signature_parameters(func)
    return params


def _entity_ids(entities, num_entities: int, device) -> torch.Tensor:
    if entities is None:
        return torch.arange(num_entities, device=device)
    if isinstance(entities, slice):
        return torch.arange(num_entities, device=device)[entities]
    return torch.as_tensor(entities, dtype=torch.long, device=device)


class FunctionScorer:
    """Adapter for a plain function ``fn(h, r, t) -> scores`` over broadcast id tensors.

    ``score_tails(h, r)`` calls ``fn(h[:, None], r[:, None], entities[None, :])`` and expects a
    ``(batch, num_entities)`` result; likewise for heads, candidates and single triples.
    """

    def __init__(self, fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor], num_entities: int,
                 num_relations: int | None = None, device=None):
        self.fn = fn
        self.num_entities = int(num_entities)
        if num_relations is not None:
            self.num_relations = int(num_relations)
        self.device = torch.device(device) if device is not None else torch.device("cpu")

    def score_tails(self, heads, relations, entities=None):
        ent = _entity_ids(entities, self.num_entities, heads.device)
        return self.fn(heads[:, None], relations[:, None], ent[None, :])

    def score_heads(self, relations, tails, entities=None):
        ent = _entity_ids(entities, self.num_entities, tails.device)
        return self.fn(ent[None, :], relations[:, None], tails[:, None])

    def score_tail_candidates(self, heads, relations, candidates):
        return self.fn(heads[:, None], relations[:, None], candidates)

    def score_head_candidates(self, relations, tails, candidates):
        return self.fn(candidates, relations[:, None], tails[:, None])

    def score_triples(self, heads, relations, tails):
        return self.fn(heads, relations, tails)


class DistMultScorer:
    """Reference DistMult scorer: ``score(h, r, t) = sum_i e_h[i] * w_r[i] * e_t[i]``.

    All-entity scoring is one matrix product ``(e_h * w_r) @ E^T``; used by the tests (with
    integer embeddings, so every score is exact) and the benchmark.
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


def as_scorer(obj):
    """Return ``obj`` as a scorer: scorers pass through, PyKEEN models are wrapped, anything else
    raises :class:`~kgeval.errors.InvalidInputError`."""
    if hasattr(obj, "score_tails") or hasattr(obj, "score_heads"):
        return obj
    if is_pykeen_model(obj):
        return PyKEENScorer(obj)
    if hasattr(obj, "entity_range") and hasattr(obj, "entity_rows"):
        raise InvalidInputError(
            f"{type(obj).__name__} is an entity shard (entities {tuple(obj.entity_range)} of {obj.num_entities}): "
            "it scores only its own entities; evaluate it with distributed='entities' under torchrun"
        )
    raise InvalidInputError(
        f"{type(obj).__name__} is not a scorer: it needs num_entities, score_tails(heads, relations) and "
        "score_heads(relations, tails) (see kgeval.evaluation.scorers), or must be a PyKEEN model"
    )


@contextmanager
def eval_mode(scorer):
    """Run the block with ``scorer`` (and the model it wraps, ``scorer.model``) in eval mode where
    they are torch modules, restoring every submodule's own mode afterwards.

    An evaluation needs deterministic scores: a model left in training mode (a fresh
    ``get_model(...)``, or one evaluated between training epochs by the user) ran its dropout and
    updated its batch-norm statistics with the evaluation's batches -- a TuckER's Nations MRR came out
    0.4055, then 0.3926, for the same weights (0.4146 in eval mode) with only a consistency warning."""
    modules = {id(obj): obj for obj in (scorer, getattr(scorer, "model", None)) if isinstance(obj, torch.nn.Module)}
    states = [(m, m.training) for obj in modules.values() for m in obj.modules() if m.training]
    for obj in modules.values():
        if any(m.training for m in obj.modules()):
            obj.eval()
    try:
        yield
    finally:
        for m, mode in states:
            m.training = mode
