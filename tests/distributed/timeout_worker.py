"""One rank of test_a_rank_not_taking_part_is_a_named_error: ``python timeout_worker.py RANK PORT OUT_DIR``.

Rank 0 evaluates with ``distributed="tasks"``, rank 1 in one process (it never joins): rank 0's
first collective times out (2 s times the suite's factor, tests/patience.py). Writes
``OUT_DIR/rank{RANK}.json`` with the error raised; rank 1 stays alive until rank 0 has written its file.
"""

import datetime
import json
import os
import sys

import numpy as np
import torch.distributed as dist

import kgeval
from kgeval.models import get_model


def main(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
    from patience import scaled, wait_until

    # both ranks have started (however slowly) before the group forms: its bound is then only on the collective
    open(os.path.join(out, f"ready{rank}"), "w").close()
    wait_until(lambda: os.path.exists(os.path.join(out, f"ready{1 - rank}")), "the other rank's start", seconds=60)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=scaled(2)))
    model = get_model("distmult", 20, 2, dim=4, seed=0).eval()
    test = np.random.default_rng(0).integers(0, [20, 2, 20], size=(10, 3))
    report = {}
    try:
        kgeval.evaluate(model, test, progress=False, distributed="tasks" if rank == 0 else None)
        report["error"] = None
    except Exception as exc:  # noqa: BLE001 - the test checks the type and message
        report = {"error": type(exc).__name__, "message": str(exc)}
    if rank == 1:  # alive past rank 0's timeout: rank 0 times out rather than losing its peer
        wait_until(lambda: os.path.exists(os.path.join(out, "rank0.json")), "rank 0's report", seconds=60)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    os._exit(0)  # no teardown of a group whose collective is still pending


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
