"""Benchmark: building the full default :class:`kgeval.Results` versus the number of candidates.

    python benchmarks/results_build.py                       # 10^4 .. 10^7 candidates, 5,000 tasks
    python benchmarks/results_build.py --candidates 1000000  # one size
    python benchmarks/results_build.py --profile 1000000     # cProfile's top 25 for one size

The rank table is a full-ranking one: ``N`` entities, two sides, each task's number of candidates
``N`` minus a few filtered answers (so the Cᵢ differ, as after filtering), ranks from a model better
than random (geometric, with ties). The time is the best of ``--repeat`` (3) calls of ``Results(table)`` -- every default metric for every
side and rank type with its null expectation / variance, adjusted indices and z-scores -- in this
process after one warm-up call on a tiny table (imports done, scipy.special included; caches of
earlier sizes cleared).

``exact`` / ``approximate`` list the base metrics whose stated null moments are exact / flagged
approximate (``Results.protocol["approximate_null_moments"]``) on any side.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import time
import tracemalloc

import numpy as np

SIZES = (10**4, 10**5, 10**6, 10**7)
NUM_TASKS = 5_000


def make_table(num_entities: int, num_tasks: int = NUM_TASKS, seed: int = 0):
    from kgeval.ranks import RankTable

    rng = np.random.default_rng(seed)
    c = num_entities - rng.integers(0, 20, size=num_tasks)  # filtered answers removed per task
    opt = np.minimum(1 + rng.geometric(0.01, size=num_tasks), c)
    pes = np.minimum(opt + rng.integers(0, 3, size=num_tasks), c)
    side = np.repeat(np.array([0, 1], dtype=np.int8), [num_tasks // 2, num_tasks - num_tasks // 2])
    return RankTable.from_ranks(opt, pes, num_candidates=c, side=side)


def _clear_caches() -> None:
    from kgeval.metrics import laplace, moments

    moments._CACHE.clear()
    laplace._H_CACHE.clear()


def build(table):
    from kgeval.results import Results

    return Results(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--tasks", type=int, default=NUM_TASKS)
    parser.add_argument("--profile", type=int, default=None, help="profile one size instead of the table")
    parser.add_argument("--memory", action="store_true", help="also the peak traced memory (slower)")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many cold-cache builds")
    args = parser.parse_args()
    import scipy.special  # noqa: F401  (0.15 s, paid once by the first size that needs it: not timed here)

    build(make_table(100, 10))  # imports and first-call costs out of the way
    if args.profile:
        table = make_table(args.profile, args.tasks)
        _clear_caches()
        prof = cProfile.Profile()
        prof.enable()
        build(table)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return
    from kgeval.metrics import default_metrics

    bases = {getattr(m, "base", m).key for m in default_metrics() if hasattr(m, "base")}
    approx_any: set[str] = set()
    head = f"{'candidates':>13} | {'tasks':>6} | {'time [s]':>8} | " + (f"{'peak MB':>8} | " if args.memory else "") + "approximate"
    print(head)
    print("-" * len(head))
    for n in args.candidates:
        table = make_table(n, args.tasks)
        dt = math.inf
        for _ in range(args.repeat):
            _clear_caches()
            t0 = time.perf_counter()
            res = build(table)
            dt = min(dt, time.perf_counter() - t0)
        mem = ""
        if args.memory:
            _clear_caches()
            tracemalloc.start()
            build(table)
            mem = f"{tracemalloc.get_traced_memory()[1] / 2**20:>8.1f} | "
            tracemalloc.stop()
        approx = res.protocol["approximate_null_moments"]
        approx_any.update(approx)
        print(f"{n:>13,} | {args.tasks:>6,} | {dt:>8.3f} | {mem}{', '.join(approx) or '-'}")
    print(f"\nexact null moments at every size: {', '.join(sorted(bases - approx_any))}")


if __name__ == "__main__":
    main()
