"""The Python side of tracking: pipeline(trackers=) with a group it makes itself, hpo_pipeline (one run per
trial), replicates (one run per seed), and the errors before training (missing package, unreachable server,
unknown tracker)."""

from __future__ import annotations

import csv
import socket
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracker_helpers import need

import kgeval
from kgeval.cli import main
from kgeval.errors import UnknownNameError
from kgeval.tracking import MissingTrackerError, TrackerError, Trackers, get_tracker, parse_specs

MRR = "both.realistic.inverse_harmonic_mean_rank"
TINY = dict(dataset="nations", model="distmult", model_kwargs={"dim": 8}, epochs=2, random_seed=0, progress=False)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _csv_rows(run_dir: Path, name: str) -> list[dict]:
    with open(run_dir / name, newline="") as f:
        return list(csv.DictReader(f))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_training(monkeypatch):
    """Training fails the test: the errors under test must come before it."""
    import kgeval.training

    def train(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(kgeval.training, "train", train)


def test_pipeline_with_tracker_names_ends_its_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the CSV tracker's default directory is ./kgeval-tracking
    result = kgeval.pipeline(trackers="csv", **TINY)
    [run_dir] = (tmp_path / "kgeval-tracking").iterdir()
    rows = _csv_rows(run_dir, "metrics.csv")
    assert [float(r["value"]) for r in rows if r["key"] == "training/loss"] == result.losses
    final = {r["key"]: float(r["value"]) for r in rows if r["step"] == ""}
    assert final[MRR] == result.results.get_metric(MRR)
    assert final["training.epochs_run"] == 2
    assert {r["key"]: r["value"] for r in _csv_rows(run_dir, "tags.csv")}["status"] == "FINISHED"


def test_a_failing_run_ends_failed(tmp_path):
    group = Trackers("csv", options={"csv": {"directory": tmp_path}})

    def stop(epoch, loss, model):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        kgeval.pipeline(trackers=group, callback=stop, **TINY)
    [run_dir] = tmp_path.iterdir()
    assert {r["key"]: r["value"] for r in _csv_rows(run_dir, "tags.csv")}["status"] == "FAILED"
    assert [r["step"] for r in _csv_rows(run_dir, "metrics.csv")] == ["1"]  # the epoch before the error is kept
    assert not group.active


def test_replicates_one_run_per_seed(tmp_path):
    group = Trackers("csv", options={"csv": {"directory": tmp_path / "csv"}})
    rep = kgeval.replicates(num_replicates=2, trackers=group, output=tmp_path / "out", **TINY)
    runs = sorted((tmp_path / "csv").iterdir())
    assert len(runs) == 2
    by_seed = {}
    for run_dir in runs:
        params = {r["key"]: r["value"] for r in _csv_rows(run_dir, "params.csv")}
        final = {r["key"]: float(r["value"]) for r in _csv_rows(run_dir, "metrics.csv") if r["step"] == ""}
        [artifact] = _csv_rows(run_dir, "artifacts.csv")
        by_seed[int(params["seed"])] = (final[MRR], artifact["path"])
    assert by_seed == {s: (run.results.get_metric(MRR), str((tmp_path / "out" / f"seed{s}").resolve()))
                       for s, run in zip(rep.seeds, rep.runs)}


@pytest.mark.service  # MLflow, one run per trial
def test_hpo_one_run_per_trial(tmp_path):
    need("mlflow")
    pytest.importorskip("optuna")
    import mlflow

    from kgeval.workflow.hpo import hpo_pipeline

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    group = Trackers(["mlflow"], options={"mlflow": {"tracking_uri": uri, "experiment": "hpo",
                                                    "artifact_location": str(tmp_path / "artifacts")}})
    res = hpo_pipeline(dataset="nations", model="distmult", epochs=2, n_trials=2, storage=f"sqlite:///{tmp_path / 's.db'}",
                       study_name="study", search_space={"dim": [8, 16]}, pruner="none", trackers=group)
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["hpo"]).sort_values("tags.mlflow.runName")
    assert runs["tags.mlflow.runName"].tolist() == ["study-trial0", "study-trial1"]
    assert set(runs["tags.group"]) == {"study"} and set(runs["status"]) == {"FINISHED"}
    values = [t.value for t in sorted(res.study.trials, key=lambda t: t.number)]
    assert runs["metrics.hpo/value"].tolist() == values
    assert runs[f"metrics.{MRR}"].tolist() == values  # the trials are scored on the validation MRR
    assert set(runs["tags.split"]) == {"valid"}
    for run_id in runs["run_id"]:  # the artifacts went to the experiment's artifact_location
        assert (tmp_path / "artifacts" / run_id / "artifacts" / "protocol.json").is_file()
    assert runs["params.model.dim"].tolist() == [str(t.params["model.dim"]) for t in sorted(res.study.trials, key=lambda t: t.number)]


