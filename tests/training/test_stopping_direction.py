"""EarlyStopper's direction: derived from the metric, a contradiction refused, only real booleans accepted.

Before: ``larger_is_better`` defaulted to True whatever the metric, so ``EarlyStopper(...,
metric="mr")`` kept the checkpoint with the *largest* validation mean rank (the worst one), and
``larger_is_better="false"`` (a string from a configuration file) was read as True.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgeval.errors import InvalidInputError
from kgeval.models import get_model
from kgeval.training import EarlyStopper, train

TRIPLES = np.array([[0, 0, 1], [1, 0, 2], [2, 1, 3], [3, 1, 0], [4, 0, 0]], dtype=np.int64)


class Scripted:
    """Returns scripted values and remembers the weights of each evaluation."""

    def __init__(self, values):
        self.values, self.snapshots = list(values), []

    def __call__(self, model, triples, **kwargs):
        self.snapshots.append(model.entity.weight.detach().clone())
        return self.values[len(self.snapshots) - 1]


@pytest.mark.parametrize(("metric", "larger"), [("mr", False), ("tail.pessimistic.gmr", False), ("mrr", True),
                                                ("hits@10", True), ("amri", True), ("tail.precision_at_3", True),
                                                ("custom_score", True)])
def test_direction_defaults_to_the_metrics(metric, larger):
    assert EarlyStopper(TRIPLES, TRIPLES, metric=metric, evaluate_fn=lambda *a, **k: 0.0).larger_is_better is larger


def test_mean_rank_keeps_the_smallest_checkpoint_without_being_told():
    fn = Scripted([5.0, 3.0, 9.0, 8.0])  # ranks: the best is the second evaluation
    model = get_model("distmult", 5, 2, dim=4, seed=0)
    stopper = EarlyStopper(TRIPLES, TRIPLES, metric="both.realistic.arithmetic_mean_rank", frequency=1, patience=2,
                           evaluate_fn=fn)
    result = train(model, TRIPLES, epochs=10, lr=0.05, stopper=stopper, progress=False)
    assert result.best_epoch == 2 and result.best_metric == 3.0 and result.epochs_run == 4
    assert torch.equal(model.entity.weight, fn.snapshots[1])


@pytest.mark.parametrize(("metric", "larger"), [("mr", True), ("mrr", False), ("hits@1", False)])
def test_a_direction_against_the_metric_is_refused(metric, larger):
    with pytest.raises(InvalidInputError, match="worst checkpoint"):
        EarlyStopper(TRIPLES, TRIPLES, metric=metric, larger_is_better=larger)


@pytest.mark.parametrize("value", ["false", "False", 0, 1, 0.0])
def test_larger_is_better_must_be_a_boolean(value):
    with pytest.raises(InvalidInputError, match="larger_is_better must be True or False"):
        EarlyStopper(TRIPLES, TRIPLES, metric="m", larger_is_better=value, evaluate_fn=lambda *a, **k: 0.0)


def test_a_custom_metric_takes_the_direction_given():
    stopper = EarlyStopper(TRIPLES, TRIPLES, metric="loss", larger_is_better=False, frequency=1,
                           evaluate_fn=lambda *a, **k: {"loss": 1.0})
    assert stopper.larger_is_better is False


def test_a_nan_evaluation_is_never_the_best():
    """A first NaN used to become the best value: nothing compares greater than NaN, so it was
    restored at the end instead of the real best (0.4 here)."""
    fn = Scripted([float("nan"), 0.4, 0.3, float("nan"), 0.2])
    model = get_model("distmult", 5, 2, dim=4, seed=0)
    stopper = EarlyStopper(TRIPLES, TRIPLES, metric="mrr", frequency=1, patience=3, evaluate_fn=fn)
    result = train(model, TRIPLES, epochs=10, lr=0.05, stopper=stopper, progress=False)
    assert result.best_epoch == 2 and result.best_metric == 0.4 and result.epochs_run == 5
    assert torch.equal(model.entity.weight, fn.snapshots[1])
