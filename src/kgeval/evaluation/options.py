"""The options of one evaluation, declared, documented and validated once.

:class:`EvaluationOptions` holds every option of :func:`kgeval.evaluation.evaluate` except the
data (scorer, evaluation triples, filter triples). It is frozen and validated in
``__post_init__``: an invalid value raises :class:`~kgeval.errors.InvalidInputError` naming the
option, an unknown option name :class:`~kgeval.errors.UnknownNameError` with a suggestion.
Checks that need the data (id ranges against the scorer's entity count) happen when the
evaluation starts.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .. import presets
from .._validation import (
    Side,
    check_positive_int,
    check_seed,
    check_positive_number,
    to_numpy,
)
from ..errors import InvalidInputError, unknown_name

#: the values of ``EvaluationOptions.distributed`` besides None (one process); the collectives and the
#: distributed driver import them from here, so that checking an option needs no distributed module
DISTRIBUTED_MODES = ("tasks", "entities")

__all__ = ["EvaluationOptions", "Tuning", "as_tuning", "ALIASES", "NAN_POLICIES", "as_options", "canonical_names"]

NAN_POLICIES = ("raise", "worst", "minus_inf")

#: Other spellings accepted by :func:`~kgeval.evaluation.evaluate` (PyKEEN's names), never stored.
ALIASES = {
    "entity_whitelist": "restrict_entities",
    "relation_whitelist": "restrict_relations",
    "evaluation_entity_whitelist": "restrict_entities",
    "evaluation_relation_whitelist": "restrict_relations",
    "restrict_entities_to": "restrict_entities",
    "restrict_relations_to": "restrict_relations",
}


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidInputError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _id_set(name: str, value, what: str) -> tuple[int, ...] | None:
    """A restriction as a sorted tuple of distinct non-negative ids (None = no restriction)."""
    if value is None:
        return None
    if isinstance(value, (set, frozenset)):
        value = sorted(value)
    elif not hasattr(value, "__len__") and hasattr(value, "__iter__"):  # generators, iterators
        value = list(value)
    arr = to_numpy(name, value)
    if arr.ndim > 1:  # e.g. triples passed by mistake: flattened, their relation ids would count as entities
        raise InvalidInputError(f"{name} must be a 1-d list of {what} ids, got an array of shape {tuple(arr.shape)}"
                                + (" (triples? pass np.unique(triples[:, [0, 2]]) for their entities)"
                                   if arr.ndim == 2 and arr.shape[1] == 3 else ""))
    arr = arr.reshape(-1)  # a single id: a restriction to it
    if arr.size == 0:
        raise InvalidInputError(f"{name} is empty: restricting to no {what} leaves nothing to evaluate")
    if arr.dtype.kind not in "iu":
        raise InvalidInputError(f"{name} must hold integer {what} ids, got dtype {arr.dtype}")
    arr = np.unique(arr.astype(np.int64))
    if arr[0] < 0:
        raise InvalidInputError(f"{name}: {what} id {int(arr[0])} is out of range (ids are >= 0)")
    return tuple(arr.tolist())


def _sides(value) -> tuple[str, ...]:
    if isinstance(value, (str, Side)) or not hasattr(value, "__iter__"):
        value = ("head", "tail") if isinstance(value, str) and value.strip().lower() == "both" else (value,)
    codes = []
    for s in value:
        c = Side.parse(s)
        if c is Side.NONE:
            raise InvalidInputError(f"unknown side {s!r}; expected 'head', 'tail' or 'relation'")
        if c not in codes:
            codes.append(c)
    if not codes:
        raise InvalidInputError("sides is empty: request 'head', 'tail' or both")
    return tuple(Side(c).label for c in sorted(codes))


@dataclass(frozen=True)
class EvaluationOptions:
    """How to evaluate: every option of :func:`~kgeval.evaluation.evaluate` but the data.

    ``EvaluationOptions(filtered=False, sides="tail")``; ``opts.replace(seed=1)`` for a variant;
    ``to_dict()`` / ``from_dict()`` round-trip through JSON.
    """

    #: Remove the other known answers of each query from its candidates (the filtered setting).
    filtered: bool = True
    #: ``"head"``, ``"tail"``, ``"both"`` or a sequence of them; stored as a sorted tuple of labels.
    sides: tuple[str, ...] = ("head", "tail")
    #: Entity ids allowed as heads, tails and candidates (None = all). Triples with another head
    #: or tail are dropped; ``num_candidates`` counts allowed entities only.
    restrict_entities: tuple[int, ...] | None = None
    #: Relation ids whose triples are evaluated (None = all).
    restrict_relations: tuple[int, ...] | None = None
    #: Sampled protocol: ``k`` negatives per task, uniformly without replacement, excluding the
    #: known answers (and restricted-out entities); ``num_candidates = 1 + k`` (``1 + available``
    #: with a warning when fewer exist). None = rank against every candidate.
    num_negatives: int | None = None
    #: Seed of the negative sampler (``numpy.random.default_rng([seed, side])``).
    seed: int = 42
    #: Scores within ``tol = tie_tolerance + tie_rtol * |s|`` of the true score ``s`` count as ties (the rule of
    #: ``torch.isclose(score, s, rtol, atol)``, computed exactly): ``better = #{score > s + tol}``,
    #: ``tied = #{abs(score - s) <= tol}``; an infinite true score ties only with equal scores.
    #: 0 = exact float comparison.
    tie_tolerance: float = 0.0
    #: The relative part of the tie tolerance (LibKGE: ``atol=1e-5``, ``rtol=1e-4``); 0 = absolute only.
    tie_rtol: float = 0.0
    #: ``"raise"`` (:class:`~kgeval.errors.NaNScoresError` naming the triple and side), ``"worst"``: NaN
    #: candidates lose to every non-NaN true score and a NaN true score gets the worst rank
    #: (``num_candidates``), or ``"minus_inf"`` (LibKGE's rule): every NaN score reads as -inf, so NaN
    #: candidates tie with a true score of -inf or NaN and lose to any other. Only the true score and the
    #: candidates count, in every protocol: a NaN at a filtered known answer (no candidate; never scored by
    #: sampled ranking) is ignored.
    nan_policy: str = "raise"
    #: Re-score the first and last task of every batch alone and warn when the in-batch score differs
    #: (relative tolerance 1e-5, absolute max(1e-6, 1e-5 x the mean absolute score of the checked rows)).
    check_consistency: bool = True
    #: Bytes for the score matrix and its temporaries (default ``min(1 GiB, available memory / 4)``, at
    #: least 16 MiB; 512 MiB where the available memory cannot be read).
    memory_budget: int | None = None
    #: Task rows per batch (default: from ``memory_budget``); out-of-memory errors halve it.
    batch_size: int | None = None
    #: Score each query batch in column chunks of this many (allowed) entities through the scorer's
    #: ``entities=`` keyword (full ranking only). Default: chunk only when the memory budget does not
    #: hold 64 whole rows. Ranks are identical to unchunked scoring.
    entity_chunk_size: int | None = None
    #: ``k`` values of query-level precision@k / recall@k (full ranking only), e.g. ``(1, 3, 10)``;
    #: reported as ``{side}.precision_at_{k}``, ``{side}.recall_at_{k}`` and the null-model values
    #: ``{side}.random_precision_at_{k}``, ``{side}.random_recall_at_{k}``. Needs whole score rows and
    #: ``tie_tolerance=0`` (a tolerance makes "tied" intransitive: no top-k set realises the ranks, see
    #: :func:`.full.add_query_metrics`).
    query_metrics_k: tuple[int, ...] = ()
    #: Weight each task by ``1 / #evaluation tasks sharing its query`` (PyKEEN's macro evaluator).
    macro: bool = False
    #: Device for the bookkeeping tensors (default: ``scorer.device``, else CPU); stored as a string.
    device: str | None = None
    #: Show a progress bar.
    progress: bool = True
    #: Relation count for key building and range checks (default: ``scorer.num_relations`` or the
    #: largest relation id seen + 1).
    num_relations: int | None = None
    #: ``"tasks"``: split the tasks over the ranks of the initialised ``torch.distributed`` process
    #: group; ``"entities"``: each rank holds a slice of the entities (the scorer is an entity shard,
    #: e.g. ``model.shard(rank, world)``). See :mod:`.distributed`; None = one process. Rank tables
    #: are identical either way.
    distributed: str | None = None
    #: A tool's protocol preset (:mod:`kgeval.presets`): ``"kgeval"`` (the defaults), ``"pykeen"``,
    #: ``"libkge"``, ``"torchkge"``, ``"ogb"``, ``"ampligraph"``, ``"dglke"``, ``"pbg"`` or ``"graphvite"``.
    #: It sets :data:`kgeval.presets.OPTION_FIELDS` (filtered, sides, tie tolerances, NaN rule) unless the
    #: same call names them, and the rank type the results' short keys resolve to.
    protocol: str = presets.DEFAULT
    #: Type-constrained ranking (OpenKE's ``type_constrain``): each task is ranked only against the entities
    #: allowed in its position of its relation. A :class:`kgeval.data.types.CandidateSets`, ``"train"``
    #: (inferred from the filter set named ``train`` / ``training``: the entities seen there in that
    #: position) or the path of a type-constraint file with ids (:mod:`kgeval.data.type_files`); None = all
    #: entities. A task whose answer is outside its allowed set is ranked against that set plus the answer
    #: itself, and counted in ``results.protocol``. Full ranking only.
    type_constraints: object = None

    def __post_init__(self):
        def set_(name, value):  # frozen: normalise the stored values once, here
            object.__setattr__(self, name, value)

        for name in ("filtered", "check_consistency", "macro", "progress"):
            set_(name, _check_bool(name, getattr(self, name)))
        set_("sides", _sides(self.sides))
        set_("restrict_entities", _id_set("restrict_entities", self.restrict_entities, "entity"))
        set_("restrict_relations", _id_set("restrict_relations", self.restrict_relations, "relation"))
        for name in ("num_negatives", "batch_size", "entity_chunk_size", "num_relations"):
            set_(name, check_positive_int(name, getattr(self, name), allow_none=True))
        set_("seed", check_seed("seed", self.seed))
        for name in ("tie_tolerance", "tie_rtol"):
            tol = getattr(self, name)
            if not isinstance(tol, (numbers.Real, np.floating)) or isinstance(tol, (bool, np.bool_)) or not (
                math.isfinite(float(tol)) and float(tol) >= 0
            ):
                raise InvalidInputError(f"{name} must be a finite number >= 0, got {tol!r}")
            set_(name, float(tol))
        set_("protocol", presets.get(self.protocol).name)
        if self.nan_policy not in NAN_POLICIES:
            raise InvalidInputError(f"nan_policy must be 'raise', 'worst' or 'minus_inf', got {self.nan_policy!r}")
        budget = check_positive_number("memory_budget", self.memory_budget, allow_none=True)
        if budget is not None and budget < 1:
            raise InvalidInputError(f"memory_budget must be at least 1 byte, got {self.memory_budget!r}")
        if budget is not None and budget != math.floor(budget):  # 1.5 meant as GiB would silently be 1 byte
            raise InvalidInputError(
                f"memory_budget is a whole number of bytes, got {self.memory_budget!r} "
                f"(for {self.memory_budget!r} GiB pass {self.memory_budget!r} * 2**30)"
            )
        set_("memory_budget", None if budget is None else int(budget))
        ks = self.query_metrics_k
        # one k, or a sequence of them (a lone float or string is one bad k: named below, not a TypeError)
        ks = () if ks is None else ((ks,) if isinstance(ks, (numbers.Number, np.number, str, bytes))
                                    or not hasattr(ks, "__iter__") else tuple(ks))
        ks = tuple(sorted({check_positive_int("query_metrics_k", k) for k in ks}))
        set_("query_metrics_k", ks)
        if self.distributed is not None and self.distributed not in DISTRIBUTED_MODES:
            raise InvalidInputError(f"distributed must be one of {', '.join(map(repr, DISTRIBUTED_MODES))} or None, "
                                    f"got {self.distributed!r}")
        if self.distributed is not None and ks and self.num_negatives is None:
            raise InvalidInputError("query_metrics_k is not supported with distributed=; drop one of them")
        if ks and self.num_negatives is None and (self.tie_tolerance > 0 or self.tie_rtol > 0):
            raise InvalidInputError(
                f"query_metrics_k cannot be combined with tie_tolerance={self.tie_tolerance!r} / tie_rtol="
                f"{self.tie_rtol!r}: with a tolerance "
                "'tied' is not transitive, so no ordering of a query's candidates gives every answer its tolerant "
                "rank and the top k is undefined (summing each answer's P(rank <= k) can exceed k, a precision "
                "above 1). Evaluate query metrics with tie_tolerance=0 in a separate run"
            )
        if self.device is not None:
            set_("device", _device_str(self.device))
        from ..data.types import as_type_constraints

        set_("type_constraints", as_type_constraints(self.type_constraints))
        for name, bad in (("num_negatives", self.num_negatives is not None), ("query_metrics_k", bool(ks))):
            if self.type_constraints is not None and bad:  # sampled ranking, query metrics: no constrained form
                raise InvalidInputError(f"type_constraints cannot be combined with {name}: evaluate it in a "
                                        "separate run")
        if self.entity_chunk_size is not None and ks and self.num_negatives is None:
            raise InvalidInputError(
                "query_metrics_k needs whole score rows and cannot be combined with entity_chunk_size; "
                "drop one of them (or raise memory_budget)"
            )

    # ------------------------------------------------------------------ conversions
    def to_dict(self) -> dict:
        """JSON-able dict of every option (tuples become lists)."""
        out = {}
        for f in _fields():
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        if callable(getattr(self.type_constraints, "to_dict", None)):  # a CandidateSets: its summary
            out["type_constraints"] = self.type_constraints.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> EvaluationOptions:
        """Inverse of :meth:`to_dict`; an unknown name raises ``UnknownNameError`` with a suggestion."""
        return cls(**canonical_names(d, aliases=False))

    def replace(self, **changes) -> EvaluationOptions:
        """A copy with ``changes`` applied (and validated); a new ``protocol`` sets its preset's options
        (those ``changes`` do not name), replacing the current ones.

        Examples
        --------
        >>> from kgeval.evaluation import EvaluationOptions
        >>> opts = EvaluationOptions(sides="tail").replace(protocol="libkge")
        >>> opts.protocol, opts.nan_policy, opts.sides
        ('libkge', 'minus_inf', ('head', 'tail'))
        >>> EvaluationOptions(protocol="libkge", tie_tolerance=0).tie_tolerance  # named in the call: kept
        0.0
        """
        return dataclasses.replace(self, **presets.with_preset(canonical_names(changes, aliases=False)))


def as_options(options) -> EvaluationOptions:
    """``options`` as :class:`EvaluationOptions`: None = defaults, a mapping goes through ``from_dict``."""
    if options is None:
        return EvaluationOptions()
    if isinstance(options, EvaluationOptions):
        return options
    if isinstance(options, Mapping):
        return EvaluationOptions.from_dict(options)
    raise InvalidInputError(f"options must be EvaluationOptions, a mapping or None, got {type(options).__name__}")


def _refuse_unknown_keywords(cls):
    """Wrap the dataclass ``__init__`` so a misspelt option (``filtred=True``) is an
    :class:`~kgeval.errors.UnknownNameError` with a suggestion, not Python's bare TypeError."""
    generated = cls.__init__

    @functools.wraps(generated)
    def __init__(self, *args, **kwargs):
        names = {f.name for f in _fields()}
        for key in kwargs:
            if key not in names:
                raise unknown_name("evaluation option", key, names)
        generated(self, *args, **presets.with_preset(kwargs))

    cls.__init__ = __init__
    return cls


