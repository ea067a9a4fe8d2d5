"""PipelineConfig: one tree, its dict form (config.json), dotted paths, the keyword form, the seed rule."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest

import kgeval
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.training import EarlyStopper
from kgeval.workflow import PipelineConfig, UnknownConfigKeyError
from kgeval.workflow.config import EARLY_STOPPING_OPTIONS, training_options

KW = dict(model="distmult", model_kwargs={"dim": 16}, epochs=3)
FAST = dict(KW, progress=False)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def test_early_stopping_options_match_the_stopper():
    import inspect

    params = inspect.signature(EarlyStopper.__init__).parameters
    # the stopper's evaluation options are the configuration's evaluation section; its test triples the dataset's
    declared = {k for k, p in params.items() if p.kind == p.KEYWORD_ONLY} - {"evaluate_fn", "options", "test_triples"}
    assert set(EARLY_STOPPING_OPTIONS) == declared
    assert {"batch_size", "num_negatives", "loss", "regularizer_weight"} <= set(training_options())
    assert not {"loop", "epochs", "lr", "optimizer", "seed"} & set(training_options())


def test_dict_round_trip_through_json():
    cfg = PipelineConfig.from_kwargs(dataset="nations", stopper="early", stopper_kwargs={"patience": 3},
                                     evaluation_kwargs={"tie_tolerance": 1e-6}, random_seed=7, **KW).resolve()
    again = PipelineConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert again.to_dict()["model"]["dim"] == 16 and again.to_dict()["training"]["epochs"] == 3
    assert again.evaluation.options.tie_tolerance == 1e-6 and again.early_stopping.options["patience"] == 3
    assert PipelineConfig.from_kwargs(**cfg.to_kwargs()) == cfg


def test_unknown_keys_name_the_key_and_suggest():
    with pytest.raises(UnknownConfigKeyError, match=r"'patiense'.*Did you mean: patience"):
        PipelineConfig.from_dict({"model": {"name": "distmult"}, "early_stopping": {"patiense": 2}})
    with pytest.raises(UnknownConfigKeyError, match=r"'sed'.*Did you mean: seed"):
        PipelineConfig.from_dict({"model": {"name": "distmult"}, "sed": 1})
    with pytest.raises(UnknownConfigKeyError, match=r"'batchsize'.*batch_size"):
        PipelineConfig(model="distmult").with_paths({"training.batchsize": 64})
    with pytest.raises(UnknownConfigKeyError, match="random_sed"):
        kgeval.pipeline(dataset="nations", random_sed=1, **FAST)
    with pytest.raises(UnknownNameError, match="tie_tolerance"):
        PipelineConfig.from_kwargs(model="distmult", evaluation_kwargs={"tie_tolerence": 0.1})


def test_dotted_paths_are_what_hpo_sets():
    base = PipelineConfig(dataset="nations", model="distmult")
    cfg = base.with_paths({"model.dim": 32, "optimizer.lr": 0.05, "training.batch_size": 64, "seed": 3,
                           "evaluation.options.tie_tolerance": 0.5})
    assert cfg.model.options["dim"] == 32 and cfg.optimizer.lr == 0.05 and cfg.seed == 3
    assert cfg.training.options["batch_size"] == 64 and cfg.evaluation.options.tie_tolerance == 0.5
    assert base.model.options == {}  # frozen: a copy was changed


def test_saved_config_reruns_to_the_same_numbers(tmp_path):
    first = kgeval.pipeline(dataset="nations", random_seed=5, **FAST)
    out = first.save(tmp_path / "run")
    cfg = kgeval.workflow.load_run(out).config
    assert cfg == first.config
    again = kgeval.pipeline(cfg, progress=False)
    assert again.losses == first.losses
    assert again.results.to_flat_dict() == pytest.approx(first.results.to_flat_dict(), nan_ok=True, rel=0, abs=0)


def test_old_flat_configuration_is_read():
    flat = {"dataset": "nations", "drop_unseen": False, "model": "distmult", "model_kwargs": {"dim": 8},
            "training_loop": "lcwa", "training_kwargs": {"batch_size": 128}, "optimizer": "adam",
            "optimizer_kwargs": {"lr": 0.01}, "epochs": 2, "stopper": None, "stopper_kwargs": None,
            "evaluation_relation_whitelist": [1, 2], "evaluation_entity_whitelist": None,
            "filter_validation_when_testing": False, "evaluation_split": "test", "evaluation_kwargs": {},
            "random_seed": 9, "device": None, "num_threads": 1}
    cfg = PipelineConfig.from_dict(flat)
    assert cfg.model.options == {"dim": 8} and cfg.seed == 9 and cfg.restriction.relations == (1, 2)
    assert cfg.evaluation.filter_validation_when_testing is False and cfg.threads == 1


@pytest.mark.parametrize("seed", [-1, 2**32, 2**70, 1.5, True])
def test_one_seed_rule(seed):
    with pytest.raises(InvalidInputError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
        kgeval.pipeline(dataset="nations", random_seed=seed, **FAST)


def test_model_name_checked_before_loading_anything(monkeypatch):
    import kgeval.data

    monkeypatch.setattr(kgeval.data, "get_dataset", lambda *a, **k: pytest.fail("dataset loaded"))
    with pytest.raises(UnknownNameError, match="complex"):
        kgeval.pipeline(dataset="nations", model="complx")


def test_config_is_frozen():
    cfg = PipelineConfig(model="distmult")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3


def test_absurd_thread_counts_are_refused_before_torch_sees_them():
    # torch's OpenMP pool segfaulted the process for --threads 99999
    with pytest.raises(InvalidInputError, match="threads must be at most 1024"):
        PipelineConfig(dataset="nations", model="distmult", threads=99_999)
    assert PipelineConfig(dataset="nations", model="distmult", threads=1024).threads == 1024


@pytest.mark.parametrize("model, paths", [("distmult", {"training.num_negatives": 5}),
                                          ("transe", {"training.loop": "lcwa", "training.num_negatives": 4})])
def test_num_negatives_with_the_lcwa_loop_is_refused(model, paths):
    """kgeval pipeline -m distmult --num-negatives 5 trained with LCWA, which draws no negatives: the option
    was accepted and ignored (the same loss 2.6440 as without it)."""
    from kgeval.errors import InvalidInputError
    from kgeval.workflow import PipelineConfig

    config = PipelineConfig().with_paths({"model.name": model, **paths})
    with pytest.raises(InvalidInputError, match="applies to the slcwa loop only"):
        config.resolve()
    slcwa = config.with_paths({"training.loop": "slcwa"}).resolve()
    assert slcwa.training.options["num_negatives"] == paths["training.num_negatives"]


def test_label_smoothing_with_the_slcwa_loop_is_refused():
    """label_smoothing smooths the LCWA labels only: with slcwa it was accepted and ignored."""
    from kgeval.errors import InvalidInputError
    from kgeval.workflow import PipelineConfig

    config = PipelineConfig().with_paths({"model.name": "transe", "training.label_smoothing": 0.1})
    with pytest.raises(InvalidInputError, match="applies to the lcwa loop only"):
        config.resolve()
    assert config.with_paths({"training.loop": "lcwa"}).resolve().training.options["label_smoothing"] == 0.1
