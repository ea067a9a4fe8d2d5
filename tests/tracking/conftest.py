"""Fixture of the tracker tests: one CLI run logged to every installed tracker (tracker_helpers.installed)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tracker_helpers import installed

from kgeval.cli import main

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
