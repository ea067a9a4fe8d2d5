"""TrainingConfig: validated once, round-trips through its dict, and train(config) == train(**options)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.models import get_model
from kgeval.training import TrainingConfig, train

N_ENT, N_REL = 14, 5
TRIPLES = np.random.default_rng(0).integers(0, [N_ENT, N_REL, N_ENT], size=(400, 3))


@pytest.mark.parametrize("name", ["epochs", "batch_size", "num_negatives"])
@pytest.mark.parametrize("value", [True, 0, -3, 2.0, "4", None])
def test_one_positive_int_rule(name, value):
    with pytest.raises(InvalidInputError, match=f"{name} must be a positive integer"):
        TrainingConfig(**{name: value})


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"lr": True}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"lr": 1e308}, "lr must be at most"),  # finite, but a raw overflow inside torch's optimiser
        ({"epochs": 10**20}, "epochs must be at most"),  # a raw OverflowError from tqdm's range
        ({"batch_size": 2**63}, "batch_size must be at most"),
        ({"label_smoothing": True}, "label_smoothing"),
        ({"label_smoothing": -0.1}, "label_smoothing"),
        ({"loop": "slcwa", "label_smoothing": 0.3}, "applies to the lcwa loop only"),  # was silently ignored
        ({"loop": "lcwa", "num_negatives": 5}, "applies to the slcwa loop only"),  # was silently ignored
        ({"regularizer_weight": False}, "regularizer_weight"),
        ({"regularizer_weight": -1.0}, "regularizer_weight"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"seed": True}, "seed"),
        ({"loss_kwargs": {1: 2.0}}, "loss_kwargs"),
    ],
)
def test_bad_values_are_refused(changes, match):
    with pytest.raises(InvalidInputError, match=match):
        TrainingConfig(**changes)


@pytest.mark.parametrize(("optimizer", "lr"), [("adam", 1e38), ("adam", 3.5e37), ("adagrad", 1e39)])
def test_learning_rates_the_optimiser_cannot_step_with_are_refused(optimizer, lr):
    """Adam's first step is 10 lr: lr = 1e38 passed the float32 bound and training died in optimizer.step()
    with a raw RuntimeError ('value cannot be converted to type float without overflow')."""
    with pytest.raises(InvalidInputError, match=f"lr must be at most .* for {optimizer}"):
        TrainingConfig(optimizer=optimizer, lr=lr)


@pytest.mark.parametrize(("optimizer", "lr"), [("adam", 3.4e37), ("adagrad", 3.4e38)])
def test_the_largest_accepted_learning_rate_steps_without_a_raw_error(optimizer, lr):
    model = get_model("distmult", N_ENT, N_REL, dim=4, seed=0, inverse_relations=True)
    with pytest.raises(InvalidInputError, match="training diverged"):  # a named error, not torch's overflow
        train(model, TRIPLES, TrainingConfig(optimizer=optimizer, lr=lr, epochs=1, batch_size=10**4), progress=False)


def test_names_are_normalised_and_checked_against_the_loop():
    cfg = TrainingConfig(loop="SLCWA", optimizer="AdaGrad", regularizer="N3", loss="margin")
    assert (cfg.loop, cfg.optimizer, cfg.regularizer) == ("slcwa", "adagrad", "n3")
    assert cfg.learning_rate == 1e-2 and TrainingConfig(lr=0.5).learning_rate == 0.5
    with pytest.raises(InvalidInputError, match="lcwa"):
        cfg.replace(loop="lcwa")  # margin is an sLCWA loss
    with pytest.raises(UnknownNameError, match="batch_size"):
        cfg.replace(batch_sise=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 3


def test_dict_round_trip():
    cfg = TrainingConfig(loop="slcwa", loss="nssa", loss_kwargs={"margin": 6}, lr=0.02, epochs=7, batch_size=64,
                         num_negatives=3, regularizer="l2", regularizer_weight=0.5, seed=9)
    data = cfg.to_dict()
    assert set(data) == set(TrainingConfig.option_names())
    assert TrainingConfig.from_dict(data) == cfg
    data["loss_kwargs"]["margin"] = 1.0  # the dict is a copy
    assert cfg.loss_kwargs == {"margin": 6}
    with pytest.raises(UnknownNameError, match="epochs"):
        TrainingConfig.from_dict({"epoch": 3})


def _run(*args, **kwargs):
    model = get_model("rotate", N_ENT, N_REL, dim=4, seed=2)
    result = train(model, TRIPLES, *args, progress=False, **kwargs)
    return result.losses, [p.detach().clone() for p in model.parameters()]


def test_config_object_dict_and_keywords_train_the_same_model():
    options = dict(loop="slcwa", num_negatives=3, epochs=2, batch_size=128, lr=0.01, regularizer="l2", seed=4)
    cfg = TrainingConfig(**options)
    runs = [_run(**options), _run(cfg), _run(cfg.to_dict()), _run(TrainingConfig(epochs=1), **{**options, "epochs": 2})]
    for losses, params in runs[1:]:
        assert losses == runs[0][0]
        assert all(torch.equal(a, b) for a, b in zip(params, runs[0][1]))
    # overrides win over the config
    assert len(_run(cfg, epochs=1)[0]) == 1


def test_train_refuses_a_non_config():
    with pytest.raises(InvalidInputError, match="TrainingConfig"):
        train(get_model("distmult", N_ENT, N_REL, dim=4), TRIPLES, "lcwa", progress=False)
    with pytest.raises(UnknownNameError, match="num_negatives"):
        train(get_model("distmult", N_ENT, N_REL, dim=4), TRIPLES, num_negative=3, progress=False)


def test_seed_bounds_are_the_pipeline_bounds():
    """train() and the pipeline share one seed rule: 2**32 - 1 is accepted, 2**32 is not."""
    model = get_model("distmult", N_ENT, N_REL, dim=4)
    assert np.isfinite(train(model, TRIPLES[:50], epochs=1, seed=2**32 - 1, progress=False).losses[0])
    from kgeval import pipeline

    with pytest.raises(InvalidInputError, match="random_seed"):
        pipeline(dataset="nations", model="distmult", random_seed=-1, epochs=1, progress=False)
