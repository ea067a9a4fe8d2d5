"""Reading labeled triple files: ``head<TAB>relation<TAB>tail`` per line.

Labels are kept as strings, always: WordNet synset ids such as ``00260881`` have
significant leading zeros, so nothing here ever parses a label as a number.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import numpy as np

from ..errors import InvalidInputError

#: File name stems accepted for each split, first = canonical.
SPLIT_STEMS = {
    "training": ("train", "training"),
    "validation": ("valid", "validation", "dev"),
    "testing": ("test", "testing"),
}
#: Accepted file extensions, tried in this order.
EXTENSIONS = (".txt", ".tsv", ".txt.gz", ".tsv.gz")

_SPLIT_ALIASES = {alias: split for split, stems in SPLIT_STEMS.items() for alias in stems}
_SPLIT_ALIASES.update({"val": "validation", "validation": "validation", "testing": "testing", "training": "training"})


def normalize_split(name: str) -> str:
    """Map ``train``/``valid``/``test`` (and long forms) to ``training``/``validation``/``testing``."""
    key = str(name).strip().lower()
    if key not in _SPLIT_ALIASES:
        raise InvalidInputError(
            f"unknown split {name!r}; use one of: train, valid, test (or training, validation, testing)"
        )
    return _SPLIT_ALIASES[key]


def find_split_file(directory: Path, split: str) -> Path | None:
    """The file holding ``split`` in ``directory`` (``train.txt``, ``train.tsv.gz``, ...), or None."""
    for stem in SPLIT_STEMS[split]:
        for ext in EXTENSIONS:
            candidate = directory / f"{stem}{ext}"
            if candidate.is_file():
                return candidate
    return None


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's content, decompressed when it ends in ``.gz``."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError) as exc:
        raise InvalidInputError(f"cannot read triple file {path}: {exc}") from None


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_triples(data: bytes, source: str = "<triples>") -> np.ndarray:
    """Parse tab-separated labeled triples into a ``(n, 3)`` object array of ``str``.

    Blank lines are skipped; any other line must hold exactly three non-empty
    tab-separated fields, else :class:`InvalidInputError` names the line number and content.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{source}: not UTF-8 text ({exc})") from None
    rows: list[list[str]] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3 or any(not f.strip() for f in fields):
            raise InvalidInputError(
                f"{source}, line {lineno}: expected 3 non-empty tab-separated fields "
                f"(head, relation, tail), got {len(fields)}: {line[:200]!r}"
            )
        rows.append([f.strip() for f in fields])
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
