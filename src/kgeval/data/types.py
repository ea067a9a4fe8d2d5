"""Type constraints: the entities allowed in each position of each relation, as CSR rows.

A :class:`CandidateSets` holds, for every relation ``r`` and side (``head``: the domain of ``r``, ``tail``:
its range), either the sorted set of entity ids that may stand there, or nothing (the relation side is
*unconstrained*: every entity is allowed). The sets are stored per side as CSR rows (``indptr`` of
``R + 1`` offsets, ``indices`` the entity ids), so memory is ``O(R + total allowed entries)``: never a
``relations x entities`` dense mask.

They come from a file (:func:`kgeval.data.type_files.read_type_constraints`: OpenKE's
``type_constrain.txt`` or a TSV ``relation<TAB>side<TAB>entity``), from explicit sets
(:meth:`CandidateSets.from_sets`), or are inferred from training triples (:meth:`CandidateSets.from_triples`:
the entities seen in that position of that relation, optionally widened to every entity sharing a type
with one of them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

from .._validation import check_positive_int
from ..errors import InvalidInputError
from ..filtering import unique_pairs
from ..ranks import SIDE_HEAD, SIDE_TAIL, side_code

__all__ = ["CandidateSets", "EntityTypes", "as_type_constraints"]

_SIDES = (SIDE_HEAD, SIDE_TAIL)


def _side(side) -> int:
    code = side_code(side)
    if code not in _SIDES:
        raise InvalidInputError(f"type constraints have a head and a tail side, got {side!r}")
    return code


def _csr(rows: np.ndarray, values: np.ndarray, num_rows: int, num_values: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` of the distinct ``(row, value)`` pairs, values sorted within each row."""
    r, v = unique_pairs(rows, values, num_keys=max(1, num_rows), num_values=max(1, num_values))
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=num_rows), out=indptr[1:])
    return indptr, v.astype(np.int64, copy=False)


class EntityTypes:
    """The types of each entity (an entity may have several), as CSR rows both ways.

    Parameters
    ----------
    entities, types:
        parallel int arrays: entity ``entities[i]`` has type ``types[i]`` (duplicates are harmless).
    num_entities:
        the number of entities (ids in ``[0, num_entities)``).
    type_names:
        the name of each type id (optional; for messages).

    Examples
    --------
    >>> import numpy as np
    >>> et = EntityTypes(np.array([0, 1, 2]), np.array([0, 0, 1]), num_entities=4)
    >>> et.members([0]).tolist(), et.types_of([2]).tolist()
    ([0, 1], [1])
    """

    def __init__(self, entities, types, *, num_entities: int, type_names=None):
        ents = np.asarray(entities, dtype=np.int64).reshape(-1)
        typ = np.asarray(types, dtype=np.int64).reshape(-1)
        if ents.shape != typ.shape:
            raise InvalidInputError(f"entity types: {ents.size} entities but {typ.size} types")
        self.num_entities = check_positive_int("num_entities", num_entities)
        if ents.size and (ents.min() < 0 or ents.max() >= self.num_entities):
            bad = int(ents[(ents < 0) | (ents >= self.num_entities)][0])
            raise InvalidInputError(f"entity types: entity id {bad} is out of range [0, {self.num_entities})")
        if typ.size and typ.min() < 0:
            raise InvalidInputError(f"entity types: type id {int(typ.min())} is negative")
        self.num_types = int(typ.max()) + 1 if typ.size else 0
        self.type_names = None if type_names is None else list(type_names)
        self._by_entity = _csr(ents, typ, self.num_entities, self.num_types)
        self._by_type = _csr(typ, ents, self.num_types, self.num_entities)

    def __repr__(self) -> str:
        return f"EntityTypes({self.num_entities} entities, {self.num_types} types, {self._by_entity[1].size} pairs)"

    @staticmethod
    def _rows(csr, ids) -> np.ndarray:
        indptr, indices = csr
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        starts, counts = indptr[ids], indptr[ids + 1] - indptr[ids]
        total = int(counts.sum())
        # every position of every row, vectorised: row i's items at starts[i] .. starts[i] + counts[i] - 1
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        return np.unique(indices[offsets + np.arange(total, dtype=np.int64)])

    def types_of(self, entities) -> np.ndarray:
        """The sorted distinct types of ``entities``."""
        return self._rows(self._by_entity, entities)

    def members(self, types) -> np.ndarray:
        """The sorted distinct entities having any of ``types`` (ids beyond the known types have none)."""
        t = np.asarray(types, dtype=np.int64).reshape(-1)
        return self._rows(self._by_type, t[t < self.num_types])