def test_hpo_command_line(tmp_path):
    pytest.importorskip("optuna")
    res = CliRunner().invoke(main, ["hpo", "-d", "nations", "-m", "distmult", "--trials", "1", "--epochs", "2",
                                    "--storage", f"sqlite:///{tmp_path / 's.db'}", "--study-name", "cli",
                                    "--tracker", f"csv={tmp_path / 'csv'}"])
    assert res.exit_code == 0, res.output
    [run_dir] = (tmp_path / "csv" / "cli").iterdir()
    assert run_dir.name == "cli-trial0"
    final = {r["key"]: float(r["value"]) for r in _csv_rows(run_dir, "metrics.csv") if r["step"] == ""}
    import optuna

    trial = optuna.load_study(study_name="cli", storage=f"sqlite:///{tmp_path / 's.db'}").trials[0]
    assert final["hpo/value"] == trial.value == final[MRR]


@pytest.mark.parametrize("name, module", [("mlflow", "mlflow"), ("wandb", "wandb"),
                                          ("tensorboard", "torch.utils.tensorboard")])
def test_missing_package_is_one_error_before_training(name, module, monkeypatch, tmp_path, no_training):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(MissingTrackerError, match=rf'pip install -e "\.\[{name}\]"'):
        get_tracker(name)
    res = CliRunner().invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "--epochs", "1",
                                    "-o", tmp_path / "out", "--tracker", name])
    assert res.exit_code != 0 and f'pip install -e ".[{name}]"' in res.output, res.output
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()


def test_unreachable_mlflow_server_before_training(tmp_path, no_training):
    need("mlflow")
    uri = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(TrackerError, match=f"cannot reach the MLflow tracking server at {uri}"):
        kgeval.pipeline(trackers=Trackers("mlflow", options={"mlflow": {"tracking_uri": uri}}), **TINY)
    res = CliRunner().invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "-o", tmp_path / "out",
                                    "--tracker", f"mlflow={uri}"])
    assert res.exit_code != 0 and "cannot reach the MLflow tracking server" in res.output, res.output


def test_unreachable_wandb_server_before_training(monkeypatch, no_training):
    need("wandb")
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_free_port()}")
    with pytest.raises(TrackerError, match="cannot reach the W&B server.*WANDB_MODE=offline"):
        kgeval.pipeline(trackers=["wandb"], **TINY)


def test_mlflow_file_store_is_named(tmp_path, monkeypatch):
    need("mlflow")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(TrackerError, match=r"MLflow tracking store file:.* cannot be used"):
        get_tracker("mlflow", tracking_uri=f"file:{tmp_path / 'mlruns'}")


def test_specs_and_names():
    assert parse_specs(["csv", "MLflow=sqlite:///a.db", "csv=out"]) == (
        ["csv", "mlflow"], {"mlflow": {"tracking_uri": "sqlite:///a.db"}, "csv": {"directory": "out"}})
    with pytest.raises(UnknownNameError, match="mlfow"):
        parse_specs(["mlfow"])
    with pytest.raises(UnknownNameError):
        get_tracker("comet")
    with pytest.raises(kgeval.errors.InvalidInputError, match="nothing after"):
        parse_specs(["csv="])


