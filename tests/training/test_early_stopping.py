"""EarlyStopper with an injected evaluate_fn: when it stops, which weights it restores, what it records."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgeval.errors import InvalidInputError
from kgeval.models import get_model
from kgeval.training import EarlyStopper, train

TRIPLES = np.array([[0, 0, 1], [1, 0, 2], [2, 1, 3], [3, 1, 0], [4, 0, 0]], dtype=np.int64)


class ScriptedMetric:
    """Returns a scripted metric sequence and remembers the weights it was shown."""

    def __init__(self, values):
        self.values = list(values)
        self.calls = []
        self.snapshots = []

    def __call__(self, model, triples, *, filter_triples, progress, **kwargs):
        assert progress is False
        assert not model.training and not torch.is_grad_enabled()
        self.calls.append((triples, filter_triples, kwargs))
        self.snapshots.append(model.entity.weight.detach().clone())
        return self.values[len(self.calls) - 1]


def _model():
    return get_model("distmult", 5, 2, dim=4, seed=0)


def test_stops_after_patience_and_restores_best():
    fn = ScriptedMetric([0.1, 0.5, 0.4, 0.45, 0.9])
    valid, filt = TRIPLES[:2], TRIPLES
    stopper = EarlyStopper(valid, filt, frequency=2, patience=2, evaluate_fn=fn, evaluate_kwargs={"batch_size": 3})
    model = _model()
    result = train(model, TRIPLES, epochs=50, lr=0.05, stopper=stopper, progress=False)
    # evaluations after epochs 2, 4, 6, 8: best at 4, then two non-improvements -> stop at 8
    assert result.epochs_run == 8 and result.stopped_early
    assert result.best_epoch == 4 and result.best_metric == 0.5
    assert stopper.history == [(2, 0.1), (4, 0.5), (6, 0.4), (8, 0.45)]
    assert result.metric_history == stopper.history
    assert torch.equal(model.entity.weight, fn.snapshots[1])  # weights of epoch 4, not epoch 8
    assert not torch.equal(fn.snapshots[1], fn.snapshots[3])
    triples, filter_triples, kwargs = fn.calls[0]
    assert triples is valid and filter_triples is filt and kwargs == {"batch_size": 3}


def test_relative_delta_and_smaller_is_better():
    # 0.5 -> 0.52 is not a 10 % improvement, so it counts against patience
    fn = ScriptedMetric([0.5, 0.52, 0.53])
    stopper = EarlyStopper(TRIPLES, TRIPLES, frequency=1, patience=2, relative_delta=0.1, evaluate_fn=fn)
    result = train(_model(), TRIPLES, epochs=10, stopper=stopper, progress=False)
    assert result.epochs_run == 3 and result.best_epoch == 1

    fn = ScriptedMetric([5.0, 4.0, 6.0, 3.0, 7.0, 8.0])
    stopper = EarlyStopper(TRIPLES, TRIPLES, metric="both.realistic.arithmetic_mean_rank", frequency=1,
                           patience=2, larger_is_better=False, evaluate_fn=fn)
    result = train(_model(), TRIPLES, epochs=10, stopper=stopper, progress=False)
    assert result.epochs_run == 6 and result.best_epoch == 4 and result.best_metric == 3.0


def test_no_stop_keeps_running_and_still_restores_best():
    fn = ScriptedMetric([0.2, 0.9, 0.3])
    model = _model()
    stopper = EarlyStopper(TRIPLES, TRIPLES, frequency=1, patience=5, evaluate_fn=fn)
    result = train(model, TRIPLES, epochs=3, lr=0.05, stopper=stopper, progress=False)
    assert result.epochs_run == 3 and not result.stopped_early and result.best_epoch == 2
    assert torch.equal(model.entity.weight, fn.snapshots[1])


def test_reads_metric_from_results_like_objects():
    class FakeResults:
        def get_metric(self, name):
            assert name == "both.realistic.inverse_harmonic_mean_rank"
            return 0.25

    stopper = EarlyStopper(TRIPLES, TRIPLES, frequency=1, evaluate_fn=lambda *a, **k: FakeResults())
    assert stopper.evaluate(_model(), 1) is False and stopper.best_metric == 0.25
    stopper = EarlyStopper(TRIPLES, TRIPLES, metric="m", frequency=1, evaluate_fn=lambda *a, **k: {"m": 0.75})
    stopper.evaluate(_model(), 1)
    assert stopper.best_metric == 0.75


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"frequency": 0}, "frequency"), ({"patience": 0}, "patience"), ({"relative_delta": -0.1}, "relative_delta")],
)
def test_bad_stopper_options(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        EarlyStopper(TRIPLES, TRIPLES, **kwargs)


def test_default_evaluate_fn_is_kgeval_evaluate():
    """Without an injected evaluate_fn the stopper calls kgeval.evaluate and reads MRR from its Results."""
    from kgeval.evaluation import evaluate

    model = _model()
    stopper = EarlyStopper(TRIPLES[:2], [TRIPLES], frequency=1, patience=1)
    result = train(model, TRIPLES, epochs=2, stopper=stopper, progress=False)
    assert len(stopper.history) == result.epochs_run >= 1
    expected = evaluate(model, TRIPLES[:2], filter_triples=[TRIPLES], progress=False)
    # the restored weights are the best ones, so re-evaluating them reproduces best_metric
    assert stopper.best_metric == pytest.approx(expected.get_metric("both.realistic.inverse_harmonic_mean_rank"))
    assert 0 < stopper.best_metric <= 1


def test_evaluation_options_reach_the_evaluator():
    """options= (an EvaluationOptions) and the older evaluate_kwargs dict evaluate the same way."""
    from kgeval.evaluation import EvaluationOptions, evaluate

    model = _model()
    opts = EvaluationOptions(sides="tail", filtered=False)
    expected = evaluate(model, TRIPLES[:3], filter_triples=[TRIPLES], options=opts, progress=False)
    expected = expected.get_metric("tail.realistic.inverse_harmonic_mean_rank")
    stoppers = [EarlyStopper(TRIPLES[:3], [TRIPLES], metric="tail.realistic.inverse_harmonic_mean_rank", **kw)
                for kw in ({"options": opts}, {"options": {"sides": "tail"}, "evaluate_kwargs": {"filtered": False}},
                           {"evaluate_kwargs": {"sides": "tail", "filtered": False}})]
    for stopper in stoppers:
        assert stopper.options == opts
        model.train()
        stopper.evaluate(model, 1)
        assert stopper.history == [(1, pytest.approx(expected))]


def test_bad_evaluation_options_are_refused_before_training():
    from kgeval.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="tie_tolerance"):
        EarlyStopper(TRIPLES, TRIPLES, evaluate_kwargs={"tie_tolerence": 1e-6})
    with pytest.raises(InvalidInputError, match="sides"):
        EarlyStopper(TRIPLES, TRIPLES, options={"sides": ()})
    with pytest.raises(InvalidInputError, match="options"):
        EarlyStopper(TRIPLES, TRIPLES, options="tail")


@pytest.mark.parametrize(("returned", "match"), [({"other": 0.5}, "not among"), ("n/a", "not a number")])
def test_an_evaluation_without_the_metric_is_one_clear_error(returned, match):
    stopper = EarlyStopper(TRIPLES, TRIPLES, metric="m", frequency=1, evaluate_fn=lambda *a, **k: returned)
    with pytest.raises(InvalidInputError, match=match):
        stopper.evaluate(_model(), 1)


def test_a_metric_the_evaluation_cannot_give_is_refused_before_training():
    from kgeval.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="mrr"):
        EarlyStopper(TRIPLES, TRIPLES, metric="tail.mrrr")
    with pytest.raises(InvalidInputError, match="side 'head' is not evaluated"):
        EarlyStopper(TRIPLES, TRIPLES, metric="head.mrr", options={"sides": "tail"})
    EarlyStopper(TRIPLES, TRIPLES, metric="left.best.hits_at_k.3")  # PyKEEN's grammar parses
