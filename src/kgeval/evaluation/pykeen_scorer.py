"""PyKEEN models as kgeval scorers (pykeen is not imported here; models are duck-typed).

Scores come from PyKEEN's public prediction path, ``model.predict_t(hr)`` and
``model.predict_h(rt)`` (with ``tails=`` / ``heads=`` for entity subsets), so a model trained
with inverse triples is scored as PyKEEN scores it: PyKEEN stores relation ``r`` at row ``2r``
and its inverse at ``2r + 1`` and answers ``(?, r, t)`` as ``(t, r⁻¹, ?)``. Relation ids given
to kgeval are the *real* ids ``[0, num_real_relations)``.

The consistency check scores true triples alone through ``model.score_hrt`` with the relation
row spelled out here (``2r`` for tails, ``(t, 2r + 1, h)`` for heads of an inverse-triple
model), a different code path from ``predict_*``: an adapter that passed raw relation ids
would fail it.

Entity subsets (``tails=`` / ``heads=``, for chunks and restrictions) go to ``predict_*`` only
where PyKEEN's own ``Model.predict_*`` and ``ERModel.score_*`` compute them. Other models
(``CooccurrenceFilteredModel`` masks whole rows and raised an IndexError on a subset; the
evaluation-only baselines ignore ``tails=``) are scored as PyKEEN's evaluator scores them, in
whole rows: ``entity_subsets`` is then False and the evaluator does not chunk.

Triples given as labels or as a PyKEEN ``TriplesFactory`` are mapped through the factory's
``entity_to_id`` / ``relation_to_id`` (:meth:`PyKEENScorer.map_triples`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from .._compat import is_triples_factory
from ..errors import InvalidInputError

__all__ = ["PyKEENScorer", "is_pykeen_model", "is_triples_factory"]

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
    """Adapter for a PyKEEN model; ``triples_factory`` (optional) maps labelled triples to ids.

    The model is put in eval mode (PyKEEN's ``predict_*`` do so too), so dropout and batch norm
    do not make scores batch-dependent.
    """

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
        try:
            device = model.device
        except AttributeError:
            device = None
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
        if entities is None:
            return None
        if isinstance(entities, slice):
            return torch.arange(self.num_entities, device=self.device)[entities]
        return torch.as_tensor(entities, dtype=torch.long).to(self.device)

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
        """``f(h, r, t)`` as tail prediction scores it: relation row ``2r`` for inverse-triple models.

        A model that cannot score entity subsets may change whole rows after scoring
        (``CooccurrenceFilteredModel`` sets non-co-occurring entities to -inf, which ``score_hrt``
        does not): its triples are read from their own ``predict_t`` rows, scored alone."""
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

    # ------------------------------------------------------------------ memory
    @property
    def score_bytes(self) -> float:
        """Measured bytes allocated per score entry (see :func:`_allocated_bytes`).

        PyKEEN's TransE, DistMult, RotatE and PairRE broadcast a ``batch x entities x dim`` tensor
        (about ``4 dim`` bytes per score and more); the batch planner adds this to its per-score
        cost. Measured once per model: the allocations of 8 and 16 query rows against ``c`` and
        ``c / 2`` columns give a cost per score and a cost per query row (spread over a whole row);
        differences cancel what does not grow with the batch (copies of the parameters).
        """
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
    """Bytes of all new tensors torch operations allocate while ``fn()`` runs (outputs that share
    storage with an input, i.e. views and in-place results, are not counted): a measured,
    device-independent upper bound on the working memory of one scoring call."""
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
