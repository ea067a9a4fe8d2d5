"""Scale benchmark: filtered evaluation time, ratio to the matmul floor, cost per scored pair and peak
memory versus the number of entities, for one process and for distributed modes over 2 gloo processes.

    python benchmarks/scale.py                                   # 1e5, 1e6, 1e7 entities, modes one + tasks
    python benchmarks/scale.py --entities 100000 --modes one     # one configuration
    python benchmarks/scale.py --entities 10000000 --dim 128 --modes one --floor-rows 1024

Each configuration runs in fresh processes. A random DistMult model built with the public
``kgeval.models.from_embeddings("distmult", entity, relation)``; from ``--memmap-from`` entities (1e7 by
default) ``entity`` is the path of a float32 ``.npy`` file on local disk (``KGEVAL_SCALE_DIR``, default
/tmp; deleted afterwards), memory-mapped and scored in place in automatic entity chunks, as
``kgeval evaluate --entity-embeddings ent.npy`` does. Filters: ``--train`` random training triples
(100,000). Columns:

- ``time s``: the ranking's wall time (``evaluate_ranks``: both sides, filtered, the rank table), the
  slowest rank; ``metrics s``: building :class:`kgeval.Results` from it (all default metrics with their
  null-model expectations; ``kgeval.evaluate`` = the two);
- ``floor s``: the same number of ``(query, dim) @ (dim, entities)`` products (deduplicated query rows x
  entities, into a reused output), no counting, in the same process, on torch's threads: the fastest
  of 1,024-row x 1,024-, 2,048- and 4,096-column blocks (``FLOOR_WIDTHS``; until 2026-11-23 4,096 only,
  which was 10-15% slower than the others on this box); measured
  on ``--floor-rows`` query rows (all by default) and scaled linearly, right after each evaluation;
  ``ratio`` = evaluation / floor of each back-to-back pair, the median over the warm pairs (from 4
  runs all but the first two: the cold one and the one that loads the count kernel under ``auto``;
  with 2-3 runs all after the first; the cold one with ``--repeat 1``; ``--settle`` ms of busy waiting
  between the two, 20 by default: see below), ``cpu ratio`` the same in
  process CPU seconds; ``warm s`` the best warm evaluation, ``floor s`` the best floor;
- ``s/1e9 pairs``: ranking time per 10^9 scored (query, entity) pairs; constant when the cost is linear in
  entities x queries (``Mpairs/s`` is its inverse per process);
- ``RSS GiB``: the process's peak resident set (``ru_maxrss``: includes the table pages of a memory-mapped
  file that were read, i.e. page cache mapped into the process, and the in-memory table);
- ``anon GiB``: the peak anonymous resident memory during the evaluation (``RssAnon`` sampled every 10 ms:
  no mapped file pages), and ``eval GiB`` what the evaluation added to it (score blocks, filter index,
  counts). With a memory-mapped table the bound of :mod:`kgeval.models.embeddings` applies:
  ``relations + batch x entity_chunk (memory_budget, <= 1 GiB) + filter index`` -- independent of
  entities x dim.

Modes (``--modes``): ``one`` = 1 process; ``tasks`` = ``distributed="tasks"`` on 2 gloo processes (each scores
its half of the tasks against all entities); ``entities`` = ``distributed="entities"`` on 2 (each holds and
scores half of the entity table, built with ``shard_embeddings``: a memory-mapped file is sliced, not read
whole). Adding a mode is one line in ``MODES``.

Numbers of the engine before issue 26 (2026-11-27 for one process at 1e4-1e6, ``--repeat`` 15 / 5 / 3, both
sides ranked at once (a feature since removed), 1e4 and 1e5 with the 20 ms ``--settle``; the 2-process rows 2026-11-26,
1e7 2026-11-23/24 with ``--floor-rows 1024``; ranges are separate runs: the same configuration measures up to
~10% apart from one process to the next, and the box's floor drifts between ~60 and ~100 ms at 1e4 from day
to day; ``scale_history.md`` beside this file has every dated measurement and what changed between them):

    dim  entities  table procs mode      ratio        warm s  s/1e9 pairs  anon GiB
     64     1e4    RAM     1   one       1.18x          0.1   0.73         0.28       (no settle: 1.22-1.29x)
     64     1e4    RAM     1   one       1.17-1.20x     0.1   0.76         0.29       (10^6 filter triples; no settle 1.23-1.27x)
     64     1e4    RAM     2   tasks     1.72x          0.1   1.29         0.30
     64     1e4    RAM     2   entities  3.30x          0.3   2.79         0.32
     64     1e5    RAM     1   one       1.05-1.06x     0.7   0.65-0.67    0.29
     64     1e5    RAM     2   tasks     1.31x          0.9   0.89         0.32
     64     1e5    RAM     2   entities  1.41x          1.1   1.05         0.31
     64     1e6    RAM     1   one       1.04x          6.1   0.61         0.50       (no settle)
     64     1e7    mmap    1   one       1.01x         83.9   0.84         0.37
    128     1e4    RAM     1   one       1.12x          0.1   1.33         0.30
    128     1e5    RAM     1   one       1.08x          1.6   1.56         0.36
    (2-process 1e6: tasks 1.23x, entities 1.21x; 1e7 mmap entities 1.19x; dim 128 1e6 1.07x: measured
    2026-11-23 17:42, before the later changes, not re-run since)

How the ratio at 1e4 depends on the way it is measured (2026-11-27 03:20-03:40 UTC, 3 runs of 15 each,
10^5 / 10^6 filter triples): pairs without a settle 1.22-1.29x / 1.24-1.27x; pairs with the 20 ms settle (the
default) 1.18-1.21x / 1.20-1.21x; ``--back-to-back`` (all evaluations, then all floors, ratio of the medians)
1.14-1.18x / 1.19-1.23x. After the setup cuts of that day (04:00-04:06 UTC, the box at its usual speed, 1-thread
floor products 83 ms): settled pairs 1.18 / 1.18x and 1.17-1.20x (5 runs), back to back 1.15 / 1.18x, no
settle 1.23x at 10^6 filter triples; in a slower window (03:50, floor products 87 ms) settled pairs read
1.19-1.24x. The settle matters because the floor's 2-thread products leave their
OpenMP worker spinning for ~7-10 ms (libgomp's spin-wait; measured as ~7-10 ms of CPU during a 200 ms
sleep right after a product), on a core that the evaluation's own threads need: in one process, an
evaluation right after a 2-thread floor took 74.6 ms, after a 1-thread floor or another evaluation 71.6-71.8
ms, and with ``OMP_WAIT_POLICY=PASSIVE`` 72.1 vs 71.5 ms (that setting slows the floor itself, 66 vs 62 ms,
so it is no way to measure). The floor is unaffected by the order (its median 61-63 ms either way). A user's
own multi-threaded torch call right before ``evaluate`` costs the same ~3 ms once. 1e5 and up are within
1.07x by any method. With 0.1 s of idle before each evaluation and each floor the pairs gave 1.31-1.32x
(the evaluation's threads wake on cores that were idle).

Where the time goes at 1e4 (dim 64, one process, 10^5 filter triples): the products take what the 2-thread
floor takes (MKL's kernel at the core's peak, ~103 GFLOP/s at dim 64), the counting kernel ~7 ms of CPU
(0.066 ns per score: two comparisons per score, from L3; no block shape does better: 2,500 x 384 per
walker is the best of nine measured shapes for product + count), and ~13 ms of CPU is serial bookkeeping
in dozens of 0.1-1 ms steps (input checks, query grouping, known answers, pass-1 true scores, reading each
answer's in-batch score, rank tables, the protocol). Measured on one thread (``KGEVAL_CHUNK_WORKERS=1``,
torch 1 thread): evaluation 140 ms = products 120 + counting 7 + the rest 13. With the sides in turn the
serial steps left the other core idle (~7 ms of the ~76 ms: before the first walk, at the side switch, at
the end); since 2026-11-27 both sides are ranked at once, one thread each, a finished side helping the
other's walks: 76.1 -> 72.4 ms median (alternated processes), and the wall time is now the CPU time over
two cores plus ~2 ms. Going further means less CPU work, not better scheduling. Tried and measured: a
counting kernel without the NaN sum 57 vs 64 us per 2,500 x 384 block (one comparison alone: 36).

The runs pass one :class:`kgeval.evaluation.KnownTriples` of the training triples, built once, so the warm
runs (``--repeat`` > 1) reuse its filter indexes and distinct count, as early stopping and hyper-parameter
trials do; ``--cold`` passes the plain array instead (every run builds them again). The counting kernel is
loaded (``warm_kernel``) before the first run.

Projection (from the throughput above; re-measure on the target hardware): full filtered evaluation scores
``2 x #test x #entities`` pairs (fewer after query deduplication). This 2-core box ranks ~1.0-1.25e9
pairs/s at dim 64 (0.80-0.96 s per 1e9 pairs from 1e5 to 1e7 entities; the matmul part grows with dim, the
counting part, ~0.1-0.2 ns per pair on one core, does not). ogbl-wikikg2-sized: 2 x 430k x 2.5M = 2.15e12
pairs: ~29-34 min on this box, ~4-5 min on 16 cores
with ``distributed="tasks"`` (cost per pair stays flat from 1e5 to 1e7 entities). On GPUs: ~4-9e14 FLOP
(dim 100-200, x2 for multiply-add) at ~5e13 FLOP/s float32 per H100 is ~10-20 s of matmul per GPU when
compute-bound, plus one write and one read of every score (8.6 TB in all at ~3 TB/s of HBM, ~3 s), i.e.
~2-3 s on 8 GPUs and well under a second per GPU on 4 nodes x 8 (not measured: no GPU was lent).
Wikidata5M-sized (4.6M entities, 5,133 test triples): 4.7e10 pairs, ~38-45 s on this box (dim 64), well
under a second of matmul per GPU; with a memory-mapped table (4.6M x 128 float32 = 2.4 GB) peak anonymous
memory stays at the ~1-2 GiB budget bound (0.36-0.39 GiB measured at 10^7 x 64).
Communication: "tasks" mode gathers 3 int64 counts + 1 int64 index per task once per side (430k tasks ->
~14 MB per side in total, not per batch); an entity-sharded mode all_reduces 2 int64 counts + 1 float
score per task per batch (3 counts with chunked local slices: a re-rank flag; O(batch) numbers, e.g.
24-32 KB for 1,024 queries) plus the batch's query rows (#queries x dim), never scores of candidates.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

#: mode -> (processes, distributed=); add a distributed mode here with one line
MODES = {
    "one": (1, None),
    "tasks": (2, "tasks"),
    "entities": (2, "entities"),  # each rank holds and scores half of the entity table
}

#: the floor's block widths (1,024 query rows each): the fastest of them at each measurement is the floor
#: (measured on the 2-core box: 1,024 x 1,024 and x 2,048 ~10% faster than x 4,096 at 1e4-1e6 entities)
FLOOR_WIDTHS = (1024, 2048, 4096)


def _rss_anon() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class _AnonPeak:
    """Peak ``RssAnon`` while active, sampled every 10 ms in a thread."""

    def __init__(self):
        self.peak = self.start = _rss_anon()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss_anon())

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _rss_anon())


def _worker(a) -> None:
    import torch

    import kgeval
    from kgeval.evaluation import KnownTriples, evaluate_ranks, warm_kernel
    from kgeval.models import from_embeddings, shard_embeddings

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3600))
    rng = np.random.default_rng(0)
    ne, nr = a.entities[0], 100
    rel = rng.standard_normal((nr, a.dim), dtype=np.float32)
    table = a.memmap if a.memmap else rng.standard_normal((ne, a.dim), dtype=np.float32)  # path: memory-mapped
    if a.mode == "entities":  # this rank's rows of the table only
        model = shard_embeddings("distmult", table, rel, rank=rank, world=world)
        lo, hi = model.entity_range
        ent = model.local.entity.weight.detach()
    else:
        model = from_embeddings("distmult", table, rel)
        lo, hi = 0, ne
        ent = model.entity.weight.detach()
    del table
    test = np.stack([rng.integers(0, ne, a.queries), rng.integers(0, nr, a.queries), rng.integers(0, ne, a.queries)], 1)
    train = np.stack([rng.integers(0, ne, a.train), rng.integers(0, nr, a.train), rng.integers(0, ne, a.train)], 1)
    mode = a.mode
    known = train if a.cold else KnownTriples(train)  # built once, as a loop of evaluations would
    warm_kernel()

    def cpu() -> float:  # this process's CPU seconds, all threads
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    # floor: this rank's share of the unique query rows times every entity, no counting
    nq = 0
    for side in (0, 2):
        nq += np.unique(test[:, side] * nr + test[:, 1]).shape[0]
    if mode == "tasks":
        nq = len(range(nq * rank // world, nq * (rank + 1) // world))
    rows = min(nq, a.floor_rows or nq)
    q = torch.from_numpy(rng.standard_normal((min(rows, 1024), a.dim), dtype=np.float32))
    block = torch.empty(q.shape[0], max(FLOOR_WIDTHS))

    def floor_width(width: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), cpu()
        with torch.inference_mode():
            for r0 in range(0, rows, q.shape[0]):
                b = min(q.shape[0], rows - r0)
                for c0_ in range(0, hi - lo, width):
                    c1 = min(hi - lo, c0_ + width)
                    torch.mm(q[:b], ent[c0_:c1].T, out=block.view(-1)[: b * (c1 - c0_)].view(b, c1 - c0_))
        return (time.perf_counter() - t0) * nq / rows, (cpu() - c0) * nq / rows

    def floor_once() -> tuple[float, float]:  # the fastest block shape of this moment
        return min(floor_width(w) for w in FLOOR_WIDTHS)

    def settle() -> None:
        """Keep this thread busy for ``--settle`` ms: the floor's 2-thread products leave their OpenMP
        worker spinning for ~7-10 ms (libgomp's spin-wait: measured as CPU time during a sleep after a
        product), on a core the evaluation's own threads need; a floor right after an evaluation gets
        the same time. Busy, not asleep: idle cores wake slowly."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < a.settle / 1000:
            pass

    # each evaluation is followed by a floor measurement: on a box whose speed drifts from minute to
    # minute, the ratio of a back-to-back pair is steadier than min(time) / min(floor)
    runs, floors = [], []  # (wall, cpu) of each evaluation (the first is cold: imports, first calls) / floor
    with _AnonPeak() as mem:  # = kgeval.evaluate, timed in its two parts
        for _ in range(max(1, a.repeat)):
            t0, c0 = time.perf_counter(), cpu()
            out = evaluate_ranks(model, test, filter_triples=known, progress=False, check_consistency=False,
                                 distributed=MODES[mode][1])
            runs.append((time.perf_counter() - t0, cpu() - c0))
            if not a.back_to_back:
                settle()
                floors.append(floor_once())
                settle()
        if a.back_to_back:  # every evaluation, then every floor: each measured right after its own kind
            floors = [floor_once() for _ in runs]
        t0 = time.perf_counter()
        res = kgeval.Results(out.rank_table, protocol=out.protocol, extra=out.extra)
        metrics = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    # warm: after the cold first run and, from 4 runs, after the second too
    skip = 2 if len(runs) >= 4 else 1
    pairs_ = list(zip(runs, floors))[skip:] or list(zip(runs, floors))
    if a.back_to_back:  # the ratio of the medians (the runs are not pairs)
        ratio = float(np.median([r[0] for r, _ in pairs_]) / np.median([f[0] for _, f in pairs_]))
        cpu_ratio = float(np.median([r[1] for r, _ in pairs_]) / np.median([f[1] for _, f in pairs_]))
    else:
        ratio = float(np.median([r[0] / f[0] for r, f in pairs_]))
        cpu_ratio = float(np.median([r[1] / f[1] for r, f in pairs_]))
    warm = min(runs[1:]) if len(runs) > 1 else runs[0]
    wall, floor = runs[0][0], min(floors)[0]
    print(json.dumps({"rank": rank, "wall": wall, "warm": warm[0], "ratio": ratio, "cpu_ratio": cpu_ratio,
                      "metrics": metrics, "floor": floor, "rss_gib": rss, "pairs": nq * (hi - lo),
                      "anon_gib": mem.peak / 2**30, "eval_gib": (mem.peak - mem.start) / 2**30,
                      "chunk": res.protocol.get("entity_chunk_size")}))


