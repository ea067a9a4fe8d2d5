"""Type constraints: the entities allowed in each position (head, tail) of each relation.

A :class:`TypeConstraints` holds, per relation and side, a sorted array of allowed entity ids as CSR rows
(``indptr`` of length ``2 * num_relations + 1``, row ``2 * r + side``; side 0 = head, 1 = tail): memory grows
with the allowed pairs, never relations x entities. It comes from

- :meth:`TypeConstraints.from_triples`: the entities seen in that position of that relation (the training
  split, usually), optionally widened to every entity sharing a type with one of them (``entity_types``);
- :meth:`TypeConstraints.from_file`: OpenKE's ``type_constrain.txt`` (first line: the number of relations; then
  per relation a line ``r n h_1 ... h_n`` of allowed heads and a line ``r m t_1 ... t_m`` of allowed tails) or a
  TSV of ``relation<TAB>side<TAB>entity`` lines (ids, or labels mapped through a dataset's ``relation_to_id`` /
  ``entity_to_id``; ``side`` is ``head`` or ``tail``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError

__all__ = ["TypeConstraints"]


@dataclass(frozen=True)
class TypeConstraints:
    """Allowed entities per relation and side (see the module docstring)."""

    num_entities: int
    num_relations: int
    indptr: np.ndarray
    entities: np.ndarray
    source: str = "given"

    def allowed(self, relation: int, side: int) -> np.ndarray:
        """The sorted allowed entity ids of ``relation`` on ``side`` (0 = head, 1 = tail)."""
        row = 2 * int(relation) + int(side)
        return self.entities[self.indptr[row]:self.indptr[row + 1]]

    def sizes(self) -> np.ndarray:
        """``(num_relations, 2)`` allowed counts (head, tail)."""
        return np.diff(self.indptr).reshape(-1, 2)

    @classmethod
    def from_pairs(cls, relations, sides, entities, num_entities: int, num_relations: int,
                   source: str = "given") -> TypeConstraints:
        """From parallel arrays of (relation, side, entity) allowances (duplicates merged)."""
        try:
            r, s, e = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (relations, sides, entities))
        except (OverflowError, ValueError, TypeError) as exc:  # an id beyond int64, or not a number
            raise InvalidInputError(f"type constraints: ids must be integers in range ({exc})") from None
        if not (len(r) == len(s) == len(e)):
            raise InvalidInputError("relations, sides and entities must have the same length")
        for name, arr, limit in (("relation", r, num_relations), ("side", s, 2), ("entity", e, num_entities)):
            if arr.size and (arr.min() < 0 or arr.max() >= limit):
                bad = arr[(arr < 0) | (arr >= limit)][0]
                raise InvalidInputError(f"type constraints: {name} id {int(bad)} is out of range (0..{limit - 1})")
        rows = 2 * r + s
        key = np.unique(rows * num_entities + e)
        rows, ents = key // num_entities, key % num_entities
        indptr = np.zeros(2 * num_relations + 1, dtype=np.int64)
        np.add.at(indptr, rows + 1, 1)
        return cls(int(num_entities), int(num_relations), np.cumsum(indptr), ents, source)

    @classmethod
    def from_triples(cls, triples, num_entities: int, num_relations: int, *, entity_types=None,
                     source: str = "training") -> TypeConstraints:
        """The entities seen as head / tail of each relation in ``triples``; with ``entity_types`` (an
        ``(n, 2)`` array of ``(entity, type)`` pairs) every entity sharing a type with a seen one is allowed too."""
        t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        r = np.concatenate([t[:, 1], t[:, 1]])
        s = np.repeat([0, 1], len(t))
        e = np.concatenate([t[:, 0], t[:, 2]])
        if entity_types is not None:
            r, s, e = _widen(r, s, e, np.asarray(entity_types, dtype=np.int64).reshape(-1, 2))
            source += " widened by entity types"
        return cls.from_pairs(r, s, e, num_entities, num_relations, source)

    @classmethod
    def from_file(cls, path, num_entities: int, num_relations: int, *, entity_to_id=None,
                  relation_to_id=None) -> TypeConstraints:
        """Read OpenKE's ``type_constrain.txt`` or a ``relation<TAB>side<TAB>entity`` TSV (see the module)."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path}: not a UTF-8 text file") from None
        except OSError as exc:
            raise InvalidInputError(f"cannot read type constraints {path}: {exc.strerror or exc}") from None
        body = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
        if not body:
            raise InvalidInputError(f"{path}: no type constraints (the file is empty)")
        parse = _openke if "\t" not in body[0][1] and len(body[0][1].split()) == 1 else _tsv
        r, s, e = parse(path, body, _mapper(entity_to_id, "entity", path), _mapper(relation_to_id, "relation", path))
        return cls.from_pairs(r, s, e, num_entities, num_relations, source=os.path.basename(path))


