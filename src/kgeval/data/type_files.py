"""Reading type-constraint files into :class:`~kgeval.data.types.CandidateSets`, and entity-type files.

Two layouts of type constraints, told apart by the first non-blank line (one integer: OpenKE):

- **OpenKE's** ``type_constrain.txt``: a first line with the number of relations ``n``, then ``2 n``
  lines, two per relation: ``relation count e_1 ... e_count`` for its heads, then the same line layout for
  its tails (ids, whitespace-separated; OpenKE's ``Reader.h`` reads them with ``fscanf``). The ids are
  OpenKE's ``entity2id.txt`` / ``relation2id.txt`` ids, which must be the evaluation's ids.
- **TSV**: one allowed pair per line, ``relation<TAB>side<TAB>entity``, ``side`` one of ``head`` /
  ``tail`` (also ``domain`` / ``range``, ``h`` / ``t``); labels when label maps are given (a dataset's
  ``relation_to_id`` / ``entity_to_id``; a field that is no label is read as an id unless some label is a
  digit string), else integer ids. Blank lines, lines starting with ``#`` and a header line are skipped.

Entity types (for :meth:`CandidateSets.from_triples` widening): TSV ``entity<TAB>type`` per line, an entity
on as many lines as it has types.

Every malformed line is an :class:`~kgeval.errors.InvalidInputError` naming the file and the line.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .._textio import shorten, text_lines
from ..errors import InvalidInputError, unknown_name
from ..ranks import SIDE_HEAD, SIDE_TAIL
from .io import read_bytes
from .types import CandidateSets, EntityTypes

__all__ = ["read_type_constraints", "parse_type_constraints", "read_entity_types", "parse_entity_types"]

#: the side words of the TSV layout
SIDE_WORDS = {"head": SIDE_HEAD, "h": SIDE_HEAD, "domain": SIDE_HEAD, "subject": SIDE_HEAD,
              "tail": SIDE_TAIL, "t": SIDE_TAIL, "range": SIDE_TAIL, "object": SIDE_TAIL}


class _Ids:
    """Turns one field of a line into an id: a label through ``mapping``, else a decimal integer below ``limit``."""

    def __init__(self, what: str, limit: int, mapping=None):
        self.what, self.limit, self.mapping = what, int(limit), mapping
        self._digits = None  # whether some label is a digit string (then a digit string is never read as an id)

    def _ids_readable(self) -> bool:
        """Whether a field that is no label may be read as an id: only when no label is a digit string (WN18RR's
        synset offsets are: '1740' could mean the label '00001740' or id 1740, so it is an error instead)."""
        if self._digits is None:
            self._digits = any(isinstance(k, str) and k.isascii() and k.isdigit() for k in self.mapping)
        return not self._digits

    def __call__(self, text: str, where: str) -> int:
        if (self.mapping is not None and text not in self.mapping and text.isascii() and text.isdigit()
                and self._ids_readable()):
            return _int(text, where, f"{self.what} id", self.limit)  # not a label, but an id
        if self.mapping is not None:
            if text not in self.mapping:
                err = unknown_name(self.what, text, self.mapping) if len(self.mapping) <= 100_000 else None
                hint = f" ({err})" if err is not None else ""
                raise InvalidInputError(f"{where}: unknown {self.what} {shorten(text, 80)}{hint}")
            return int(self.mapping[text])
        return _int(text, where, f"{self.what} id", self.limit)


def _int(text: str, where: str, what: str, limit: int | None = None) -> int:
    """``text`` as a non-negative decimal integer (below ``limit`` when given), or a named error."""
    if not (text.isascii() and text.isdigit()):
        raise InvalidInputError(f"{where}: {what} must be a non-negative integer, got {shorten(text, 80)}")
    value = int(text)
    if limit is not None and value >= limit:
        raise InvalidInputError(f"{where}: {what} {value} is out of range [0, {limit})")
    return value


def read_type_constraints(path: str | os.PathLike, *, num_entities: int, num_relations: int, entity_to_id=None,
                          relation_to_id=None) -> CandidateSets:
    """The type constraints in the file at ``path`` (either layout, see the module docstring).

    Parameters
    ----------
    path:
        the file (``.gz`` is decompressed).
    num_entities, num_relations:
        the evaluation's id ranges (a larger id is an error naming its line).
    entity_to_id, relation_to_id:
        label maps (e.g. a dataset's); given, the TSV layout's fields are labels. The OpenKE layout always
        holds ids.

    Returns
    -------
    CandidateSets
        the allowed entities per relation and side (relations the file does not name are unconstrained).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "type_constrain.txt"
    >>> _ = path.write_text("1\\n0 2 3 1\\n0 1 2\\n")
    >>> cs = read_type_constraints(path, num_entities=4, num_relations=1)
    >>> cs.allowed(0, "head").tolist(), cs.allowed(0, "tail").tolist()
    ([1, 3], [2])
    """
    data = read_bytes(path)
    return parse_type_constraints(data, source=str(path), num_entities=num_entities, num_relations=num_relations,
                                  entity_to_id=entity_to_id, relation_to_id=relation_to_id)


def parse_type_constraints(data: bytes, *, source: str, num_entities: int, num_relations: int, entity_to_id=None,
                           relation_to_id=None) -> CandidateSets:
    """:func:`read_type_constraints` of the file content ``data`` (``source`` names it in errors)."""
    lines = text_lines(data, source)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise InvalidInputError(f"{source}: the type-constraint file is empty")
    name = Path(source).name
    if len(lines[first].split()) == 1 and "\t" not in lines[first].strip():
        rows, flags = _openke(lines, first, source, int(num_entities), int(num_relations))
        what = f"file {name} (OpenKE layout)"
    else:
        rows, flags = _tsv(lines, source, _Ids("entity", num_entities, entity_to_id),
                           _Ids("relation", num_relations, relation_to_id))
        what = f"file {name} (relation, side, entity)"
    return CandidateSets(num_entities, num_relations, rows, constrained=flags, source=what)


def _openke(lines: list[str], first: int, source: str, ne: int, nr: int):
    """OpenKE's layout: ``n``, then per relation a head line and a tail line ``relation count ids...``."""
    where = f"{source}, line {first + 1}"
    n = _int(lines[first].strip(), where, "the number of relations (OpenKE's first line)")
    body = [(i + 1, line.split()) for i, line in enumerate(lines) if i > first and line.strip()]
    if len(body) != 2 * n:
        raise InvalidInputError(
            f"{where}: the first line says {n} relations, so {2 * n} lines should follow (a head line and a tail "
            f"line per relation), found {len(body)}")
    rels = {SIDE_HEAD: [], SIDE_TAIL: []}
    ents = {SIDE_HEAD: [], SIDE_TAIL: []}
    seen = {SIDE_HEAD: {}, SIDE_TAIL: {}}
    for k, (lineno, fields) in enumerate(body):
        side = SIDE_HEAD if k % 2 == 0 else SIDE_TAIL
        where = f"{source}, line {lineno}"
        if len(fields) < 2:
            raise InvalidInputError(f"{where}: expected 'relation count entity...', got {shorten(' '.join(fields))}")
        r = _int(fields[0], where, "relation id", nr)
        count = _int(fields[1], where, "entity count")
        if count != len(fields) - 2:
            raise InvalidInputError(f"{where}: relation {r} says {count} entities but the line lists "
                                    f"{len(fields) - 2}")
        if side == SIDE_TAIL and body[k - 1][1][0] != fields[0]:
            raise InvalidInputError(f"{where}: the tail line of relation {fields[0]} follows the head line of "
                                    f"relation {body[k - 1][1][0]} (line {body[k - 1][0]}); OpenKE writes each "
                                    "relation's head line, then its tail line")
        if r in seen[side]:
            raise InvalidInputError(f"{where}: relation {r} has a second {'head' if side == SIDE_HEAD else 'tail'} "
                                    f"line (the first: line {seen[side][r]})")
        seen[side][r] = lineno
        ids = [_int(x, where, "entity id", ne) for x in fields[2:]]
        rels[side].append(np.full(len(ids), r, dtype=np.int64))
        ents[side].append(np.asarray(ids, dtype=np.int64))
    rows = {s: (np.concatenate(rels[s]) if rels[s] else np.zeros(0, np.int64),
                np.concatenate(ents[s]) if ents[s] else np.zeros(0, np.int64)) for s in rels}
    return rows, {s: list(seen[s]) for s in seen}


def _tsv(lines: list[str], source: str, entity: _Ids, relation: _Ids):
    """The TSV layout: ``relation<TAB>side<TAB>entity`` per line."""
    rels = {SIDE_HEAD: [], SIDE_TAIL: []}
    ents = {SIDE_HEAD: [], SIDE_TAIL: []}
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}, line {i + 1}"
        fields = [f.strip() for f in line.rstrip("\r\n").split("\t")]
        while len(fields) > 3 and not fields[-1]:  # trailing tabs
            fields.pop()
        if len(fields) != 3 or not all(fields):
            raise InvalidInputError(f"{where}: expected 3 non-empty tab-separated fields (relation, side, entity), "
                                    f"got {len(fields)}: {shorten(line)}")
        side = SIDE_WORDS.get(fields[1].lower())
        if side is None:
            if not rels[SIDE_HEAD] and not rels[SIDE_TAIL] and fields[1].lower() in ("side", "position"):
                continue  # a header line
            raise InvalidInputError(f"{where}: side must be 'head' or 'tail' (or domain / range), got "
                                    f"{shorten(fields[1], 40)}")
        rels[side].append(relation(fields[0], where))
        ents[side].append(entity(fields[2], where))
    if not rels[SIDE_HEAD] and not rels[SIDE_TAIL]:
        raise InvalidInputError(f"{source}: no (relation, side, entity) line in the type-constraint file")
    rows = {s: (np.asarray(rels[s], dtype=np.int64), np.asarray(ents[s], dtype=np.int64)) for s in rels}
    return rows, {s: sorted(set(rels[s])) for s in rels}