@pytest.mark.multiprocess  # a fresh interpreter
def test_no_tracker_package_is_imported_by_kgeval():
    import subprocess

    code = ("import sys, kgeval, kgeval.tracking, kgeval.workflow.pipeline, kgeval.cli.pipeline; "
            "print(sorted(m for m in ('mlflow', 'wandb', 'tensorboard', 'torch.utils.tensorboard') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class Recorder:
    """A Tracker of the test's own: records every call."""

    name = "recorder"

    def __init__(self, fail_on_start=False):
        self.calls, self.fail_on_start = [], fail_on_start

    def start(self, run_name, params, *, group=None):
        if self.fail_on_start:
            raise ConnectionError("refused")
        self.calls.append(("start", run_name, dict(params), group))

    def set_tags(self, tags):
        self.calls.append(("tags", dict(tags)))

    def log_metrics(self, values, step=None):
        self.calls.append(("metrics", dict(values), step))

    def log_artifact(self, path, name=None):
        self.calls.append(("artifact", Path(path).name, name))

    def finish(self, status="FINISHED"):
        self.calls.append(("finish", status))


def test_an_own_tracker_gets_each_epoch_and_the_final_values():
    rec = Recorder()
    result = kgeval.pipeline(trackers=[rec], stopper="early", stopper_kwargs={"frequency": 1, "patience": 5}, **TINY)
    kind = [c[0] for c in rec.calls]
    assert kind[0] == "start" and kind[-1] == "finish" and rec.calls[-1] == ("finish", "FINISHED")
    assert rec.calls[0][2]["training.epochs"] == 2 and rec.calls[0][2]["model.name"] == "distmult"
    epochs = [c for c in rec.calls if c[0] == "metrics" and c[2] is not None]
    assert [(c[2], c[1]["training/loss"]) for c in epochs] == list(enumerate(result.losses, start=1))
    assert [(c[2], c[1][f"validation/{MRR}"]) for c in epochs] == result.training.metric_history
    final = {k: v for c in rec.calls if c[0] == "metrics" and c[2] is None for k, v in c[1].items()}
    flat = result.results.to_flat_dict(p_values=True)
    assert {k: final[k] for k in flat} == pytest.approx(flat, nan_ok=True, rel=0, abs=0)
    assert final["training.best_epoch"] == result.training.best_epoch
    assert ("artifact", "protocol.json", "protocol.json") in rec.calls


def test_a_tracker_failing_to_start_ends_the_runs_before_it(tmp_path, no_training):
    group = Trackers(["csv", Recorder(fail_on_start=True)], options={"csv": {"directory": tmp_path}})
    with pytest.raises(TrackerError, match="the recorder tracker cannot start a run: ConnectionError: refused"):
        kgeval.pipeline(trackers=group, **TINY)
    [run_dir] = tmp_path.iterdir()
    assert {r["key"]: r["value"] for r in _csv_rows(run_dir, "tags.csv")}["status"] == "FAILED"
    assert not group.active


def test_replicates_command_line(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "--dim", "8", "--epochs", "1",
                                    "--replicates", "2", "-o", out, "--tracker", f"csv={tmp_path / 'csv'}"])
    assert res.exit_code == 0, res.output
    runs = sorted((tmp_path / "csv" / out.name).iterdir())  # grouped under the output directory's name
    saved = {}
    for run_dir in runs:
        seed = {r["key"]: r["value"] for r in _csv_rows(run_dir, "params.csv")}["seed"]
        final = {r["key"]: float(r["value"]) for r in _csv_rows(run_dir, "metrics.csv") if r["step"] == ""}
        [artifact] = _csv_rows(run_dir, "artifacts.csv")
        assert artifact["path"] == str((out / f"seed{seed}").resolve())
        saved[seed] = final[MRR]
    import json

    assert saved == {s: json.loads((out / f"seed{s}" / "results.json").read_text())["metrics"][MRR] for s in ("42", "43")}


def test_a_pruned_trial_ends_killed(tmp_path, monkeypatch):
    optuna = pytest.importorskip("optuna")
    from kgeval.workflow.hpo import hpo_pipeline

    monkeypatch.setattr(optuna.trial.Trial, "should_prune", lambda self: True)  # every trial pruned at its first report
    rec = Recorder()
    with pytest.raises(kgeval.errors.InvalidInputError, match="no trial .* completed"):
        hpo_pipeline(dataset="nations", model="distmult", epochs=2, n_trials=1, evaluation_frequency=1,
                     storage=f"sqlite:///{tmp_path / 's.db'}", study_name="p", search_space={"dim": [8]},
                     trackers=[rec])
    assert rec.calls[0][:2] == ("start", "p-trial0") and rec.calls[0][3] == "p"
    assert [c for c in rec.calls if c[0] == "finish"] == [("finish", "KILLED")]
    assert [c[2] for c in rec.calls if c[0] == "metrics"] == [1]  # the epoch before the pruning report


def test_logging_without_a_run_is_refused(tmp_path):
    group = Trackers("csv", options={"csv": {"directory": tmp_path}})
    with pytest.raises(TrackerError, match="no tracker run is active"):
        group.log_metrics({"x": 1.0}, step=1)
    group.start_run("r", {})
    with pytest.raises(TrackerError, match="still active"):
        group.start_run("again", {})
    group.end_run()
    group.end_run()  # nothing left to end
