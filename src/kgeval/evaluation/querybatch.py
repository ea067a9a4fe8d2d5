"""Batch bookkeeping shared by full ranking (:mod:`.full`) and entity shards (:mod:`.sharded`).

A side's tasks are sorted by query key, so each query's tasks are contiguous (:func:`group_by_query`);
a batch covers whole queries ``q0:q1`` (tasks ``a0:a1``) and maps every task to its query row
(:func:`batch_tasks`); the filter's known answers of its queries become ``(row, column)`` pairs
(:func:`known_answers`); a chunked batch whose true scores differ re-ranks a sub-batch of its queries
(:func:`redo_batch`). Nothing here scores or counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .context import RunContext
from ..filtering import FilterIndex

__all__ = ["Batch", "Queries", "group_by_query", "known_answers", "batch_tasks", "first_rest", "Redo", "redo_batch"]


@dataclass
class Batch:
    """One batch of one side's tasks, as every ranking routine takes it: its query rows and its tasks
    (sorted by query row), with the known answers to exclude."""

    ent: torch.Tensor  # per query row: the given entity id (an entity shard: its embedding row)
    rel: torch.Tensor  # per query row: the relation id
    task_q: torch.Tensor  # per task: its query row (sorted)
    col: torch.Tensor  # per task: its answer's candidate column (-1: on another entity shard)
    first: torch.Tensor | None  # each query row's first task and the others (None, None: one task per row)
    rest: torch.Tensor | None
    known: tuple | None  # (row, column) pairs of the known answers to exclude (None: unfiltered)
    triples: np.ndarray  # per task: its triple (for error messages)

    @property
    def num_tasks(self) -> int:
        return int(self.task_q.shape[0])

    def part(self, q0: int, q1: int, t0: int, t1: int, known) -> Batch:
        """Query rows ``q0:q1`` with their tasks ``t0:t1`` (``known``: their pairs, rows relative to ``q0``)."""
        tq = self.task_q[t0:t1] - q0
        return Batch(self.ent[q0:q1], self.rel[q0:q1], tq, self.col[t0:t1], *first_rest(tq), known,
                     self.triples[t0:t1])

    def redo(self, differ: torch.Tensor) -> tuple[Batch, torch.Tensor]:
        """The queries of the tasks ``differ`` as a batch of their own, and its tasks' positions here."""
        r = redo_batch(self.ent.shape[0], self.task_q, differ, self.known)
        t = r.tasks
        return Batch(self.ent[r.queries], self.rel[r.queries], r.task_q, self.col[t], r.first, r.rest, r.known,
                     self.triples[t.cpu().numpy()]), t


@dataclass
class Queries:
    """The tasks of one side sorted by query key, so each query's tasks are contiguous."""

    qstart: np.ndarray  # first (sorted) task of each query
    task_end: np.ndarray  # tasks of queries [0, i] end at task_end[i]
    ent: torch.Tensor  # per query: the given entity and relation
    rel: torch.Tensor
    keys: torch.Tensor
    answers: torch.Tensor  # per sorted task
    triples: np.ndarray
    triple_index: np.ndarray


def group_by_query(ctx: RunContext, sub, eval_idx, keys, answers) -> Queries:
    """The side's tasks (``sub``: triples, ``keys``: query keys ``entity * #relations + relation``,
    ``answers``) sorted stably by key, with each query's first task and entity / relation."""
    dev = ctx.device
    order = np.argsort(keys, kind="stable")
    skeys = keys[order]
    # where the key changes (no query at all for no task: a "tasks" rank's empty share)
    qstart = np.flatnonzero(np.r_[skeys.size > 0, skeys[1:] != skeys[:-1]])
    uq = skeys[qstart]
    return Queries(
        qstart=qstart,
        task_end=np.r_[qstart[1:], skeys.shape[0]],
        ent=torch.as_tensor((uq // ctx.num_relations).astype(np.int64), device=dev),
        rel=torch.as_tensor((uq % ctx.num_relations).astype(np.int64), device=dev),
        keys=torch.as_tensor(uq, device=dev),
        answers=torch.as_tensor(answers[order], device=dev),
        triples=sub[order],
        triple_index=eval_idx[order],
    )


def known_answers(ctx: RunContext, index: FilterIndex, keys: torch.Tensor):
    """``(query row, column)`` of every known answer of the batch's queries that is a candidate."""
    rows, ents = index.pairs(keys)
    if ctx.pos_map is None:
        return rows, ents
    cols = ctx.pos_map[ents]
    ok = cols >= 0  # answers outside the restriction are not candidates
    return rows[ok], cols[ok]


def batch_tasks(qstart: np.ndarray, nt: int, dev):
    """``(task_q, first, rest)`` of a batch whose query ``i`` owns tasks ``qstart[i]..``: each task's
    query row, and the first / other tasks of each query as :meth:`Counter.rows` takes them
    (``None, None`` when every query has one task: rows are compared in place)."""
    task_q = torch.as_tensor(np.searchsorted(qstart, np.arange(nt), side="right") - 1, device=dev)
    if nt == len(qstart):
        return task_q, None, None
    first = torch.as_tensor(qstart, device=dev)
    rest = torch.ones(nt, dtype=torch.bool, device=dev)
    rest[first] = False
    return task_q, first, rest.nonzero().view(-1)


def first_rest(task_q: torch.Tensor):
    """``(first, rest)`` of sorted ``task_q`` as :meth:`Counter.rows` takes them (None, None: one task per row)."""
    nt = task_q.shape[0]
    if task_q.device.type == "cpu":  # numpy: cheaper than five small torch ops (once per row group)
        a = task_q.numpy()
        change = np.empty(nt, dtype=bool)
        change[:1] = True
        np.not_equal(a[1:], a[:-1], out=change[1:])
        first = np.flatnonzero(change)
        if first.shape[0] == nt:
            return None, None
        return torch.from_numpy(first), torch.from_numpy(np.flatnonzero(~change))
    change = torch.ones(nt, dtype=torch.bool, device=task_q.device)
    change[1:] = task_q[1:] != task_q[:-1]
    first = change.nonzero().view(-1)
    if first.numel() == nt:
        return None, None
    return first, (~change).nonzero().view(-1)


@dataclass
class Redo:
    """The queries of the tasks whose true score differed, as a batch of their own."""

    queries: torch.Tensor  # their rows in the batch
    tasks: torch.Tensor  # their tasks in the batch
    task_q: torch.Tensor  # each of those tasks' row in ``queries``
    known: tuple | None  # the known answers of those rows, rows renumbered
    first: torch.Tensor | None
    rest: torch.Tensor | None


def redo_batch(nq: int, task_q: torch.Tensor, differ: torch.Tensor, known) -> Redo:
    """Every task of a query any of whose tasks ``differ`` (positions in the batch), as a batch of its own:
    its query rows, tasks, task -> row map, known answers (rows renumbered) and first / rest split."""
    dev = task_q.device
    redo_q = torch.unique(task_q[differ])
    pos = torch.full((nq,), -1, dtype=torch.long, device=dev)
    pos[redo_q] = torch.arange(redo_q.numel(), device=dev)
    tasks = (pos[task_q] >= 0).nonzero().view(-1)
    sub_q = pos[task_q[tasks]]
    sub_known = None
    if known is not None:
        keep = pos[known[0]] >= 0
        sub_known = (pos[known[0][keep]], known[1][keep])
    first, rest = first_rest(sub_q)
    return Redo(redo_q, tasks, sub_q, sub_known, first, rest)