def read_entity_types(path: str | os.PathLike, *, num_entities: int, entity_to_id=None) -> EntityTypes:
    """The entity types in the TSV file at ``path`` (``entity<TAB>type`` per line; labels through
    ``entity_to_id`` when given, else integer ids; type names are any text).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "types.tsv"
    >>> _ = path.write_text("0\\tperson\\n2\\tperson\\n1\\tcity\\n")
    >>> et = read_entity_types(path, num_entities=3)
    >>> et.members(et.types_of([0])).tolist()
    [0, 2]
    """
    return parse_entity_types(read_bytes(path), source=str(path), num_entities=num_entities,
                              entity_to_id=entity_to_id)


def parse_entity_types(data: bytes, *, source: str, num_entities: int, entity_to_id=None) -> EntityTypes:
    """:func:`read_entity_types` of the file content ``data``."""
    entity = _Ids("entity", num_entities, entity_to_id)
    ents, types, names = [], [], {}
    for i, line in enumerate(text_lines(data, source)):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}, line {i + 1}"
        fields = [f.strip() for f in line.split("\t")]
        while len(fields) > 2 and not fields[-1]:
            fields.pop()
        if len(fields) != 2 or not all(fields):
            raise InvalidInputError(f"{where}: expected 2 non-empty tab-separated fields (entity, type), got "
                                    f"{len(fields)}: {shorten(line)}")
        ents.append(entity(fields[0], where))
        types.append(names.setdefault(fields[1], len(names)))
    if not ents:
        raise InvalidInputError(f"{source}: no (entity, type) line in the entity-type file")
    return EntityTypes(np.asarray(ents), np.asarray(types), num_entities=num_entities, type_names=list(names))