_refuse_unknown_keywords(EvaluationOptions)


def _fields():
    return [f for f in dataclasses.fields(EvaluationOptions) if not f.name.startswith("_")]


def _device_str(device) -> str:
    try:
        import torch

        return str(torch.device(device))
    except (TypeError, RuntimeError) as exc:
        raise InvalidInputError(f"device: {device!r} is not a device ({exc})") from None


def canonical_names(d: Mapping, *, aliases: bool = True) -> dict:
    """``d`` with option names resolved through :data:`ALIASES` (when ``aliases``); an unknown name
    raises :class:`~kgeval.errors.UnknownNameError` with a suggestion."""
    if not isinstance(d, Mapping):
        raise InvalidInputError(f"evaluation options must be a mapping, got {type(d).__name__}")
    names = {f.name for f in _fields()}
    out: dict = {}
    for key, value in d.items():
        name = ALIASES.get(key, key) if aliases else key
        if name not in names:
            raise unknown_name("evaluation option", key, names | (set(ALIASES) if aliases else set()))
        if name in out:
            raise InvalidInputError(f"evaluation option {name!r} given twice (as {key!r} and another spelling)")
        out[name] = value
    return out


# the performance knobs live in .tuning; imported here for the code and tests that import them from this module
from .tuning import Tuning, as_tuning  # noqa: E402,F401
