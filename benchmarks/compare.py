"""Paired comparison (kgeval.compare): type-I error, power and timing.

    python benchmarks/compare.py [--reps 1000] [--quick] [--tests permutation,bootstrap --sizes 10,100]
                                 [--only type1|power|timing]

1. Type-I error: two exchangeable models (every task's rank drawn independently from the same
   truncated geometric distribution for both) -> the share of p-values <= 0.05, per test and
   metric, through the public kgeval.compare (no correction). Nominal: 0.05; the issue asks
   for [0.03, 0.07] (binomial standard error at 1,000 repetitions: 0.007).
2. Power: model A better (geometric p_A > p_B), the share of rejections at 0.05.
3. Timing and peak memory (tracemalloc) of compare() with 10,000 resamples of the four headline
   metrics on 40,932 tasks (FB15k-237's test split: 20,466 triples, head and tail).

Measured 2026-11-23 on the shared 2-core machine (load average 6-10, so absolute times are
inflated ~2-3x):

    timing (s, 10,000 resamples, 4 metrics)  permutation  bootstrap  wilcoxon   peak (tracemalloc)
    per-metric multinomial draws (before)         133.3      110.6     100.9    100 / 99 / 136 MiB
    one shared set, integers + bincount            10.2        8.5       7.1     74 / 75 / 71 MiB
    (the wilcoxon row also pays for the bootstrap interval; "before" included importing scipy.stats)

    type-I error, 2,000 repetitions per cell, 999 resamples (sd 0.005); MRR hits@10 MR GMR
    permutation (exact)  10 triples   0.058 0.018 0.049 0.051   (hits@10: discrete, exact => <= 0.05)
    permutation          30           0.051 0.040 0.054 0.047
    permutation         100           0.049 0.043 0.048 0.051
    permutation         400           0.045 0.046 0.052 0.051
    bootstrap-t          10           0.021 0.038 0.035 0.042   (conservative at 10 triples)
    bootstrap-t          30           0.046 0.059 0.051 0.047
    bootstrap-t         100           0.048 0.051 0.049 0.051
    bootstrap-t         400           0.045 0.051 0.051 0.050
    centred percentile bootstrap (before; still the median's test):
                         10           0.109 0.073 0.098 0.082   (liberal)
                         30           0.062 0.060 0.067 0.056
                        100           0.051 0.051 0.050 0.054
                        400           0.050 0.051 0.054 0.051
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from kgeval import RankTable, compare

C = 500
METRICS = ("mrr", "hits@10", "mr", "gmr")


def table(rng, n_triples: int, p: float) -> RankTable:
    ranks = np.minimum(rng.geometric(p, size=2 * n_triples), C)
    return RankTable.from_ranks(ranks, num_candidates=C, side=np.tile([0, 1], n_triples),
                                triple_index=np.repeat(np.arange(n_triples), 2))


def rejection_rates(test: str, n_triples: int, p_b: float, reps: int, resamples: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    hits = dict.fromkeys(METRICS, 0)
    for rep in range(reps):
        a, b = table(rng, n_triples, 0.05), table(rng, n_triples, p_b)
        df = compare(a, b, metrics=METRICS, test=test, num_resamples=resamples, seed=seed + rep, correction=None)
        for metric, p in zip(df["metric"], df["p_value"]):
            hits[metric] += p <= 0.05
    return {m: h / reps for m, h in hits.items()}


GRID = (("permutation", 10), ("permutation", 100), ("bootstrap", 100), ("wilcoxon", 100), ("bootstrap", 400))


def print_rates(title: str, p_b: float, reps: int, resamples: int, grid, band=None) -> None:
    print(f"\n{title} ({reps} repetitions per cell, {resamples} resamples, ranks ~ Geometric, C = {C}; "
          f"A: p = 0.05, B: p = {p_b})", flush=True)
    if band:
        sd = (0.05 * 0.95 / reps) ** 0.5
        print(f"binomial sd of a rate of 0.05 at {reps} repetitions: {sd:.4f}; "
              f"'*' marks a rate outside [{band[0]}, {band[1]}]")
    print(f"{'test':<20}{'triples':>8}  " + "".join(f"{m:>9}" for m in METRICS) + f"{'seconds':>10}")
    for test, n in grid:
        t0 = time.perf_counter()
        rates = rejection_rates(test, n, p_b, reps, resamples, seed=1)
        label = test + (" (exact)" if test == "permutation" and n <= 20 else "")
        flag = (lambda r: "*" if band and not band[0] <= r <= band[1] else " ")
        print(f"{label:<20}{n:>8}  " + "".join(f"{rates[m]:>8.3f}{flag(rates[m])}" for m in METRICS)
              + f"{time.perf_counter() - t0:>10.1f}", flush=True)


def timing(repeat: int = 3) -> None:
    """Median wall time of ``repeat`` calls (after a warm-up call that imports scipy.stats etc.),
    then the peak of traced allocations (tracemalloc, a separate call: tracing slows numpy down)."""
    rng = np.random.default_rng(0)
    a, b = table(rng, 20_466, 0.05), table(rng, 20_466, 0.05)
    print("\ntiming: 40,932 tasks (20,466 triples), 10,000 resamples, metrics " + ", ".join(METRICS)
          + f"; median of {repeat} calls", flush=True)
    print(f"{'test':<14}{'seconds':>10}{'peak MiB':>10}")
    for test in ("permutation", "bootstrap", "wilcoxon"):
        compare(a, b, metrics=METRICS, test=test, num_resamples=10, seed=0)  # warm-up (imports)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            compare(a, b, metrics=METRICS, test=test, num_resamples=10_000, seed=0)
            times.append(time.perf_counter() - t0)
        tracemalloc.start()
        compare(a, b, metrics=METRICS, test=test, num_resamples=10_000, seed=0)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        print(f"{test:<14}{float(np.median(times)):>10.2f}{peak:>10.1f}", flush=True)
    t0 = time.perf_counter()
    compare(a, b, metrics=("median_rank",), test="bootstrap", num_resamples=1_000, seed=0)
    print(f"{'bootstrap, median rank (1,000 resamples)':<40}{time.perf_counter() - t0:>8.2f} s")


def _grid(tests: str, sizes: str):
    return [(t, int(n)) for t in tests.split(",") for n in sizes.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=999)
    parser.add_argument("--quick", action="store_true", help="200 repetitions, 199 resamples")
    parser.add_argument("--tests", help="comma-separated tests of the type-I grid (with --sizes; default: "
                        + ", ".join(f"{t} {n}" for t, n in GRID) + ")")
    parser.add_argument("--sizes", default="10,30,100,400", help="triples per table of the --tests grid")
    parser.add_argument("--only", choices=["type1", "power", "timing"], action="append",
                        help="run only these parts (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per test (median reported)")
    args = parser.parse_args()
    reps, resamples = (200, 199) if args.quick else (args.reps, args.resamples)
    grid = _grid(args.tests, args.sizes) if args.tests else GRID
    parts = args.only or ["type1", "power", "timing"]
    if "type1" in parts:
        print_rates("type-I error at alpha = 0.05 (exchangeable models)", 0.05, reps, resamples, grid,
                    band=(0.03, 0.07))
    if "power" in parts:
        print_rates("power at alpha = 0.05", 0.06, reps, resamples, grid)
    if "timing" in parts:
        timing(args.repeat)


if __name__ == "__main__":
    main()
