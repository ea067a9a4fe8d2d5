"""Batch sizes from a memory budget, and the one out-of-memory-aware batch driver.

The driver walks ``[0, n)`` in batches; with ``ends`` (the sorted end positions of groups, e.g.
the tasks of each query) every batch holds whole groups. On an out-of-memory error (CUDA, the
CPU allocator or numpy; see :func:`is_out_of_memory`) it halves the batch size and resumes at the
failed batch: finished batches are never redone.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import torch

__all__ = ["available_memory_bytes", "default_memory_budget", "auto_batch", "is_out_of_memory", "run_batches"]

_DEFAULT_BUDGET_CAP = 1 << 30  # 1 GiB
# substrings of allocation failures raised as plain RuntimeError: CUDA's caching allocator and
# torch's CPU allocator ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ...",
# "not enough memory" on Windows)
_OOM_MESSAGES = ("out of memory", "can't allocate memory", "not enough memory")


def available_memory_bytes(device: torch.device | None = None) -> int | None:
    """Free memory on ``device``: CUDA free memory; on the CPU the smallest of MemAvailable (psutil or
    /proc/meminfo), the cgroup's headroom (containers) and the address-space limit's headroom
    (``ulimit -v`` / ``prlimit --as``), since exceeding any of them fails the allocation."""
    if device is not None and device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:
            return None
    found = [x for x in (_mem_available(), _cgroup_headroom(), _address_space_headroom()) if x is not None]
    return max(0, min(found)) if found else None


_PSUTIL = None  # the psutil module once looked up; False when it is not installed


def _psutil():
    """psutil (optional), imported once: a failed import searched sys.path again on every call
    (~0.1 ms of stat calls per evaluation without psutil)."""
    global _PSUTIL
    if _PSUTIL is None:
        try:
            import psutil
        except Exception:  # noqa: BLE001 - missing or broken: /proc/meminfo is read instead
            psutil = False
        _PSUTIL = psutil
    return _PSUTIL or None


def _mem_available() -> int | None:
    ps = _psutil()
    if ps is not None:
        try:
            return int(ps.virtual_memory().available)
        except Exception:  # noqa: BLE001 - unsupported platform: fall back to /proc/meminfo
            pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_headroom() -> int | None:
    """``limit - usage`` of the process's memory cgroup (v2, else v1); None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as fh:
                raw = fh.read().strip()
            if raw == "max" or int(raw) >= 1 << 60:  # v1 writes a huge number for "no limit"
                return None
            with open(usage_file) as fh:
                return int(raw) - int(fh.read().strip())
        except (OSError, ValueError):
            continue
    return None


def _address_space_headroom() -> int | None:
    """``RLIMIT_AS - current virtual size``; None without a limit (or off Linux)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft < 0:
            return None
        with open("/proc/self/statm") as fh:
            vsize = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return int(soft) - vsize
    except (ImportError, OSError, ValueError, AttributeError):
        return None


def default_memory_budget(device: torch.device | None = None) -> int:
    """``min(1 GiB, available / 4)``: a safe share for the score matrix and its temporaries."""
    avail = available_memory_bytes(device)
    if avail is None:
        return _DEFAULT_BUDGET_CAP // 2
    return int(max(16 << 20, min(_DEFAULT_BUDGET_CAP, avail // 4)))


def auto_batch(budget: int, columns: int, n_tasks: int, itemsize: int = 4, extra: float = 0.0) -> int:
    """Task rows per batch: ``budget / (columns * (3 * itemsize + 2 + extra) + 256)``, in ``[1, n_tasks]``.

    Per row: the score matrix, a gathered/restricted copy and the float comparison buffer (batches
    hold whole queries, so a batch may exceed its task count by one query's tasks); ``extra``: the
    scorer's own working memory per score entry (``score_bytes``, e.g. a broadcast
    ``batch x entities x dim`` tensor).
    """
    per_row = int(columns * (3 * itemsize + 2 + extra)) + 256
    return int(max(1, min(n_tasks, budget // per_row)))


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure: ``MemoryError`` (numpy's ``_ArrayMemoryError``
    included), ``torch.OutOfMemoryError``, or a ``RuntimeError`` from torch's CUDA or CPU allocator."""
    if isinstance(exc, MemoryError):
        return True
    for name in ("OutOfMemoryError",):
        cls = getattr(torch, name, None) or getattr(torch.cuda, name, None)
        if cls is not None and isinstance(exc, cls):
            return True
    if isinstance(exc, RuntimeError):
        msg = str(exc).lower()
        return any(m in msg for m in _OOM_MESSAGES)
    return False


def _batch_stop(start: int, size: int, n: int, ends: np.ndarray | None) -> int:
    """End of the batch starting at ``start``: ``start + size``, moved back to the last group end
    (at least one whole group)."""
    stop = min(n, start + size)
    if ends is None:
        return stop
    i = int(np.searchsorted(ends, stop, side="right"))  # groups ending at or before stop
    first = int(np.searchsorted(ends, start, side="right"))  # the group starting at ``start``
    return int(ends[max(i, first + 1) - 1])


def run_batches(n: int, batch_size: int, step, bar=None, *, ends: np.ndarray | None = None) -> int:
    """Call ``step(start, stop)`` over ``[0, n)``; returns the final batch size.

    ``ends``: sorted group end positions (the last one ``n``); batches then cover whole groups.
    An out-of-memory error halves the batch size (frees the CUDA cache) and retries the same
    start; it is re-raised when the batch is a single row or a single group already.
    """
    start, size = 0, int(batch_size)
    while start < n:
        stop = _batch_stop(start, size, n, ends)
        try:
            step(start, stop)
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is an allocation failure
            smallest = _batch_stop(start, 1, n, ends)
            if not is_out_of_memory(exc) or stop <= smallest:
                raise
            size = max(1, min(size, stop - start) // 2)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            warnings.warn(f"out of memory: retrying with batch size {size}", stacklevel=3)
            continue
        if bar is not None:
            bar.update(stop - start)
        start = stop
    return size
