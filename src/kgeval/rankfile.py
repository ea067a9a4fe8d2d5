"""Rank files: reading and writing :class:`~kgeval.ranks.RankTable` as ``.npz``, ``.csv`` or ``.tsv``.

A text rank file has a header naming its columns (any order, any case):

- ``optimistic`` and ``pessimistic`` ranks, or a single ``rank`` (``ranks``) column (no ties);
- optional ``num_candidates`` (``candidates``), ``side`` (``head``/``tail``/``both``, or
  ``0``/``1``/``-1``), ``weight`` (``weights``), ``triple_index`` and ``relation``.

The delimiter is the header's: tab, comma or semicolon, else runs of whitespace. Standard CSV
quoting is read, lines starting with ``#`` and blank lines are skipped, a UTF-8 byte-order mark
and any line ending are accepted. Integer columns must hold whole numbers written exactly
(``12`` or ``12.0``, never ``12.5``); a column named twice, an unknown column, or ``rank``
next to ``optimistic``/``pessimistic`` is refused: a file is never read in a way that
changes its data. Everything :meth:`RankTable.save` writes reads back to an equal table.
A field longer than :data:`MAX_FIELD_CHARS` characters is refused with its line and column:
numpy parses a column through a fixed-width string array as wide as its longest field, so one
300 MB field made a 1.1 GiB array per row (a ``MemoryError``).
"""

from __future__ import annotations

import csv
import itertools
import math
import os
from pathlib import Path

import numpy as np

from ._json import atomic_path
from ._textio import decode_text, shorten
from .errors import InvalidInputError
from .ranks import SIDE_NAMES, RankTable, parse_side

#: Accepted header names (after lower-casing) -> column.
HEADER_ALIASES = {
    "optimistic": "optimistic", "pessimistic": "pessimistic", "rank": "rank", "ranks": "rank",
    "num_candidates": "num_candidates", "candidates": "num_candidates", "side": "side",
    "weight": "weight", "weights": "weight", "triple_index": "triple_index", "relation": "relation",
}
_INTEGER_COLUMNS = ("optimistic", "pessimistic", "rank", "num_candidates", "triple_index", "relation")
_EXACT_FLOAT = 2**53  # from here on a float-spelled integer may already have lost digits
#: the longest field accepted: an int64 is 20 characters, a float's repr at most 24, a side label 5;
#: the margin is for zero-padding and spelled-out decimals
MAX_FIELD_CHARS = 1000
_FAST_WIDTH = 40  # numbers this wide parse through one numpy string array (see _column)


# ---------------------------------------------------------------------------------- reading
def load_rank_file(path: str | os.PathLike) -> RankTable:
    """A table from ``.npz`` (as :meth:`RankTable.save` writes) or a text rank file."""
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"rank file not found: {path}")
    if not path.is_file():  # a FIFO blocked the reader, /dev/zero filled the memory
        raise InvalidInputError(f"cannot read rank file {path}: not a regular file")
    if path.suffix.lower() == ".npz":
        return _read_npz(path)
    return read_rank_file(path)


