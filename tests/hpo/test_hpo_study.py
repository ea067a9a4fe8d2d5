"""Shared studies: per-trial sampler seeds, dead workers' trials, workers creating one database together."""

from __future__ import annotations

import multiprocessing
import re
import time
import warnings

import pytest
from patience import scaled

optuna = pytest.importorskip("optuna")

from kgeval.workflow.hpo import hpo_pipeline  # noqa: E402
from kgeval.workflow import study as study_mod  # noqa: E402
from kgeval.workflow.study import make_pruner, make_sampler, open_study, trial_seed  # noqa: E402

SPACE = {"dim": [4, 8, 12, 16], "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}}
TINY = dict(dataset="nations", model="distmult", search_space=SPACE, epochs=1, sampler="random", pruner="none")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        yield


def _open(storage, sampler="random", seed=42):
    return open_study(storage, "s", direction="maximize", sampler=make_sampler(sampler, seed),
                      pruner=make_pruner("none"), load_if_exists=True)


def _params(study):
    return [tuple(sorted(t.params.items())) for t in study.trials]


def test_resumed_study_continues_instead_of_repeating(tmp_path):
    """The CLI's resume hint re-runs with the same --seed: the second call must draw new configurations,
    and a fresh study with that seed reproduces the first call."""
    storage = f"sqlite:///{tmp_path / 'a.db'}"
    hpo_pipeline(n_trials=2, storage=storage, study_name="s", **TINY)
    resumed = hpo_pipeline(n_trials=2, storage=storage, study_name="s", **TINY)
    params = _params(resumed.study)
    assert len(params) == 4 and len(set(params)) == 4  # lr is continuous: a repeat means a repeated seed
    again = hpo_pipeline(n_trials=2, storage=f"sqlite:///{tmp_path / 'b.db'}", study_name="s", **TINY)
    assert _params(again.study) == params[:2]


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_two_workers_draw_different_configurations(tmp_path, sampler):
    """Two workers started with the same seed on one storage, taking turns (no training needed)."""
    storage = f"sqlite:///{tmp_path / 'w.db'}"
    workers = [_open(storage, sampler), _open(storage, sampler)]
    for _ in range(3):
        for study in workers:
            trial = study.ask()
            trial.suggest_float("lr", 1e-3, 1e-1, log=True)
            study.tell(trial, 0.5)
    values = [t.params["lr"] for t in workers[0].trials]
    assert len(values) == 6 and len(set(values)) == 6
    assert trial_seed(42, 0) != trial_seed(42, 1) and trial_seed(42, 1) == trial_seed(42, 1)


def test_killed_workers_trial_is_failed_on_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(study_mod, "HEARTBEAT_INTERVAL", 1)
    monkeypatch.setattr(study_mod, "GRACE_PERIOD", 1)
    storage = f"sqlite:///{tmp_path / 'k.db'}"
    dead = _open(storage)
    trial = dead.ask()  # what a worker killed with SIGKILL leaves: RUNNING, heartbeat never renewed
    dead._storage.record_heartbeat(trial._trial_id)
    time.sleep(2.1)
    res = hpo_pipeline(n_trials=1, storage=storage, study_name="s", **TINY)
    states = [t.state.name for t in res.study.trials]
    assert states == ["FAIL", "COMPLETE"]


def _create(storage, barrier, queue):
    warnings.simplefilter("ignore")
    barrier.wait()
    try:
        _open(storage)
        queue.put("ok")
    except Exception as exc:  # noqa: BLE001 -- reported to the parent
        queue.put(f"{type(exc).__name__}: {exc}")


def test_workers_creating_one_new_database_together(tmp_path):
    """Without retrying, one of two workers dies with 'table ... already exists' / 'UNIQUE constraint failed'."""
    storage = f"sqlite:///{tmp_path / 'c.db'}"
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_create, args=(storage, barrier, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=scaled(120)) for _ in procs]  # before join: a full queue blocks its writer
    for p in procs:
        p.join(scaled(30))
    assert outcomes == ["ok"] * 3
    assert len(optuna.get_all_study_summaries(storage)) == 1


def test_opening_a_study_prints_no_experimental_warning(tmp_path):
    """Optuna calls the heartbeat experimental; `kgeval hpo` printed that warning on every run."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _open(f"sqlite:///{tmp_path / 'q.db'}")
    assert not [w for w in seen if issubclass(w.category, optuna.exceptions.ExperimentalWarning)]


def _age(path, sql: str) -> None:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute(sql)


def test_resume_names_trials_whose_worker_stopped_sending_heartbeats(tmp_path):
    """Before: a resume within the grace period listed a killed worker's trial as running, without comment."""
    from click.testing import CliRunner

    from kgeval.cli import main

    path = tmp_path / "k.db"
    storage = f"sqlite:///{path}"
    dead = _open(storage)
    trial = dead.ask()  # a worker killed with SIGKILL: RUNNING, its heartbeat 45 s old (the database's clock)
    dead._storage.record_heartbeat(trial._trial_id)
    _age(path, "UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-45 seconds')")
    res = hpo_pipeline(n_trials=1, storage=storage, study_name="s", **TINY)
    assert [t.state.name for t in res.study.trials] == ["RUNNING", "COMPLETE"]  # within the 120 s grace
    assert len(res.notes) == 1 and re.fullmatch(  # 45 s and the time the search took to open the study
        r"1 trial \(trial 0\) whose worker stopped sending heartbeats (4[5-9]|[5-9]\d) s ago; it is marked "
        r"failed after 120 s", res.notes[0]), res.notes
    path = tmp_path / "cli.db"  # the same through the command line (its own search space: a new study)
    storage = f"sqlite:///{path}"
    dead = _open(storage)
    dead._storage.record_heartbeat(dead.ask()._trial_id)
    _age(path, "UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-45 seconds')")
    out = CliRunner().invoke(main, ["hpo", "--dataset", "nations", "--model", "distmult", "--trials", "1",
                                    "--epochs", "1", "--sampler", "random", "--pruner", "none",
                                    "--storage", storage, "--study-name", "s"])
    assert out.exit_code == 0, out.output
    assert re.search(r": 1 running.*\n  when the study was opened: 1 trial \(trial 0\) whose worker stopped sending "
                     r"heartbeats (4[5-9]|[5-9]\d|1[01]\d) s ago; it is marked failed after 120 s\n",
                     out.output), out.output


def test_resume_names_a_running_trial_that_never_sent_a_heartbeat(tmp_path):
    path = tmp_path / "n.db"
    storage = f"sqlite:///{path}"
    _open(storage).ask()  # the worker died before the heartbeat thread's first beat
    _age(path, "UPDATE trials SET datetime_start = datetime(datetime_start, '-100 seconds')")
    res = hpo_pipeline(n_trials=1, storage=storage, study_name="s", **TINY)
    assert len(res.notes) == 1 and re.fullmatch(
        r"1 trial \(trial 0\) RUNNING without any heartbeat 1[0-5]\d s after its start .*it stays RUNNING", res.notes[0])


def test_a_live_trial_gets_no_note(tmp_path):
    storage = f"sqlite:///{tmp_path / 'l.db'}"
    live = _open(storage)
    live._storage.record_heartbeat(live.ask()._trial_id)  # beating now
    assert study_mod.silent_trials_note(_open(storage)) is None