class CandidateSets:
    """The entities allowed as head and as tail of each relation (type constraints), as CSR rows.

    ``indptr[side]`` (``R + 1`` offsets) and ``indices[side]`` (entity ids, sorted within each row) per
    side code; ``constrained[side]`` (``R`` bools) says which relations have a set on that side: a
    relation side without one is unconstrained (every entity allowed). A set may be empty (nothing is
    allowed: every task there has its answer outside the set).

    Parameters
    ----------
    num_entities, num_relations:
        the id ranges.
    rows:
        per side (``"head"`` / ``"tail"`` or the side codes): ``(relation ids, entity ids)`` parallel int
        arrays of allowed pairs (duplicates are harmless).
    constrained:
        per side, the relation ids that have a set (default: those appearing in ``rows``; add relations
        with an explicitly empty set here).
    source:
        where the sets came from (shown in the evaluation protocol).

    Examples
    --------
    >>> import numpy as np
    >>> cs = CandidateSets.from_sets({0: [1, 2]}, {0: [3], 1: [0, 4]}, num_entities=5, num_relations=2)
    >>> cs.allowed(0, "head").tolist(), cs.allowed(1, "tail").tolist(), cs.allowed(1, "head") is None
    ([1, 2], [0, 4], True)
    >>> cs.contains(np.array([0, 0]), np.array([2, 3]), "head").tolist()
    [True, False]
    """

    def __init__(self, num_entities: int, num_relations: int, rows: Mapping, *, constrained: Mapping | None = None,
                 source: str = "given sets"):
        self.num_entities = check_positive_int("num_entities", num_entities)
        self.num_relations = check_positive_int("num_relations", num_relations)
        self.source = str(source)
        self.indptr: dict[int, np.ndarray] = {}
        self.indices: dict[int, np.ndarray] = {}
        self.constrained: dict[int, np.ndarray] = {}
        given = {_side(k): v for k, v in rows.items()}
        extra = {_side(k): v for k, v in (constrained or {}).items()}
        for side in _SIDES:
            rel, ent = given.get(side, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            rel = np.asarray(rel, dtype=np.int64).reshape(-1)
            ent = np.asarray(ent, dtype=np.int64).reshape(-1)
            if rel.shape != ent.shape:
                raise InvalidInputError(f"type constraints: {rel.size} relation ids but {ent.size} entity ids")
            self._check_range(rel, self.num_relations, "relation")
            self._check_range(ent, self.num_entities, "entity")
            self.indptr[side], self.indices[side] = _csr(rel, ent, self.num_relations, self.num_entities)
            flag = np.zeros(self.num_relations, dtype=bool)
            flag[rel] = True
            more = np.asarray(extra.get(side, ()), dtype=np.int64).reshape(-1)
            self._check_range(more, self.num_relations, "relation")
            flag[more] = True
            self.constrained[side] = flag

    @staticmethod
    def _check_range(ids: np.ndarray, limit: int, what: str) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= limit):
            bad = int(ids[(ids < 0) | (ids >= limit)][0])
            raise InvalidInputError(f"type constraints: {what} id {bad} is out of range [0, {limit})")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_sets(cls, head: Mapping, tail: Mapping, *, num_entities: int, num_relations: int,
                  source: str = "given sets") -> CandidateSets:
        """From ``{relation id: allowed entity ids}`` per side (a relation missing from a side's mapping is
        unconstrained there; one mapped to an empty list allows nothing)."""
        rows, flags = {}, {}
        for name, sets in (("head", head), ("tail", tail)):
            if not isinstance(sets, Mapping):
                raise InvalidInputError(f"type constraints: {name} must be a mapping relation id -> entity ids, "
                                        f"got {type(sets).__name__}")
            rel = [np.full(len(v), int(r), dtype=np.int64) for r, v in sets.items()]
            ent = [np.asarray(list(v), dtype=np.int64).reshape(-1) for v in sets.values()]
            rows[name] = (np.concatenate(rel) if rel else np.zeros(0, np.int64),
                          np.concatenate(ent) if ent else np.zeros(0, np.int64))
            flags[name] = [int(r) for r in sets]
        return cls(num_entities, num_relations, rows, constrained=flags, source=source)

    @classmethod
    def from_triples(cls, triples, *, num_entities: int, num_relations: int, entity_types: EntityTypes | None = None,
                     source: str = "train") -> CandidateSets:
        """Inferred from ``triples`` (typically the training split): the allowed heads of ``r`` are the entities
        seen as head of ``r``, its allowed tails those seen as tail. A relation absent from ``triples`` is
        unconstrained. With ``entity_types`` each set is widened to every entity sharing a type with one
        of its entities (entities without a type widen nothing).

        Examples
        --------
        >>> import numpy as np
        >>> train = np.array([[0, 0, 1], [2, 0, 1]])
        >>> cs = CandidateSets.from_triples(train, num_entities=4, num_relations=2)
        >>> cs.allowed(0, "head").tolist(), cs.allowed(0, "tail").tolist(), cs.allowed(1, "tail") is None
        ([0, 2], [1], True)
        >>> types = EntityTypes(np.array([1, 3]), np.array([0, 0]), num_entities=4)
        >>> CandidateSets.from_triples(train, num_entities=4, num_relations=2,
        ...                            entity_types=types).allowed(0, "tail").tolist()
        [1, 3]
        """
        from ..triples import as_triples, check_ids

        tri = as_triples("type constraint triples", triples, allow_empty=True)
        check_ids("type constraint triples", tri, num_entities, num_relations)
        rows = {SIDE_HEAD: (tri[:, 1], tri[:, 0]), SIDE_TAIL: (tri[:, 1], tri[:, 2])}
        what = f"inferred from {source} ({tri.shape[0]:,} triples)"
        if entity_types is not None:
            if entity_types.num_entities != int(num_entities):
                raise InvalidInputError(f"entity types cover {entity_types.num_entities} entities, the graph has "
                                        f"{num_entities}")
            rows = {s: _widened(rel, ent, entity_types, int(num_relations)) for s, (rel, ent) in rows.items()}
            what += f", widened by {entity_types.num_types:,} entity types"
        return cls(num_entities, num_relations, rows, source=what)

    # ------------------------------------------------------------------ queries
    def allowed(self, relation: int, side) -> np.ndarray | None:
        """The sorted allowed entity ids of ``relation`` on ``side``; None when that side is unconstrained."""
        s, r = _side(side), int(relation)
        if not 0 <= r < self.num_relations:
            raise InvalidInputError(f"relation id {r} is out of range [0, {self.num_relations})")
        if not self.constrained[s][r]:
            return None
        p = self.indptr[s]
        return self.indices[s][p[r]:p[r + 1]]

    def contains(self, relations, entities, side) -> np.ndarray:
        """Whether each ``entities[i]`` is allowed on ``side`` of ``relations[i]`` (True where unconstrained):
        one binary search per pair in the side's sorted codes ``relation * E + entity``."""
        s = _side(side)
        rel = np.asarray(relations, dtype=np.int64).reshape(-1)
        ent = np.asarray(entities, dtype=np.int64).reshape(-1)
        codes = self._codes(s)
        want = rel * self.num_entities + ent
        pos = np.searchsorted(codes, want).clip(max=max(0, codes.size - 1))
        hit = codes[pos] == want if codes.size else np.zeros(want.shape, dtype=bool)
        return hit | ~self.constrained[s][rel]

    def _codes(self, s: int) -> np.ndarray:
        """The side's pairs as sorted int64 codes ``relation * E + entity`` (built once)."""
        cache = self.__dict__.setdefault("_code_cache", {})
        if s not in cache:
            p = self.indptr[s]
            rel = np.repeat(np.arange(self.num_relations, dtype=np.int64), np.diff(p))
            cache[s] = rel * self.num_entities + self.indices[s]
        return cache[s]

    def num_allowed(self, side) -> np.ndarray:
        """``(R,)`` allowed entities per relation on ``side`` (``num_entities`` where unconstrained)."""
        s = _side(side)
        return np.where(self.constrained[s], np.diff(self.indptr[s]), self.num_entities)

    def num_constrained(self) -> int:
        """Relation sides with a set (out of ``2 R``)."""
        return int(sum(int(self.constrained[s].sum()) for s in _SIDES))

    def sha256(self) -> str:
        """SHA-256 of the sets (sizes, flags and rows of both sides): equal exactly for equal constraints."""
        h = hashlib.sha256(repr((self.num_entities, self.num_relations)).encode())
        for s in _SIDES:
            for a in (self.constrained[s].astype(np.int64), self.indptr[s], self.indices[s]):
                h.update(repr(a.shape).encode())
                h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        return h.hexdigest()

    def to_dict(self) -> dict:
        """A JSON-able summary (source, sizes, digest): what the options and the protocol record."""
        return {"source": self.source, "num_entities": self.num_entities, "num_relations": self.num_relations,
                "constrained_relation_sides": self.num_constrained(), "sha256": self.sha256()}

    def __repr__(self) -> str:
        return (f"CandidateSets({self.source}; {self.num_constrained()} of {2 * self.num_relations} relation sides "
                f"constrained, {sum(self.indices[s].size for s in _SIDES):,} allowed pairs, sha256 "
                f"{self.sha256()[:12]})")

    def __eq__(self, other) -> bool:
        return isinstance(other, CandidateSets) and self.sha256() == other.sha256()

    def __hash__(self) -> int:
        return hash(self.sha256())


