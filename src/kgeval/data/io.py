"""Reading labeled triple files: ``head<TAB>relation<TAB>tail`` per line.

Labels are kept as strings, always: WordNet synset ids such as ``00260881`` have
significant leading zeros, so nothing here ever parses a label as a number.
Text is decoded by :func:`kgeval._textio.decode_text` (UTF-8 only, a byte-order mark is
dropped, any line ending is accepted).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from pathlib import Path

import numpy as np

from .._textio import text_lines
from ..errors import InvalidInputError
from .splits import FILE_STEMS, canonical_split, split_attribute

#: Accepted file extensions, tried in this order.
EXTENSIONS = (".txt", ".tsv", ".txt.gz", ".tsv.gz")


def normalize_split(name: str) -> str:
    """The Dataset attribute of a split (``test`` -> ``testing``), kept for existing callers.

    New code: :func:`kgeval.data.splits.canonical_split` (``train``/``valid``/``test``).
    """
    return split_attribute(name)


def find_split_file(directory: Path, split: str) -> Path | None:
    """The file holding ``split`` in ``directory`` (``train.txt``, ``train.tsv.gz``, ...), or None.

    Several candidates (``train.txt`` next to ``train.txt.gz``) are fine when they hold the same
    triples; different contents are refused rather than one of them picked silently.
    """
    found = [directory / f"{stem}{ext}" for stem in FILE_STEMS[canonical_split(split)] for ext in EXTENSIONS]
    found = [f for f in found if f.is_file()]
    for other in found[1:]:
        if read_bytes(other) != read_bytes(found[0]):
            raise InvalidInputError(
                f"{directory}: {found[0].name} and {other.name} both hold the {split} split but differ; remove one"
            )
    return found[0] if found else None


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's content, decompressed when it ends in ``.gz``."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; a corrupt stream raises zlib.error
        raise InvalidInputError(f"cannot read triple file {path}: {exc}") from None


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: First lines that name columns (PyKEEN writes ``head relation tail`` above its numeric triples, pandas
#: a DataFrame's column names): refused, never read as a triple of made-up entities.
HEADERS = frozenset(
    tuple(f"{w}{suffix}" for w in words)
    for words in (("head", "relation", "tail"), ("head", "rel", "tail"), ("subject", "predicate", "object"),
                  ("source", "relation", "target"))
    for suffix in ("", "_label", "_id")
)


def parse_triples(data: bytes, source: str = "<triples>") -> np.ndarray:
    """Parse tab-separated labeled triples into a ``(n, 3)`` object array of ``str``.

    Blank lines are skipped and trailing whitespace (a ``\\r``, spaces, a trailing tab) ends a
    line; every other line must hold exactly three non-empty tab-separated fields, each
    stripped of surrounding spaces, else :class:`InvalidInputError` names the line. A first line
    that is a column header (``head relation tail``, ``subject predicate object``, ...) is refused.
    """
    rows: list[list[str]] = []
    for lineno, line in enumerate(text_lines(data, source), start=1):
        line = line.rstrip()
        if not line:
            continue
        if "\ufeff" in line:  # a byte-order mark past the start: concatenated files; it would join a label
            raise InvalidInputError(f"{source}, line {lineno}: a byte-order mark (U+FEFF) inside the file")
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) != 3 or not all(fields):
            raise InvalidInputError(
                f"{source}, line {lineno}: expected 3 non-empty tab-separated fields "
                f"(head, relation, tail), got {len(fields)}: {line[:200]!r}"
            )
        if not rows and tuple(f.lower() for f in fields) in HEADERS:
            raise InvalidInputError(
                f"{source}, line {lineno}: {line[:200]!r} is a column header; triple files have none "
                "(it would be read as a triple: entities and a relation that do not exist): remove the line"
            )
        rows.append(fields)
    out = np.empty((len(rows), 3), dtype=object)  # object dtype: Python str labels, no fixed-width copies
    if rows:
        out[:] = rows
    return out


def read_triples(path: str | os.PathLike) -> tuple[np.ndarray, str]:
    """Read one triple file; returns the ``(n, 3)`` label array and the sha256 of its (decompressed) bytes."""
    data = read_bytes(path)
    return parse_triples(data, source=str(path)), sha256_of(data)


def serialize_triples(labels: np.ndarray) -> bytes:
    """The canonical TSV bytes of a label array (LF endings, trailing newline): the inverse of parsing."""
    return "".join(f"{h}\t{r}\t{t}\n" for h, r, t in labels).encode("utf-8")
