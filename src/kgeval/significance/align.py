"""What :func:`kgeval.compare` compares: models read from results, rank tables or run
directories, checked to be evaluated on the same tasks under the same protocol, and aligned.

A *model* is one :class:`~kgeval.Results` (or :class:`~kgeval.RankTable`), one run directory,
or a directory of replicated runs (``replicates.json``, written by
``pipeline(..., num_replicates=k)``): then it has one rank table per training seed.

Tasks are identified by ``(triple_index, side)``. When every task of both tables has a
triple index and the pairs are unique, the tables are aligned by sorting on them (their
order may differ) and an evaluation triple's head and tail tasks form one resampling unit.
Tables without a ``triple_index`` column are paired by position when their lengths and
side columns agree (each task is then its own unit). Evaluations that record different
``tasks_sha256`` (:func:`kgeval.protocol.tasks_digest`: other triples, or the same in another
order, at the same positions; other given negatives) are not the same tasks, whatever their
positions and relations say. Anything else is refused with :class:`TaskMismatchError`; different
protocols with :class:`ProtocolMismatchError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InvalidInputError
from ..ranks import RankTable


class TaskMismatchError(InvalidInputError):
    """The models were not evaluated on the same ranking tasks."""


class ProtocolMismatchError(InvalidInputError):
    """The models were evaluated under different protocols (filtering, restriction, sampling, dataset)."""


#: protocol fields (``EvaluationProtocol`` attributes) that must agree for a paired comparison
PROTOCOL_FIELDS = ("filtered", "filter_sets", "num_known_triples", "num_triples", "num_evaluated_triples",
                   "num_entities", "num_relations", "restrict_entities", "restrict_relations",
                   "num_triples_dropped", "sampling", "macro", "tie_tolerance", "candidates", "tasks_sha256")


@dataclass
class Model:
    """One compared model: its name, rank tables (one per replicate) and protocol."""

    name: str
    tables: list[RankTable]
    protocol: dict = field(default_factory=dict)
    dataset: dict | None = None  # the run's dataset identity (name, split hashes) when known
    replicated: bool = False
    path: Path | None = None  # the run or replicate directory it was read from


def _load_run(directory: Path) -> tuple[RankTable, dict, dict | None]:
    from ..workflow.run_files import load_run_results

    run, results = load_run_results(directory)  # refused where results.json and the rank table disagree
    return results.rank_table, results.protocol, run.metadata.get("dataset")


def as_model(item, index: int) -> Model:
    """A :class:`Model` from a Results, RankTable, run directory, replicate directory or ``(name, item)``."""
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        model = as_model(item[1], index)
        model.name = item[0]
        return model
    if isinstance(item, (str, os.PathLike)):
        from ..workflow.replicates import REPLICATES_FILE, load_replicates

        path = Path(item)
        if (path / REPLICATES_FILE).is_file():
            runs = load_replicates(path)
            loaded = [_load_run(r) for r in runs]
            # the model's protocol is its first run's: every other run must agree with it (a set
            # assembled by hand from runs evaluated otherwise would be averaged as one model)
            members = [Model(f"{path.name}/{r.name}", [t], p, d, path=r) for r, (t, p, d) in zip(runs, loaded)]
            for other in members[1:]:
                try:
                    check_protocols(members[0], other)
                except InvalidInputError as exc:
                    raise type(exc)(f"the runs of the replicate set {str(path)!r} are not one model's "
                                    f"replicates: {exc}") from None
            return Model(path.name, [t for t, _, _ in loaded], loaded[0][1], loaded[0][2], True, path)
        table, protocol, dataset = _load_run(path)
        return Model(path.name, [table], protocol, dataset, path=path)
    if isinstance(item, RankTable):
        return Model(f"model{index + 1}", [item])
    table = getattr(item, "rank_table", None)
    if table is None:
        raise InvalidInputError(f"model {index + 1}: expected Results with a rank table, a RankTable or a run "
                                f"directory, got {type(item).__name__}"
                                + (" without a rank table" if hasattr(item, "protocol") else ""))
    return Model(getattr(item, "name", None) or f"model{index + 1}", [table], dict(item.protocol or {}))


def check_protocols(a: Model, b: Model) -> None:
    """Refuse models whose protocols (or datasets) differ in a field both record."""
    from ..protocol import EvaluationProtocol

    pa, pb = EvaluationProtocol.from_dict(a.protocol), EvaluationProtocol.from_dict(b.protocol)
    for name in PROTOCOL_FIELDS:
        va, vb = getattr(pa, name), getattr(pb, name)
        if va is not None and vb is not None and va != vb and name == "tasks_sha256":
            raise TaskMismatchError(f"{a.name!r} and {b.name!r} were evaluated on different triples (or the same "
                                    "triples in another order, or other given negatives): a task of one is not "
                                    f"the task at its position in the other (tasks_sha256 {va[:12]}... vs {vb[:12]}...)")
        if va is not None and vb is not None and va != vb:
            raise ProtocolMismatchError(f"{a.name!r} and {b.name!r} were evaluated under different protocols: "
                                        f"{name} is {va!r} vs {vb!r}")
    da, db = a.dataset or {}, b.dataset or {}
    for key in ("reference", "hashes"):
        if da.get(key) is not None and db.get(key) is not None and da[key] != db[key]:
            raise ProtocolMismatchError(f"{a.name!r} and {b.name!r} were evaluated on different datasets "
                                        f"({key} differs: {da.get('reference')!r} vs {db.get('reference')!r})")


def _order(table: RankTable) -> np.ndarray | None:
    """Row order sorting the tasks by ``(triple_index, side)``, or None if that identity is incomplete."""
    ti = table.triple_index
    if ti is None or np.any(ti < 0):
        return None
    order = np.lexsort((table.side, ti))
    key_t, key_s = ti[order], table.side[order]
    if np.any((key_t[1:] == key_t[:-1]) & (key_s[1:] == key_s[:-1])):
        return None  # a (triple, side) pair twice: not an identity
    return order


def _same(x, y) -> bool:
    return (x is None) == (y is None) and (x is None or np.array_equal(x, y))


def align(reference: RankTable, table: RankTable, names: tuple[str, str]) -> RankTable:
    """``table``'s rows in the order of ``reference``'s tasks; refuses other tasks."""
    what = f"{names[0]!r} and {names[1]!r}"
    if len(reference) != len(table):
        raise TaskMismatchError(f"{what} do not cover the same tasks: {len(reference)} vs {len(table)} ranking tasks")
    o_ref, o_tab = _order(reference), _order(table)
    if o_ref is not None and o_tab is not None:
        inverse = np.empty_like(o_ref)
        inverse[o_ref] = np.arange(o_ref.size)
        table = table.subset(o_tab[inverse])  # row i of the result is the task of reference row i
    elif reference.triple_index is not None or table.triple_index is not None:
        raise TaskMismatchError(f"{what}: the tasks cannot be matched (a triple_index column that is missing, "
                                "unknown (-1) or repeats a (triple, side) pair)")
    for col in ("triple_index", "side", "relation"):
        x, y = getattr(reference, col), getattr(table, col)
        if x is not None and y is not None and not np.array_equal(x, y):
            i = int(np.flatnonzero(x != y)[0])
            raise TaskMismatchError(f"{what} do not cover the same tasks: {col} differs at task {i} "
                                    f"({x[i]} vs {y[i]})")
    if reference.num_candidates is not None and table.num_candidates is not None \
            and not np.array_equal(reference.num_candidates, table.num_candidates):
        raise ProtocolMismatchError(f"{what} rank different numbers of candidates for the same tasks "
                                    "(different filtering, restriction or sampling)")
    if not _same(reference.weight, table.weight):
        raise ProtocolMismatchError(f"{what} weight the tasks differently (micro vs macro averaging?)")
    return table

