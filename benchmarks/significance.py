"""Benchmark: coverage and cost of the bootstrap confidence intervals (issue 9 §4).

    python benchmarks/significance.py                  # 1,000 tables, 1,000 resamples each; timing
    python benchmarks/significance.py --tables 200     # quicker coverage
    python benchmarks/significance.py --task-units     # also the (wrong) task-level bootstrap, for contrast
    python benchmarks/significance.py --skip-coverage  # timing only

**Coverage.** Rank tables are drawn from a known population: each evaluation triple has a
difficulty q drawn from a fixed discrete set, and its head and tail rank are independent given q,
each a geometric(q) rank truncated to 1..C. Head and tail ranks of one triple are therefore
correlated, which is why the triple (not the task) is the resampling unit. The true MRR, hits@10,
MR and GMR are exact sums over this finite distribution. For each table the 95% interval (BCa and
percentile, triples resampled) is computed; coverage is the share of tables whose interval holds
the true value (target 93–97%; with 1,000 tables its Monte Carlo standard error is ~0.7 points).
With ``--task-units`` a column "bca, tasks" resamples single tasks instead (the table without
triple ids): it ignores the head/tail correlation and should cover less.

**Timing.** 10,000 resamples of all headline metrics (MRR, hits@1/3/10, MR, IGMR and the adjusted
and z variants: ``confidence_intervals`` shares one draw) for 40,932 tasks = 20,466 triples × 2
sides (FB15k-237's test split): wall time and peak traced memory (tracemalloc sees numpy's buffers).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from kgeval import RankTable
from kgeval.results import HEADLINE, Results
from kgeval.significance.bootstrap import confidence_intervals

C = 1_000
DIFFICULTY = np.array([0.5, 0.1, 0.02, 0.003])  # geometric success probabilities of the triples
DIFFICULTY_P = np.array([0.2, 0.3, 0.3, 0.2])
METRICS = ("mrr", "hits@10", "mr", "gmr")


def rank_distribution() -> np.ndarray:
    """P(rank = j) for j = 1..C of one task: a mixture over difficulties of truncated geometrics."""
    j = np.arange(1, C + 1)
    pmf = np.zeros(C)
    for q, pq in zip(DIFFICULTY, DIFFICULTY_P):
        g = q * (1 - q) ** (j - 1)
        g[-1] += (1 - q) ** C  # the tail beyond C lands on rank C
        pmf += pq * g
    return pmf


def true_values() -> dict[str, float]:
    """Every task has the same marginal distribution, so the population metrics are its moments."""
    j = np.arange(1, C + 1)
    p = rank_distribution()
    return {"mrr": float(p @ (1 / j)), "hits@10": float(p[:10].sum()), "mr": float(p @ j),
            "gmr": float(np.exp(p @ np.log(j)))}


def draw_table(rng: np.random.Generator, num_triples: int, with_triples: bool = True) -> RankTable:
    q = rng.choice(DIFFICULTY, size=num_triples, p=DIFFICULTY_P)
    ranks = np.minimum(rng.geometric(np.repeat(q, 2)), C)  # head and tail share their triple's q
    return RankTable.from_ranks(ranks, num_candidates=C, side=np.tile([0, 1], num_triples),
                                triple_index=np.repeat(np.arange(num_triples), 2) if with_triples else None)


def coverage(num_tables: int, num_triples: int, num_resamples: int, variants, seed: int = 0) -> dict:
    """``{(metric, variant): (coverage, mean width)}`` over ``num_tables`` simulated tables."""
    truth = true_values()
    rng = np.random.default_rng(seed)
    hits = {(m, v): 0 for m in METRICS for v in variants}
    width = {(m, v): 0.0 for m in METRICS for v in variants}
    for _ in range(num_tables):
        table_seed = int(rng.integers(2**31))
        for method, with_triples in variants:
            res = Results(draw_table(np.random.default_rng(table_seed), num_triples, with_triples),
                          metrics=["mrr", "hits@10", "mr", "gmr"], rank_types=["realistic"])
            cis = confidence_intervals(res, METRICS, method=method, num_resamples=num_resamples, seed=table_seed)
            for m in METRICS:
                hits[m, (method, with_triples)] += cis[m].low <= truth[m] <= cis[m].high
                width[m, (method, with_triples)] += cis[m].high - cis[m].low
    return {k: (hits[k] / num_tables, width[k] / num_tables) for k in hits}, truth


def timing(num_triples: int = 20_466, num_resamples: int = 10_000, method: str = "bca") -> tuple[float, float, int]:
    rng = np.random.default_rng(1)
    table = draw_table(rng, num_triples)
    res = Results(table)
    keys = [k for k in HEADLINE if not k.startswith("p_")]
    confidence_intervals(res, keys, method=method, num_resamples=50, seed=0)  # imports and first-call costs
    tracemalloc.start()
    t0 = time.perf_counter()
    confidence_intervals(res, keys, method=method, num_resamples=num_resamples, seed=0)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return elapsed, peak / 2**20, len(keys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--triples", type=int, default=500, help="evaluation triples per simulated table")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per coverage interval")
    ap.add_argument("--task-units", action="store_true", help="also resample single tasks (ignores the triples)")
    ap.add_argument("--skip-coverage", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args()
    if not args.skip_coverage:
        variants = [("bca", True), ("percentile", True)] + ([("bca", False)] if args.task_units else [])
        names = ["bca", "percentile", "bca, tasks"][:len(variants)]
        t0 = time.perf_counter()
        cov, truth = coverage(args.tables, args.triples, args.resamples, variants)
        print(f"coverage of 95% intervals: {args.tables} tables x {args.triples} triples (x 2 sides), "
              f"{args.resamples} resamples, C = {C} ({time.perf_counter() - t0:.0f} s)")
        print(f"{'metric':<9}{'true value':>12} | " + " | ".join(f"{n:>14}" for n in names))
        print(f"{'':<9}{'':>12} | " + " | ".join(f"{'cover  width':>14}" for _ in names))
        for m in METRICS:
            cells = [cov[m, v] for v in variants]
            print(f"{m:<9}{truth[m]:>12.5g} | " + " | ".join(f"{c:>6.1%} {w:>7.4g}" for c, w in cells))
    if args.skip_timing:
        return
    print()
    print("timing: all headline metrics (adjusted and z included), 20,466 triples = 40,932 tasks, 10,000 resamples")
    print(f"{'method':<11}{'metrics':>8}{'time (s)':>10}{'peak MiB':>10}")
    for method in ("bca", "percentile", "normal"):
        elapsed, peak, k = timing(method=method)
        print(f"{method:<11}{k:>8}{elapsed:>10.2f}{peak:>10.1f}")


if __name__ == "__main__":
    main()
