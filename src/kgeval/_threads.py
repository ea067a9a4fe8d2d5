"""torch's intra-op thread count, set for a ``with`` block and restored afterwards; the process's
named thread pools."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

__all__ = ["torch_threads", "thread_pool"]

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
