"""Benchmark: all metric values of a rank table, side by side with PyKEEN 1.11.1.

    python benchmarks/metrics.py               # 10^4, 4·10^4, 10^5, 10^6 tasks
    python benchmarks/metrics.py --sizes 40932 # one size
    python benchmarks/metrics.py --extra       # also weighted, 10x tasks / 10x max C rows

For each size the same rank table (max C = 14,541 as FB15k-237, two sides, ties) is given to

- kgeval ``Results(table)``: the full default result (every metric, side and rank type,
  including the ``expected`` rank type and exact null moments PyKEEN does not have);
- kgeval restricted to the values PyKEEN reports (its 31 default metrics, 3 rank types);
- PyKEEN ``RankBasedMetricResults.from_ranks`` with ``RankBasedEvaluator().metrics``.

"first" is the first call in a fresh process (imports done, not timed), "warm" the best of
three later calls. Goal (issue 8): kgeval faster than PyKEEN for the values PyKEEN reports,
within 2x of it for the full set, first call under 0.3 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import tracemalloc

import numpy as np

MAX_C = 14_541
SIZES = (10_000, 40_932, 100_000, 1_000_000)


def make_arrays(num_tasks: int, max_candidates: int = MAX_C, seed: int = 0, weighted: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    c = rng.integers(max(2, max_candidates // 10), max_candidates + 1, size=num_tasks)
    c[0] = max_candidates
    # a model better than random: ranks concentrated near the top, with ties
    opt = np.minimum(1 + rng.geometric(0.01, size=num_tasks), c)
    pes = np.minimum(opt + rng.integers(0, 3, size=num_tasks), c)
    side = np.repeat(np.array([0, 1], dtype=np.int8), [num_tasks // 2, num_tasks - num_tasks // 2])
    w = rng.random(num_tasks) + 0.1 if weighted else None
    return {"opt": opt, "pes": pes, "c": c, "side": side, "w": w}


# ---------------------------------------------------------------------------- the three contenders
def pykeen_setup(a: dict):
    from pykeen.evaluation import RankBasedEvaluator
    from pykeen.evaluation.rank_based_evaluator import RankBasedMetricResults, _iter_ranks

    metrics = RankBasedEvaluator().metrics
    ranks, cands = {}, {}
    for code, side in ((0, "head"), (1, "tail")):
        sel = a["side"] == code
        o, p = a["opt"][sel].astype(float), a["pes"][sel].astype(float)
        ranks[side, "optimistic"], ranks[side, "pessimistic"], ranks[side, "realistic"] = [o], [p], [0.5 * (o + p)]
        cands[side] = [a["c"][sel]]

    def run():
        return RankBasedMetricResults.from_ranks(metrics, _iter_ranks(ranks=ranks, num_candidates=cands))

    return run


def pykeen_keys() -> list[str]:
    """PyKEEN's default metrics as kgeval keys (its hits-family keys drop k)."""
    from pykeen.evaluation import RankBasedEvaluator

    return sorted({m.key.replace("_at_k", f"_at_{m.k}") if hasattr(m, "k") else m.key
                   for m in RankBasedEvaluator().metrics})


def kgeval_setup(a: dict, subset: list[str] | None):
    from kgeval.ranks import RankTable
    from kgeval.results import Results

    table = RankTable.from_ranks(a["opt"], a["pes"], num_candidates=a["c"], side=a["side"], weights=a["w"])
    if subset is None:
        return lambda: Results(table)
    return lambda: Results(table, metrics=subset, rank_types=("optimistic", "pessimistic", "realistic"))


def _count(result) -> int:
    return len(result.to_flat_dict()) if hasattr(result, "to_flat_dict") else len(result.data)


def first_call(which: str, num_tasks: int) -> dict:
    """Run in a fresh process: import and set up untimed, then time the first call."""
    a = make_arrays(num_tasks)
    if which == "pykeen":
        run = pykeen_setup(a)
    else:
        run = kgeval_setup(a, json.loads(sys.argv[-1]) if which == "kgeval-pykeen-set" else None)
    t0 = time.perf_counter()
    out = run()
    return {"time": time.perf_counter() - t0, "values": _count(out)}


def measure(which: str, num_tasks: int, keys: list[str], repeat: int) -> dict:
    cmd = [sys.executable, __file__, "--first-call", which, str(num_tasks), json.dumps(keys)]
    first = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    a = make_arrays(num_tasks)
    run = pykeen_setup(a) if which == "pykeen" else kgeval_setup(a, keys if which == "kgeval-pykeen-set" else None)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return {"first": first["time"], "warm": min(times), "values": first["values"]}


def side_by_side(sizes, have_pykeen: bool) -> None:
    keys = pykeen_keys() if have_pykeen else []
    rows = []
    for n in sizes:
        repeat = 2 if n >= 10**6 else 3
        row = {"tasks": n, "kgeval": measure("kgeval", n, keys, repeat)}
        if have_pykeen:
            row["kgeval (PyKEEN's values)"] = measure("kgeval-pykeen-set", n, keys, repeat)
            row["pykeen"] = measure("pykeen", n, keys, repeat)
        rows.append(row)
    names = [k for k in rows[0] if k != "tasks"]
    head = f"{'tasks':>9} | " + " | ".join(f"{nm:>28}" for nm in names)
    print(head)
    print(f"{'':>9} | " + " | ".join(f"{'values  first [s]  warm [s]':>28}" for _ in names))
    print("-" * len(head))
    for r in rows:
        cells = [f"{r[nm]['values']:>6} {r[nm]['first']:>10.3f} {r[nm]['warm']:>9.3f}" for nm in names]
        print(f"{r['tasks']:>9,} | " + " | ".join(f"{c:>28}" for c in cells))
    if have_pykeen:
        print("\nwarm ratio kgeval/PyKEEN: full set " + ", ".join(
            f"{r['kgeval']['warm'] / r['pykeen']['warm']:.2f}x" for r in rows) + "; PyKEEN's values " + ", ".join(
            f"{r['kgeval (PyKEEN' + chr(39) + 's values)']['warm'] / r['pykeen']['warm']:.2f}x" for r in rows))


def extra_rows() -> None:
    """Weighted tasks, 10x tasks and 10x max C: time and peak traced memory of the full result."""
    from kgeval.metrics import moments

    print(f"\n{'tasks':>10} | {'max C':>8} | {'weighted':>8} | {'time [s]':>8} | {'peak [MB]':>9}")
    for n, max_c, weighted in [(40_932, MAX_C, True), (409_320, MAX_C, False), (40_932, 10 * MAX_C, False)]:
        a = make_arrays(n, max_c, weighted=weighted)
        run = kgeval_setup(a, None)
        times = []
        for _ in range(2):
            moments._CACHE.clear()  # cold prefix sums
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        moments._CACHE.clear()
        tracemalloc.start()
        run()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{n:>10,} | {max_c:>8,} | {weighted!s:>8} | {min(times):>8.3f} | {peak / 2**20:>9.1f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--first-call":
        print(json.dumps(first_call(sys.argv[2], int(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--extra", action="store_true", help="also weighted / 10x tasks / 10x max C rows")
    args = parser.parse_args()
    try:
        import pykeen.evaluation  # noqa: F401

        have_pykeen = True
    except ImportError:
        have_pykeen = False
        print("PyKEEN is not installed: kgeval only\n")
    side_by_side(args.sizes, have_pykeen)
    if args.extra:
        extra_rows()


if __name__ == "__main__":
    main()