def read_rank_file(path: str | os.PathLike) -> RankTable:
    """A table from a CSV/TSV/whitespace-separated rank file with a header (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"rank file not found: {path}")
    if not path.is_file():
        raise InvalidInputError(f"cannot read rank file {path}: not a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read rank file {path}: {exc.strerror or exc}") from None
    return parse_rank_bytes(data, source=str(path))


def parse_rank_bytes(data: bytes, source: str = "<rank file>") -> RankTable:
    """A table from the bytes of a text rank file; errors name ``source`` and the line."""
    text = decode_text(data, source)
    lines = text.split("\n")
    keep = [i for i, line in enumerate(lines) if (s := line.lstrip()) and s[0] != "#"]  # no blanks, comments
    if not keep:
        raise InvalidInputError(f"{source}: the rank file is empty")
    header_line = lines[keep[0]]
    delim = next((d for d in ("\t", ",", ";") if d in header_line), None)
    names = _fields(header_line, delim, source, keep[0] + 1)
    _check_lengths(names, [keep[0] + 1] * len(names), source, "the header", columns=True)
    header = _header(names, source)
    line_of = [i + 1 for i in keep[1:]]
    if not line_of:
        raise InvalidInputError(f"{source}: the rank file has a header but no rows")
    body = [lines[i - 1] for i in line_of]
    values = dict(zip(header, _split_columns(text, body, line_of, delim, len(header), source)))
    for j, (name, fields) in enumerate(values.items()):
        _check_lengths(fields, line_of, source, f"column {j + 1} ({name!r})")
    cols = {h: _column(h, v, line_of, source) for h, v in values.items()}
    try:
        return RankTable.from_ranks(
            cols.get("optimistic"), cols.get("pessimistic"), ranks=cols.get("rank"),
            num_candidates=cols.get("num_candidates"), side=cols.get("side"), weights=cols.get("weight"),
            triple_index=cols.get("triple_index"), relation=cols.get("relation"),
        )
    except InvalidInputError as exc:
        raise InvalidInputError(f"{source}: {exc} (position i = data row i + 1)") from None


def _split_columns(text: str, body: list[str], line_of: list[int], delim, width: int, source: str) -> list[list[str]]:
    """The data lines' fields, column by column; every line must have ``width`` fields.

    Quoting needs the csv module; without a quote in the file, splitting the joined lines once
    is the same and several times faster (fields keep surrounding spaces: every column parser
    ignores them).
    """
    if '"' in text or delim is None:
        rows = [_fields(line, delim, source, no) if '"' in line else line.split(delim)
                for no, line in zip(line_of, body)]
        counts = list(map(len, rows))
        flat = list(itertools.chain.from_iterable(rows))
    else:
        counts = [c + 1 for c in map(str.count, body, itertools.repeat(delim))]
        flat = delim.join(body).split(delim)
    if set(counts) != {width}:
        bad = next(i for i, c in enumerate(counts) if c != width)
        raise InvalidInputError(f"{source}, line {line_of[bad]}: expected {width} fields, got {counts[bad]}: {shorten(body[bad])}")
    return [flat[j::width] for j in range(width)]


def _fields(line: str, delim: str | None, source: str, lineno: int) -> list[str]:
    """The stripped fields of one line: CSV rules (quoting) for a delimiter, else whitespace runs."""
    if delim is None:
        return [f[1:-1] if len(f) >= 2 and f[0] == f[-1] == '"' else f for f in line.split()]
    try:
        parsed = list(csv.reader([line], delimiter=delim, strict=True))
    except csv.Error as exc:
        raise InvalidInputError(f"{source}, line {lineno}: malformed CSV ({exc}): {shorten(line)}") from None
    return [f.strip() for f in (parsed[0] if parsed else [])]


def _check_lengths(fields: list[str], line_of: list[int], source: str, where: str, columns: bool = False) -> None:
    """Refuse a field over :data:`MAX_FIELD_CHARS` before numpy sizes a string array by it."""
    if not fields or max(map(len, fields)) <= MAX_FIELD_CHARS:
        return
    i = next(i for i, f in enumerate(fields) if len(f) > MAX_FIELD_CHARS)
    at = f"column {i + 1} of the header" if columns else where
    raise InvalidInputError(
        f"{source}, line {line_of[i]}, {at}: a field of {len(fields[i])} characters "
        f"({shorten(fields[i], 40)}); rank file fields are numbers or side labels of at most {MAX_FIELD_CHARS}"
    )


def _header(names: list[str], source: str) -> list[str]:
    """Canonical column names; refuses unknown, duplicated and conflicting columns."""
    header, spelled = [], {}
    for raw in names:
        col = HEADER_ALIASES.get(raw.strip().lower())
        if col is None:
            raise InvalidInputError(
                f"{source}: unknown column(s) {[n for n in names if n.strip().lower() not in HEADER_ALIASES]} "
                f"in the header; expected some of {sorted(set(HEADER_ALIASES.values()))}"
            )
        if col in spelled:
            raise InvalidInputError(
                f"{source}: column {col!r} appears twice in the header ({spelled[col]!r} and {raw!r}); "
                "each column may be given once"
            )
        spelled[col] = raw
        header.append(col)
    if "rank" in spelled and ({"optimistic", "pessimistic"} & spelled.keys()):
        raise InvalidInputError(
            f"{source}: the header has both 'rank' and 'optimistic'/'pessimistic'; give one or the other"
        )
    if "rank" not in spelled and "optimistic" not in spelled:
        raise InvalidInputError(f"{source}: the header needs an 'optimistic' (and 'pessimistic') or a 'rank' column")
    return header


def _column(name: str, values: list[str], line_of: list[int], source: str):
    """Parse one column's text fields; errors name the line."""
    # numpy's string array is as wide as the longest field, for every row: one 1000-character field in a
    # million-row file would make a 4 GB array. Wide columns take the per-field paths (linear memory).
    narrow = not values or max(map(len, values)) <= _FAST_WIDTH
    if name == "side":
        codes = {}
        for label in set(values):
            try:
                codes[label] = int(parse_side(label))
            except InvalidInputError as exc:
                raise InvalidInputError(f"{source}, line {line_of[values.index(label)]}: {exc}") from None
        return np.fromiter(map(codes.__getitem__, values), dtype=np.int8, count=len(values))
    integer = name in _INTEGER_COLUMNS
    if narrow:
        try:  # fast path: numpy parses every field exactly, or raises
            return np.asarray(values).astype(np.int64 if integer else np.float64)
        except (ValueError, OverflowError):
            pass
    parse = _integer if integer else _real
    out = []
    for i, v in enumerate(values):
        try:
            out.append(parse(v))
        except ValueError as exc:
            raise InvalidInputError(f"{source}, line {line_of[i]}: column {name!r} {exc}: {shorten(v)}") from None
    return np.asarray(out, dtype=np.int64 if integer else np.float64)


