"""A resumed study keeps one metric, base configuration and dataset; trial values come from validation.

Before: resuming a validation-MRR study with ``metric="hits@10"`` ranked the new trial's hits@10
(0.937) against the old trials' MRR (0.316) and reported it as the best value.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("optuna")

from kgeval.errors import InvalidInputError  # noqa: E402
from kgeval.workflow import PipelineConfig  # noqa: E402
from kgeval.workflow.hpo import hpo_pipeline  # noqa: E402
from kgeval.workflow.pipeline import pipeline  # noqa: E402

TINY = dict(dataset="nations", model="distmult", search_space={"dim": [4, 8]}, epochs=2, sampler="grid",
            pruner="none")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_resuming_with_other_settings_is_refused(tmp_path):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    first = hpo_pipeline(n_trials=1, storage=storage, study_name="s", metric="mrr", **TINY)
    for change, match in (({"metric": "hits@10"}, "metric"), ({"epochs": 3}, "training.epochs"),
                          ({"model_kwargs": {"dim": 4}, "search_space": {"lr": [0.01, 0.1]}}, "model.dim")):
        with pytest.raises(InvalidInputError, match=f"not comparable.*{match}"):
            hpo_pipeline(n_trials=1, storage=storage, study_name="s", **{**TINY, "metric": "mrr", **change})
    assert len(first.study.trials) == 1  # nothing was added by the refused calls
    # the same metric under another spelling, another seed or thread count: resumed
    again = hpo_pipeline(n_trials=1, storage=storage, study_name="s", metric="both.realistic.mrr",
                         random_seed=3, num_threads=1, **TINY)
    assert [t.state.name for t in again.study.trials] == ["COMPLETE", "COMPLETE"]


def test_trial_values_are_the_validation_metric_and_the_best_follows_its_direction(tmp_path):
    """Each trial's value is its configuration's validation mean rank, recomputed here by a plain
    pipeline run (no pruning callback); the best is the smallest."""
    res = hpo_pipeline(n_trials=2, storage=f"sqlite:///{tmp_path / 'g.db'}", metric="mr",
                       evaluation_frequency=1, **TINY)
    values = {}
    for t in res.study.trials:
        config = PipelineConfig.from_dict(t.user_attrs["config"])
        assert config.evaluation.split == "valid"
        values[t.number] = pipeline(config, progress=False).results.get_metric("mr")
        assert t.value == values[t.number]
    assert len(set(values.values())) == 2 and res.best_value == min(values.values())
    assert res.best_config.evaluation.split == "test"


@pytest.mark.parametrize(("spec", "match"), [
    ({"type": "float", "low": 0.001, "high": 0.1, "grid": [5.0]}, r"grid point\(s\) \[5.0\] outside"),
    ({"type": "int", "low": 4, "high": 8, "grid": [2, 4]}, r"grid point\(s\) \[2\] outside"),
    ({"type": "int", "low": 4, "high": 8, "grid": [4.5]}, "must be an integer"),
    ({"type": "int", "low": 4, "high": 8, "grid": []}, "non-empty list"),
])
def test_grid_points_must_lie_in_the_range(spec, match):
    """sampler='grid' trained on these points although they were outside the declared range
    (lr=5.0 for a range [0.001, 0.1]) and were never checked against the configuration."""
    from kgeval.workflow.search_space import normalize_space

    with pytest.raises(InvalidInputError, match=match):
        normalize_space({"x": spec})


def test_a_null_step_means_no_step():
    """``"step": null`` (JSON) passed the check, then every trial failed with int(None)."""
    import optuna

    from kgeval.workflow.search_space import normalize_space, suggest

    space = normalize_space({"model.dim": {"type": "int", "low": 4, "high": 8, "step": None}})
    trial = optuna.create_study().ask()
    assert 4 <= suggest(trial, "model.dim", space["model.dim"]) <= 8


@pytest.mark.parametrize(("metric", "direction"), [("mrr", "minimize"), ("mr", "maximize"),
                                                   ("tail.precision_at_3", "minimize")])
def test_a_direction_against_the_metric_is_refused(metric, direction):
    """hpo_pipeline(metric="mrr", direction="minimize") searched for the worst configuration."""
    from kgeval.workflow.hpo import _direction

    with pytest.raises(InvalidInputError, match="worst trial"):
        _direction(metric, direction)
    assert _direction(metric, None) == ("minimize" if direction == "maximize" else "maximize")


def test_a_search_whose_trials_would_never_evaluate_for_early_stopping_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="training.epochs.*never evaluate"):
        hpo_pipeline(n_trials=1, storage=f"sqlite:///{tmp_path / 'e.db'}", stopper="early",
                     stopper_kwargs={"frequency": 4}, **{**{k: v for k, v in TINY.items() if k != "epochs"},
                                                          "search_space": {"training.epochs": [2, 8]}})
