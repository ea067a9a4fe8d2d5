"""Type-constrained entity ranking: a task's answer is ranked only against the entities allowed in that position
of that relation (:class:`kgeval.data.types.TypeConstraints`; Krompaß et al., 2015; OpenKE's ``type_constrain``).

Each (relation, side) group of tasks is one run of the one driver on a problem whose entities are the group's
allowed entities: query ``q`` (a head for tail prediction, a tail for head prediction) scores through the real
scorer's ``entities=`` columns, so nothing outside the allowed set is ever scored or counted. Filtering applies
within the allowed set; ``num_candidates`` = allowed entities minus the query's other known answers, so the null
model, adjusted index and z-score are those of the constrained task.

A relation and side the constraints do not state (a relation absent from the types file, or from the training
split) allows every entity; the protocol counts these tasks (``type_constraints.unconstrained_tasks``).

**An answer outside its allowed set** (a test triple whose head or tail was never seen in that position of the
relation when the constraints come from training) is ranked against the allowed set plus itself, never dropped,
and counted in the protocol (``type_constraints.answers_outside``). ``macro`` weights are one over the tasks of
the query, across both kinds. The unconstrained path is untouched: this module runs only when constraints are
given. ``distributed='tasks'``: every rank takes its share of each group's tasks (the groups run in the same order
on every rank); entity shards are refused.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..errors import InvalidInputError
from ..ranks import RankTable, Side
from ..triples import as_triples

__all__ = ["evaluate_constrained"]


class _GroupScorer:
    """Entities of the group's problem: ``ids`` (real entity ids); relation ``q``: the query's anchor entity."""

    def __init__(self, scorer, relation: int, side: int, anchors: np.ndarray, ids: np.ndarray):
        self.scorer, self.relation, self.side = scorer, relation, side
        self.anchors, self.ids = torch.as_tensor(anchors), torch.as_tensor(ids)
        self.num_entities, self.num_relations = int(len(ids)), int(len(anchors))
        self.device = torch.device("cpu")

    def _score(self, q, columns) -> torch.Tensor:
        device = getattr(self.scorer, "device", torch.device("cpu"))
        anchor = self.anchors[torch.as_tensor(q, dtype=torch.long).cpu()].to(device)
        rel = torch.full_like(anchor, self.relation)
        ents = columns.to(device)
        if self.side == Side.TAIL:
            rows = self.scorer.score_tails(anchor, rel, entities=ents)
        else:
            rows = self.scorer.score_heads(rel, anchor, entities=ents)
        return torch.as_tensor(rows).detach().cpu()

    def score_tails(self, heads, relations, entities=None):
        if entities is None:
            columns = self.ids
        elif isinstance(entities, slice):
            columns = self.ids[entities]
        else:
            columns = self.ids[torch.as_tensor(entities, dtype=torch.long).cpu()]
        return self._score(relations, columns)

    def score_heads(self, relations, tails, entities=None):  # pragma: no cover - only tails are asked
        raise InvalidInputError("a type-constrained group ranks one side")

    def score_triples(self, heads, relations, tails):
        t = torch.as_tensor(tails, dtype=torch.long).cpu()
        q = torch.as_tensor(relations, dtype=torch.long).cpu()
        return torch.stack([self._score(q[i:i + 1], self.ids[t[i:i + 1]])[0, 0] for i in range(len(q))])


@dataclasses.dataclass
class Outcome:
    tables: list
    outside: int = 0
    groups: int = 0
    consistency_checked: int = 0
    consistency_mismatches: int = 0
    unconstrained: int = 0  # tasks of a relation and side with no stated allowed entity


def _known_of(known: list[np.ndarray], relation: int, side: int) -> np.ndarray:
    """(anchor, answer) pairs of the known triples of ``relation`` seen from ``side``."""
    parts = [k[k[:, 1] == relation] for k in known]
    k = np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)
    return k[:, [0, 2]] if side == Side.TAIL else k[:, [2, 0]]


def _run_group(scorer, tri, idx, side, ids, known_pairs, opts, tuning, run):
    """Rank the tasks ``idx`` (rows of ``tri``) of one relation and side against entity ids ``ids``, the
    ``known_pairs`` (anchor, answer) removed in the filtered setting."""
    anchor_col, answer_col = (0, 2) if side == Side.TAIL else (2, 0)
    anchors, query = np.unique(tri[idx, anchor_col], return_inverse=True)
    pos = np.searchsorted(ids, tri[idx, answer_col])
    triples = np.stack([np.zeros(len(idx), np.int64), query.reshape(-1), pos], 1)
    filt = ()
    if opts.filtered and len(known_pairs):
        keep = np.isin(known_pairs[:, 0], anchors) & np.isin(known_pairs[:, 1], ids)
        kp = known_pairs[keep]
        if len(kp):
            filt = [np.stack([np.zeros(len(kp), np.int64), np.searchsorted(anchors, kp[:, 0]),
                              np.searchsorted(ids, kp[:, 1])], 1)]
    inner = opts.replace(sides=("tail",), restrict_relations=None, restrict_entities=None, macro=False,
                         num_relations=len(anchors), query_metrics_k=(), progress=False)
    out = run(_GroupScorer(scorer, int(tri[idx[0], 1]), side, anchors, ids), triples, filt, inner, tuning)
    t = out.rank_table
    rows = idx[np.asarray(t.triple_index)]
    table = RankTable(side=np.full(len(t), int(side), np.int8), optimistic=t.optimistic, pessimistic=t.pessimistic,
                      num_candidates=t.num_candidates, triple_index=rows, relation=tri[rows, 1])
    return table, (out.protocol.consistency_checked or 0, out.protocol.consistency_mismatches or 0)


#: (query, entity) pairs one run of the answers outside their allowed sets may filter (their product, chunked)
OUTSIDE_PAIRS = 1 << 21


def _outside(scorer, tri, idx, side, allowed, pairs, opts, tuning, run) -> list:
    """The tasks ``idx`` whose answer is outside ``allowed``, each ranked against ``allowed`` plus its answer.

    Filtered: in one run (per chunk) over ``allowed`` and all these answers ``O``, every ``(query, o)`` with ``o``
    in ``O`` filtered as if known, so a task keeps only its own answer from ``O`` (the engine never filters a
    task's true answer). Unfiltered there is nothing to filter with: one run per answer."""
    answer_col, anchor_col = (2, 0) if side == Side.TAIL else (0, 2)
    if not opts.filtered:
        return [_run_group(scorer, tri, idx[tri[idx, answer_col] == a], side, np.union1d(allowed, [a]), pairs, opts,
                           tuning, run)[0] for a in np.unique(tri[idx, answer_col])]
    tables = []
    answers = np.unique(tri[idx, answer_col])
    queries = np.unique(tri[idx, anchor_col])
    step = max(1, OUTSIDE_PAIRS // max(len(answers), 1))
    for lo in range(0, len(queries), step):
        chunk = queries[lo:lo + step]
        sub = idx[np.isin(tri[idx, anchor_col], chunk)]
        own = np.unique(tri[sub, answer_col])
        fake = np.stack([np.repeat(chunk, len(own)), np.tile(own, len(chunk))], 1)
        known = np.concatenate([pairs, fake]) if len(pairs) else fake
        tables.append(_run_group(scorer, tri, sub, side, np.union1d(allowed, own), known, opts, tuning, run)[0])
    return tables


def evaluate_constrained(scorer, triples, known: list[np.ndarray], constraints, opts, tuning, run):
    """``(RankTable, outcome)`` of the entity tasks of ``triples`` under ``constraints`` (see the module)."""
    if opts.distributed == "entities":  # each group's columns are entity ids of the whole model
        raise InvalidInputError("type constraints cannot run on entity shards (distributed='entities'); use "
                                "distributed='tasks' (every rank ranks its share of each group) or one process")
    if opts.num_negatives is not None:
        raise InvalidInputError("type constraints rank against every allowed entity: num_negatives is not supported")
    tri = as_triples("triples", triples)
    keep = np.ones(len(tri), bool)
    if opts.restrict_relations is not None:
        keep &= np.isin(tri[:, 1], opts.restrict_relations)
    if opts.restrict_entities is not None:
        keep &= np.isin(tri[:, 0], opts.restrict_entities) & np.isin(tri[:, 2], opts.restrict_entities)
    if tri.size and (tri[:, 1].max() >= constraints.num_relations or
                     tri[:, [0, 2]].max() >= constraints.num_entities):
        raise InvalidInputError("type constraints hold fewer relations or entities than the evaluation triples use")
    known = [as_triples("filter_triples", k) for k in known] + [tri]
    out = Outcome([])
    for side in (Side(s) for s in sorted(Side.parse(x) for x in opts.sides if x != "relation")):
        answer_col = 2 if side == Side.TAIL else 0
        for rel in np.unique(tri[keep, 1]):
            idx = np.flatnonzero(keep & (tri[:, 1] == rel))
            allowed = constraints.allowed(rel, int(side))
            if allowed.size == 0:  # a relation and side the constraints do not state: every entity is allowed
                allowed = np.arange(constraints.num_entities)  # (an empty set would rank each answer first)
                out.unconstrained += len(idx)
            if opts.restrict_entities is not None:
                allowed = np.intersect1d(allowed, opts.restrict_entities)
            inside = np.isin(tri[idx, answer_col], allowed)
            pairs = _known_of(known, rel, side)
            if inside.any():
                table, (checked, differed) = _run_group(scorer, tri, idx[inside], side, allowed, pairs, opts, tuning,
                                                        run)
                out.tables.append(table)
                out.consistency_checked += checked
                out.consistency_mismatches += differed
                out.groups += 1
            if (~inside).any():  # against the allowed set plus the answer itself
                out.tables += _outside(scorer, tri, idx[~inside], side, allowed, pairs, opts, tuning, run)
                out.outside += int((~inside).sum())
    if not out.tables:
        raise InvalidInputError("type constraints: no evaluation task is left after the restriction")
    table = RankTable.concat(out.tables)
    if opts.macro:  # one over the tasks sharing the query (anchor, relation, side), inside and outside alike
        anchor = np.where(table.side == Side.TAIL, tri[table.triple_index, 0], tri[table.triple_index, 2])
        keys = np.stack([anchor, table.relation, table.side.astype(np.int64)], 1)
        _, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        table = dataclasses.replace(table, weight=1.0 / counts[inverse.reshape(-1)])
    return table, out


def resolve_constraints(type_constraints, scorer, triples, filter_triples, train_triples):
    """A :class:`~kgeval.data.types.TypeConstraints` from what ``evaluate(type_constraints=...)`` was given:
    the object itself, or ``"train"`` (the entities seen in each position of each relation in the training
    triples: ``train_triples``, else the filter set named ``train`` / ``training``)."""
    from ..data.types import TypeConstraints
    from ..data.unseen import training_triples_of

    if isinstance(type_constraints, TypeConstraints):
        return type_constraints
    if isinstance(type_constraints, str) and type_constraints.strip().lower() in ("train", "training"):
        train = train_triples
        if train is None:
            named = training_triples_of(filter_triples)
            train = None if named is None else named[1]
        if train is None:
            raise InvalidInputError("type_constraints='train' needs the training triples: pass train_triples= or "
                                    "a filter set named 'train'")
        tri = as_triples("triples", triples)
        train = as_triples("train_triples", train)
        ne = int(getattr(scorer, "num_entities", 0) or max(tri[:, [0, 2]].max(), train[:, [0, 2]].max()) + 1)
        nr = int(getattr(scorer, "num_relations", 0) or max(tri[:, 1].max(), train[:, 1].max()) + 1)
        return TypeConstraints.from_triples(train, ne, nr)
    raise InvalidInputError(f"type_constraints must be a kgeval.data.types.TypeConstraints or 'train', got "
                            f"{type(type_constraints).__name__}")


def constrained_output(scorer, triples, filter_triples, named: list, constraints, opts, tuning, run):
    """``(table, protocol, extra, sampled)``: the entity sides of ``opts`` under ``constraints``, and the relation
    tasks when asked (:mod:`.relations`), for :func:`kgeval.evaluation.evaluate`."""
    from ..protocol import FilterSet
    from .scoring import eval_mode

    with eval_mode(scorer):
        table, outcome = evaluate_constrained(scorer, triples, [a for _, a in named], constraints, opts, tuning, run)
        tables = [table]
        if "relation" in opts.sides:
            from .relations import evaluate_relations

            tables.append(evaluate_relations(scorer, triples, [a for _, a in named], opts, tuning, run)[0])
    both = RankTable.concat(tables)
    tri = as_triples("triples", triples)
    sizes = constraints.sizes()
    record = {"source": constraints.source, "answers_outside": int(outcome.outside), "groups": int(outcome.groups),
              "unconstrained_tasks": int(outcome.unconstrained),
              "mean_allowed_heads": float(sizes[:, 0].mean()), "mean_allowed_tails": float(sizes[:, 1].mean()),
              "outside_rule": "ranked against the allowed entities plus the answer itself"}
    from ..protocol import EvaluationProtocol

    protocol = EvaluationProtocol(
        sides=tuple(opts.sides), filtered=opts.filtered,
        filter_sets=(FilterSet("evaluation", len(tri)), *(FilterSet(str(n), len(a)) for n, a in named))
        if opts.filtered else (),
        num_triples=len(tri), num_evaluated_triples=len(np.unique(both.triple_index)), num_tasks=len(both),
        num_entities=constraints.num_entities, num_relations=constraints.num_relations,
        restrict_entities=None if opts.restrict_entities is None else len(opts.restrict_entities),
        restrict_relations=None if opts.restrict_relations is None else len(opts.restrict_relations),
        macro=opts.macro, tie_tolerance=opts.tie_tolerance, tie_rtol=opts.tie_rtol, nan_policy=opts.nan_policy,
        preset=opts.protocol, candidates="type-constrained", consistency_checked=outcome.consistency_checked,
        consistency_mismatches=outcome.consistency_mismatches if opts.check_consistency else None,
        extra={"type_constraints": record})
    return both, protocol, {}, None


def evaluate_typed(scorer, triples, filter_triples, type_constraints, train_triples, opts, tuning, run):
    """:func:`kgeval.evaluation.evaluate`'s path with ``type_constraints``: ``(table, protocol, extra, sampled)``."""
    from .inputs import _filter_sets

    allowed = resolve_constraints(type_constraints, scorer, triples, filter_triples, train_triples)
    named = _filter_sets(filter_triples) if opts.filtered else []
    return constrained_output(scorer, triples, filter_triples, named, allowed, opts, tuning, run)
