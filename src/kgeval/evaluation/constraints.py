"""Type-constrained full ranking: each task against the entities allowed in its position of its relation.

The constraint sets (:class:`kgeval.data.types.CandidateSets`, CSR rows per relation and side) turn one
side's tasks into *groups* sharing a candidate set, each ranked by the one full-ranking driver
(:func:`.full.rank_full`) exactly as a restricted evaluation is: the group's allowed entities are its
columns (``entities=`` scores only them), known answers outside them are no candidates, and
``num_candidates = #allowed - #other known answers among them`` (filtered) or ``#allowed`` (unfiltered),
so the null model, adjusted indices and z-scores are those of the constrained task. The groups:

- the tasks of relation ``r`` whose answer is allowed: candidates ``A_r`` (``A_r``: the relation side's
  set, intersected with ``restrict_entities``; every entity of the restriction when the side has no set);
- a task whose answer ``a`` is outside ``A_r``: candidates ``A_r + {a}``. This is OpenKE's rule (its
  ``testHead`` / ``testTail`` compare the answer with the allowed entities only, wherever the answer is) and
  keeps the task: it is counted in the protocol, never dropped. All such tasks of a relation side form one
  group over ``A_r + O`` (``O``: their answers) with ``O`` excluded from every row like known answers, the own
  answer counted back (:class:`OutsideAnswers`): at most two groups per relation side.

Nothing here runs without constraints: the unconstrained path is :func:`.full.rank_full` alone. Memory
beyond the driver's: one ``num_entities`` int64 column map, reused by every group, and one group's
allowed ids at a time.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch

from ..data.types import CandidateSets
from ..errors import InvalidInputError
from ..protocol import TypeConstraints
from ..ranks import SIDE_NAMES
from .batches import RunContext, SideResult
from .full import rank_full

__all__ = ["resolve", "rank_constrained", "task_groups", "protocol_record"]

#: the filter-set names ``type_constraints="train"`` infers from
TRAIN_NAMES = ("train", "training")


def resolve(value, inp) -> CandidateSets | None:
    """The evaluation's :class:`CandidateSets` from ``EvaluationOptions.type_constraints`` (None: none),
    checked against the evaluation's entity and relation counts."""
    if value is None:
        return None
    if isinstance(value, str) and value == "train":
        sets = [a for name, a in inp.filter_sets if name.lower() in TRAIN_NAMES]
        if not sets:
            names = ", ".join(repr(n) for n, _ in inp.filter_sets) or "none"
            raise InvalidInputError(
                "type_constraints='train' infers the allowed entities from the training triples: pass them as the "
                f"filter set named 'train' (filter_triples={{'train': ...}}; given sets: {names}), or pass a "
                "CandidateSets (kgeval.data.types.CandidateSets.from_triples)")
        train = np.concatenate(sets) if len(sets) > 1 else sets[0]
        return CandidateSets.from_triples(train, num_entities=inp.num_entities, num_relations=inp.num_relations)
    if isinstance(value, (str, os.PathLike)):
        from ..data.type_files import read_type_constraints

        return read_type_constraints(value, num_entities=inp.num_entities, num_relations=inp.num_relations)
    cs = value
    if cs.num_entities != inp.num_entities:
        raise InvalidInputError(f"type_constraints cover {cs.num_entities} entities, the scorer has "
                                f"{inp.num_entities}: build them with the evaluation's entity ids")
    if cs.num_relations < inp.num_relations:
        raise InvalidInputError(f"type_constraints cover {cs.num_relations} relations, the evaluation has "
                                f"{inp.num_relations}: build them with the evaluation's relation ids")
    return cs


def task_groups(cs: CandidateSets, relations: np.ndarray, answers: np.ndarray, side: int):
    """The groups of one side's tasks: ``(order, bounds, relation, outside)``, the tasks ``order[bounds[g]:bounds[g +
    1]]`` forming group ``g``: those of relation ``relation[g]`` whose answers are allowed (``outside[g]`` False), or
    those whose answers are not (True). Groups are sorted by relation, the allowed group first."""
    rel = np.asarray(relations, dtype=np.int64)
    ans = np.asarray(answers, dtype=np.int64)
    key = rel * 2 + ~cs.contains(rel, ans, side)
    order = np.argsort(key, kind="stable")
    skey = key[order]
    starts = np.flatnonzero(np.r_[skey.size > 0, skey[1:] != skey[:-1]])
    bounds = np.r_[starts, skey.size].astype(np.int64)
    return order, bounds, skey[starts] // 2, (skey[starts] % 2).astype(bool)


class _ColumnMap:
    """One ``num_entities`` entity -> column map, filled for one group's allowed ids and cleared after it (a map
    per group would cost ``O(num_entities)`` each; filling costs ``O(#allowed)``)."""

    def __init__(self, num_entities: int, device):
        self.map = torch.full((num_entities,), -1, dtype=torch.long, device=device)

    def fill(self, allowed: torch.Tensor) -> torch.Tensor:
        self.map[allowed] = torch.arange(allowed.shape[0], device=allowed.device)
        return self.map

    def clear(self, allowed: torch.Tensor) -> None:
        self.map[allowed] = -1


