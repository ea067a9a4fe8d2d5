"""Relation prediction: the task ``(h, ?, t)`` ranks the true relation against every relation.

It is the one driver's entity ranking, applied to a transposed problem (no second driver): each distinct pair
``(h, t)`` of the evaluation triples is a query ``q``, each relation a candidate, and the evaluation triple
``(h, r, t)`` becomes ``(0, q, r)`` ranked on its tail side:

- the scorer of the transposed problem scores query ``q`` against every candidate relation at once with
  ``scorer.score_relations(heads, tails)`` (``(batch, num_relations)``: the built-in bilinear models in one
  product), else through ``score_triples`` for every relation, in slices of bounded size;
- the known triples ``(h, r', t)`` of an evaluated pair become ``(0, q, r')``: filtering removes the other
  known relations of the pair from its candidates, and ``num_candidates`` counts the rest exactly, so every
  metric, null expectation, adjusted index, z-score and p-value applies unchanged;
- ``restrict_relations`` is the candidate set (triples of other relations are dropped, as for entities);
  ``restrict_entities`` drops the triples whose head or tail is outside it; ``macro`` weights a task by one
  over the tasks sharing its pair.

The tasks come back with side ``relation`` (:data:`kgeval.ranks.Side.RELATION`), their triple index and true
relation, beside the head and tail tasks of the same evaluation. A model trained with inverse relations is
asked for its forward relations only (``num_relations`` of the scorer counts those).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..errors import InvalidInputError
from ..protocol import FilterSet
from ..ranks import RankTable, Side
from ..triples import as_triples

__all__ = ["evaluate_relations", "with_relations", "score_relations", "RelationScorer"]

#: scores computed at once by the ``score_triples`` fallback (pairs x relations)
FALLBACK_SCORES = 1 << 20


def score_relations(scorer, heads: torch.Tensor, tails: torch.Tensor, relations: torch.Tensor) -> torch.Tensor:
    """``(batch, len(relations))`` scores of ``(heads[i], relations[j], tails[i])``: the scorer's
    ``score_relations`` where it has one (its columns ``relations``), else ``score_triples`` slice by slice."""
    if hasattr(scorer, "score_relations"):
        return torch.as_tensor(scorer.score_relations(heads, tails))[:, relations.to(torch.long)]
    if not hasattr(scorer, "score_triples"):
        raise InvalidInputError("relation prediction needs a scorer with score_relations(heads, tails) or "
                                "score_triples(heads, relations, tails)")
    b, k = heads.shape[0], relations.shape[0]
    rows = max(1, FALLBACK_SCORES // max(k, 1))
    parts = []
    for lo in range(0, b, rows):
        h, t = heads[lo:lo + rows], tails[lo:lo + rows]
        n = h.shape[0]
        scores = scorer.score_triples(h.repeat_interleave(k), relations.repeat(n), t.repeat_interleave(k))
        parts.append(torch.as_tensor(scores).reshape(n, k))
    return torch.cat(parts) if parts else torch.zeros(0, k)


class RelationScorer:
    """The transposed problem's scorer: entity ``j`` is relation ``relations[j]``, relation ``q`` the pair
    ``(heads[q], tails[q])``; only tail queries are asked."""

    def __init__(self, scorer, heads: np.ndarray, tails: np.ndarray, relations: np.ndarray):
        self.scorer = scorer
        self.heads, self.tails = torch.as_tensor(heads), torch.as_tensor(tails)
        self.relations = torch.as_tensor(relations)
        self.num_entities, self.num_relations = int(len(relations)), int(len(heads))
        self.device = torch.device("cpu")

    def _rows(self, q) -> torch.Tensor:
        q = torch.as_tensor(q, dtype=torch.long).cpu()
        device = getattr(self.scorer, "device", torch.device("cpu"))
        h, t = self.heads[q].to(device), self.tails[q].to(device)
        return score_relations(self.scorer, h, t, self.relations.to(device)).detach().cpu()

    def score_tails(self, heads, relations, entities=None):
        rows = self._rows(relations)
        if entities is None:
            return rows
        return rows[:, entities] if isinstance(entities, slice) else rows.index_select(1, torch.as_tensor(entities))

    def score_heads(self, relations, tails, entities=None):  # pragma: no cover - the driver asks tails only
        raise InvalidInputError("relation prediction ranks relations only")

    def score_triples(self, heads, relations, tails):
        return self._rows(relations).gather(1, torch.as_tensor(tails, dtype=torch.long).view(-1, 1)).view(-1)


@dataclasses.dataclass
class Transposed:
    """The transposed evaluation: its triples, known triples and scorer, and the way back."""

    triples: np.ndarray  # (0, q, candidate index)
    known: list  # the other known triples of the evaluated pairs, (0, q, candidate index) arrays (the filter sets)
    scorer: RelationScorer
    kept: np.ndarray  # indices of the evaluated triples among the given ones
    relations: np.ndarray  # candidate index -> relation id
    dropped: int
    true_relation: np.ndarray  # the true relation of each given triple


def _num_relations(scorer, triples: np.ndarray, opts) -> int:
    n = opts.num_relations or getattr(scorer, "num_relations", None)
    return int(n) if n is not None else int(triples[:, 1].max()) + 1


def transpose(scorer, triples, filter_sets: list[np.ndarray], opts) -> Transposed:
    """The relation tasks of ``triples`` as a tail-ranking problem (see the module docstring)."""
    tri = as_triples("triples", triples)
    num_relations = _num_relations(scorer, tri, opts)
    if tri.size and tri[:, 1].max() >= num_relations:
        raise InvalidInputError(f"relation id {int(tri[:, 1].max())} is out of range for {num_relations} relations")
    allowed = np.arange(num_relations) if opts.restrict_relations is None else np.asarray(opts.restrict_relations)
    allowed = allowed[allowed < num_relations]
    keep = np.isin(tri[:, 1], allowed)
    if opts.restrict_entities is not None:
        keep &= np.isin(tri[:, 0], opts.restrict_entities) & np.isin(tri[:, 2], opts.restrict_entities)
    kept = np.flatnonzero(keep)
    if kept.size == 0:
        raise InvalidInputError("relation prediction: no evaluation triple is left after the restriction")
    pairs, query = np.unique(tri[kept][:, [0, 2]], axis=0, return_inverse=True)
    query = query.reshape(-1)
    index_of = np.full(num_relations, -1, dtype=np.int64)
    index_of[allowed] = np.arange(allowed.size)
    transposed = np.stack([np.zeros(kept.size, dtype=np.int64), query, index_of[tri[kept][:, 1]]], axis=1)
    known = []  # the evaluation triples are known anyway: the driver adds them
    for arr in filter_sets:  # the known relations of every evaluated pair, among the candidates
        arr = as_triples("filter_triples", arr)
        arr = arr[np.isin(arr[:, 1], allowed)]
        if arr.size == 0:
            continue
        keys = np.concatenate([pairs, arr[:, [0, 2]]])
        _, ids = np.unique(keys, axis=0, return_inverse=True)
        ids = ids.reshape(-1)
        pair_id, arr_id = ids[: len(pairs)], ids[len(pairs):]
        lookup = np.full(ids.max() + 1, -1, dtype=np.int64)
        lookup[pair_id] = np.arange(len(pairs))
        q = lookup[arr_id]
        hit = q >= 0
        known.append(np.stack([np.zeros(hit.sum(), dtype=np.int64), q[hit], index_of[arr[hit, 1]]], axis=1))
    scorer_t = RelationScorer(scorer, pairs[:, 0], pairs[:, 1], allowed)
    return Transposed(transposed, known, scorer_t, kept, allowed, int(tri.shape[0] - kept.size), tri[:, 1])


def evaluate_relations(scorer, triples, filter_sets: list[np.ndarray], opts, tuning, run):
    """``(RankTable, protocol)`` of the relation tasks of ``triples`` under ``opts`` (``run``: the driver,
    :func:`kgeval.evaluation.run_evaluation`)."""
    if opts.distributed == "entities":  # an entity shard holds some entities, the relation tasks need all
        raise InvalidInputError("relation prediction cannot run on entity shards (distributed='entities'); "
                                "use distributed='tasks' or one process")
    t = transpose(scorer, triples, filter_sets, opts)
    inner = opts.replace(sides=("tail",), restrict_relations=None, restrict_entities=None, query_metrics_k=(),
                         type_constraints=None,  # entity positions: the relation tasks have none
                         num_relations=t.scorer.num_relations)
    out = run(t.scorer, t.triples, t.known, inner, tuning)
    inner_table = out.rank_table
    kept = t.kept[np.asarray(inner_table.triple_index)]
    table = RankTable(side=np.full(len(inner_table), int(Side.RELATION), dtype=np.int8),
                      optimistic=inner_table.optimistic, pessimistic=inner_table.pessimistic,
                      num_candidates=inner_table.num_candidates, weight=inner_table.weight, triple_index=kept,
                      relation=t.true_relation[kept])
    return table, out.protocol, t


def with_relations(scorer, triples, filter_triples, named: list, opts, tuning, run):
    """``(table, protocol, extra, sampled negatives)`` of the entity sides of ``opts`` (if any, by ``run``) and
    the relation tasks, in one table; ``named``: the ``(name, array)`` filter sets (empty when unfiltered)."""
    entity_sides = tuple(s for s in opts.sides if s != "relation")
    table, rel_protocol, t = evaluate_relations(scorer, triples, [a for _, a in named], opts, tuning, run)
    if not entity_sides:
        sets = (FilterSet("evaluation", int(len(t.triples) + t.dropped)),
                *(FilterSet(str(name), len(a)) for name, a in named)) if opts.filtered else ()
        protocol = rel_protocol.replace(
            sides=("relation",), filter_sets=sets,
            num_triples=int(len(t.triples) + t.dropped), num_evaluated_triples=len(t.triples),
            num_entities=getattr(scorer, "num_entities", None), num_relations=int(len(t.relations)),
            restrict_entities=None if opts.restrict_entities is None else len(opts.restrict_entities),
            restrict_relations=None if opts.restrict_relations is None else len(t.relations),
            num_triples_dropped=t.dropped, candidates="relations")
        return table, protocol, {}, None
    out = run(scorer, triples, filter_triples, opts.replace(sides=entity_sides), tuning)
    both = RankTable.concat([out.rank_table, table])
    protocol = out.protocol.replace(sides=(*out.protocol.sides, "relation"), num_tasks=len(both))
    return both, protocol, out.extra, out.sampled_negatives
