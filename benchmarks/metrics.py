"""Benchmark: metric finalisation of a rank table, side by side with PyKEEN 1.11.1.

    python benchmarks/metrics.py                         # 10^4, 4·10^4, 10^5, 10^6 tasks
    python benchmarks/metrics.py --sizes 40932           # one size (FB15k-237 test, both sides)
    python benchmarks/metrics.py --sizes 40932 --write   # also benchmarks/results/metrics-<date>.md
    python benchmarks/metrics.py --extra                 # also weighted, 10x tasks / 10x max C rows

For each size the same rank table (max C = 14,541 as FB15k-237, two sides, ties) is given to

- ``kgeval``: ``Results(table).to_flat_dict()``, the full default result (every metric, side and
  rank type, including the ``expected`` rank type and exact null moments PyKEEN does not have),
  called again on the same table: its null moments are kept on the table (computed once);
- ``kgeval, new table``: the same on a new :class:`RankTable` each call, as an evaluation loop
  would: the moments are computed again (the process-wide caches keyed by the candidate counts,
  prefix sums, log-moment series and harmonic numbers, are warm);
- ``kgeval (PyKEEN's values)``: restricted to PyKEEN's 31 default metrics and 3 rank types;
- ``kgeval + p-values``: ``to_flat_dict(p_values=True)``, the exact p-values of the headline metrics;
- ``pykeen``: ``RankBasedMetricResults.from_ranks`` with ``RankBasedEvaluator().metrics``.

"first" is the first call in a fresh process (imports done, not timed), "warm" the best of three
later calls; the first call's CPU time (``time.process_time``) is printed too, as the load inflates
wall time. Goal (issue 26): the default kgeval result within 2x PyKEEN's warm call, its first
call in a process under 0.5 s. The box's load (``os.getloadavg``) is printed with the numbers: on a
shared machine they are only as good as it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

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


CONTENDERS = ("kgeval", "kgeval, new table", "kgeval (PyKEEN's values)", "kgeval + p-values", "pykeen")


def kgeval_setup(a: dict, which: str = "kgeval", subset: list[str] | None = None, calls: int = 4):
    from kgeval.ranks import RankTable
    from kgeval.results import Results

    def table():
        return RankTable.from_ranks(a["opt"], a["pes"], num_candidates=a["c"], side=a["side"], weights=a["w"])

    one = table()
    if which == "kgeval":
        return lambda: Results(one).to_flat_dict()
    if which == "kgeval + p-values":
        return lambda: Results(one).to_flat_dict(p_values=True)
    if which == "kgeval, new table":
        fresh = iter([table() for _ in range(calls)])  # built untimed
        return lambda: Results(next(fresh)).to_flat_dict()
    rank_types = ("optimistic", "pessimistic", "realistic")
    return lambda: Results(one, metrics=subset, rank_types=rank_types).to_flat_dict()


def setup(which: str, a: dict, keys: list[str], calls: int = 4):
    return pykeen_setup(a) if which == "pykeen" else kgeval_setup(a, which, keys, calls)


def _count(result) -> int:
    return len(result) if isinstance(result, dict) else len(result.data)


def first_call(which: str, num_tasks: int, keys: list[str]) -> dict:
    """Run in a fresh process: import and set up untimed, then time the first call."""
    run = setup(which, make_arrays(num_tasks), keys, calls=1)
    t0, c0 = time.perf_counter(), time.process_time()
    out = run()
    return {"time": time.perf_counter() - t0, "cpu": time.process_time() - c0, "values": _count(out)}


def measure(which: str, num_tasks: int, keys: list[str], repeat: int) -> dict:
    cmd = [sys.executable, __file__, "--first-call", which, str(num_tasks), json.dumps(keys)]
    first = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    run = setup(which, make_arrays(num_tasks), keys, calls=repeat + 1)
    run()  # the first call of this process is the subprocess's number
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return {"first": first["time"], "first_cpu": first["cpu"], "warm": min(times), "values": first["values"]}


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} CPUs)"


def side_by_side(sizes, have_pykeen: bool) -> list[str]:
    """The table as printed lines (also returned, for --write)."""
    keys = pykeen_keys() if have_pykeen else []
    names = [c for c in CONTENDERS if have_pykeen or c in ("kgeval", "kgeval, new table", "kgeval + p-values")]
    rows, loads = [], [_load()]
    for n in sizes:
        repeat = 2 if n >= 10**6 else 3
        row = {"tasks": n}
        for which in names:
            row[which] = measure(which, n, keys, repeat)
        rows.append(row)
        loads.append(_load())
    lines = [f"{'tasks':>9} | " + " | ".join(f"{nm:>26}" for nm in names)]
    lines.append(f"{'':>9} | " + " | ".join(f"{'values  first [s]  warm [s]':>26}" for _ in names))
    lines.append("-" * len(lines[0]))
    for r in rows:
        cells = [f"{r[nm]['values']:>6} {r[nm]['first']:>9.3f} {r[nm]['warm']:>9.3f}" for nm in names]
        lines.append(f"{r['tasks']:>9,} | " + " | ".join(f"{c:>26}" for c in cells))
    lines.append("")
    for r in rows:
        k = r["kgeval"]
        line = (f"{r['tasks']:,} tasks: kgeval first call {k['first']:.3f} s, CPU time {k['first_cpu']:.3f} s "
                f"(goal < 0.5 s; PyKEEN's first call CPU {r['pykeen']['first_cpu']:.3f} s)" if have_pykeen else
                f"{r['tasks']:,} tasks: kgeval first call {k['first']:.3f} s, CPU time {k['first_cpu']:.3f} s (goal < 0.5 s)")
        if have_pykeen:
            pk = r["pykeen"]["warm"]
            line += (f"; warm kgeval / PyKEEN: default result {k['warm'] / pk:.2f}x (goal <= 2x), new table "
                     f"{r['kgeval, new table']['warm'] / pk:.2f}x, PyKEEN's values "
                     f"{r[chr(107) + 'geval (PyKEEN' + chr(39) + 's values)']['warm'] / pk:.2f}x, "
                     f"with p-values {r['kgeval + p-values']['warm'] / pk:.2f}x")
        lines.append(line)
    lines += ["", "load before / after each size: " + "; ".join(loads)]
    for ln in lines:
        print(ln)
    return lines


def write_results(lines: list[str], extra: list[str]) -> Path:
    """benchmarks/results/metrics-<UTC date>.md (appended to when it exists: one file per day)."""
    import datetime
    import platform

    import kgeval

    now = datetime.datetime.now(datetime.timezone.utc)
    path = Path(__file__).resolve().parent / "results" / f"metrics-{now:%Y-%m-%d}.md"
    path.parent.mkdir(exist_ok=True)
    head = [] if path.exists() else ["# `benchmarks/metrics.py` results", ""]
    try:
        import pykeen

        pykeen_version = pykeen.get_version()
    except Exception:  # noqa: BLE001 -- absent or without get_version: say so
        pykeen_version = "not installed"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=path.parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    body = [f"## {now:%Y-%m-%d %H:%M} UTC", "",
            f"kgeval {kgeval.__version__} (commit {commit}), PyKEEN {pykeen_version}, Python {platform.python_version()}, "
            f"{platform.processor() or platform.machine()}; `python benchmarks/metrics.py {' '.join(sys.argv[1:])}`",
            "", "```", *lines, *extra, "```", ""]
    with path.open("a", encoding="utf-8") as f:
        f.write("\n".join(head + body) + "\n")
    return path


def _clear_caches() -> None:
    """Empty the process-wide caches keyed by candidate counts (cold prefix sums and series)."""
    from kgeval.metrics import laplace, moments

    moments._CACHE.clear()
    moments._CENTRAL_CACHE.clear()
    laplace._H_CACHE.clear()


def extra_rows() -> list[str]:
    """Weighted tasks, 10x tasks and 10x max C: time (a new table each call, cold caches) and peak
    traced memory of the full default result."""
    lines = [f"{'tasks':>10} | {'max C':>8} | {'weighted':>8} | {'time [s]':>8} | {'peak [MB]':>9}"]
    for n, max_c, weighted in [(40_932, MAX_C, True), (409_320, MAX_C, False), (40_932, 10 * MAX_C, False)]:
        run = kgeval_setup(make_arrays(n, max_c, weighted=weighted), "kgeval, new table", calls=3)
        times = []
        for _ in range(2):
            _clear_caches()
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        _clear_caches()
        tracemalloc.start()
        run()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        lines.append(f"{n:>10,} | {max_c:>8,} | {weighted!s:>8} | {min(times):>8.3f} | {peak / 2**20:>9.1f}")
    lines.append(_load())
    print("\n" + "\n".join(lines))
    return ["", *lines]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--first-call":
        print(json.dumps(first_call(sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--extra", action="store_true", help="also weighted / 10x tasks / 10x max C rows")
    parser.add_argument("--write", action="store_true", help="append the tables to benchmarks/results/metrics-<date>.md")
    args = parser.parse_args()
    try:
        import pykeen.evaluation  # noqa: F401

        have_pykeen = True
    except ImportError:
        have_pykeen = False
        print("PyKEEN is not installed: kgeval only\n")
    lines = side_by_side(args.sizes, have_pykeen)
    extra = extra_rows() if args.extra else []
    if args.write:
        print(f"\nwritten to {write_results(lines, extra)}")


if __name__ == "__main__":
    main()
