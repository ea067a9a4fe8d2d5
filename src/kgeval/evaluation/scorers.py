"""The scorer protocol, written down in one place, and its adapters (:class:`FunctionScorer`, the
PyKEEN adapter :class:`PyKEENScorer`). Everything is duck-typed: the evaluator asks an object for
attributes, never for its class (``kgeval.models`` and third-party scorers implement the same protocol;
pykeen is never imported).

Required
--------
- ``num_entities: int``;
- ``score_tails(heads, relations) -> Tensor (batch, num_entities)``: score of ``(h_i, r_i, e)`` for
  every entity ``e``, larger = more plausible; ``score_heads(relations, tails)``: of ``(e, r_i, t_i)``.

Scores are floats (half precision widened to float32, moved to the evaluation device); a wrong type,
shape or dtype is an :class:`~kgeval.errors.InvalidInputError` naming the method. A returned tensor is
written into only when the evaluator holds its whole storage and it is none of the scorer's tensors.

Optional capabilities, each used when present
---------------------------------------------
- ``entities=`` on ``score_tails`` / ``score_heads``: a 1-d int64 tensor of ids (or a ``slice``); one
  column per listed entity, in order (restrictions, entity chunks). ``entity_subsets = False``: the
  keyword only slices whole rows, so the scorer is used as one without it.
- ``out=`` (CPU): a float32 ``(batch, columns)`` block the scorer may write into (and return), reused.
- ``concurrent_scoring: bool``: several threads may score at once (only then do several walkers score).
- ``score_tail_candidates(heads, relations, candidates)`` / ``score_head_candidates(relations, tails,
  candidates)``: ``(batch, m)`` scores of listed candidates (:mod:`.listed`; else whole rows gathered).
- ``score_triples(heads, relations, tails) -> (batch,)``: a triple alone (consistency check);
  ``score_head_triples`` when head prediction scores it differently (``inverse_relations = True``).
- ``score_bytes: float``: working memory per score entry beyond the score matrix (batch planner).
- ``map_triples(triples, filter_triples)``: the caller's triples (labels, a ``TriplesFactory``) as ids;
  ``device`` (default CPU); ``num_relations`` (the relation-id range check).
- ``prepare_tails(heads, relations)`` / ``prepare_heads(relations, tails)`` with
  ``score_prepared(prepared, entities=None, out=None)``: queries built once per batch, bit for bit the
  scores of ``score_*``; ``prepared.rows(a, b)`` gives queries ``a:b``. ``light_prepare: bool``
  declares the preparation cheap (it may run beside one-thread walkers).

Entity shards (``distributed="entities"``, see :mod:`.distributed`)
-----------------------------------------------------------------
Each rank holds a shard (``model.shard(rank, world)``, :func:`kgeval.models.shard_embeddings`, or your
own object) with ``num_entities`` (of the whole model); ``entity_range = (lo, hi)``, which must be
``shard_range(num_entities, rank, world)``; ``entity_rows(ids) -> (k, w)``, the rows of local entities
from which any rank forms a query (same width and float dtype on every rank);
``score_tails_from(head_rows, relations, entities=None)`` / ``score_heads_from(relations, tail_rows,
entities=None) -> (b, m)`` against local entities (None: all, in id order; or a slice / tensor of global
ids in the range). Optional: ``num_relations``, ``device``, ``score_bytes``, ``out=``,
``concurrent_scoring``, ``prepare_*_from`` with ``score_prepared_from``, and ``replicated_digest()``, a
hash of what every rank holds (else the float tensors that are not entity rows are compared). Ranks
that disagree fail at the start with :class:`~kgeval.evaluation.distributed.DistributedMismatchError`.

PyKEEN models: ``predict_t`` / ``predict_h`` (subsets only where PyKEEN's own ``Model.predict_*``
compute them) on the real relation ids, ``(?, r, t)`` as ``(t, r⁻¹, ?)`` for inverse-triple models; the
consistency check goes through ``score_hrt``.

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
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from .._compat import is_triples_factory
from ..errors import InvalidInputError

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
    """The parameter names of a plain function, cached weakly (a function made per trial is freed with it)."""
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
    """Adapter for a plain function ``fn(h, r, t) -> scores`` over broadcast id tensors: ``score_tails(h, r)``
    is ``fn(h[:, None], r[:, None], entities[None, :])``; likewise heads, candidates and single triples."""

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


# ------------------------------------------------------------------ PyKEEN models (duck-typed)
_PROBE_COLUMNS = 256


def is_pykeen_model(obj) -> bool:
    """Whether ``obj`` looks like a PyKEEN model (``predict_t``, ``predict_h``, ``score_hrt``)."""
    return all(callable(getattr(obj, m, None)) for m in ("predict_t", "predict_h", "score_hrt")) \
        and hasattr(obj, "num_entities")


def _defined_in(obj, name: str) -> str:
    """The module of the class in ``type(obj)``'s MRO that defines attribute ``name`` ('' if none)."""
    for cls in type(obj).__mro__:
        if name in vars(cls):
            return cls.__module__
    return ""


