"""torch's intra-op thread count, set for a ``with`` block and restored afterwards."""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch

from .errors import InvalidInputError

__all__ = ["torch_threads", "bookkeeping_threads", "env_count"]


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