def as_type_constraints(value):
    """``EvaluationOptions.type_constraints`` checked: None, ``"train"``, a file path (as a string) or a
    :class:`CandidateSets`; anything else a named error."""
    import os

    if value is None or isinstance(value, CandidateSets):
        return value
    if isinstance(value, str) and value.strip().lower() == "train":
        return "train"
    if isinstance(value, (str, os.PathLike)) and str(value).strip():
        return os.fspath(value)
    if isinstance(value, Mapping) and "sha256" in value:  # the summary to_dict() writes
        raise InvalidInputError("type_constraints: a summary of constraint sets (as to_dict() writes it) cannot be "
                                "evaluated with; pass the CandidateSets itself, 'train' or a file path")
    raise InvalidInputError("type_constraints must be None, 'train', a file path or a kgeval.data.types.CandidateSets, "
                            f"got {type(value).__name__}")


def _widened(rel: np.ndarray, ent: np.ndarray, types: EntityTypes, num_relations: int):
    """``(relation, entity)`` pairs of ``rel, ent`` plus, per relation, every entity sharing a type with one
    of its entities (relation by relation: memory is one relation's set at a time besides the output)."""
    indptr, seen = _csr(rel, ent, num_relations, types.num_entities)
    out_r, out_e = [rel], [ent]
    for r in range(num_relations):
        mine = seen[indptr[r]:indptr[r + 1]]
        if mine.size:
            more = types.members(types.types_of(mine))
            out_r.append(np.full(more.size, r, dtype=np.int64))
            out_e.append(more)
    return np.concatenate(out_r), np.concatenate(out_e)
