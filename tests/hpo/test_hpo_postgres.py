"""Several workers on one study in a real PostgreSQL server (a throw-away cluster per test session).

The cluster is conftest.py's postgres_url: skipped when PostgreSQL's server binaries or psycopg are missing,
unless KGEVAL_REQUIRE_POSTGRES is set (``.ci/run`` sets it, so CI cannot pass by skipping).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from patience import env as patient_env
from patience import scaled, wait_until

optuna = pytest.importorskip("optuna")

from kgeval.workflow import study as study_mod  # noqa: E402
from kgeval.workflow.hpo import IDENTITY_ATTR, hpo_pipeline  # noqa: E402
from kgeval.workflow.study import StorageError, display_url  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"
WORKER = ["--dataset", "nations", "--model", "distmult", "--sampler", "random", "--pruner", "none", "--seed", "7"]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        yield


def _worker(url: str, study: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-m", "kgeval", "hpo", *WORKER, "--storage", url, "--study-name", study,
                             *args], env=patient_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.service  # a PostgreSQL server, and worker processes against it
@pytest.mark.multiprocess
def test_two_concurrent_workers_record_every_trial_once(postgres_url):
    workers = [_worker(postgres_url, "shared", "--trials", "3", "--epochs", "1") for _ in range(2)]
    outputs = [w.communicate(timeout=scaled(300)) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    trials = optuna.load_study(study_name="shared", storage=postgres_url).trials
    assert sorted(t.number for t in trials) == list(range(6))  # none lost, none duplicated
    assert {t.state.name for t in trials} == {"COMPLETE"}
    params = [tuple(sorted(t.params.items())) for t in trials]
    assert len(set(params)) == 6  # same --seed on both workers, yet no configuration drawn twice
    assert all(t.value is not None for t in trials)


@pytest.mark.service
@pytest.mark.multiprocess
def test_killed_workers_trial_is_failed_and_the_study_resumes(postgres_url, monkeypatch):
    worker = _worker(postgres_url, "killed", "--trials", "1", "--epochs", "5000")
    # read-only polls: opening the study here (Optuna creates missing tables) raced the worker's CREATE TABLE
    # (UniqueViolation on pg_type), which failed this test
    trial_id = wait_until(lambda: _running_trial(postgres_url, "killed") or worker.poll() is not None,
                          "the worker's running trial", seconds=300)
    assert worker.poll() is None, worker.communicate()
    # Optuna's heartbeat thread records the first heartbeat just after the trial starts; a worker
    # killed before that leaves a RUNNING trial without one, which Optuna never fails (a known gap).
    # A fixed pause here lost that race on a loaded machine: wait for the heartbeat row itself.
    wait_until(lambda: _has_heartbeat(postgres_url, trial_id) or worker.poll() is not None,
               "the worker's first heartbeat", seconds=120)
    assert worker.poll() is None, worker.communicate()
    worker.send_signal(signal.SIGKILL)  # no chance to clean up: the trial stays RUNNING
    worker.wait(scaled(30))
    monkeypatch.setattr(study_mod, "HEARTBEAT_INTERVAL", 1)
    monkeypatch.setattr(study_mod, "GRACE_PERIOD", 1)
    time.sleep(2.1)
    # the killed worker trained 5000 epochs (to be caught RUNNING); the resumed one trains 1, which a
    # resumed study refuses (other settings, incomparable values): forget the recorded settings
    optuna.load_study(study_name="killed", storage=postgres_url).set_user_attr(IDENTITY_ATTR, None)
    res = hpo_pipeline(dataset="nations", model="distmult", epochs=1, n_trials=1, sampler="random", pruner="none",
                       storage=postgres_url, study_name="killed")
    assert [t.state.name for t in res.study.trials] == ["FAIL", "COMPLETE"]


def _query(url: str, sql: str, *args):
    """The first row of a read-only query on Optuna's tables; None while they do not exist yet."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        try:
            return conn.execute(sql, args).fetchone()
        except psycopg.errors.UndefinedTable:
            return None


