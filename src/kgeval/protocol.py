"""The record of how an evaluation was done: :class:`EvaluationProtocol`.

Written once by the evaluator, held by :class:`kgeval.Results`, saved in ``results.json`` and
printed by every reporter through the one :meth:`EvaluationProtocol.describe`. It lives at the
top level (not in :mod:`kgeval.evaluation`) because ``Results`` depends on it.

``to_dict()`` keeps the layout of the protocol dicts written by earlier versions (``filter``,
``restriction``, ``sampling``, ... sub-dicts), and ``from_dict()`` reads those files: keys it does
not know are kept in :attr:`EvaluationProtocol.extra` and written back unchanged. For code written
against the old dict, the protocol is also a read-only mapping over ``to_dict()``
(``protocol["filter"]["sets"]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from .keys import RANK_TYPES

__all__ = ["EvaluationProtocol", "FilterSet", "Sampling", "Unseen", "TypeConstraints", "RANK_TYPE_MEANINGS",
           "tasks_digest"]

#: What each rank type means (one definition, printed by :meth:`EvaluationProtocol.describe`).
RANK_TYPE_MEANINGS = {
    "optimistic": "1 + #candidates scoring better than the true answer",
    "pessimistic": "optimistic + #other candidates tied with the true answer",
    "realistic": "the metric of the rank (optimistic + pessimistic) / 2, as in PyKEEN",
    "expected": "the exact expectation of the metric under uniformly random tie-breaking",
    "rounded_mean": "optimistic + floor((#other tied candidates + 1) / 2), LibKGE's rounded_mean_rank (an integer)",
}

# keys of the old dict layout that are derived from fields (never kept in ``extra``)
_DERIVED = {"realistic", "realistic_rank", "expected", "rounded_mean", "averaging", "macro_weights", "ties", "filter", "restriction",
            "sampling", "query_metrics", "consistency_check"}


def tasks_digest(triples, *given) -> str:
    """SHA-256 (hex) of the evaluation triples as int64 ``(h, r, t)`` rows in their order, followed by
    any ``given`` int arrays (the candidates mode's negatives), each with its shape. Two evaluations
    share it exactly when they ranked the same triples at the same positions (and the same given
    candidates), whatever dtype or memory layout the arrays came in."""
    import hashlib

    h = hashlib.sha256()
    for a in (triples, *given):
        a = np.ascontiguousarray(np.asarray(a), dtype=np.int64)
        h.update(repr(a.shape).encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


@dataclass(frozen=True)
class FilterSet:
    """A named set of known true triples and its size."""

    name: str
    num_triples: int


@dataclass(frozen=True)
class Sampling:
    """The sampled protocol: ``num_negatives`` per task, uniformly without replacement."""

    num_negatives: int
    seed: int
    excludes: str  #: which entities are never drawn
    capped_tasks: int = 0  #: tasks with fewer available negatives (they use all of them)
    scoring: str = ""  #: "candidates method" or "full rows, gathered"
    replacement: bool = False


@dataclass(frozen=True)
class Unseen:
    """Evaluation triples with an entity or relation that no training triple has (see
    :mod:`kgeval.data.unseen`): ranked with an untrained embedding when ``policy="kept"``, removed
    before the evaluation when ``policy="dropped"`` (PyKEEN's default)."""

    policy: str  #: "kept" or "dropped"
    triples: int  #: evaluation triples with an unseen entity or relation
    entities: int  #: distinct unseen entities among them
    relations: int  #: distinct unseen relations among them
    reference: str = "train"  #: the training set they were counted against
    #: labels differing from another label only in their Unicode normal form (NFC vs NFD), kept distinct
    #: (None: not checked, e.g. id triples without labels)
    twins: int | None = None

    def describe(self) -> str:
        what = (f"{_n(self.triples)} evaluation triple(s) with an entity or relation unseen in {self.reference} "
                f"({_n(self.entities)} entities, {_n(self.relations)} relations)")
        what += (": kept, ranked with untrained embeddings (drop_unseen=True / --drop-unseen drops them, as PyKEEN)"
                 if self.policy == "kept" else ": dropped before the evaluation (as PyKEEN)")
        if self.twins:
            what += (f"; {_n(self.twins)} group(s) of labels differ only in Unicode normal form (NFC/NFD) "
                     "and count as distinct entities or relations")
        return f"unseen: {what}" if self.triples or self.twins else f"unseen: none in {self.reference}"


#: how a task whose answer is outside its allowed set is ranked (type-constrained ranking)
OUTSIDE_RULE = "ranked against the allowed set plus the answer itself (as OpenKE)"


@dataclass(frozen=True)
class TypeConstraints:
    """Type-constrained ranking: each task's candidates are the entities allowed in its position of its relation
    (:class:`kgeval.data.types.CandidateSets`); relation sides without a set allow every entity."""

    source: str  #: where the sets came from (a file and its layout, or inferred from training triples)
    sha256: str  #: digest of the sets (:meth:`kgeval.data.types.CandidateSets.sha256`)
    constrained: int  #: relation sides (of ``2 x relations``) with a set
    relation_sides: int  #: ``2 x relations``
    outside_tasks: int  #: evaluated tasks whose answer is outside its allowed set
    outside_rule: str = OUTSIDE_RULE

    def describe(self) -> str:
        from ._escape import plain_text  # the source names the caller's file: no newline or ESC

        text = (f"type constraints: {plain_text(self.source)}; {_n(self.constrained)} of {_n(self.relation_sides)} "
                f"relation sides constrained (sha256 {self.sha256[:12]})")
        if self.outside_tasks:
            text += f"; {_n(self.outside_tasks)} task(s) with the answer outside its allowed set, {self.outside_rule}"
        else:
            text += "; every answer inside its allowed set"
        return text


@dataclass(frozen=True)
class EvaluationProtocol(Mapping):
    """What was evaluated and how. Every field may be None when an old results file lacks it."""

    sides: tuple[str, ...] = ()
    #: the rank types whose metrics are present
    rank_types: tuple[str, ...] = RANK_TYPES
    filtered: bool | None = None
    #: the known-triple sets used for filtering (the evaluation triples first), empty when unfiltered
    filter_sets: tuple[FilterSet, ...] = ()
    num_known_triples: int | None = None
    num_triples: int | None = None
    num_evaluated_triples: int | None = None
    num_tasks: int | None = None
    num_entities: int | None = None
    num_relations: int | None = None
    #: sizes of the entity / relation restriction (None = unrestricted)
    restrict_entities: int | None = None
    restrict_relations: int | None = None
    num_triples_dropped: int = 0
    sampling: Sampling | None = None
    macro: bool = False
    tie_tolerance: float = 0.0
    #: relative tie tolerance: ties are ``|score - s| <= tie_tolerance + tie_rtol * |s|`` (torch.isclose's rule)
    tie_rtol: float = 0.0
    nan_policy: str | None = None
    #: the protocol preset the evaluation followed (:mod:`kgeval.presets`; None: not recorded, i.e. kgeval's)
    preset: str | None = None
    #: the rule giving each task's number of candidates
    candidates: str | None = None
    #: ``k`` of the query-level precision/recall (empty = not computed)
    query_metrics_k: tuple[int, ...] = ()
    #: tasks re-scored alone by the consistency check and how many differed (None = check off)
    consistency_checked: int | None = None
    consistency_mismatches: int | None = None
    entity_chunk_size: int | None = None
    #: query rows ranked a second time, exactly, because the scorer's score of a true answer among the answer
    #: columns (pass 1 of chunked ranking) was not bitwise its score in the answer's column chunk (a scorer that
    #: rounds gathered and sliced columns differently): the ranks are exact either way, this is extra work.
    #: ``distributed="tasks"``: the sum over ranks. None: not recorded (an older file)
    chunk_redone_queries: int | None = None
    device: str | None = None
    #: SHA-256 of what defines the ranking tasks (:func:`tasks_digest`): the evaluation triples in their
    #: order (a task's ``triple_index`` is a row of them) and any given negatives; paired comparisons
    #: refuse results whose digests differ (None: not recorded, e.g. an older results file)
    tasks_sha256: str | None = None
    #: set by :class:`kgeval.Results`: whether tasks carry weights, whether null moments are approximate
    weighted: bool | None = None
    #: evaluation triples unseen in training (None: the training triples were not known to the evaluation)
    unseen: Unseen | None = None
    #: type-constrained ranking (None: every (restricted) entity is a candidate of every task)
    type_constraints: TypeConstraints | None = None
    approximate_null_moments: object = None  # bool, or the keys whose null moments are approximate
    #: keys of a loaded protocol that this version does not know, written back unchanged
    extra: Mapping = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "sides", tuple(self.sides))
        object.__setattr__(self, "rank_types", tuple(self.rank_types))
        object.__setattr__(self, "filter_sets", tuple(self.filter_sets))
        object.__setattr__(self, "query_metrics_k", tuple(self.query_metrics_k))
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))

    # ------------------------------------------------------------------ conversions
    def replace(self, **changes) -> EvaluationProtocol:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-able dict in the layout of earlier versions' ``protocol`` dicts."""
        d = {
            "sides": list(self.sides),
            "rank_types": list(self.rank_types),
            **{rt: RANK_TYPE_MEANINGS[rt] for rt in ("realistic", "expected", "rounded_mean") if rt in self.rank_types},
            "filtered": self.filtered,
            "filter": {"sets": [dataclasses.asdict(s) for s in self.filter_sets],
                       "num_known_triples": self.num_known_triples} if self.filtered else None,
            "num_triples": self.num_triples,
            "num_evaluated_triples": self.num_evaluated_triples,
            "num_tasks": self.num_tasks,
            "num_entities": self.num_entities,
            "num_relations": self.num_relations,
            "restriction": {"entities": self.restrict_entities, "relations": self.restrict_relations,
                            "num_triples_dropped": self.num_triples_dropped},
            "sampling": None if self.sampling is None else dataclasses.asdict(self.sampling),
            "averaging": "macro" if self.macro else "micro",
            "macro_weights": "1 / #evaluation tasks sharing the query" if self.macro else None,
            "tie_tolerance": self.tie_tolerance,
            "tie_rtol": self.tie_rtol,
            "ties": self._ties(),
            "nan_policy": self.nan_policy,
            "candidates": self.candidates,
            "query_metrics": self._query_metrics(),
            "consistency_check": None if self.consistency_checked is None else {
                "checked": self.consistency_checked, "mismatches": self.consistency_mismatches},
            "entity_chunk_size": self.entity_chunk_size,
            **({} if self.chunk_redone_queries is None else {"chunk_redone_queries": self.chunk_redone_queries}),
            "device": self.device,
        }
        for name in ("preset", "tasks_sha256", "weighted", "approximate_null_moments"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.unseen is not None:
            d["unseen"] = dataclasses.asdict(self.unseen)
        if self.type_constraints is not None:
            d["type_constraints"] = dataclasses.asdict(self.type_constraints)
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping | None) -> EvaluationProtocol:
        """Read a protocol dict of this or an earlier version (missing keys become None)."""
        if isinstance(d, EvaluationProtocol):
            return d
        d = dict(d or {})
        filt = d.get("filter") if isinstance(d.get("filter"), Mapping) else {}
        restr = d.get("restriction") if isinstance(d.get("restriction"), Mapping) else {}
        samp = d.get("sampling") if isinstance(d.get("sampling"), Mapping) else None
        qm = d.get("query_metrics") if isinstance(d.get("query_metrics"), Mapping) else {}
        cc = d.get("consistency_check") if isinstance(d.get("consistency_check"), Mapping) else {}
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "filter_sets", "sampling", "macro", "unseen",
                                                              "type_constraints"}
        unseen = d.get("unseen") if isinstance(d.get("unseen"), Mapping) else None
        if unseen is not None and not {"policy", "triples", "entities", "relations"} <= unseen.keys():
            unseen = None  # not this version's record: kept unread in extra
        tc = d.get("type_constraints") if isinstance(d.get("type_constraints"), Mapping) else None
        tc_fields = [f.name for f in dataclasses.fields(TypeConstraints)]
        if tc is not None and not set(tc_fields[:-1]) <= tc.keys():
            tc = None  # not this version's record: kept unread in extra
        kw = {k: d[k] for k in names if k in d}
        kw.pop("restrict_entities", None)
        kw.pop("restrict_relations", None)
        if d.get("rank_types") is not None:
            kw["rank_types"] = tuple(d["rank_types"])
        kw.update(
            filter_sets=tuple(FilterSet(str(s["name"]), int(s["num_triples"])) for s in filt.get("sets") or ()),
            num_known_triples=filt.get("num_known_triples"),
            restrict_entities=restr.get("entities"),
            restrict_relations=restr.get("relations"),
            num_triples_dropped=int(restr.get("num_triples_dropped") or 0),
            sampling=None if samp is None else Sampling(**{k: samp[k] for k in
                                                             ("num_negatives", "seed", "excludes", "capped_tasks",
                                                              "scoring", "replacement") if k in samp}),
            macro=d.get("averaging") == "macro" or bool(d.get("macro", False)),
            query_metrics_k=tuple(qm.get("k") or ()),
            consistency_checked=cc.get("checked"),
            consistency_mismatches=cc.get("mismatches"),
            unseen=None if unseen is None else Unseen(**{k: unseen[k] for k in
                                                         ("policy", "triples", "entities", "relations", "reference",
                                                          "twins") if k in unseen}),
            type_constraints=None if tc is None else TypeConstraints(**{k: tc[k] for k in tc_fields if k in tc}),
            extra={k: v for k, v in d.items() if k not in names and k not in _DERIVED and k != "macro"
                   and not (k == "unseen" and unseen is not None) and not (k == "type_constraints" and tc is not None)},
        )
        for k in ("tie_tolerance", "tie_rtol"):
            if kw.get(k) is None:
                kw.pop(k, None)
        return cls(**kw)

    # ------------------------------------------------------------------ mapping view of to_dict()
    def __getitem__(self, key):
        return self.to_dict()[key]

    def __iter__(self):
        return iter(self.to_dict())

    def __len__(self):
        return len(self.to_dict())

    # ------------------------------------------------------------------ text
    def _ties(self) -> str:
        if not self.tie_tolerance and not self.tie_rtol:
            return "exact float comparison"
        tol = " + ".join(([f"{self.tie_tolerance}"] if self.tie_tolerance else [])
                         + ([f"{self.tie_rtol} |true score|"] if self.tie_rtol else []))
        return f"|score - true score| <= {tol} counts as a tie"

    def _query_metrics(self) -> dict | None:
        if not self.query_metrics_k:
            return None
        return {
            "k": list(self.query_metrics_k),
            "relevant": "evaluation answers of the query",
            "excluded": "answers known only from filter_triples" if self.filtered else "none",
            "ties": "expected hits under random tie-breaking (hypergeometric mean on the tie block)",
            "averaging": "mean over unique queries",
        }

    def describe(self) -> str:
        """The protocol in a few human-readable lines (the one text every printer shows)."""
        n = _n
        sides = " + ".join(self.sides) or "unknown sides"
        what = f"evaluation: {n(self.num_triples)} triples"
        if self.num_evaluated_triples is not None and self.num_evaluated_triples != self.num_triples:
            what += f" ({n(self.num_evaluated_triples)} evaluated)"
        lines = [what + f", sides {sides} ({n(self.num_tasks)} ranking tasks)"]
        if self.preset is not None and self.preset != "kgeval":
            from .presets import PRESETS

            p = PRESETS.get(self.preset)
            tool = f" ({p.tool})" if p is not None else ""
            rank = f"; short keys (mrr, hits@k, mr) use {p.rank_type} ranks" if p is not None else ""
            lines.append(f"protocol preset: {self.preset}{tool}{rank}")
        ents = (f"the {n(self.restrict_entities)} allowed entities" if self.restrict_entities is not None
                else f"all {n(self.num_entities)} entities" if self.num_entities is not None else "all entities")
        entity_tasks = any(s != "relation" for s in self.sides) or not self.sides
        if self.type_constraints is not None:  # each relation side's allowed entities (within the restriction)
            ents = ("the entities allowed in the task's position of its relation"
                    + (f" among {ents}" if self.restrict_entities is not None else ""))
        if self.sampling is not None:
            lines.append("candidates: the true answer + sampled negatives")
        elif self.filtered is not None and entity_tasks:
            other = " minus the other known answers of the query" if self.filtered else ""
            lines.append(f"candidates: {ents}{other} (the true answer counted)")
        if "relation" in self.sides and self.sampling is None:
            rels = (f"the {n(self.restrict_relations)} allowed relations" if self.restrict_relations is not None
                    else f"all {n(self.num_relations)} relations")
            other = " minus the other known relations of the pair (h, t)" if self.filtered else ""
            lines.append(f"relation candidates: {rels}{other} (the true relation counted)")
        if self.type_constraints is not None:
            lines.append(self.type_constraints.describe())
        if self.filtered is not None:
            if self.filtered and self.filter_sets:
                from ._escape import plain_text  # a filter set's name is the caller's: no newline or ESC

                sets = " + ".join(f"{plain_text(s.name)} ({n(s.num_triples)})" for s in self.filter_sets)
                known = f"; {n(self.num_known_triples)} distinct known triples" if self.num_known_triples else ""
                lines.append(f"filtered: {sets}{known}")
            else:
                lines.append("filtered" if self.filtered else "unfiltered: known answers stay candidates")
        if self.unseen is not None:
            lines.append(self.unseen.describe())
        if self.restrict_entities is not None or self.restrict_relations is not None:
            parts = [f"{n(c)} {w}" for c, w in ((self.restrict_relations, "relations"),
                                                (self.restrict_entities, "entities")) if c is not None]
            lines.append(f"restriction: {', '.join(parts)}; {n(self.num_triples_dropped)} triples dropped")
        if self.sampling is not None:
            s = self.sampling
            lines.append(f"sampled: {s.num_negatives} negatives per task from {ents} without replacement "
                         f"(seed {s.seed}), excluding {s.excludes}; {n(s.capped_tasks)} tasks have fewer")
        brief = {"realistic": "realistic ((optimistic + pessimistic) / 2, PyKEEN)",
                 "expected": "expected (expectation over random tie-breaking)",
                 "rounded_mean": "rounded_mean (LibKGE's rounded mean rank)"}
        lines.append("rank types: " + ", ".join(brief.get(rt, rt) for rt in self.rank_types))
        tail = f"ties: {self._ties()}"
        if self.nan_policy:
            tail += f"; NaN scores: {self.nan_policy}"
        tail += "; averaging: " + ("macro (1 / #tasks sharing the query)" if self.macro else "micro")
        if self.weighted:
            tail += " (weighted tasks)"
        lines.append(tail)
        if self.query_metrics_k:
            lines.append(f"query metrics: precision/recall at k = {', '.join(map(str, self.query_metrics_k))}, "
                         "mean over unique queries")
        if self.consistency_checked is not None:
            lines.append(f"consistency check: {n(self.consistency_checked)} tasks re-scored alone, "
                         f"{n(self.consistency_mismatches)} differed")
        if self.chunk_redone_queries:
            lines.append(f"entity chunks: {n(self.chunk_redone_queries)} query rows ranked again exactly (a pass-1 "
                         "true score was not bitwise its chunk's score)")
        return "\n".join(lines)


def _n(x) -> str:
    return "?" if x is None else f"{x:,}" if isinstance(x, int) else str(x)