class OutsideAnswers:
    """The excluded answers of a group of tasks whose answers are outside their relation side's set ``A``: each query
    row is ranked against ``A + O`` (``O``: the group's outside answers, its columns) with every entity of ``O``
    excluded, besides the query's known answers (filtered). A task's own answer, in ``O``, is counted back as every
    filtered true answer is; another task's outside answer is no candidate of it. So a task ranks against
    ``A`` (minus the known answers) plus itself, and all of a relation side's outside tasks share one group.

    Shaped as :meth:`kgeval.filtering.FilterIndex.pairs` answers: ``(row, entity)`` pairs, distinct per row. Their
    count is ``#rows x |O|`` at most besides the known answers: within the ``#rows x (|A| + |O|)`` scores of a batch.
    """

    def __init__(self, index, outside: torch.Tensor, num_entities: int):
        self.index, self.outside, self.num_entities = index, outside, int(num_entities)

    def pairs(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, m, dev = keys.shape[0], self.outside.shape[0], keys.device
        rows = torch.arange(n, device=dev).repeat_interleave(m)
        ents = self.outside.repeat(n)
        if self.index is not None:  # the known answers too, each (row, entity) pair once
            r, e = self.index.pairs(keys)
            code = torch.unique(torch.cat([rows * self.num_entities + ents, r * self.num_entities + e]))
            rows, ents = code // self.num_entities, code % self.num_entities
        return rows, ents


def _allowed(cs: CandidateSets, relation: int, side: int, outside: np.ndarray | None, restriction: np.ndarray | None):
    """A group's sorted candidate ids (None: every entity, no restriction): the relation side's set (every entity
    of the restriction where it has none) within the restriction, plus the group's ``outside`` answers."""
    ids = cs.allowed(relation, side)
    if ids is None:
        return restriction
    if restriction is not None:
        ids = np.intersect1d(ids, restriction, assume_unique=True)
    return ids if outside is None else np.union1d(ids, outside)


def rank_constrained(ctx: RunContext, inp, side: int, sub: np.ndarray, eval_idx: np.ndarray, keys: np.ndarray,
                     answers: np.ndarray, index, bar, red, make_scorer) -> SideResult:
    """Counts of every task of one side under ``inp.constraints``: :func:`.full.rank_full` per group (see the
    module docstring), the groups in a fixed order (an entity shard's ranks all run the same sequence of
    collectives). ``make_scorer(allowed)``: the side's scorer over the sorted candidate ids ``allowed``
    (a tensor, or None for every entity)."""
    cs: CandidateSets = inp.constraints
    order, bounds, grel, gout = task_groups(cs, sub[:, 1], answers, side)
    res = SideResult()
    columns = _ColumnMap(inp.num_entities, ctx.device)
    for g in range(len(bounds) - 1):
        tasks = order[bounds[g]:bounds[g + 1]]
        outside = np.unique(answers[tasks]) if gout[g] else None
        ids = _allowed(cs, int(grel[g]), side, outside, inp.entities)
        gindex = index
        if ids is None or ids is inp.entities:  # the relation side is unconstrained: the evaluation's own columns
            gctx, allowed = ctx, ctx.allowed
        else:
            allowed = torch.as_tensor(ids, dtype=torch.long, device=ctx.device)
            gctx = dataclasses.replace(ctx, num_columns=int(allowed.shape[0]), allowed=allowed,
                                       pos_map=columns.fill(allowed), chunk_used=None, chunk_redone_queries=0)
            if outside is not None:
                gindex = OutsideAnswers(index, torch.as_tensor(outside, device=ctx.device), inp.num_entities)
        try:
            part = rank_full(gctx, make_scorer(allowed), sub[tasks], eval_idx[tasks], keys[tasks], answers[tasks],
                             gindex, bar, red)
        finally:
            if gctx is not ctx:
                columns.clear(allowed)
        if gctx is not ctx:  # the group's chunk record, kept by the evaluation's context
            ctx.chunk_redone_queries += gctx.chunk_redone_queries
            if gctx.chunk_used is not None:
                ctx.note_chunk(gctx.chunk_used)
        for name in ("triple_index", "better", "tied", "ncand"):
            getattr(res, name).extend(getattr(part, name))
    return res


def protocol_record(inp, eval_idx: np.ndarray) -> TypeConstraints | None:
    """The protocol's record of the constraints: their source and digest, and the evaluated tasks whose answer
    is outside its allowed set (every side; the same on every rank of a distributed evaluation)."""
    cs: CandidateSets | None = inp.constraints
    if cs is None:
        return None
    sub = inp.triples[eval_idx]
    outside = 0
    for side in inp.side_codes:
        ans = sub[:, 0] if SIDE_NAMES[side] == "head" else sub[:, 2]
        outside += int((~cs.contains(sub[:, 1], ans, side)).sum())
    return TypeConstraints(source=cs.source, sha256=cs.sha256(), constrained=cs.num_constrained(),
                           relation_sides=2 * cs.num_relations, outside_tasks=outside)
