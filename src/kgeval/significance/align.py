"""What :func:`kgeval.compare` compares: models given as results or rank tables, checked to be
evaluated on the same tasks under the same protocol, and aligned.

A *model* is one :class:`~kgeval.Results` (or :class:`~kgeval.RankTable`), or a list of Results of
replicated runs (one model trained with several seeds): then it has one rank table per seed. Run and
replicate directories are read by :mod:`kgeval.workflow.comparison`, above this module.

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
                   "num_triples_dropped", "sampling", "macro", "tie_tolerance", "tie_rtol", "type_constraints",
                   "candidates",
                   "tasks_sha256")


@dataclass
class Model:
    """One compared model: its name, rank tables (one per replicate) and protocol."""

    name: str
    tables: list[RankTable]
    protocol: dict = field(default_factory=dict)
    dataset: dict | None = None  # the run's dataset identity (name, split hashes) when known
    replicated: bool = False
    path: Path | None = None  # the run or replicate directory it was read from


def as_model(item, index: int) -> Model:
    """A :class:`Model` from a Results (with its rank table), a RankTable, a list of replicate Results (one
    model trained with several seeds), a :class:`Model`, or ``(name, item)`` of one of them.

    Run directories are read one layer up (:func:`kgeval.workflow.comparison.run_model`, which
    :func:`kgeval.compare` calls): the statistics take what was loaded, never a path.
    """
    if isinstance(item, Model):
        return item
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        model = as_model(item[1], index)
        model.name = item[0]
        return model
    if isinstance(item, (str, os.PathLike)):
        raise InvalidInputError(f"model {index + 1} is a path ({os.fspath(item)!r}): read run directories with "
                                "kgeval.compare (or kgeval compare), which loads them; "
                                "kgeval.significance.compare.compare takes Results and RankTables")
    if isinstance(item, RankTable):
        return Model(f"model{index + 1}", [item])
    if isinstance(item, (list, tuple)) and item and all(getattr(r, "rank_table", None) is not None for r in item):
        name = f"model{index + 1}"
        members = [Model(f"{name}/{i + 1}", [r.rank_table], dict(r.protocol or {})) for i, r in enumerate(item)]
        return replicates(name, members, f"the Results of model {index + 1}")
    table = getattr(item, "rank_table", None)
    if table is None:
        raise InvalidInputError(f"model {index + 1}: expected Results with a rank table, a RankTable or a list of "
                                f"replicate Results, got {type(item).__name__}"
                                + (" without a rank table" if hasattr(item, "protocol") else ""))
    return Model(getattr(item, "name", None) or f"model{index + 1}", [table], dict(item.protocol or {}))


def replicates(name: str, members: list[Model], what: str, path: Path | None = None) -> Model:
    """One replicated model from its runs, one rank table each. Its protocol is the first run's: every
    other run must agree with it (a set assembled by hand from runs evaluated otherwise would be
    averaged as one model); ``what`` names the set in that error."""
    for other in members[1:]:
        try:
            check_protocols(members[0], other)
        except InvalidInputError as exc:
            raise type(exc)(f"{what} are not one model's replicates: {exc}") from None
    return Model(name, [t for m in members for t in m.tables], members[0].protocol, members[0].dataset, True, path)


#: each protocol field in words, for the refusal that names it first
FIELD_WORDS = {"filtered": "filtering (filtered vs unfiltered)", "filter_sets": "filter sets",
               "num_known_triples": "number of known (filtered) triples", "num_triples": "number of test triples",
               "num_evaluated_triples": "number of evaluated triples", "num_entities": "number of entities",
               "num_relations": "number of relations", "restrict_entities": "entity restriction",
               "restrict_relations": "relation restriction", "num_triples_dropped": "triples dropped (unseen)",
               "sampling": "sampled negatives", "macro": "averaging (micro vs macro)",
               "tie_tolerance": "tie tolerance", "tie_rtol": "relative tie tolerance",
               "candidates": "given candidates", "type_constraints": "type constraints"}


def check_protocols(a: Model, b: Model) -> None:
    """Refuse models evaluated on different datasets or under protocols that differ in a field both record;
    the message says what differs in words first ("different datasets (Nations vs Kinships)"), then the
    detail."""
    from ..protocol import EvaluationProtocol

    da, db = a.dataset or {}, b.dataset or {}
    for key in ("reference", "hashes"):
        if da.get(key) is not None and db.get(key) is not None and da[key] != db[key]:
            names = (da.get("name") or da.get("reference"), db.get("name") or db.get("reference"))
            what = f"{names[0]} vs {names[1]}" if names[0] != names[1] else f"both named {names[0]}, other files"
            raise ProtocolMismatchError(f"different datasets ({what}): {a.name!r} and {b.name!r} cannot be "
                                        f"compared task by task ({key} differs)")
    if da.get("split") is not None and db.get("split") is not None and da["split"] != db["split"]:
        splits = " vs ".join("validation" if s == "valid" else s for s in (da["split"], db["split"]))
        raise ProtocolMismatchError(f"different splits ({splits}): {a.name!r} and {b.name!r} were evaluated on "
                                    "other triples")
    pa, pb = EvaluationProtocol.from_dict(a.protocol), EvaluationProtocol.from_dict(b.protocol)
    for name in PROTOCOL_FIELDS:
        va, vb = getattr(pa, name), getattr(pb, name)
        if name == "type_constraints":  # the sets themselves (their digest), or none: not how the source was worded
            va, vb = (f"{t.source} (sha256 {t.sha256[:12]})" if t is not None else "none" for t in (va, vb))
            if va != "none" and vb != "none" and pa.type_constraints.sha256 == pb.type_constraints.sha256:
                continue
        if va is not None and vb is not None and va != vb and name == "tasks_sha256":
            raise TaskMismatchError(f"different triples: {a.name!r} and {b.name!r} were evaluated on other "
                                    "test triples (or the same triples in another order, or other given negatives): a "
                                    f"task of one is not the task at its position in the other (tasks_sha256 "
                                    f"{va[:12]}... vs {vb[:12]}...)")
        if va is not None and vb is not None and va != vb:
            raise ProtocolMismatchError(f"different {FIELD_WORDS.get(name, name)} ({_words(va)} vs {_words(vb)}): "
                                        f"{a.name!r} and {b.name!r} were evaluated under different protocols")


def _words(value) -> str:
    """A protocol value as a reader says it: filter sets as ``training 1,592 + validation 199``."""
    if isinstance(value, (list, tuple)) and value and all(hasattr(v, "name") and hasattr(v, "num_triples")
                                                          for v in value):
        return " + ".join(f"{v.name} {v.num_triples:,}" for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


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

