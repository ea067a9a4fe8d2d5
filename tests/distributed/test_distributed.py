"""Two gloo ranks on CPU (subprocesses, one process group for every scenario) against one process."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kgeval.errors import InvalidInputError
from kgeval.evaluation import EvaluationOptions

WORKER = Path(__file__).with_name("dist_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), "2", str(port), str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=120)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("distributed workers hung")
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


SCENARIOS = ["filtered", "unfiltered", "restricted", "sampled", "macro_small_batches"]


@pytest.mark.parametrize("mode", ["tasks"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rank_tables_equal_single_process(reports, mode, scenario):
    for rank, rep in enumerate(reports):
        r = rep[f"{mode}/{scenario}"]
        assert len(r["single"]["optimistic"]) > 0
        assert r["distributed"] == r["single"], f"rank {rank}"
        assert r["protocol_diff"] == [], f"rank {rank}"


@pytest.mark.parametrize("mode", ["tasks"])
def test_mismatched_inputs_fail_on_every_rank(reports, mode):
    for rep in reports:
        r = rep[f"{mode}/mismatch"]
        assert r["error"] == "DistributedMismatchError"
        assert "rank(s) [1]" in r["message"]


@pytest.mark.parametrize("mode", ["tasks"])
def test_exception_on_one_rank_ends_every_rank(reports, mode):
    assert reports[1][f"{mode}/exception"]["error"] == "Boom"
    r0 = reports[0][f"{mode}/exception"]
    assert r0["error"] == "RankFailedError"
    assert "rank 1" in r0["message"] and "Boom" in r0["message"]


def test_without_process_group_is_a_named_error():
    import numpy as np
    import torch

    import kgeval
    from kgeval.evaluation import DistMultScorer

    scorer = DistMultScorer(torch.ones(5, 2), torch.ones(2, 2))
    with pytest.raises(InvalidInputError, match="process group"):
        kgeval.evaluate(scorer, np.array([[0, 0, 1]]), progress=False, distributed="tasks")


def test_unknown_mode_is_a_named_error():
    with pytest.raises(InvalidInputError, match="distributed must be one of"):
        EvaluationOptions(distributed="rows")
