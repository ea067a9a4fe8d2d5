"""Early stopping inside HPO trials: each trial is scored on the checkpoint that is best by the optimised metric."""

from __future__ import annotations

import json
import warnings

import pytest

optuna = pytest.importorskip("optuna")

from kgeval.data import get_dataset  # noqa: E402
from kgeval.workflow import PipelineConfig  # noqa: E402
from kgeval.workflow.hpo import StoppingMetricWarning, _validation_results, hpo_pipeline  # noqa: E402
from kgeval.workflow.pipeline import pipeline  # noqa: E402

#: distmult at lr 0.1 on Nations: validation MRR peaks at epoch 12, hits@3 at epoch 10 (0.8744 there, 0.8367 at 12)
RUN = dict(dataset="nations", model="distmult", epochs=15, random_seed=42)
SPACE = {"optimizer.lr": [0.1]}  # one configuration: the search's trial is the reference run
STOP = {"frequency": 1, "patience": 20}  # evaluates after every epoch, never stops: the restored best decides


def _metric_per_epoch(*metrics):
    """``metrics`` on validation after every epoch of RUN trained without a stopper: {metric: {epoch: value}}."""
    cfg = PipelineConfig.from_kwargs(None, **RUN, optimizer_kwargs={"lr": 0.1}, evaluation_split="valid")
    ds, values = get_dataset("nations"), {}

    def record(epoch, loss, kge):
        was = kge.training
        res = _validation_results(kge, ds, cfg)
        for m in metrics:
            values.setdefault(m, {})[epoch] = float(res.get_metric(m))
        kge.train(was)

    pipeline(cfg, dataset=ds, progress=False, callback=record)
    return values


@pytest.fixture(autouse=True)
def _quiet():
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_a_trial_is_scored_on_its_best_checkpoint_by_the_optimised_metric():
    """A search of validation hits@3 with early stopping left at its defaults stopped on MRR: the trial's value was
    the hits@3 of the best-MRR checkpoint (epoch 12: 0.8367), not the best hits@3 the trial reached (epoch 10:
    0.8744), without a word. The stopper now stops on the search's metric, and the trial records it."""
    values = _metric_per_epoch("hits@3", "mrr")
    per_epoch, mrr = values["hits@3"], values["mrr"]
    best_epoch = max(per_epoch, key=lambda e: (per_epoch[e], -e))
    assert per_epoch[max(mrr, key=lambda e: (mrr[e], -e))] < per_epoch[best_epoch]  # the case that was wrong
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoppingMetricWarning)
        res = hpo_pipeline(**RUN, stopper="early", stopper_kwargs=STOP, metric="hits@3", n_trials=1,
                           search_space=SPACE, sampler="random", pruner="none", storage="sqlite://")
    trial = res.study.trials[0]
    assert trial.value == per_epoch[best_epoch]
    assert trial.user_attrs["early_stopping"] == {"metric": "both.realistic.hits_at_3", "best_epoch": best_epoch,
                                                  "best_value": per_epoch[best_epoch], "stopped_early": False,
                                                  "selected_by": "validation hits@3 filtered with "
                                                                 "the validation filter sets (training + validation)"}
    assert res.best_config.to_dict()["early_stopping"]["metric"] == "hits@3"  # the test run stops on it too


def test_an_explicit_other_stopping_metric_is_kept_recorded_and_warned():
    per_epoch = _metric_per_epoch("hits@3")["hits@3"]
    with pytest.warns(StoppingMetricWarning, match="stop early on early_stopping.metric 'mrr'.*'hits@3'"):
        res = hpo_pipeline(**RUN, stopper="early", stopper_kwargs={**STOP, "metric": "mrr"}, metric="hits@3",
                           n_trials=1, search_space=SPACE, sampler="random", pruner="none",
                           storage="sqlite://")
    trial = res.study.trials[0]
    stopping = trial.user_attrs["early_stopping"]
    assert stopping["metric"] == "both.realistic.inverse_harmonic_mean_rank"
    assert trial.value == per_epoch[stopping["best_epoch"]]  # the hits@3 of the best-MRR checkpoint, as recorded


def test_a_search_space_that_turns_early_stopping_on_stops_on_the_metric(tmp_path):
    res = hpo_pipeline(**RUN, metric="hits@3", n_trials=1, search_space={**SPACE, "early_stopping.frequency": [1],
                                                                        "early_stopping.patience": [20]},
                       sampler="random", pruner="none", storage="sqlite://", output_dir=tmp_path)
    stopping = res.study.trials[0].user_attrs["early_stopping"]
    assert stopping["metric"] == "both.realistic.hits_at_3"
    assert json.loads((tmp_path / "trials.json").read_text())[0]["early_stopping"] == stopping  # saved with the trial


def test_the_printed_pipeline_command_stops_on_the_trials_metric():
    from kgeval.cli.hpo import _pipeline_command_for

    cfg = {"dataset": "nations", "model": "distmult", "epochs": 15, "random_seed": 42}
    params = {"early_stopping.patience": 3}
    line = _pipeline_command_for({**cfg, "stopper_kwargs": {"metric": "both.realistic.inverse_harmonic_mean_rank"}},
                                 params)
    assert line is not None and "--early-stopping --patience 3" in line
    line = _pipeline_command_for({**cfg, "stopper_kwargs": {"metric": "hits@3"}}, params)
    assert "--early-stopping --stopping-metric hits@3 --patience 3" in line
    # the metric's own direction needs no option; no option sets another (a metric without one)
    assert "--stopping-metric" not in _pipeline_command_for({**cfg, "stopper_kwargs": {"larger_is_better": True}}, params)
    assert "--stopping-metric mr" in _pipeline_command_for(
        {**cfg, "stopper_kwargs": {"metric": "mr", "larger_is_better": False}}, params)
    assert _pipeline_command_for({**cfg, "stopper_kwargs": {"metric": "mr", "larger_is_better": True}}, params) is None


@pytest.mark.parametrize("larger, stops_on", [(False, "both.realistic.arithmetic_mean_rank"),
                                              (True, "both.realistic.inverse_harmonic_mean_rank")])
def test_a_stopping_direction_without_a_metric(larger, stops_on):
    """larger_is_better without a metric: the search's metric where the direction is its own; else the direction
    is the stopper's default metric's, which is kept (a direction against mean rank would keep its worst
    checkpoint), and the user is warned."""
    kwargs = dict(RUN, epochs=3, stopper="early", stopper_kwargs={**STOP, "larger_is_better": larger}, metric="mr",
                  n_trials=1, search_space=SPACE, sampler="random", pruner="none", storage="sqlite://")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = hpo_pipeline(**kwargs)
    warned = [w for w in seen if issubclass(w.category, StoppingMetricWarning)]
    assert len(warned) == (1 if larger else 0)
    assert res.study.trials[0].user_attrs["early_stopping"]["metric"] == stops_on
