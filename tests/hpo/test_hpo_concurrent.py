"""Workers started at the same moment on one new study (a SQLite file, a PostgreSQL server): they must end up on
one study, with every trial recorded once."""

from __future__ import annotations

import multiprocessing
import warnings

import pytest
from patience import scaled

optuna = pytest.importorskip("optuna")
# worker processes started together; the PostgreSQL cases need the server too (marked where parametrized)
pytestmark = pytest.mark.multiprocess

from kgeval.workflow.hpo import IDENTITY_ATTR, STUDY_ID_ATTR, _canonical_metric  # noqa: E402

WORKERS, TRIALS = 2, 2
SPACE = {"dim": [4, 8, 12, 16], "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}}
TINY = dict(dataset="nations", model="distmult", search_space=SPACE, epochs=1, sampler="random", pruner="none",
            num_threads=1)


def _worker(storage, name, barrier, queue, kwargs, slow_attrs=False):
    """One worker: hpo_pipeline, with every worker let into open_study at the same moment. ``slow_attrs``: a
    storage slow to write study attributes (1 s each), which opens the window between a study's creation and
    the recording of its settings wide."""
    warnings.simplefilter("ignore")
    import time

    from kgeval.workflow import study as study_mod
    from kgeval.workflow.hpo import hpo_pipeline

    if slow_attrs:
        write = optuna.storages.RDBStorage.set_study_user_attr

        def slow(self, *args):
            time.sleep(1.0)
            return write(self, *args)

        optuna.storages.RDBStorage.set_study_user_attr = slow
    real = study_mod.open_study

    def together(*args, **kw):
        barrier.wait(scaled(120))
        return real(*args, **kw)

    study_mod.open_study = together
    try:
        res = hpo_pipeline(n_trials=TRIALS, storage=storage, study_name=name, **TINY, **kwargs)
        queue.put(("ok", res.study_id, res.metric))
    except BaseException as exc:  # noqa: BLE001 -- reported to the parent
        queue.put((f"{type(exc).__name__}: {exc}", None, None))


def _run_together(storage, name, settings, slow_attrs):
    """Run one worker per entry of ``settings`` (extra hpo_pipeline keywords) together; their outcomes."""
    ctx = multiprocessing.get_context("spawn")  # fork after torch has started its threads may hang
    barrier, queue = ctx.Barrier(len(settings)), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(storage, name, barrier, queue, kwargs, slow_attrs))
             for kwargs in settings]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=scaled(300)) for _ in procs]
    for p in procs:
        p.join(scaled(60))
    return outcomes


def _storage(backend, tmp_path, request):
    return f"sqlite:///{tmp_path / 'together.db'}" if backend == "sqlite" else request.getfixturevalue("postgres_url")


BACKENDS = pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.service)])
#: slow_attrs=True widens the window between the study's creation and the recording of its settings
SLOW = pytest.mark.parametrize("slow_attrs", [False, True])


@SLOW
@BACKENDS
def test_workers_creating_one_study_together_share_it(tmp_path, request, backend, slow_attrs):
    storage, name = _storage(backend, tmp_path, request), f"same-{backend}-{slow_attrs}"
    outcomes = _run_together(storage, name, [{}] * WORKERS, slow_attrs)
    assert [o[0] for o in outcomes] == ["ok"] * WORKERS, outcomes
    assert name in optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    trials = study.trials
    assert sorted(t.number for t in trials) == list(range(WORKERS * TRIALS))  # none lost, none twice
    assert [t.state.name for t in trials] == ["COMPLETE"] * (WORKERS * TRIALS)
    assert len({tuple(sorted(t.params.items())) for t in trials}) == WORKERS * TRIALS  # no configuration twice
    # one identity and one study id, which every worker saw as its study's
    assert study.user_attrs[IDENTITY_ATTR]["metric"] == "both.realistic.inverse_harmonic_mean_rank"
    assert {o[1] for o in outcomes} == {study.user_attrs[STUDY_ID_ATTR]}


@SLOW
@BACKENDS
def test_workers_with_other_settings_on_one_new_study_are_refused(tmp_path, request, backend, slow_attrs):
    """Two workers creating one study together with other metrics: the settings of the one that made the study
    are recorded, and the other is refused. Before, with slow_attrs, both workers adopted the new study, each
    recorded its metric in turn, and both ran: MRR and hits@10 values of 4 trials ranked in one study."""
    storage, name = _storage(backend, tmp_path, request), f"mixed-{backend}-{slow_attrs}"
    outcomes = _run_together(storage, name, [{"metric": "mrr"}, {"metric": "hits@10"}], slow_attrs)
    assert sorted(o[0] == "ok" for o in outcomes) == [False, True], outcomes
    assert "was run with other settings" in next(o[0] for o in outcomes if o[0] != "ok")
    study = optuna.load_study(study_name=name, storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * TRIALS
    (_, study_id, metric), = (o for o in outcomes if o[0] == "ok")
    assert study.user_attrs[STUDY_ID_ATTR] == study_id
    assert study.user_attrs[IDENTITY_ATTR]["metric"] == _canonical_metric(metric)  # the one that ran its trials


@pytest.mark.parametrize("with_trial", [False, True])
def test_a_study_made_by_optuna_is_adopted(tmp_path, monkeypatch, with_trial):
    """A study without kgeval's settings (made by Optuna directly) is adopted: at once when it has a trial, after
    IDENTITY_WAIT when it is empty (it might be a new study whose maker is about to record its settings)."""
    from kgeval.workflow import hpo as hpo_mod
    from kgeval.workflow import study_guard

    monkeypatch.setattr(study_guard, "IDENTITY_WAIT", 0.5)
    waits = []
    real = study_guard._wait_for_identity
    monkeypatch.setattr(study_guard, "_wait_for_identity", lambda study: waits.append(1) or real(study))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    made = optuna.create_study(storage=storage, study_name="by-optuna", direction="maximize")
    if with_trial:
        made.enqueue_trial({})
        made.optimize(lambda t: 0.25, n_trials=1)
    res = hpo_mod.hpo_pipeline(n_trials=1, storage=storage, study_name="by-optuna", **TINY)
    assert len(waits) == (0 if with_trial else 1)
    assert [t.state.name for t in res.study.trials] == ["COMPLETE"] * (1 + with_trial)
    assert res.study.user_attrs[IDENTITY_ATTR]["metric"] == "both.realistic.inverse_harmonic_mean_rank"
