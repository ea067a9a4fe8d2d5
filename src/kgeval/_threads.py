"""torch's intra-op thread count, set for a ``with`` block and restored afterwards; the process's
named thread pools."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

from .errors import InvalidInputError

__all__ = ["torch_threads", "bookkeeping_threads", "env_count", "env_switch", "thread_pool"]

_POOLS: dict[str, tuple[int, int, ThreadPoolExecutor]] = {}  # name -> (pid, size, pool)
_POOLS_LOCK = threading.Lock()


def _after_fork_in_child() -> None:  # a fork while another thread held the lock: the child's copy stays held
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def thread_pool(name: str, size: int) -> ThreadPoolExecutor:
    """The process's pool ``name`` (its threads' name prefix) of at least ``size`` threads, made on first
    use, again when a larger one is asked for, and again in a forked child: the parent's threads do not
    exist there, so a task submitted to the inherited pool would wait forever."""
    with _POOLS_LOCK:
        got = _POOLS.get(name)
        if got is None or got[0] != os.getpid() or got[1] < size:
            got = _POOLS[name] = (os.getpid(), size, ThreadPoolExecutor(max_workers=size, thread_name_prefix=name))
        return got[2]


@contextmanager
def torch_threads(n: int | None):
    """Run the block with ``torch.set_num_threads(n)`` (``None`` = unchanged), restoring the old value.

    Changing the count is skipped when it already holds: ``set_num_threads`` tears down and
    rebuilds the OpenMP pool even for the same value.
    """
    old = torch.get_num_threads()
    if n is not None and n != old:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != old:
            torch.set_num_threads(old)


def bookkeeping_threads() -> int | None:
    """Threads for the evaluator's memory-bound bookkeeping (filter lookups, masking, counting).

    ``KGEVAL_BOOKKEEPING_THREADS`` (read at each call, not at import): a positive count, or 0 to
    keep torch's setting; default 1. One thread, because on a loaded machine every parallel region
    can stall on a descheduled OpenMP thread (measured: 330 small blocks took 10 s with 2 threads,
    0.04 s with 1); the scorer calls keep the caller's count.
    """
    n = env_count("KGEVAL_BOOKKEEPING_THREADS", minimum=0)
    return 1 if n is None else (n or None)


def env_count(name: str, *, minimum: int) -> int | None:
    """The integer count in environment variable ``name`` (read now), None when unset or empty; a
    value below ``minimum`` (0 or 1) or not an integer is a named error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = minimum - 1
    if n < minimum:
        kind = "non-negative" if minimum == 0 else "positive"
        raise InvalidInputError(f"{name} must be a {kind} integer, got {raw!r}")
    return n


def env_switch(name: str) -> bool:
    """Environment variable ``name`` as an on/off switch (read now): ``1`` or unset/empty is on, ``0``
    off, anything else a named error."""
    raw = os.environ.get(name, "").strip() or "1"
    if raw not in ("0", "1"):
        raise InvalidInputError(f"{name} must be 0 or 1, got {raw!r}")
    return raw == "1"
