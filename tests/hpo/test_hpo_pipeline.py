"""hpo_pipeline(): tiny studies in temporary SQLite storage, resume, test isolation, errors."""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("optuna")

from kgeval.data import Dataset, get_dataset  # noqa: E402
from kgeval.errors import InvalidInputError, UnknownNameError  # noqa: E402
from kgeval.workflow.hpo import MissingDependencyError, hpo_pipeline  # noqa: E402

SPACE = {"dim": [8, 16], "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}}
TINY = dict(model="distmult", search_space=SPACE, epochs=4, evaluation_frequency=2)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_study_in_sqlite_and_resume(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    res = hpo_pipeline(dataset="nations", n_trials=2, storage=storage, study_name="s", **TINY)
    assert len(res.study.trials) == 2
    assert 0 < res.best_value <= 1
    assert set(res.best_params) == {"model.dim", "optimizer.lr"}
    cfg = res.best_pipeline_kwargs()
    assert cfg["evaluation_split"] == "test" and cfg["model_kwargs"]["dim"] == res.best_params["model.dim"]
    # intermediate values were reported for pruning (epoch 2 of 4)
    assert all(2 in t.intermediate_values for t in res.study.trials)
    again = hpo_pipeline(dataset="nations", n_trials=1, storage=storage, study_name="s", **TINY)
    assert len(again.study.trials) == 3
    with pytest.raises(InvalidInputError, match="already exists"):
        hpo_pipeline(dataset="nations", n_trials=1, storage=storage, study_name="s", load_if_exists=False, **TINY)


def test_default_storage_in_output_dir(tmp_path):
    res = hpo_pipeline(dataset="nations", n_trials=1, output_dir=tmp_path, pruner="none", sampler="random", **TINY)
    assert res.storage == f"sqlite:///{(tmp_path / 'kgeval-hpo.db').absolute()}"
    assert (tmp_path / "kgeval-hpo.db").is_file()
    saved = json.loads((tmp_path / "best_pipeline_config.json").read_text())
    assert saved["best_value"] == pytest.approx(res.best_value)
    assert len(json.loads((tmp_path / "trials.json").read_text())) == 1


def test_hpo_never_touches_test(tmp_path):
    ds = get_dataset("nations")
    rng = np.random.default_rng(1)
    garbage = np.stack([rng.integers(0, ds.num_entities, 30), rng.integers(0, ds.num_relations, 30),
                        rng.integers(0, ds.num_entities, 30)], axis=1)
    poisoned = Dataset(name="nations", training=ds.training, validation=ds.validation, testing=garbage,
                       entity_labels=ds.entity_labels, relation_labels=ds.relation_labels)
    values = []
    for i, data in enumerate((ds, poisoned)):
        res = hpo_pipeline(dataset=data, n_trials=2, storage=f"sqlite:///{tmp_path / f'{i}.db'}", **TINY)
        values.append([(t.params, t.value, t.intermediate_values) for t in res.study.trials])
    assert values[0] == values[1]


def test_grid_sampler_and_direction(tmp_path):
    space = {"dim": [8, 16]}
    res = hpo_pipeline(dataset="nations", model="distmult", n_trials=2, search_space=space, sampler="grid",
                       epochs=2, storage=f"sqlite:///{tmp_path / 'g.db'}", metric="mr")
    assert res.direction == "minimize"
    assert sorted(t.params["model.dim"] for t in res.study.trials) == [8, 16]
    with pytest.raises(InvalidInputError, match="finite"):
        hpo_pipeline(dataset="nations", model="distmult", n_trials=1, sampler="grid", epochs=1,
                     search_space={"lr": {"type": "float", "low": 0.001, "high": 0.1}},
                     storage=f"sqlite:///{tmp_path / 'g2.db'}")


def test_bad_input(tmp_path):
    storage = f"sqlite:///{tmp_path / 'b.db'}"
    with pytest.raises(UnknownNameError, match="distmult"):
        hpo_pipeline(dataset="nations", model="distmul", n_trials=1, storage=storage)
    with pytest.raises(UnknownNameError, match="tpe"):
        hpo_pipeline(dataset="nations", model="distmult", n_trials=1, sampler="tpee", storage=storage)
    with pytest.raises(InvalidInputError, match="search space parameter 'foo'"):
        hpo_pipeline(dataset="nations", model="distmult", n_trials=1, search_space={"foo": [1, 2]}, storage=storage)
    with pytest.raises(InvalidInputError, match="n_trials"):
        hpo_pipeline(dataset="nations", model="distmult", n_trials=0, storage=storage)


def test_missing_optuna_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # makes `import optuna` raise ImportError
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[hpo\]"'):
        hpo_pipeline(dataset="nations", model="distmult", n_trials=1)


def test_saved_files_are_strict_json(tmp_path):
    """A NaN intermediate value (a diverging trial reported to the pruner) is written as null, not NaN."""
    import optuna

    from kgeval.workflow import PipelineConfig
    from kgeval.workflow.hpo import HPOResult

    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    trial.suggest_int("model.dim", 4, 8)
    trial.report(float("nan"), 1)
    trial.set_user_attr("configuration", {"model": "distmult"})
    trial.set_user_attr("config", PipelineConfig(model="distmult").to_dict())
    study.tell(trial, 0.5)
    HPOResult(study, "mrr", "maximize", "memory", "s").save(tmp_path)

    def refuse(name):
        raise ValueError(f"{name} in JSON")

    trials = json.loads((tmp_path / "trials.json").read_text(), parse_constant=refuse)
    assert trials[0]["intermediate_values"] == {"1": None}
    assert json.loads((tmp_path / "best_pipeline_config.json").read_text(), parse_constant=refuse)["best_value"] == 0.5


class _RacingStudy:
    """A study another worker adds a better trial to (alternating dim 4 / dim 8) before every read of it."""

    def __init__(self, study):
        import optuna

        self._study, self._value = study, 10.0
        self._templates = sorted(study.trials, key=lambda t: t.params["model.dim"])
        self._make = lambda t, v: optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=v,
                                                            user_attrs=t.user_attrs)

    def _another_worker_finishes(self):
        template = self._templates[int(self._value) % 2]
        self._study.add_trial(self._make(template, self._value))
        self._value += 1

    @property
    def best_trial(self):
        self._another_worker_finishes()
        return self._study.best_trial

    def get_trials(self, *args, **kwargs):
        self._another_worker_finishes()
        return self._study.get_trials(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._study, name)


def test_saved_best_is_one_trial_while_other_workers_finish_trials(tmp_path):
    """save() read best_value, best_params, pipeline and config through four storage queries: a trial another
    worker finished in between made best_pipeline_config.json pair one trial's value with another's
    parameters (best_params model.dim 4, config dim 8)."""
    res = hpo_pipeline(dataset="nations", model="distmult", n_trials=2, search_space={"dim": [4, 8]}, sampler="grid",
                       epochs=1, pruner="none", storage=f"sqlite:///{tmp_path / 'r.db'}")
    res.study = _RacingStudy(res.study)
    saved = json.loads((res.save(tmp_path / "out") / "best_pipeline_config.json").read_text())
    trial = [t for t in res.study._study.trials if t.value == saved["best_value"]][0]
    assert saved["best_params"] == trial.params
    assert saved["config"]["model"]["dim"] == saved["pipeline"]["model_kwargs"]["dim"] == trial.params["model.dim"]


def test_best_trial_of_tied_values_is_the_first(tmp_path):
    import optuna

    res = hpo_pipeline(dataset="nations", model="distmult", n_trials=2, search_space={"dim": [4, 8]}, sampler="grid",
                       epochs=1, pruner="none", storage=f"sqlite:///{tmp_path / 't.db'}")
    first, second = sorted(res.study.trials, key=lambda t: t.number)
    for t in (second, first):  # the same best value, the later trial added first
        res.study.add_trial(optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=5.0,
                                                      user_attrs=t.user_attrs))
    assert res.best_trial.number == 2 and res.summary()["best_params"] == second.params