def _run(ne: int, mode: str, a, memmap: str | None) -> dict:
    procs = MODES[mode][0]
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    p = port.getsockname()[1]
    port.close()
    args = [sys.executable, __file__, "--worker", "--entities", str(ne), "--queries", str(a.queries), "--dim",
            str(a.dim), "--train", str(a.train), "--mode", mode, "--floor-rows", str(a.floor_rows or 0),
            "--repeat", str(a.repeat)] \
        + (["--memmap", memmap] if memmap else []) + (["--back-to-back"] if a.back_to_back else []) \
        + ["--settle", str(a.settle)] + (["--cold"] if a.cold else [])
    ps = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(procs), "MASTER_ADDR": "127.0.0.1",
                                "MASTER_PORT": str(p), "OMP_NUM_THREADS": str(max(1, os.cpu_count() // procs))})
          for r in range(procs)]
    outs = []
    for x in ps:
        text = x.communicate()[0].strip()
        if x.returncode or not text:
            raise SystemExit(f"worker failed (exit {x.returncode}) for {ne} entities, mode {mode}")
        outs.append(json.loads(text.splitlines()[-1]))
    return {"wall": max(o["wall"] for o in outs), "warm": max(o["warm"] for o in outs),
            "ratio": max(o["ratio"] for o in outs), "cpu_ratio": max(o["cpu_ratio"] for o in outs), "metrics": max(o["metrics"] for o in outs), "floor": max(o["floor"] for o in outs),
            "rss": max(o["rss_gib"] for o in outs), "anon": max(o["anon_gib"] for o in outs),
            "eval": max(o["eval_gib"] for o in outs), "pairs": sum(o["pairs"] for o in outs),
            "chunk": outs[0]["chunk"], "procs": procs}


def _write_table(ne: int, dim: int) -> str:
    fd, path = tempfile.mkstemp(suffix=".npy", dir=os.environ.get("KGEVAL_SCALE_DIR", "/tmp"))
    os.close(fd)
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(ne, dim))
    rng = np.random.default_rng(0)
    for c0 in range(0, ne, 1_000_000):
        table[c0:c0 + 1_000_000] = rng.standard_normal((min(1_000_000, ne - c0), dim), dtype=np.float32)
    table.flush()
    del table
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entities", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--queries", type=int, default=5000, help="test triples")
    ap.add_argument("--train", type=int, default=100_000, help="filter (training) triples")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--modes", nargs="+", default=["one", "tasks"], choices=sorted(MODES))
    ap.add_argument("--memmap-from", type=int, default=10_000_000,
                    help="from this many entities the table is a memory-mapped .npy file")
    ap.add_argument("--floor-rows", type=int, default=0,
                    help="measure the floor on this many query rows and scale (0: all)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="evaluations (each followed by a floor) per process: 'warm s' and the ratios use those after the first")
    ap.add_argument("--back-to-back", action="store_true",
                    help="all evaluations, then all floors (ratio of the medians) instead of evaluation/floor pairs")
    ap.add_argument("--settle", type=float, default=20.0,
                    help="ms of busy waiting between an evaluation and its floor and back (pairs only): the "
                         "floor's OpenMP workers spin ~7-10 ms after its products, on the evaluation's cores")
    ap.add_argument("--cold", action="store_true",
                    help="pass the filter triples as a plain array (every run builds its filter indexes again)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--memmap", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return _worker(a)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {a.queries} test triples, "
          f"{a.train} filter triples, DistMult dim {a.dim}; filter triples "
          f"{'as a plain array (--cold)' if a.cold else 'as one KnownTriples'}")
    print(f"{'entities':>10} {'table':>6} {'procs':>5} {'mode':>6} {'chunk':>8} {'time s':>8} {'warm s':>8} {'floor s':>8} "
          f"{'ratio':>6} {'cpu ratio':>9} {'metrics s':>9} {'s/1e9 pairs':>11} {'Mpairs/s/proc':>13} {'RSS GiB':>8} {'anon GiB':>8} {'eval GiB':>8}")
    for ne in a.entities:
        memmap = _write_table(ne, a.dim) if ne >= a.memmap_from else None
        try:
            for mode in a.modes:
                r = _run(ne, mode, a, memmap)
                t = r["warm"] if a.repeat > 1 else r["wall"]
                per = t / (r["pairs"] / 1e9)
                warm = f"{r['warm']:>8.1f}" if a.repeat > 1 else f"{'-':>8}"
                print(f"{ne:>10} {'mmap' if memmap else 'RAM':>6} {r['procs']:>5} {mode:>6} {str(r['chunk']):>8} "
                      f"{r['wall']:>8.1f} {warm} {r['floor']:>8.1f} {r['ratio']:>6.2f} {r['cpu_ratio']:>9.2f} "
                      f"{r['metrics']:>9.1f} {per:>11.2f} {r['pairs'] / t / r['procs'] / 1e6:>13.1f} {r['rss']:>8.2f} {r['anon']:>8.2f} "
                      f"{r['eval']:>8.2f}", flush=True)
        finally:
            if memmap:
                os.unlink(memmap)


if __name__ == "__main__":
    main()
