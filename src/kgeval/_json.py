"""File output shared by every writer in kgeval: one JSON ``default`` hook (the only one) and atomic writes."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np


def finite_or_none(x):
    """Replace NaN/±inf (recursively in dicts, lists, tuples) by None; numpy scalars become Python ones."""
    if isinstance(x, dict):
        return {k: finite_or_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite_or_none(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def json_default(o):
    """``json.dumps`` fallback for numpy values, arrays, sets, records with ``to_dict`` and anything else (as text)."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return finite_or_none(float(o))
    if isinstance(o, np.ndarray):
        return finite_or_none(o.tolist())
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)


def dumps(obj, *, sort_keys: bool = False) -> str:
    return json.dumps(obj, indent=2, sort_keys=sort_keys, default=json_default) + "\n"


def current_umask() -> int:
    """The process umask (read by setting and restoring it: there is no read-only call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one ``os.replace``.

    A reader sees the old file or the complete new one, never a partial write; on error the
    temporary file is removed. As with a plain ``open(path, "w")``: a symlink is written
    through (its target is replaced, the link stays), an existing file keeps its mode, a new
    one gets ``0o666`` less the umask (not ``mkstemp``'s 0600).
    """
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    return Path(path)


def write_json(path: str | os.PathLike, obj, *, sort_keys: bool = False) -> Path:
    """Write ``obj`` as indented JSON, atomically."""
    return write_atomic(path, dumps(obj, sort_keys=sort_keys))


def read_json(path: str | os.PathLike, what: str = "a JSON file"):
    """The JSON document in ``path``. An unreadable file, bytes that are not UTF-8 or invalid JSON
    raise :class:`~kgeval.errors.InvalidInputError` naming the file, ``what`` it should be and
    the problem."""
    from .errors import InvalidInputError

    path = Path(path)
    try:
        # utf-8-sig: editors on Windows save JSON with a byte-order mark, which json refuses
        return json.loads(path.read_bytes().decode("utf-8-sig"))
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # before ValueError, its base class
        raise InvalidInputError(f"{path}: not {what} (not UTF-8: {exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise InvalidInputError(f"{path}: not {what} (invalid JSON: {exc})") from None
