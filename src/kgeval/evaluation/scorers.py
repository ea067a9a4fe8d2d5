"""The scorer protocol, written down in one place, and the adapters.

Everything here is duck-typed: the evaluator asks an object for attributes, never for its class
(``kgeval.models`` and third-party scorers implement the same protocol).

Required
--------
- ``num_entities: int``;
- ``score_tails(heads, relations) -> Tensor (batch, num_entities)``: score of ``(h_i, r_i, e)``
  for every entity ``e``; larger = more plausible;
- ``score_heads(relations, tails) -> Tensor (batch, num_entities)``: score of ``(e, r_i, t_i)``.

Returned scores must be floating point; float16/bfloat16 are widened to float32 and scores on
another device are moved to the evaluation device. A wrong type, shape or dtype raises
:class:`~kgeval.errors.InvalidInputError` naming the method. The evaluator writes into a returned
score tensor only when it holds the tensor's whole storage and the storage is none of the
scorer's own tensors; otherwise (``expand`` views, slices, cached buffers) it works on a copy.

Optional capabilities, each used when present
---------------------------------------------
- ``entities=`` keyword on ``score_tails`` / ``score_heads``: a 1-d int64 tensor of entity ids
  (or a ``slice``); the result has one column per listed entity, in that order. Used for
  restrictions and entity chunks. A scorer whose ``entities=`` only slices whole rows declares
  ``entity_subsets = False`` and is then used like one without the keyword.
- ``out=`` keyword on ``score_tails`` / ``score_heads`` (CPU): a float32 ``(batch, columns)``
  block the scorer may write its scores into (and return); reused between calls.
- ``concurrent_scoring: bool``: True when several threads may score at once (stateless scoring);
  only then does the evaluator score column chunks on several threads.
- ``score_tail_candidates(heads, relations, candidates)`` /
  ``score_head_candidates(relations, tails, candidates)``: ``candidates`` is ``(batch, m)``
  int64, the result ``(batch, m)`` the score of each listed candidate. Used when ranking
  against listed candidates (sampled negatives, given candidates: :mod:`.listed`); without it
  whole rows are scored and the candidates gathered.
- ``score_triples(heads, relations, tails) -> Tensor (batch,)``: a triple scored alone, for the
  consistency check; ``score_head_triples`` (same signature) when head prediction scores the
  true triple differently (models answering ``(?, r, t)`` through an inverse relation, which
  also declare ``inverse_relations = True``).
- ``score_bytes: float``: working memory per score entry beyond the score matrix (a scorer
  broadcasting ``batch x entities x dim`` declares ``dim * itemsize``); added to the batch
  planner's per-score cost.
- ``map_triples(triples, filter_triples) -> (triples, filter_triples)``: turns the caller's
  triples (labels, a PyKEEN ``TriplesFactory``) into id arrays before any check.
- ``device``: where the scorer wants its id tensors and where scoring runs (default: CPU).
- ``num_relations: int``: enables the relation-id range check.
- ``prepare_tails(heads, relations)`` / ``prepare_heads(relations, tails)`` with
  ``score_prepared(prepared, entities=None, out=None)``: queries built once per batch and scored
  chunk by chunk, bit for bit the scores of ``score_tails`` / ``score_heads``; ``prepared.rows(a, b)``
  gives queries ``a:b``, and ``prepared.product(entities)`` returns ``(q, C)`` when the scores are
  the product ``q @ C.T`` (else None).
- ``light_prepare: bool``: declares ``prepare_*`` cheap (DistMult's ``h * r``; TuckER's core
  products are not), so a batch's preparation may run on one thread beside one-thread scoring
  walkers; without the declaration the evaluator decides for itself.

Entity shards (``distributed="entities"``, see :mod:`.distributed`)
-----------------------------------------------------------------
No rank holds the whole entity table; each holds a shard (``model.shard(rank, world)`` of a
built-in model, :func:`kgeval.models.shard_embeddings`, or your own object) with

- ``num_entities``: the number of entities of the *whole* model;
- ``entity_range``: ``(lo, hi)``, the ids held here; must be ``shard_range(num_entities, rank, world)``;
- ``entity_rows(ids) -> (k, w)``: the rows of local entities (global ids) from which any rank forms
  a query on them (an embedding row; same width and float dtype on every rank);
- ``score_tails_from(head_rows, relations, entities=None) -> (b, m)``: scores of ``(h_i, r_i, e)``
  for local entities ``e``, ``h_i`` given by its row; ``entities``: None = every local entity in id
  order, a slice or 1-d tensor of global ids inside ``entity_range``;
- ``score_heads_from(relations, tail_rows, entities=None) -> (b, m)``: likewise for ``(e, r_i, t_i)``;
- optionally ``num_relations``, ``device``, ``score_bytes``, ``out=`` and ``concurrent_scoring`` as
  above, ``prepare_tails_from`` / ``prepare_heads_from`` with ``score_prepared_from`` (prepared
  queries, as above), and ``replicated_digest() -> str``: a hash of the parameters every rank
  holds (relations, configuration), compared at the start. Without it the ranks compare the float
  tensors of the shard that are not entity rows (:func:`.distributed.replicated_tensors`); a shard
  holding none is not checked, with a warning.

A shard range other than ``shard_range(n, rank, world)``, rows of another width or dtype, another
``replicated_digest()`` (or other replicated tensors) or another ``num_entities`` fail at the start
with :class:`~kgeval.evaluation.distributed.DistributedMismatchError` on every rank; more ranks than
entities with :class:`~kgeval.evaluation.distributed.TooManyRanksError`.

Adapters: :class:`FunctionScorer` (a plain ``fn(h, r, t)``) and :class:`PyKEENScorer` (a PyKEEN
model, :mod:`.pykeen_scorer`); :func:`as_scorer` wraps a PyKEEN model and refuses anything else.

Examples
--------
>>> import torch
>>> from kgeval.evaluation.scorers import FunctionScorer
>>> s = FunctionScorer(lambda h, r, t: (h == t).float(), num_entities=3)
>>> s.score_tails(torch.tensor([1]), torch.tensor([0])).tolist()
[[0.0, 1.0, 0.0]]
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import torch

from ..errors import InvalidInputError
from .pykeen_scorer import PyKEENScorer, is_pykeen_model, is_triples_factory

__all__ = ["Scorer", "FunctionScorer", "PyKEENScorer", "accepts_entities", "accepts_keyword", "as_scorer",
           "is_pykeen_model", "is_triples_factory"]


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
