"""Fixtures of the tracker tests: which tracker packages are installed, and one CLI run logged to all of them.

A tracker whose package is missing is skipped, unless ``KGEVAL_REQUIRE_TRACKERS`` is set (``.ci/run`` sets
it: CI cannot pass by skipping).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # wandb_records

from click.testing import CliRunner  # noqa: E402

from kgeval.cli import main  # noqa: E402

#: tracker -> the module its adapter imports
PACKAGES = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboard"}


def installed(name: str) -> bool:
    module = PACKAGES.get(name)
    return module is None or importlib.util.find_spec(module) is not None


def need(name: str) -> None:
    """Skip the calling test when the tracker's package is missing (fail under KGEVAL_REQUIRE_TRACKERS)."""
    if installed(name):
        return
    message = f"the {name} tracker's package is not installed (pip install -e \".[{name}]\")"
    if os.environ.get("KGEVAL_REQUIRE_TRACKERS"):
        pytest.fail(f"KGEVAL_REQUIRE_TRACKERS is set but {message}")
    pytest.skip(message)


#: the CLI run: 4 epochs, the early stopper evaluating after epochs 2 and 4
PIPELINE = ("pipeline", "--dataset", "nations", "--model", "distmult", "--dim", "8", "--epochs", "4", "--seed", "0",
            "--early-stopping", "--frequency", "2", "--patience", "5")


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """``kgeval pipeline ... --tracker X=LOCATION`` for every installed tracker (W&B offline), run in a temporary
    working directory; returns a dict of the paths and the saved run's own files as oracles."""
    root = tmp_path_factory.mktemp("tracked")
    where = {"mlflow": f"sqlite:///{root / 'mlflow.db'}", "wandb": str(root / "wandb"),
             "tensorboard": str(root / "tensorboard"), "csv": str(root / "csv")}
    specs = [f"--tracker={name}={loc}" for name, loc in where.items() if installed(name)]
    out = root / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # MLflow's artifacts go to ./mlruns beside a SQLite store
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        res = CliRunner().invoke(main, [*PIPELINE, "--output", str(out), *specs])
    assert res.exit_code == 0, res.output + repr(res.exception)
    results = json.loads((out / "results.json").read_text())
    losses = json.loads((out / "losses.json").read_text())
    assert [e for e, _ in losses["training"]["metric_history"]] == [2, 4]  # the stopper evaluated twice
    return {"root": root, "where": where, "out": out, "output": res.output, "results": results,
            "metrics": results["metrics"], "losses": losses["losses"],
            "validation": [tuple(x) for x in losses["training"]["metric_history"]]}
