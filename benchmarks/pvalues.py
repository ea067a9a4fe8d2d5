"""Benchmark: p-values against chance (kgeval.significance.pvalues) — cost and type-I error.

    python benchmarks/pvalues.py                 # both tables
    python benchmarks/pvalues.py --only timing   # or --only type1

Timing: an FB15k-237-sized rank table (40,932 tasks, max C = 14,541, ~12,500 distinct Cᵢ, as
benchmarks/metrics.py makes it): ``Results(table)`` (p-values are lazy: not computed there),
then each headline p-value by the method ``auto`` picks, then the first ``to_flat_dict(p_values=True)``
(every p-value key of every side) and a second one (cached). Also MR with few distinct Cᵢ,
where the exact convolution applies.

Type-I error: rank tables drawn from the null model itself (rᵢ ~ U{1..Cᵢ}); the rate of
p ≤ α should be at most α (a valid test) and close to it where the distribution is not too
discrete. Small n shows where the normal approximation (MRR, GMR) is anti-conservative.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from kgeval import RankTable, Results
from kgeval.metrics import get
from kgeval.significance.pvalues import null_p_value

from metrics import make_arrays  # benchmarks/metrics.py: the FB15k-237-like rank table


def timing() -> None:
    a = make_arrays(40_932)
    t0 = time.perf_counter()
    results = Results(RankTable.from_ranks(a["opt"], a["pes"], num_candidates=a["c"], side=a["side"]))
    rows = [("Results(table), 40,932 tasks", time.perf_counter() - t0, "")]
    for key in ("both.realistic.hits@10", "both.realistic.hits@1", "both.realistic.mr", "both.realistic.mrr",
                "both.realistic.igmr"):
        t0 = time.perf_counter()
        p = results.p_value(key)
        rows.append((f"p_value({key})", time.perf_counter() - t0, f"{p.method}; p = {p}"))
    for label in ("to_flat_dict(p_values=True) first (all p keys)", "to_flat_dict(p_values=True) again (cached)"):
        t0 = time.perf_counter()
        results.to_flat_dict(p_values=True)
        rows.append((label, time.perf_counter() - t0, ""))
    rng = np.random.default_rng(0)
    for n, choices in ((40_932, [50, 100, 200, 400]), (2_000, np.arange(100, 2100, 100))):
        c = rng.choice(choices, size=n)
        value = get("mr")(np.maximum(1, rng.integers(1, c + 1) // 2), c)
        t0 = time.perf_counter()
        p = null_p_value("mr", value, c)
        rows.append((f"MR, {n} tasks, {len(choices)} distinct C", time.perf_counter() - t0, f"{p.method}; p = {p}"))
    print(f"{'what':48s} {'seconds':>8s}  result")
    for label, sec, note in rows:
        print(f"{label:48s} {sec:8.3f}  {note}")


def type1(num_tables: int = 2000) -> None:
    rng = np.random.default_rng(1)
    print(f"\ntype-I error under the null ({num_tables} tables each; MC sd at 0.05 ~ "
          f"{np.sqrt(0.05 * 0.95 / num_tables):.3f})")
    print(f"{'metric':8s} {'n':>6s} {'method':28s} {'P(p<=0.01)':>10s} {'P(p<=0.05)':>10s}")
    for n in (5, 30, 300):
        c = rng.choice([10, 50, 200], size=n)
        for key in ("hits@10", "mr", "mrr", "gmr"):
            m = get(key)
            ps, method = [], ""
            for _ in range(num_tables):
                p = null_p_value(m, m(rng.integers(1, c + 1), c), c)
                ps.append(p.value)
                method = p.method
            ps = np.array(ps)
            print(f"{key:8s} {n:6d} {method:28s} {np.mean(ps <= 0.01):10.4f} {np.mean(ps <= 0.05):10.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("timing", "type1"))
    parser.add_argument("--tables", type=int, default=2000, help="null tables per row of the type-I table")
    args = parser.parse_args()
    if args.only != "type1":
        timing()
    if args.only != "timing":
        type1(args.tables)


if __name__ == "__main__":
    main()