def _integer(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = _real(text)
        if not math.isfinite(value) or value != int(value):
            raise ValueError("is not a whole number") from None
        if abs(value) >= _EXACT_FLOAT:
            raise ValueError("is too large to be exact in floating-point notation (write it as an integer)") from None
        value = int(value)
    if not -(2**63) <= value < 2**63:
        raise ValueError("is out of the 64-bit integer range")
    return value


def _real(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("is not a number") from None


def _read_npz(path: Path) -> RankTable:
    try:
        with np.load(path, allow_pickle=False) as data:
            cols = {k: data[k] for k in data.files}
    except Exception as exc:  # zip/npy format errors of any kind
        raise InvalidInputError(f"{path}: not a readable rank table ({type(exc).__name__}: {exc})") from None
    unknown = sorted(set(cols) - set(RankTable.COLUMNS))
    if unknown:
        raise InvalidInputError(f"{path}: unknown array(s) {unknown}; a rank table holds some of {list(RankTable.COLUMNS)}")
    if "optimistic" not in cols:
        raise InvalidInputError(f"{path}: no 'optimistic' column")
    try:
        return RankTable(**cols)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------------------- writing
def write_rank_file(table: RankTable, path: str | os.PathLike) -> Path:
    """Write ``table`` as ``.npz`` or ``.csv``/``.tsv`` (UTF-8, header, weights as exact ``repr``).

    The file appears complete or not at all (:func:`kgeval._json.atomic_path`).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".csv", ".tsv"):
        raise InvalidInputError(f"unknown rank-table format {path.suffix!r}: use .npz, .csv or .tsv")
    cols = table.to_columns()
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            if suffix == ".npz":
                np.savez_compressed(fh, **cols)
            else:
                fh.write(_text(cols, "," if suffix == ".csv" else "\t").encode("utf-8"))
    except OSError as exc:  # e.g. no such directory, the target is a directory, the disk is full
        raise InvalidInputError(f"cannot write rank file {path}: {exc.strerror or exc}") from None
    return path


def _text(cols: dict[str, np.ndarray], delim: str) -> str:
    labels = np.array([SIDE_NAMES[c] for c in sorted(SIDE_NAMES)], dtype=object)  # index = code + 1
    text = {
        c: labels[v.astype(np.int64) + 1] if c == "side" else ([repr(float(x)) for x in v] if c == "weight" else v.astype(str))
        for c, v in cols.items()
    }
    lines = [delim.join(cols)] + [delim.join(row) for row in zip(*text.values())]
    return "\n".join(lines) + "\n"

