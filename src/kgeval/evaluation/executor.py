"""The evaluator's only worker threads: a batch's independent parts walked by N workers.

A batch of full ranking splits into parts (row groups of whole rows, or (row block, column chunk)
pairs). :func:`walk_parts` runs them on ``workers`` walkers: walker 0 is the calling thread, the
others come from one process-wide pool; each takes the next part as it finishes one (so a slow walker
takes fewer), scores it on one torch thread into its own reused block (``slot``) and uses it. A
``setup`` task (the batch's serial work) runs on the calling thread while the other walkers score
their first part; no part's scores are used before it is done. A walker that fails (or is
interrupted) makes the others stop at their next part, and its error is raised once all have
ended. With one walker everything runs on the calling thread, in order: the sequential executor
(accelerators, debugging, scorers that cannot score from several threads at once).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import torch

from .._threads import thread_pool, torch_threads

__all__ = ["walk_parts", "run_on_workers", "walkers"]


def walkers(ctx, sc, nparts: int, block: int) -> int:
    """How many walkers take a batch's ``nparts`` parts, each scoring on one torch thread.

    On the CPU with ``t >= 2`` walkers (``Tuning.workers``, default the caller's torch threads),
    single-threaded walkers (each scores its part, then counts it with the compiled kernel, both
    outside the GIL) keep every core busy; one walker with a ``t``-thread matmul leaves ``t - 1``
    cores idle while it counts. A scorer's rounding may depend on the thread count, which is safe
    because every walker reads each answer's score from the very block it counts with, pass 2
    verifies pass 1, and re-ranking scores and counts on one walker. Only for scorers that say
    several threads may score at once (``concurrent_scoring``) and take ``out=``, automatic block
    sizes (each walker holds one block of at most ``block`` scores) and when this evaluation counts
    with the kernel (decided at its start). Otherwise 1: the sequential executor.
    """
    n = ctx.tuning.workers or ctx.score_threads or 1
    if n < 2 or nparts < 2 or ctx.device.type != "cpu" or not sc.accepts_out or block > ctx.tuning.cpu_block:
        return 1
    if getattr(sc.scorer, "concurrent_scoring", False) is not True:
        return 1
    if not ctx.counter.fused:
        return 1
    return min(n, nparts)


def walk_parts(sc, n_parts: int, workers: int, score: Callable, use: Callable, *,
               setup: Callable | None = None, start: Callable | None = None) -> list:
    """Walk parts ``0 .. n_parts - 1``: ``x = score(k, slot)`` then ``use(k, x, state)``, where ``state``
    is ``start(slot)`` (made once per walker, after ``setup()`` has run; None without ``start``).
    Returns every walker's ``state``, walker 0 first (walkers that took no part: None)."""
    order = iter(range(n_parts))  # shared: next() is atomic under the GIL, each part is taken by one walker
    failed = []
    ready = threading.Event()
    if setup is None:
        ready.set()

    def walk(slot: int):
        try:
            if slot == 0 and setup is not None:
                try:
                    setup()
                finally:
                    ready.set()
            state, started = None, False
            for k in order:
                if failed:
                    break
                x = score(k, slot)
                if not started:  # this walker's first part: using it needs setup()'s results
                    ready.wait()
                    if failed:
                        break
                    state, started = (start(slot) if start is not None else None), True
                use(k, x, state)
            return state
        except BaseException:
            failed.append(slot)  # the other walkers stop at their next part; this error is raised
            raise

    if workers <= 1:
        return [walk(0)]
    return run_on_workers(sc, walk, workers)


def run_on_workers(sc, walk: Callable[[int], object], workers: int) -> list:
    """``[walk(slot) for slot in range(workers)]``, slot 0 on the calling thread, the others on the
    process's walker pool; the scorer's calls run on one torch thread each meanwhile (its
    ``threads`` is set to 1 and restored)."""
    # at least one thread per core: evaluations run at once from several threads never queue
    pool = thread_pool("kgeval-chunks", max(workers - 1, os.cpu_count() or 1))
    threads = sc.threads
    sc.threads = 1  # scorer calls must not change the process-wide thread count under each other
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def walker(slot: int):  # autograd modes are per thread: the walker takes the caller's
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return walk(slot)

    try:
        with torch_threads(1):
            futures = [pool.submit(walker, slot) for slot in range(1, workers)]
            try:
                parts = [walk(0)]
            finally:  # never leave a walker running past this batch (an error is raised after all end)
                done = [f.exception() for f in futures]
            for f, err in zip(futures, done):
                if err is not None:
                    raise err
                parts.append(f.result())
    finally:
        sc.threads = threads
    return parts