def _scores_subsets(model) -> bool:
    """Whether ``predict_t(tails=)`` / ``predict_h(heads=)`` score exactly the listed entities: PyKEEN's
    own ``Model.predict_*`` (and ``score_h_inverse``) over ``ERModel``'s ``score_t`` / ``score_h``."""
    return all(_defined_in(model, m) == "pykeen.models.base" for m in ("predict_t", "predict_h", "score_h_inverse")) \
        and all(_defined_in(model, m) == "pykeen.models.nbase" for m in ("score_t", "score_h"))


def _check_representations(model) -> None:
    """Every entity / relation representation has one row per entity / relation of the model: with fewer,
    ``predict_*`` index past the table (IndexError); with more, rows have more columns than entities."""
    for kind, count in (("entity", "num_entities"), ("relation", "num_relations")):
        n = int(getattr(model, count))
        for i, rep in enumerate(getattr(model, f"{kind}_representations", None) or ()):
            rows = getattr(rep, "max_id", None)
            if isinstance(rows, int) and rows != n:
                raise InvalidInputError(
                    f"{type(model).__name__}.{kind}_representations[{i}] ({type(rep).__name__}) has {rows} rows but "
                    f"the model has {count}={n}" + (" (inverse relations included)" if kind == "relation" and getattr(
                        model, "use_inverse_triples", False) else "") + ": the representation was built for "
                    "another triples factory")


def _real_relations(obj) -> int:
    """Relations without inverses: ``num_real_relations`` (models) / ``real_num_relations`` (factories)."""
    for name in ("num_real_relations", "real_num_relations"):
        if hasattr(obj, name):
            return int(getattr(obj, name))
    return int(obj.num_relations)


