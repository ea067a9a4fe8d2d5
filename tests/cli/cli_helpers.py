"""Helpers shared by the CLI tests: invoke `kgeval` through click's CliRunner and read the MRR
of the headline table. (A module with a unique name: test modules import it directly.)"""

from __future__ import annotations

import re

from click.testing import CliRunner
from patience import env as patient_env
from patience import scaled

from kgeval.cli import main


def run(*args):
    """``kgeval ARGS...`` in-process; returns click's Result (exit_code, output)."""
    return CliRunner().invoke(main, [str(a) for a in args])


def headline_mrr(text: str) -> str:
    """The printed both-sides MRR of a headline table (last column of the MRR row)."""
    m = re.search(r"^MRR \(inverse_harmonic_mean_rank\)\s+\S+\s+\S+\s+(\S+)", text, re.M)
    assert m, text
    return m.group(1)


def torchrun_json(*args, nproc: int = 2, timeout: float = 300) -> dict:
    """``torchrun --nproc-per-node NPROC -m kgeval ARGS...`` (gloo on the CPU, one torch thread per
    rank) and the one JSON document its rank 0 prints (``--format json``; text before it is skipped).
    ``timeout`` (a hang guard) is scaled to the machine's load (tests/patience.py)."""
    import json
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = patient_env({**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                                     os.environ.get("PYTHONPATH", "")]),
                       "OMP_NUM_THREADS": "1"})
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                           "--master-port", str(port), "-m", "kgeval", *[str(a) for a in args]], env=env,
                          capture_output=True, text=True, timeout=scaled(timeout))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])
