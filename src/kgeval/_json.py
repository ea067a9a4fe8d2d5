"""File output shared by every writer in kgeval: one JSON ``default`` hook (the only one) and atomic writes."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import stat
import tempfile
import threading
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


class _Terminated(BaseException):
    """Raised by :func:`terminate_as_exception`'s handler so that cleanup code runs on SIGTERM."""


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP raise an exception instead of killing the process at once.

    Writers remove their temporary files in ``except BaseException`` clauses, which the default
    action of SIGTERM (immediate death) skips: a run killed while saving left its hidden
    ``.<name>.tmp-*`` directory behind. After the block has cleaned up, the process dies of the
    same signal as it would have (exit status 128 + signal number). Only the main thread can set
    handlers, and a handler the program installed itself is left alone: then this does nothing.
    """
    signals = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    if threading.current_thread() is not threading.main_thread() or any(
            signal.getsignal(s) is not signal.SIG_DFL for s in signals):
        yield
        return

    def handler(signum, frame):
        for s in signals:  # a second signal must not interrupt the cleanup
            signal.signal(s, signal.SIG_IGN)
        raise _Terminated(signum)

    for s in signals:
        signal.signal(s, handler)
    try:
        yield
    except _Terminated as exc:
        for s in signals:
            signal.signal(s, signal.SIG_DFL)
        os.kill(os.getpid(), exc.args[0])
        raise SystemExit(128 + exc.args[0]) from None  # only if the signal is blocked: never carry on
    finally:
        for s in signals:
            signal.signal(s, signal.SIG_DFL)


def os_cause(exc: BaseException) -> str:
    """The operating system's reason behind ``exc`` (e.g. "No space left on device"), else its message.

    Follows ``__cause__``/``__context__``: wrappers such as ``raise ... from None`` keep the
    original ``OSError`` as context.
    """
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


class _RecordingWriter:
    """A file's ``write`` that keeps the exception raised while it ran: torch turns any of them, even a
    KeyboardInterrupt or SIGTERM's exception, into an opaque RuntimeError."""

    def __init__(self, fh):
        self.fh, self.error = fh, None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except BaseException as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.fh.flush()


