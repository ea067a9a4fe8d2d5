"""Benchmark: the full default result (every metric, side and rank type, with all null
expectations and variances) from a rank table.

    python benchmarks/metrics.py            # FB15k-237-sized table and 10^7 tasks
    python benchmarks/metrics.py --quick    # FB15k-237-sized only

Prints wall time and peak traced memory (tracemalloc: numpy allocations included) per
configuration, plus a linearity check (time per task / per max C). Goal: < 0.5 s for the
FB15k-237-sized table (40,932 tasks, candidates up to 14,541). For comparison: PyKEEN 1.11.1
computes its (smaller) default set in about 0.1 s; its master takes ~186 s because its GMR
moments are O(Σ Cᵢ).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from kgeval import RankTable
from kgeval.results import Results


def make_table(num_tasks: int, max_candidates: int, seed: int = 0, weighted: bool = False) -> RankTable:
    rng = np.random.default_rng(seed)
    c = rng.integers(max(2, max_candidates // 10), max_candidates + 1, size=num_tasks)
    c[0] = max_candidates
    # a model better than random: ranks concentrated near the top, with ties
    opt = np.minimum(1 + rng.geometric(0.01, size=num_tasks), c)
    pes = np.minimum(opt + rng.integers(0, 3, size=num_tasks), c)
    side = np.repeat(np.array([0, 1], dtype=np.int8), [num_tasks // 2, num_tasks - num_tasks // 2])
    w = rng.random(num_tasks) + 0.1 if weighted else None
    return RankTable.from_ranks(opt, pes, num_candidates=c, side=side, weights=w)


def run(num_tasks: int, max_c: int, weighted: bool = False, repeat: int = 3) -> dict:
    table = make_table(num_tasks, max_c, weighted=weighted)
    times = []
    for _ in range(repeat):
        from kgeval.metrics import moments

        moments._CACHE.clear()  # measure cold: prefix sums recomputed
        t0 = time.perf_counter()
        res = Results(table)
        times.append(time.perf_counter() - t0)
    moments._CACHE.clear()
    tracemalloc.start()
    Results(table)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "tasks": num_tasks,
        "max C": max_c,
        "weighted": weighted,
        "values": len(res.to_flat_dict()),
        "time [s]": min(times),
        "peak [MB]": peak / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the FB15k-237-sized table")
    args = parser.parse_args()
    configs = [(40_932, 14_541, False), (40_932, 14_541, True), (409_320, 14_541, False), (40_932, 145_410, False)]
    if not args.quick:
        configs.append((10_000_000, 14_541, False))
    rows = [run(n, c, w, repeat=1 if n >= 10**6 else 3) for n, c, w in configs]
    header = ["tasks", "max C", "weighted", "values", "time [s]", "peak [MB]", "µs/task"]
    print(" | ".join(f"{h:>10}" for h in header))
    print("-" * (13 * len(header)))
    for r in rows:
        r["µs/task"] = 1e6 * r["time [s]"] / r["tasks"]
        print(" | ".join(f"{r[h]:>10.3f}" if isinstance(r[h], float) else f"{r[h]!s:>10}" for h in header))
    base = rows[0]
    print(
        f"\nFB15k-237-sized default result: {base['time [s]']:.3f} s (goal < 0.5 s); "
        f"10x tasks: {rows[2]['time [s]'] / base['time [s]']:.1f}x time; 10x max C: {rows[3]['time [s]'] / base['time [s]']:.1f}x time"
    )


if __name__ == "__main__":
    main()
