"""One rank of the distributed tests: ``python dist_worker.py RANK WORLD PORT OUT_DIR``.

Runs every scenario in one process group (one interpreter start per rank) and writes
``OUT_DIR/rank{RANK}.json``: per scenario the rank table columns of the distributed run and of
the single-process run, or the name of the error raised.
"""

import datetime
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import kgeval
from kgeval.evaluation import DistMultScorer


def graph(seed=0, ne=30, nr=4):
    rng = np.random.default_rng(seed)
    ent = torch.as_tensor(rng.integers(-2, 3, size=(ne, 4)), dtype=torch.float32)  # integer scores: many ties
    rel = torch.as_tensor(rng.integers(-2, 3, size=(nr, 4)), dtype=torch.float32)
    allt = rng.integers(0, [ne, nr, ne], size=(90, 3))
    return DistMultScorer(ent, rel), allt[:60], allt[60:]


def table(res):
    t = res.rank_table
    return {k: np.asarray(getattr(t, k)).tolist() for k in ("optimistic", "pessimistic", "num_candidates",
                                                           "triple_index", "side")}


SCENARIOS = {
    "filtered": dict(),
    "unfiltered": dict(filtered=False),
    "restricted": dict(restrict_entities=tuple(range(0, 30, 2)) + (1, 3), restrict_relations=(0, 1, 2)),
    "sampled": dict(num_negatives=7, seed=3),
    "macro_small_batches": dict(macro=True, batch_size=3),
}


class Boom(RuntimeError):
    pass


class FailingScorer(DistMultScorer):
    def score_tails(self, h, r, entities=None):
        raise Boom("scorer failed on this rank")


def main(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
    scorer, train, test = graph()
    report = {}
    for mode in ("tasks",):
        for name, kw in SCENARIOS.items():
            base = dict(filter_triples=train, progress=False, **kw)
            one = kgeval.evaluate(scorer, test, **base)
            many = kgeval.evaluate(scorer, test, distributed=mode, **base)
            report[f"{mode}/{name}"] = {"single": table(one), "distributed": table(many),
                                        "protocol_diff": _protocol_diff(one, many)}
        # rank 1 is given other triples: both ranks fail at the start with a named error
        mine = test if rank == 0 else test[::-1][:20]
        report[f"{mode}/mismatch"] = _error(lambda: kgeval.evaluate(scorer, mine, filter_triples=train,
                                                                    progress=False, distributed=mode))
        # the scorer raises on rank 1 only: both ranks end with an error, none waits
        bad = FailingScorer(scorer.entity, scorer.relation) if rank == 1 else scorer
        report[f"{mode}/exception"] = _error(lambda: kgeval.evaluate(bad, test, filter_triples=train,
                                                                     progress=False, distributed=mode))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


def _protocol_diff(one, many):
    """Protocol fields that differ; the consistency check re-scores the first and last task of each
    batch, and batches differ between one process and a rank's slice, so its count may differ."""
    a, b = dict(one.protocol), dict(many.protocol)
    return sorted(k for k in a if a[k] != b[k] and not k.startswith("consistency_check"))


def _error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test checks the type and message
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None}


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
