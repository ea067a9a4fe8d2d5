"""One ``kgeval pipeline --tracker ...`` run, read back through each tracker's own reader and compared
with the run directory it saved: ``results.json`` (every value of its flat dict, under kgeval's keys),
``losses.json`` (the loss of every epoch, the early stopper's validation values) and ``config.json``.

Oracles are the saved files, written by kgeval's own writer independently of the tracking code.
MLflow, W&B and CSV hold float64 values, compared exactly; TensorBoard stores float32, compared with
the float32 rounding of the saved value (exactly).
"""

from __future__ import annotations

import csv
import glob
import json
import math

import numpy as np
import pytest
from tracker_helpers import need

# one CLI run logged to every installed tracker (MLflow's SQLite store, W&B offline, TensorBoard) and read back
pytestmark = pytest.mark.service

MRR = "both.realistic.inverse_harmonic_mean_rank"
VALIDATION = "validation/" + MRR  # the stopper's default metric


def same(expected, got) -> bool:
    """A results.json value (None: not finite) equals a value read back."""
    if expected is None:
        return got is None or not math.isfinite(float(got))
    return float(got) == float(expected)


def check_all_values(metrics: dict, read) -> None:
    assert len(metrics) > 400  # values of every side, rank type and metric, and p-values
    wrong = {k: (v, read.get(k)) for k, v in metrics.items() if k not in read or not same(v, read[k])}
    assert not wrong, f"{len(wrong)} values differ, e.g. {list(wrong.items())[:3]}"


def test_mlflow(cli_run):
    need("mlflow")
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = cli_run["where"]["mlflow"]
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["kgeval"])
    assert len(runs) == 1
    row = runs.iloc[0]
    # the criterion: the test MRR of results.json, read back with mlflow.search_runs
    assert row[f"metrics.{MRR}"] == cli_run["metrics"][MRR]
    check_all_values(cli_run["metrics"], {c[len("metrics."):]: row[c] for c in runs.columns if c.startswith("metrics.")})
    assert row["status"] == "FINISHED" and row["tags.mlflow.runName"] == cli_run["out"].name
    assert row["params.model.dim"] == "8" and row["params.training.epochs"] == "4" and row["params.seed"] == "0"
    assert row["tags.split"] == "test" and row["tags.protocol.num_triples"] == str(cli_run["results"]["protocol"]["num_triples"])
    client = MlflowClient(uri)
    history = client.get_metric_history(row.run_id, "training/loss")
    assert [(m.step, m.value) for m in history] == list(enumerate(cli_run["losses"], start=1))
    validation = client.get_metric_history(row.run_id, VALIDATION)
    assert [(m.step, m.value) for m in validation] == cli_run["validation"]
    local = client.download_artifacts(row.run_id, "", str(cli_run["root"] / "mlflow-download"))
    assert json.loads(open(f"{local}/protocol.json").read()) == cli_run["results"]["protocol"]
    assert open(f"{local}/run/results.json").read() == (cli_run["out"] / "results.json").read_text()


def test_wandb_offline(cli_run):
    need("wandb")
    from wandb_records import read_run

    files = glob.glob(f"{cli_run['where']['wandb']}/wandb/offline-run-*/run-*.wandb")
    assert len(files) == 1
    run = read_run(files[0])
    assert run["summary"][MRR] == cli_run["metrics"][MRR]
    check_all_values(cli_run["metrics"], run["summary"])
    losses = [(row["_step"], row["training/loss"]) for row in run["history"] if "training/loss" in row]
    assert losses == list(enumerate(cli_run["losses"], start=1))
    assert [(row["_step"], row[VALIDATION]) for row in run["history"] if VALIDATION in row] == cli_run["validation"]
    assert run["config"]["model"]["dim"] == 8 and run["config"]["training"]["epochs"] == 4
    assert run["config"]["tags"]["protocol.num_triples"] == str(cli_run["results"]["protocol"]["num_triples"])
    assert run["run"].display_name == cli_run["out"].name and run["exit_code"] == 0
    contents = {a.type: sorted(e.path for e in a.manifest.contents) for a in run["artifacts"]}
    assert contents["kgeval-file"] == ["protocol.json"]
    assert contents["kgeval-run"] == sorted(p.name for p in cli_run["out"].iterdir())


def test_tensorboard(cli_run):
    need("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    [log_dir] = glob.glob(f"{cli_run['where']['tensorboard']}/*")
    acc = EventAccumulator(log_dir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    final = {tag: acc.Scalars(tag)[-1].value for tag in acc.Tags()["scalars"]}
    assert final[MRR] == np.float32(cli_run["metrics"][MRR])
    float32 = {k: None if v is None else float(np.float32(v)) for k, v in cli_run["metrics"].items()}
    check_all_values(float32, final)
    assert [(e.step, e.value) for e in acc.Scalars("training/loss")] == \
        [(i, np.float32(v)) for i, v in enumerate(cli_run["losses"], start=1)]
    assert [(e.step, e.value) for e in acc.Scalars(VALIDATION)] == [(e, np.float32(v)) for e, v in cli_run["validation"]]

    def text(tag):
        return tensor_util.make_ndarray(acc.Tensors(f"{tag}/text_summary")[0].tensor_proto).item().decode()

    assert json.loads(text("configuration"))["model.dim"] == 8
    assert text("artifacts/run") == str(cli_run["out"].resolve())
    saved = json.loads(open(f"{log_dir}/artifacts/protocol.json").read())
    assert saved == cli_run["results"]["protocol"]


def test_csv(cli_run):
    [run_dir] = glob.glob(f"{cli_run['where']['csv']}/*")
    with open(f"{run_dir}/metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    final = {r["key"]: float(r["value"]) for r in rows if r["step"] == ""}
    assert final[MRR] == cli_run["metrics"][MRR]
    check_all_values(cli_run["metrics"], final)
    assert [(int(r["step"]), float(r["value"])) for r in rows if r["key"] == "training/loss"] == \
        list(enumerate(cli_run["losses"], start=1))
    assert [(int(r["step"]), float(r["value"])) for r in rows if r["key"] == VALIDATION] == cli_run["validation"]
    with open(f"{run_dir}/params.csv", newline="") as f:
        params = {r["key"]: r["value"] for r in csv.DictReader(f)}
    assert params["model.dim"] == "8" and params["evaluation.split"] == "test"
    with open(f"{run_dir}/tags.csv", newline="") as f:
        tags = {r["key"]: r["value"] for r in csv.DictReader(f)}
    assert tags["status"] == "FINISHED" and tags["dataset"] == "Nations"
    with open(f"{run_dir}/artifacts.csv", newline="") as f:
        assert list(csv.DictReader(f)) == [{"name": "run", "path": str(cli_run["out"].resolve())}]