class PyKEENScorer:
    """Adapter for a PyKEEN model (put in eval mode); ``triples_factory`` (optional) maps labelled triples
    (or a ``TriplesFactory``'s) to ids (:meth:`map_triples`)."""

    def __init__(self, model, triples_factory=None):
        if not is_pykeen_model(model):
            raise InvalidInputError(
                f"{type(model).__name__} is not a PyKEEN model: PyKEENScorer needs predict_t, predict_h and score_hrt")
        inductive = next((c.__name__ for c in type(model).__mro__ if c.__name__ == "InductiveERModel"), None)
        if inductive is not None:  # PyKEEN: 'does not support the transductive setting (i.e., when mode is None)'
            raise InvalidInputError(
                f"{type(model).__name__} is an inductive PyKEEN model ({inductive}): it scores the entities of an "
                "inference graph chosen by mode='training' / 'validation' / 'testing', which kgeval's PyKEEN "
                "adapter does not pass; evaluate it with PyKEEN's evaluator (mode=...) or wrap "
                "predict_t(..., mode=...) / predict_h(..., mode=...) in your own scorer")
        self.model = model
        model.eval()
        self.inverse = bool(getattr(model, "use_inverse_triples", False))
        if self.inverse:
            inverter = type(getattr(model, "relation_inverter", None)).__name__
            if inverter != "DefaultRelationInverter":
                raise InvalidInputError(f"unsupported PyKEEN relation inverter {inverter}: kgeval knows PyKEEN's "
                                        "DefaultRelationInverter (relation r at row 2r, its inverse at 2r + 1)")
        self.num_entities = int(model.num_entities)
        self.num_relations = _real_relations(model)
        _check_representations(model)
        #: predict_* score entity subsets themselves; False: whole rows, then the listed columns
        self.entity_subsets = _scores_subsets(model)
        device = None
        try:
            device = model.device
        except AttributeError:
            pass
        except ValueError as exc:  # PyKEEN's DeviceResolutionError: no parameters or buffers (e.g. its baselines)
            raise InvalidInputError(
                f"{type(model).__name__} has no parameters or buffers, so PyKEEN cannot place it on a device "
                f"({type(exc).__name__}: {exc}): its own predict_t / predict_h (and RankBasedEvaluator) fail on it "
                "too; wrap its score_t / score_h in a kgeval scorer (kgeval.evaluation.scorers)") from None
        self.device = device or torch.device("cpu")
        self.triples_factory = None
        if triples_factory is not None:
            self._check_factory(triples_factory)
            self.triples_factory = triples_factory
        self._score_bytes: float | None = None

    # ------------------------------------------------------------------ scoring (PyKEEN's public path)
    def _ids(self, entities):
        return None if entities is None else _entity_ids(entities, self.num_entities, self.device)

    def score_tails(self, heads, relations, entities=None):
        hr = torch.stack([heads, relations], dim=1).to(self.device)
        if not self.entity_subsets:
            return self._columns(self.model.predict_t(hr), entities)
        return self.model.predict_t(hr, tails=self._ids(entities))

    def score_heads(self, relations, tails, entities=None):
        rt = torch.stack([relations, tails], dim=1).to(self.device)
        if not self.entity_subsets:
            return self._columns(self.model.predict_h(rt), entities)
        return self.model.predict_h(rt, heads=self._ids(entities))

    def _columns(self, rows: torch.Tensor, entities) -> torch.Tensor:
        """The ``entities`` columns of whole score rows (models that cannot score subsets)."""
        if entities is None:
            return rows
        if rows.dim() != 2 or rows.shape[1] != self.num_entities:
            raise InvalidInputError(f"{type(self.model).__name__}.predict_* returned shape {tuple(rows.shape)}, "
                                    f"expected (queries, {self.num_entities}) for the model's {self.num_entities} "
                                    "entities")
        return rows[:, entities] if isinstance(entities, slice) else rows.index_select(1, self._ids(entities))

    # ------------------------------------------------------------------ consistency check (score_hrt)
    def _hrt(self, h, r, t):
        scores = self.model.score_hrt(torch.stack([h, r, t], dim=1).to(self.device)).view(-1)
        return torch.sigmoid(scores) if getattr(self.model, "predict_with_sigmoid", False) else scores

    def score_triples(self, heads, relations, tails):
        """``f(h, r, t)`` as tail prediction scores it: relation row ``2r`` for inverse-triple models; read from
        the triple's own ``predict_t`` row for a model that cannot score subsets (it may change whole rows
        after scoring, as ``CooccurrenceFilteredModel`` does, which ``score_hrt`` does not)."""
        if not self.entity_subsets:
            return self._from_rows(self.score_tails, heads, relations, tails)
        return self._hrt(heads, 2 * relations if self.inverse else relations, tails)

    def score_head_triples(self, heads, relations, tails):
        """``f(h, r, t)`` as head prediction scores it: ``f(t, 2r + 1, h)`` for inverse-triple models."""
        if not self.entity_subsets:
            return self._from_rows(self.score_heads, relations, tails, heads)
        if self.inverse:
            return self._hrt(tails, 2 * relations + 1, heads)
        return self._hrt(heads, relations, tails)

    @staticmethod
    def _from_rows(method, a, b, answers):
        """Each triple's score from its own whole row (one query per call: nothing else in the batch)."""
        return torch.cat([method(a[i:i + 1], b[i:i + 1])[0, answers[i]].view(1) for i in range(a.shape[0])])

    @property
    def score_bytes(self) -> float:
        """Bytes allocated per score entry, measured once (PyKEEN's TransE, DistMult, RotatE and PairRE
        broadcast ``batch x entities x dim``): 8 and 16 query rows against ``c`` and ``c / 2`` columns give a
        cost per score and per row; the differences cancel what does not grow with the batch."""
        if self._score_bytes is None:
            wide = min(self.num_entities, _PROBE_COLUMNS)
            narrow = max(1, wide // 2)
            worst = 0.0
            with torch.inference_mode():
                for method in (self.score_tails, self.score_heads):
                    if not self.entity_subsets:  # whole rows only: their cost spread over a row
                        worst = max(worst, max(0.0, self._per_row(method, None)) / self.num_entities)
                        continue
                    per_row = {c: self._per_row(method, c) for c in {wide, narrow}}
                    per_score = (per_row[wide] - per_row[narrow]) / (wide - narrow) if wide > narrow else 0.0
                    fixed = per_row[wide] - per_score * wide
                    worst = max(worst, max(0.0, per_score) + max(0.0, fixed) / self.num_entities)
            self._score_bytes = worst
        return self._score_bytes

    def _per_row(self, method, columns: int | None) -> float:
        ids = None if columns is None else torch.arange(columns, device=self.device)

        def call(rows):
            q = torch.zeros(rows, dtype=torch.long, device=self.device)
            return _allocated_bytes(lambda: method(q, q, entities=ids))

        return (call(16) - call(8)) / 8

    # ------------------------------------------------------------------ labels and factories
    def _check_factory(self, factory) -> None:
        if not is_triples_factory(factory):
            raise InvalidInputError(f"triples_factory must be a PyKEEN TriplesFactory, got {type(factory).__name__}")
        got = (int(factory.num_entities), _real_relations(factory))
        if got != (self.num_entities, self.num_relations):
            raise InvalidInputError(
                f"the TriplesFactory has {got[0]} entities and {got[1]} relations but the PyKEEN model has "
                f"{self.num_entities} entities and {self.num_relations} relations (without inverses): "
                "they do not belong together")
        if self.triples_factory is not None and hasattr(factory, "entity_to_id") \
                and hasattr(self.triples_factory, "entity_to_id") and (
                factory.entity_to_id != self.triples_factory.entity_to_id
                or factory.relation_to_id != self.triples_factory.relation_to_id):
            raise InvalidInputError("the TriplesFactory's entity_to_id / relation_to_id differ from the training "
                                    "factory's: ids would mean different entities")

    def map_triples(self, triples, filter_triples):
        """``(triples, filter_triples)`` as id arrays: factories give their ``mapped_triples``, labels
        are mapped through a factory's ``entity_to_id`` / ``relation_to_id``."""
        if is_triples_factory(triples):
            self._check_factory(triples)
            if self.triples_factory is None and hasattr(triples, "entity_to_id"):
                self.triples_factory = triples
        triples = self._map_one("triples", triples)
        if filter_triples is None:
            return triples, None
        if isinstance(filter_triples, Mapping):
            return triples, {k: self._map_one(f"filter_triples[{k!r}]", v) for k, v in filter_triples.items()}
        if _is_single(filter_triples):
            return triples, self._map_one("filter_triples", filter_triples)
        return triples, [self._map_one(f"filter_triples[{i}]", v) for i, v in enumerate(filter_triples)]

    def _map_one(self, name: str, value):
        if is_triples_factory(value):
            self._check_factory(value)
            if self.triples_factory is None and hasattr(value, "entity_to_id"):
                # the first labelled factory is the reference the others' maps are checked against
                self.triples_factory = value
            return value.mapped_triples.cpu().numpy()
        if isinstance(value, torch.Tensor):
            return value
        arr = np.asarray(value, dtype=object) if not isinstance(value, np.ndarray) else value
        if arr.dtype.kind not in "OUS" or arr.size == 0 or all(isinstance(x, (int, np.integer)) for x in arr.flat):
            return value
        return self._labels_to_ids(name, arr)

    def _labels_to_ids(self, name: str, arr: np.ndarray) -> np.ndarray:
        tf = self.triples_factory
        if tf is None or not hasattr(tf, "entity_to_id"):
            raise InvalidInputError(
                f"{name} holds labels: pass the training TriplesFactory (PyKEENScorer(model, triples_factory=...), "
                "or evaluate a TriplesFactory) so they can be mapped to the model's ids")
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise InvalidInputError(f"{name} must have shape (n, 3), got {arr.shape}")
        out = np.empty(arr.shape, dtype=np.int64)
        for col, mapping, kind in ((0, tf.entity_to_id, "entity"), (1, tf.relation_to_id, "relation"),
                                   (2, tf.entity_to_id, "entity")):
            for i, label in enumerate(arr[:, col]):
                try:
                    out[i, col] = mapping[str(label)]
                except KeyError:
                    raise InvalidInputError(
                        f"{name}: row {i} has {kind} label {str(label)!r}, unknown to the TriplesFactory") from None
        return out


def _is_single(value) -> bool:
    """Whether a filter argument is one triple set (not a list of them)."""
    if is_triples_factory(value) or isinstance(value, (np.ndarray, torch.Tensor)):
        return True
    items = list(value)
    return not items or not any(is_triples_factory(x) or isinstance(x, (np.ndarray, torch.Tensor))
                                or (isinstance(x, (list, tuple)) and x and isinstance(x[0], (list, tuple)))
                                for x in items)


def _allocated_bytes(fn) -> int:
    """Bytes of the new tensors torch allocates while ``fn()`` runs (views and in-place results not
    counted): a device-independent upper bound on the working memory of one scoring call."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def storages(values):
        return {t.untyped_storage().data_ptr() for t in tree_flatten(values)[0] if isinstance(t, torch.Tensor)}

    class _Allocations(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen = storages((args, kwargs))
            for o in tree_flatten(out)[0]:
                if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() not in seen:
                    seen.add(o.untyped_storage().data_ptr())
                    self.total += o.numel() * o.element_size()
            return out

    mode = _Allocations()
    with mode:
        fn()
    return mode.total