def torch_save(obj, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)``, raising the ``OSError`` (a full disk: ENOSPC) that torch would hide.

    torch reports a failed write as ``RuntimeError: [enforce fail at inline_container.cc] unexpected
    pos ...``, which never says that the disk is full; Ctrl-C and SIGTERM during the write are
    re-raised as themselves too, so that the process stops instead of reporting a failed save.
    """
    import torch

    with open(path, "wb", buffering=0) as fh:
        writer = _RecordingWriter(fh)
        try:
            torch.save(obj, writer)
        except RuntimeError as exc:
            if writer.error is not None:
                raise writer.error from exc
            raise


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
    with terminate_as_exception():  # SIGTERM too removes the temporary file
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


#: The largest file kgeval reads whole as JSON: a configuration, manifest, results or summary file
#: is kilobytes; a symlink to /dev/zero or a procfs file would otherwise be read until memory runs out.
MAX_JSON_BYTES = 64 << 20
#: The deepest nesting a JSON file kgeval reads may have (its own files nest 5 levels): a deeper one
#: (``[`` x 100,000) ended in a RecursionError traceback, in the parser or in a later recursive walk.
MAX_JSON_DEPTH = 64


def _invalid(message: str):
    from .errors import InvalidInputError

    return InvalidInputError(message)


def confined(path: str | os.PathLike, root: str | os.PathLike) -> Path:
    """``path`` with every symlink resolved, refused (:class:`~kgeval.errors.InvalidInputError`) unless it
    lies inside ``root`` (itself resolved): ``root / name`` where ``name`` is absolute, holds ``..`` or
    is a symlink leaving ``root``.

    Examples
    --------
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> confined(os.path.join(root, "a.json"), root).name
    'a.json'
    """
    base = Path(os.path.realpath(root))
    resolved = Path(os.path.realpath(path))
    if resolved != base and base not in resolved.parents:
        raise _invalid(f"{path}: outside the directory {root} (an absolute path, '..' or a symlink leaving it)")
    return resolved


def read_regular(path: str | os.PathLike, what: str = "a file", *, max_bytes: int = MAX_JSON_BYTES,
                 root: str | os.PathLike | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    Refused with :class:`~kgeval.errors.InvalidInputError` naming the file: a path outside ``root``
    (when given, see :func:`confined`), anything but a regular file (a FIFO, a device such as
    /dev/zero, a directory), a file longer than ``max_bytes`` (procfs files report size 0: the
    bound is on the bytes read, not on ``st_size``), an unreadable one.

    Examples
    --------
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "a.json")
    >>> _ = open(path, "w").write("[1]")
    >>> read_regular(path)
    b'[1]'
    """
    if root is not None:
        path = confined(path, root)
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _invalid(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _invalid(f"{path}: not {what} (not a regular file)")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise _invalid(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise _invalid(f"{path}: not {what} (larger than {max_bytes:,} bytes)")
    return data


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(k for i, k in enumerate(keys) if k in keys[:i])
        raise ValueError(f"the key {twice!r} appears twice in one object")
    return dict(pairs)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: beyond a double, read as inf
        raise ValueError(f"the number {text[:40]} overflows a double")
    return value


def _check_depth(obj, limit: int) -> None:
    """Refuse nesting deeper than ``limit`` (an explicit stack: no recursion on hostile input)."""
    stack = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    raise ValueError(f"nested deeper than {limit} levels")
                stack.append((child, depth + 1))


def parse_json(data: bytes | str, source: str, what: str = "a JSON file", *, allow_nan: bool = True,
               max_depth: int = MAX_JSON_DEPTH):
    """The JSON document in ``data`` (read from ``source``); every failure is an
    :class:`~kgeval.errors.InvalidInputError` naming ``source``, ``what`` it should be and the problem:
    bytes that are not UTF-8, invalid JSON, a key twice in one object, nesting deeper than
    ``max_depth``, and ``NaN`` / ``Infinity`` literals unless ``allow_nan``.

    Examples
    --------
    >>> parse_json(b'{"a": [1, 2]}', "example")
    {'a': [1, 2]}
    """
    try:
        # utf-8-sig: editors on Windows save JSON with a byte-order mark, which json refuses
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
        obj = json.loads(text, object_pairs_hook=_no_duplicates,
                         **({} if allow_nan else {"parse_constant": _refuse_constant,
                                                       "parse_float": _finite_float}))
        _check_depth(obj, max_depth)
        return obj
    except UnicodeDecodeError as exc:  # before ValueError, its base class
        raise _invalid(f"{source}: not {what} (not UTF-8: {exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise _invalid(f"{source}: not {what} (invalid JSON: nested deeper than {max_depth} levels)") from None
    except ValueError as exc:
        raise _invalid(f"{source}: not {what} (invalid JSON: {exc})") from None


def read_json(path: str | os.PathLike, what: str = "a JSON file", *, max_bytes: int = MAX_JSON_BYTES,
              root: str | os.PathLike | None = None, allow_nan: bool = True):
    """The JSON document in the regular file ``path`` (:func:`read_regular`, then :func:`parse_json`): the
    one reader of every JSON file kgeval reads. Every failure (outside ``root``, not a regular file, over
    ``max_bytes``, unreadable, not UTF-8, invalid JSON, nested too deep, a duplicate key, ``NaN`` unless
    ``allow_nan``) is an :class:`~kgeval.errors.InvalidInputError` naming the file and the problem.

    Examples
    --------
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "a.json")
    >>> _ = open(path, "w").write('{"x": 1}')
    >>> read_json(path)
    {'x': 1}
    """
    data = read_regular(path, what, max_bytes=max_bytes, root=root)
    return parse_json(data, str(path), what, allow_nan=allow_nan)