def _running_trial(url: str, study: str) -> int | None:
    row = _query(url, "SELECT t.trial_id FROM trials t JOIN studies s ON s.study_id = t.study_id "
                      "WHERE s.study_name = %s AND t.state = 'RUNNING'", study)
    return None if row is None else row[0]


def _has_heartbeat(url: str, trial_id: int) -> bool:
    return _query(url, "SELECT 1 FROM trial_heartbeats WHERE trial_id = %s", trial_id) is not None


def _unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_one_named_error_without_the_password(monkeypatch):
    pytest.importorskip("psycopg")
    url = f"postgresql+psycopg://kgeval:s3cret@127.0.0.1:{_unused_port()}/study"
    backoffs = []  # the create-race retry loop's sleeps (seconds in all): it must not run for a dead server
    monkeypatch.setattr(study_mod, "time", SimpleNamespace(sleep=backoffs.append))
    with pytest.raises(StorageError, match="cannot reach the Optuna storage") as err:
        hpo_pipeline(dataset="nations", model="distmult", epochs=1, n_trials=1, storage=url)
    assert "s3cret" not in str(err.value) and "kgeval:***@" in str(err.value)
    assert backoffs == []


@pytest.mark.multiprocess  # a fresh interpreter
def test_cli_unreachable_server_exits_2_with_one_line():
    url = f"postgresql+psycopg://u:pw@127.0.0.1:{_unused_port()}/db"
    proc = _worker(url, "x", "--trials", "1", "--epochs", "1")
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and ":pw@" not in err


def test_missing_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ModuleNotFoundError
    with pytest.raises(StorageError, match=r"driver 'psycopg'.*pip install -e \"\.\[postgres\]\""):
        study_mod.check_storage("postgresql+psycopg://u@127.0.0.1:1/db")


@pytest.mark.parametrize("url", ["not a url", "postgresql://u@host:notaport/db"])
def test_malformed_url_is_named(url):
    with pytest.raises(StorageError, match="storage"):
        study_mod.check_storage(url)


def test_display_url_masks_only_the_password():
    assert display_url("postgresql://me:pa:ss@db.example:5432/hpo") == "postgresql://me:***@db.example:5432/hpo"
    assert display_url("postgresql://me@db/hpo") == "postgresql://me@db/hpo"
    assert display_url("sqlite:////tmp/a:b@c.db") == "sqlite:////tmp/a:b@c.db"



def test_resume_hint_masks_the_password():
    from kgeval.workflow.hpo import HPOResult

    res = HPOResult(study=None, metric="mrr", direction="maximize", storage="postgresql://me:hunter2@db/hpo",
                    study_name="s")
    assert "hunter2" not in res.resume_hint() and "me:***@db" in res.resume_hint()
    assert res.shown_storage == "postgresql://me:***@db/hpo"  # what save() writes


@pytest.mark.service
@pytest.mark.multiprocess
def test_workers_creating_the_tables_together(postgres_url):
    """Several workers opening one fresh database at once race on CREATE TABLE; PostgreSQL reports
    the loser as DuplicateTable ("relation ... already exists"), which must be retried, not fatal.
    (The race is timing-dependent: this test does not reproduce it on every run.)"""
    import multiprocessing

    base = postgres_url.rsplit("/", 1)[0]
    import psycopg

    with psycopg.connect(base.replace("postgresql+psycopg://", "postgresql://") + "/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE race")
    url = base + "/race"
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_open_together, args=(url, barrier, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    outcomes = sorted(queue.get(timeout=scaled(120)) for _ in procs)  # before join: a full queue blocks its writer
    for p in procs:
        p.join(scaled(30))
    assert outcomes == ["ok"] * 4


def _open_together(url, barrier, queue):
    warnings.simplefilter("ignore")
    from kgeval.workflow.study import make_pruner, make_sampler, open_study

    barrier.wait()
    try:
        open_study(url, "s", direction="maximize", sampler=make_sampler("random", 1), pruner=make_pruner("none"),
                   load_if_exists=True)
        queue.put("ok")
    except Exception as exc:  # noqa: BLE001 -- reported to the parent
        queue.put(f"{type(exc).__name__}: {exc}")
