"""Id files of plain embedding tables: which row of a table is which label of the dataset.

``kgeval evaluate --entity-embeddings E --entity-ids FILE`` (and ``--relation-ids``) reads FILE in
one of two layouts:

- one label per line: line ``i`` (from 0) names row ``i`` of the table;
- ``row<TAB>label`` per line, in any order: LibKGE's ``entity_ids.del`` and PyKEEN's
  ``entity_to_id.tsv(.gz)`` (its ``id<TAB>label`` header line is skipped).

A file is one layout or the other: a tab on any line makes it the two-column layout, which every
line must then follow. Files ending in ``.gz`` are decompressed; text is decoded as kgeval's
triple files are (UTF-8, a byte-order mark dropped, any line ending) and labels are stripped of
surrounding spaces, as triple files' labels are. Blank lines at the end are ignored; in the
one-label layout a blank line elsewhere is refused (skipping it would shift every later row
onto the next label, silently).

The file must describe the table exactly: every row ``0 .. n-1`` once, every label once, ``n``
equal to the table's rows, and its labels the dataset's labels (none missing, none unknown).
Anything else is an :class:`~kgeval.errors.InvalidInputError` naming the option, the file and the
offending lines or labels, raised before any scoring.
"""

from __future__ import annotations

import gzip
import os
import zlib

import numpy as np

from .._textio import text_lines
from ..errors import InvalidInputError, plural

#: a first line naming the columns of the two-column layout (PyKEEN's entity_to_id.tsv.gz)
HEADER = ("id", "label")
#: labels shown in an error before "and N more"
_SHOWN = 5


def _shown(items: list) -> str:
    return ", ".join(map(repr, items[:_SHOWN])) + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def read_row_labels(path, flag: str) -> list[str]:
    """The labels of the rows ``0 .. n-1`` of a table, from its id file (see the module docstring)."""
    path = os.fspath(path)
    where = f"{flag} {path}"
    if not os.path.isfile(path):
        raise InvalidInputError(f"{where}: {'a directory, not an id file' if os.path.isdir(path) else 'no such file'}")
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                data = fh.read()
        else:
            with open(path, "rb") as fh:
                data = fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidInputError(f"{where}: cannot read ({exc})") from None
    lines = text_lines(data, where)
    while lines and not lines[-1].strip():
        lines.pop()
    numbered = list(enumerate(lines, start=1))
    if numbered and tuple(f.strip().lower() for f in numbered[0][1].split("\t")) == HEADER:
        numbered = numbered[1:]
    if not numbered:
        raise InvalidInputError(f"{where}: the file lists no labels")
    if any("\t" in line for _, line in numbered):
        rows = _two_columns(numbered, where)
    else:
        rows = _one_label_per_line(numbered, where)
    unique_labels(rows, where)
    return [rows[i][1] for i in range(len(rows))]


def _one_label_per_line(numbered, where: str) -> dict[int, tuple[int, str]]:
    rows = {}
    for row, (lineno, line) in enumerate(numbered):
        label = line.strip()
        if not label:
            raise InvalidInputError(f"{where}, line {lineno}: an empty line; one label per line names row "
                                    "0, 1, 2, ... in order, so an empty line cannot be skipped (every later label "
                                    "would name the row before its own): remove it, or write 'row<TAB>label' lines")
        rows[row] = (lineno, label)
    return rows


def _two_columns(numbered, where: str) -> dict[int, tuple[int, str]]:
    rows = row_label_lines(numbered, where, hint=" like every line with a tab in this file")
    gaps = numbering_gaps(rows, len(rows))
    if gaps:
        raise InvalidInputError(f"{where}: {len(rows)} lines must number the rows 0..{len(rows) - 1}, each once; "
                                f"{gaps}")
    return rows


def row_label_lines(numbered, where: str, *, form: str = "row<TAB>label", hint: str = "") -> dict[int, tuple[int, str]]:
    """``{row: (line number, label)}`` of ``row<TAB>label`` lines, given as ``(line number, text)``: blank lines
    are skipped; every other line is a row number (ASCII digits), a tab and a label, both stripped of surrounding
    spaces; a row listed twice is refused. Which rows there must be is the caller's check (:func:`numbering_gaps`).
    The one parser of id files: ``--entity-ids`` / ``--relation-ids`` (two-column layout) and LibKGE's
    ``entity_ids.del`` / ``relation_ids.del`` (``form="index<TAB>id"``, the word used in errors)."""
    word, _, name = form.partition("<TAB>")
    rows: dict[int, tuple[int, str]] = {}
    for lineno, line in numbered:
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("\t")]
        # ASCII digits only: str.isdigit() also takes '²' or '①', which int() refuses (a ValueError traceback)
        if len(fields) != 2 or not fields[1] or not (fields[0].isascii() and fields[0].isdigit()):
            raise InvalidInputError(f"{where}, line {lineno}: expected '{form}' ({_a(word)} number, a tab, "
                                    f"{_a(name)}){hint}, got {line[:120]!r}")
        row = int(fields[0])
        if row in rows:
            raise InvalidInputError(f"{where}, line {lineno}: {word} {row} is listed twice (lines {rows[row][0]} "
                                    f"and {lineno})")
        rows[row] = (lineno, fields[1])
    return rows


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def numbering_gaps(rows, n: int, words: str = "row(s)") -> str:
    """Why the numbers ``rows`` are not ``0 .. n-1`` ("row(s) 3 are not listed, row(s) 7 are beyond"), or ''."""
    missing = sorted(set(range(n)) - set(rows))
    beyond = sorted(set(rows) - set(range(n)))
    return ", ".join(f"{words} {_shown(xs)} are {what}" for xs, what in ((missing, "not listed"), (beyond, "beyond"))
                     if xs)


def unique_labels(rows: dict[int, tuple[int, str]], where: str) -> None:
    """A label named by two lines of ``rows`` (``{row: (line number, label)}``) is a named error."""
    seen: dict[str, int] = {}
    for lineno, label in sorted(rows.values()):
        if label in seen:
            raise InvalidInputError(f"{where}: label {label!r} is listed twice (lines {seen[label]} and {lineno}); "
                                    "each label names one row")
        seen[label] = lineno


def dataset_rows(row_labels: list[str], labels: list[str], table_rows: int, *, flag: str, table_flag: str,
                 kind: str, path, dataset: str) -> np.ndarray:
    """``rows`` with ``rows[i]`` the table row of the dataset's id ``i`` (label ``labels[i]``), given the
    file's labels of the table rows; the file's count against ``table_rows``, then unknown and missing
    labels are named errors."""
    where = f"{flag} {os.fspath(path)}"
    if len(row_labels) != table_rows:
        raise InvalidInputError(f"{where} lists {len(row_labels)} {kind} labels but {table_flag} has {table_rows} "
                                "rows: the id file must name every row of the table, once")
    kinds = plural(kind)
    ids = {label: i for i, label in enumerate(labels)}
    unknown = [label for label in row_labels if label not in ids]
    if unknown:
        raise InvalidInputError(f"{where}: {len(unknown)} of its labels are not {kinds} of dataset {dataset}: "
                                f"{_shown(unknown)}")
    where_row = {label: row for row, label in enumerate(row_labels)}
    missing = [label for label in labels if label not in where_row]
    if missing:
        raise InvalidInputError(f"{where}: {len(missing)} of dataset {dataset}'s {kinds} have no row: "
                                f"{_shown(missing)}")
    return np.fromiter((where_row[label] for label in labels), dtype=np.int64, count=len(labels))