def _widen(r, s, e, types):
    """(relation, side, entity) allowances widened to every entity of a type of an allowed entity."""
    order = np.argsort(types[:, 0], kind="stable")
    ent_sorted, type_sorted = types[order, 0], types[order, 1]
    lo, hi = np.searchsorted(ent_sorted, e, "left"), np.searchsorted(ent_sorted, e, "right")
    idx = np.repeat(np.arange(len(e)), hi - lo)
    pos = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]) if len(e) else np.zeros(0, dtype=np.int64)
    row_types = np.unique(np.stack([(2 * r + s)[idx], type_sorted[pos]], 1), axis=0)  # (row, type)
    by_type = np.argsort(types[:, 1], kind="stable")
    t_sorted, t_ents = types[by_type, 1], types[by_type, 0]
    lo, hi = np.searchsorted(t_sorted, row_types[:, 1], "left"), np.searchsorted(t_sorted, row_types[:, 1], "right")
    rows = np.repeat(row_types[:, 0], hi - lo)
    ents = np.concatenate([t_ents[a:b] for a, b in zip(lo, hi)]) if len(row_types) else np.zeros(0, np.int64)
    rows, ents = np.concatenate([2 * r + s, rows]), np.concatenate([e, ents])
    return rows // 2, rows % 2, ents


def _mapper(mapping, what: str, path: str):
    def to_id(token: str, line: int) -> int:
        if mapping is not None and token in mapping:
            return int(mapping[token])
        try:
            return int(token)
        except ValueError:
            raise InvalidInputError(f"{path}, line {line}: unknown {what} {token[:80]!r}"
                                    + ("" if mapping is not None else " (ids expected: no label map given)")) from None
    return to_id


def _openke(path, body, entity, relation):
    rows = body[1:]
    try:
        declared = int(body[0][1])
    except ValueError:
        raise InvalidInputError(f"{path}, line {body[0][0]}: expected the number of relations") from None
    if len(rows) != 2 * declared:
        raise InvalidInputError(f"{path}: declares {declared} relations but holds {len(rows)} lines "
                                f"(expected {2 * declared}: a head line and a tail line per relation)")
    r, s, e = [], [], []
    for k, (line_no, line) in enumerate(rows):
        tokens = line.split()
        if len(tokens) < 2:
            raise InvalidInputError(f"{path}, line {line_no}: expected 'relation count entity ...'")
        count = _int(tokens[1], path, line_no, "count")
        if count != len(tokens) - 2:
            raise InvalidInputError(f"{path}, line {line_no}: says {count} entities but lists {len(tokens) - 2}")
        rel = relation(tokens[0], line_no)
        for tok in tokens[2:]:
            r.append(rel)
            s.append(k % 2)  # OpenKE: the head line first, then the tail line
            e.append(entity(tok, line_no))
    return r, s, e


def _tsv(path, body, entity, relation):
    r, s, e = [], [], []
    for line_no, line in body:
        parts = line.split("\t")
        if len(parts) != 3:
            raise InvalidInputError(f"{path}, line {line_no}: expected relation<TAB>side<TAB>entity, got "
                                    f"{len(parts)} field(s)")
        side = parts[1].strip().lower()
        if side not in ("head", "tail"):
            raise InvalidInputError(f"{path}, line {line_no}: side must be head or tail, got {parts[1][:40]!r}")
        r.append(relation(parts[0].strip(), line_no))
        s.append(0 if side == "head" else 1)
        e.append(entity(parts[2].strip(), line_no))
    return r, s, e


def _int(token: str, path: str, line: int, what: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise InvalidInputError(f"{path}, line {line}: {what} {token[:40]!r} is not an integer") from None
