"""Decoding text files: one rule for every reader (rank files, triple files).

UTF-8 only; a UTF-8 byte-order mark at the start is dropped (Excel and Windows editors write
one, and it must not become part of the first label or column name); line endings are
universal (``\\n``, ``\\r\\n`` and a lone ``\\r`` all end a line, as Python's text mode reads them).
Anything that is not UTF-8 text (a byte that is not UTF-8, a NUL byte) is refused with the file
and line of the first bad byte.
"""

from __future__ import annotations

from .errors import InvalidInputError

_BOM = "\ufeff"


def decode_text(data: bytes, source: str) -> str:
    """``data`` as text with ``\\n`` line endings, or an :class:`InvalidInputError` naming ``source``."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InvalidInputError(f"{source}: UTF-16 text (byte-order mark {data[:2]!r}); save the file as UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        hint = " (it looks like a zip/npz archive)" if data.startswith(b"PK\x03\x04") else ""
        raise InvalidInputError(
            f"{source}, line {line}, column {column}: byte 0x{data[exc.start]:02x} is not UTF-8{hint}; "
            "save the file as UTF-8"
        ) from None
    nul = text.find("\x00")
    if nul >= 0:  # valid UTF-8, but no text file holds one: a binary file, or UTF-16 without a byte-order mark
        raise InvalidInputError(
            f"{source}, line {text.count(chr(10), 0, nul) + 1}: a NUL byte; this is not a UTF-8 text file"
        )
    if text.startswith(_BOM):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def text_lines(data: bytes, source: str) -> list[str]:
    """The decoded lines of ``data`` (1-based line ``i`` is element ``i - 1``)."""
    return decode_text(data, source).split("\n")


def shorten(text: str, limit: int = 200) -> str:
    """``repr(text)``, cut to about ``limit`` characters with the full length said: an error message
    quoting a line must not carry a 300 MB line (nor print it to a terminal)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"
