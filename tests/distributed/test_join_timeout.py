"""A rank that never joins the process group is a CollectiveError naming it, not torch's raw
DistStoreError (issue 31, 7a)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from patience import env as patient_env
from patience import scaled

# subprocesses: a lone rank 0; torchrun with three interpreters
pytestmark = pytest.mark.multiprocess

SRC = str(Path(__file__).parents[2] / "src")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra):
    return patient_env({**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
                        "OMP_NUM_THREADS": "1", **extra})


def test_cli_rank_0_alone_names_the_missing_rank(tmp_path):
    """``kgeval evaluate --distributed tasks`` as rank 0 of 2 with no rank 1 (rank 0 hosts the store):
    before, a traceback ending in 'DistStoreError: Timed out after 3 seconds waiting for clients. 1/2
    clients joined.'; now one line naming rank 1, exit code 1."""
    (tmp_path / "m.pt").write_bytes(b"never read: the process group forms first")
    env = _env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    proc = subprocess.run([sys.executable, "-m", "kgeval", "evaluate", "--model-file", str(tmp_path / "m.pt"),
                           "--dataset", "nations", "--distributed", "tasks", "--dist-timeout", "2"],
                          env=env, capture_output=True, text=True, timeout=scaled(300))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "the process group did not form within 2 s: only 1 of 2 ranks joined (rank 1 missing)" \
        in proc.stderr, proc.stderr[-2000:]


WORKER = """
import os, sys, time
from pathlib import Path
from kgeval.evaluation.distributed import CollectiveError, init_from_env
rank, out = os.environ["RANK"], Path(sys.argv[2])
if rank == sys.argv[1]:  # started by torchrun, never joins; alive until the others are done
    for _ in range(6000):  # at most 10 minutes, should the others never finish
        if len(list(out.glob("done*"))) == 2:
            break
        time.sleep(0.1)
    raise SystemExit(0)
# every joining rank has started (however slowly) before the 2 s bound on the missing one starts
(out / f"ready{rank}").touch()
while len(list(out.glob("ready*"))) < 2:
    time.sleep(0.1)
try:
    init_from_env(2)
    line = f"RANK {rank} joined"
except CollectiveError as exc:
    line = f"RANK {rank} CollectiveError {exc}"
# a file per rank: the ranks end together, and their prints to torchrun's one stdout interleaved
(out / f"result{rank}.txt").write_text(line)
(out / f"done{rank}").touch()
"""


def test_torchrun_worker_that_never_joins_is_named_on_every_other_rank(tmp_path):
    """Under torchrun the agent hosts the store and gloo waits for the missing rank's key."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "--master-port",
                           str(_free_port()), str(script), "2", str(tmp_path)], env=_env(), capture_output=True,
                          text=True, timeout=scaled(300))
    lines = [p.read_text() for p in sorted(tmp_path.glob("result*.txt"))]
    assert sorted(x.split(":")[0] for x in lines) == [
        f"RANK {r} CollectiveError the process group did not form within 2 s" for r in (0, 1)], proc.stdout + proc.stderr[-2000:]
    assert all("rank 2 did not join" in x for x in lines), lines
