"""Scale benchmark: filtered evaluation time, ratio to the matmul floor and peak RSS versus the
number of entities, for one process and for ``distributed="tasks"`` over 2 gloo processes.

    python benchmarks/scale.py                       # 1e5, 1e6, 1e7 entities, 5,000 test triples, dim 64
    python benchmarks/scale.py --entities 100000 --procs 1 2

Each configuration runs in fresh processes (so ``ru_maxrss`` is that configuration's peak). A random
DistMult model (float32); from 1e7 entities the entity table is a ``.npy`` file on local disk opened
with ``np.load(mmap_mode="r")`` and scored in entity chunks (``entity_chunk_size``), deleted afterwards.
Filters: 100,000 random training triples. The floor: the same number of ``(query, dim) @ (dim, chunk)``
products, no counting, in the same process; ratio = evaluation time / floor.

Projection (written from the throughput this script measures, ``scored pairs / s`` per process;
re-measure on the target hardware): full filtered evaluation scores ``2 x #test x #entities`` pairs.
ogbl-wikikg2-sized: 2 x 430k x 2.5M = 2.15e12 pairs x dim 100-200 -> ~4-9e14 FLOP (x2 for multiply-add);
an H100 sustains ~5e13 FLOP/s float32 (TF32 more), so ~10-20 s per GPU-equivalent of matmul, i.e. a few
seconds on 8 GPUs and ~1 s on 4 x 8 GPUs when compute-bound (the counting pass roughly doubles memory
traffic). Wikidata5M-sized (4.6M entities, 5,133 test triples): 4.7e10 pairs, well under a second of
matmul per GPU; its cost is dominated by start-up and filter-index building, not by scoring.
Communication: "tasks" mode gathers 3 int64 counts + 1 int64 index per task once per side
(430k tasks -> ~14 MB per side in total, not per batch); an entity-sharded mode would all_reduce
2 int64 counts + 1 float score per task per batch (O(batch) numbers, e.g. 24 KB for 1,024 queries),
never scores of candidates.
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
import time

import numpy as np

NUM_TRAIN = 100_000
MEMMAP_FROM = 10_000_000


def _worker(a) -> None:
    import torch

    import kgeval
    from kgeval.evaluation import DistMultScorer

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3600))
    rng = np.random.default_rng(0)
    ne, nr = a.entities[0], 100
    ent = torch.from_numpy(np.load(a.memmap, mmap_mode="r")) if a.memmap else torch.from_numpy(
        rng.standard_normal((ne, a.dim), dtype=np.float32))
    rel = torch.from_numpy(rng.standard_normal((nr, a.dim), dtype=np.float32))
    scorer = DistMultScorer(ent, rel)
    test = np.stack([rng.integers(0, ne, a.queries), rng.integers(0, nr, a.queries), rng.integers(0, ne, a.queries)], 1)
    train = np.stack([rng.integers(0, ne, NUM_TRAIN), rng.integers(0, nr, NUM_TRAIN), rng.integers(0, ne, NUM_TRAIN)], 1)
    chunk = 1_000_000 if a.memmap else None
    t0 = time.perf_counter()
    kgeval.evaluate(scorer, test, filter_triples=train, progress=False, check_consistency=False,
                    entity_chunk_size=chunk, distributed="tasks" if world > 1 else None)
    wall = time.perf_counter() - t0
    # floor: this rank's share of the unique query rows times every entity, same chunks, no counting
    nq = 0
    for side in (0, 2):
        nq += np.unique(test[:, side] * nr + test[:, 1]).shape[0]
    nq = len(range(nq * rank // world, nq * (rank + 1) // world))
    q = torch.from_numpy(rng.standard_normal((min(nq, 1024), a.dim), dtype=np.float32))
    width = chunk or ne
    t0 = time.perf_counter()
    with torch.inference_mode():
        for r0 in range(0, nq, q.shape[0]):
            for c0 in range(0, ne, width):
                q[: min(q.shape[0], nq - r0)] @ ent[c0:c0 + width].T
    floor = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(json.dumps({"rank": rank, "wall": wall, "floor": floor, "rss_gib": rss, "pairs": nq * ne}))


def _run(ne: int, procs: int, a, memmap: str | None) -> dict:
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    p = port.getsockname()[1]
    port.close()
    args = [sys.executable, __file__, "--worker", "--entities", str(ne), "--queries", str(a.queries), "--dim",
            str(a.dim)] + (["--memmap", memmap] if memmap else [])
    ps = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(procs), "MASTER_ADDR": "127.0.0.1",
                                "MASTER_PORT": str(p), "OMP_NUM_THREADS": str(max(1, os.cpu_count() // procs))})
          for r in range(procs)]
    outs = [json.loads(x.communicate()[0].strip().splitlines()[-1]) for x in ps]
    return {"wall": max(o["wall"] for o in outs), "floor": max(o["floor"] for o in outs),
            "rss": max(o["rss_gib"] for o in outs), "pairs": sum(o["pairs"] for o in outs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entities", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--queries", type=int, default=5000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--memmap", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return _worker(a)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {a.queries} test triples, dim {a.dim}")
    print(f"{'entities':>10} {'procs':>5} {'mode':>6} {'time s':>8} {'floor s':>8} {'ratio':>6} "
          f"{'ns/pair':>8} {'peak RSS GiB':>12}")
    for ne in a.entities:
        memmap = None
        if ne >= MEMMAP_FROM:
            fd, memmap = tempfile.mkstemp(suffix=".npy", dir=os.environ.get("KGEVAL_SCALE_DIR", "/tmp"))
            os.close(fd)
            table = np.lib.format.open_memmap(memmap, mode="w+", dtype=np.float32, shape=(ne, a.dim))
            rng = np.random.default_rng(0)
            for c0 in range(0, ne, 1_000_000):
                table[c0:c0 + 1_000_000] = rng.standard_normal((min(1_000_000, ne - c0), a.dim), dtype=np.float32)
            table.flush()
            del table
        try:
            for procs in a.procs:
                r = _run(ne, procs, a, memmap)
                mode = "one" if procs == 1 else "tasks"
                print(f"{ne:>10} {procs:>5} {mode:>6} {r['wall']:>8.2f} {r['floor']:>8.2f} "
                      f"{r['wall'] / r['floor']:>6.2f} {1e9 * r['wall'] / r['pairs']:>8.3f} {r['rss']:>12.2f}",
                      flush=True)
        finally:
            if memmap:
                os.unlink(memmap)


if __name__ == "__main__":
    main()
