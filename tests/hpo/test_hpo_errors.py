"""hpo: every mistake is one clear error before the first trial; failing trials and Ctrl-C keep the study."""

from __future__ import annotations

import json
import warnings

import pytest

optuna = pytest.importorskip("optuna")

import kgeval.workflow.hpo as hpo  # noqa: E402
from kgeval.errors import InvalidInputError, UnknownNameError  # noqa: E402
from kgeval.workflow.hpo import HPOInterrupted, TrialError, hpo_pipeline  # noqa: E402

TINY = dict(dataset="nations", model="distmult", search_space={"dim": [4, 8]}, epochs=1, pruner="none")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize(
    ("space", "match"),
    [
        ({"lr": {"type": "float", "low": 0.0, "high": 0.1, "log": True}}, "low > 0"),
        ({"dim": {"type": "int", "low": 1.5, "high": 8}}, "integer"),
        ({"dim": {"type": "int", "low": 16, "high": 8}}, "low <= high"),
        ({"dim": {"type": "int", "low": 8, "hgh": 16}}, "hgh"),
        ({"dim": [[8, 16]]}, "choices"),
        ({"dim": [0, 8]}, "dim must be a positive integer"),
        ({"model.dimm": [8]}, "dimm"),
        ({"training.batch_size": [64, True]}, "batch_size"),
        ({"training.loss": ["margin"]}, "margin"),  # an sLCWA loss for an LCWA model
        ({"optimizer.momentum": [0.9]}, "optimizer"),
        ({"evaluation.split": ["test"]}, "fixes it"),  # trials never read test
        ({"evaluation.options.tie_tolerance": [-1.0]}, "tie_tolerance"),
    ],
)
def test_bad_search_space_is_refused_before_any_trial(tmp_path, space, match):
    db = tmp_path / "s.db"
    with pytest.raises(InvalidInputError, match=match):
        hpo_pipeline(**{**TINY, "search_space": space}, n_trials=1, storage=f"sqlite:///{db}")
    assert not db.exists()


@pytest.mark.parametrize(
    ("metric", "evaluation_kwargs", "match"),
    [
        ("head.realistic.mrr", {"sides": "tail"}, "no 'head' side"),
        ("tail.precision_at_10", {}, "precision_at_10"),  # query metric not computed
        ("mrrr", {}, "mrr"),
        ("both.realistic.count", {}, "number of evaluated tasks"),  # constant: optimising it means nothing
    ],
)
def test_metric_without_a_value_is_refused_before_any_trial(tmp_path, metric, evaluation_kwargs, match):
    db = tmp_path / "m.db"
    with pytest.raises((UnknownNameError, InvalidInputError), match=match):
        hpo_pipeline(**TINY, n_trials=1, metric=metric, evaluation_kwargs=evaluation_kwargs, storage=f"sqlite:///{db}")
    assert not db.exists()


def test_evaluation_options_reach_every_trial(tmp_path):
    """Every pipeline option (evaluation options, threads) reaches the trials, and the best configuration
    is a PipelineConfig that evaluates on test."""
    res = hpo_pipeline(**TINY, n_trials=1, metric="tail.precision_at_3", evaluation_kwargs={"sides": "tail",
                       "query_metrics_k": [3]}, num_threads=1, storage=f"sqlite:///{tmp_path / 'e.db'}")
    assert res.direction == "maximize" and 0 <= res.best_value <= 1
    cfg = res.best_pipeline_kwargs()
    assert cfg["evaluation_kwargs"]["sides"] == ["tail"] and cfg["evaluation_kwargs"]["query_metrics_k"] == [3]
    assert cfg["num_threads"] == 1
    best = res.best_config
    assert best.evaluation.split == "test" and best.evaluation.options.sides == ("tail",)
    assert best.model.options["dim"] == res.best_params["model.dim"]
    with pytest.raises(InvalidInputError, match="Did you mean: epochs"):
        hpo_pipeline(**{**TINY, "epoch": 1}, n_trials=1, storage=f"sqlite:///{tmp_path / 'x.db'}")


@pytest.mark.parametrize(("option", "match"), [({"timeout": -1}, "timeout"), ({"storage": 3}, "storage"),
                                               ({"evaluation_split": "test"}, "evaluation_split")])
def test_bad_options(tmp_path, option, match):
    with pytest.raises(InvalidInputError, match=match):
        hpo_pipeline(**{"storage": f"sqlite:///{tmp_path / 'o.db'}", **TINY, **option}, n_trials=1)


@pytest.mark.parametrize("seed", [-1, 2**32, True])
def test_seed_rule_is_the_pipelines(tmp_path, seed):
    with pytest.raises(InvalidInputError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
        hpo_pipeline(**TINY, n_trials=1, random_seed=seed, storage=f"sqlite:///{tmp_path / 's.db'}")


def _pipeline_failing_at(call: int, exc: BaseException, monkeypatch):
    real, calls = hpo.pipeline, []

    def fake(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise exc
        return real(*args, **kwargs)

    monkeypatch.setattr(hpo, "pipeline", fake)


def test_error_inside_a_trial_is_one_line_and_keeps_the_study(tmp_path, monkeypatch):
    _pipeline_failing_at(2, RuntimeError("CUDA error: device-side assert\n  traceback line"), monkeypatch)
    storage = f"sqlite:///{tmp_path / 't.db'}"
    with pytest.raises(TrialError) as info:
        hpo_pipeline(**TINY, n_trials=3, storage=storage, study_name="s")
    message = str(info.value)
    assert "\n" not in message and "trial 1 (model.dim=" in message and "RuntimeError: CUDA error" in message
    assert "resume: run again with --storage" in message
    study = optuna.load_study(study_name="s", storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL"]


def test_ctrl_c_saves_and_says_how_to_resume(tmp_path, monkeypatch):
    _pipeline_failing_at(2, KeyboardInterrupt(), monkeypatch)
    storage = f"sqlite:///{tmp_path / 'i.db'}"
    with pytest.raises(HPOInterrupted, match="1 trial") as info:
        hpo_pipeline(**TINY, n_trials=3, storage=storage, study_name="s", output_dir=tmp_path / "out")
    assert isinstance(info.value, KeyboardInterrupt) and "resume: run again with --storage" in str(info.value)
    assert info.value.result.best_params["model.dim"] in (4, 8)
    assert json.loads((tmp_path / "out" / "trials.json").read_text())[0]["state"] == "COMPLETE"
    states = [t.state.name for t in optuna.load_study(study_name="s", storage=storage).trials]
    assert states == ["COMPLETE", "FAIL"]  # nothing left RUNNING


def test_cli_errors_are_one_line(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from kgeval.cli import main

    base = ["hpo", "-d", "nations", "-m", "distmult", "--epochs", "1", "--trials", "2", "--pruner", "none",
            "--storage", f"sqlite:///{tmp_path / 'c.db'}"]
    out = CliRunner().invoke(main, [*base, "--seed", "-1"])
    assert out.exit_code == 2 and out.output.count("\n") == 1 and "seed must be an integer" in out.output
    base += ["--metric", "head.mrr"]  # the study resumed below is one of head.mrr (another metric is refused)
    out = CliRunner().invoke(main, [*base, "--search-space", _space_file(tmp_path)])
    assert out.exit_code == 0, out.output
    _pipeline_failing_at(1, RuntimeError("boom\n  more"), monkeypatch)
    out = CliRunner().invoke(main, [*base, "--search-space", _space_file(tmp_path)])
    assert out.exit_code == 2 and out.output.count("\n") == 1 and "RuntimeError: boom" in out.output
    _pipeline_failing_at(1, KeyboardInterrupt(), monkeypatch)
    out = CliRunner().invoke(main, [*base, "--search-space", _space_file(tmp_path)])
    assert out.exit_code == 130 and "resume: run again with --storage" in out.output
    assert "Traceback" not in out.output


def _space_file(tmp_path):
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"dim": [4, 8]}))
    return str(path)


def test_cli_base_configuration_from_a_file_and_set(tmp_path):
    """--config (a saved run's config.json works) and --set reach every trial; bad --set values are refused early."""
    from click.testing import CliRunner

    from kgeval.cli import main
    from kgeval.workflow import PipelineConfig

    config = PipelineConfig(model="distmult").with_paths({"evaluation.options.sides": "tail", "training.epochs": 1})
    (tmp_path / "config.json").write_text(json.dumps({"configuration": config.to_dict()}))
    base = ["hpo", "-d", "nations", "--trials", "1", "--pruner", "none", "--search-space", _space_file(tmp_path),
            "--storage", f"sqlite:///{tmp_path / 'f.db'}", "--config", str(tmp_path / "config.json"), "--format", "json"]
    for bad in ("model.p=1", "model.options.p=1"):  # distmult has no option p: refused before a trial
        out = CliRunner().invoke(main, [*base, "--set", bad, "--metric", "tail.mrr"])
        assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    out = CliRunner().invoke(main, [*base, "--set", "threads=1", "--metric", "tail.mrr"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.output)
    assert payload["pipeline"]["evaluation_kwargs"]["sides"] == ["tail"] and payload["pipeline"]["num_threads"] == 1
    out = CliRunner().invoke(main, [*base, "--set", "threads"])
    assert out.exit_code == 2 and "PATH=VALUE" in out.output


def test_output_directory_that_cannot_be_created_is_named(tmp_path):
    from kgeval.workflow.runs import OutputDirectoryError

    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(OutputDirectoryError, match="afile exists and is a file"):
        hpo_pipeline(**TINY, n_trials=1, output_dir=blocker)
    with pytest.raises(OutputDirectoryError, match="cannot create output directory"):
        hpo_pipeline(**TINY, n_trials=1, output_dir=blocker / "below")


@pytest.mark.parametrize("path", ["evaluation.options.filtered", "evaluation.options.tie_tolerance",
                                  "evaluation.options.sides", "evaluation.filter_validation_when_testing",
                                  "restriction.relations", "drop_unseen"])
def test_search_space_cannot_move_the_evaluation_protocol(tmp_path, path):
    """A space over the protocol compared trials scored differently: {"evaluation.options.filtered":
    [False, True]} trained the same DistMult twice and chose filtered (validation MRR 0.316 over the
    unfiltered 0.221) as the 'best configuration'. Refused before any trial; speed options stay searchable."""
    choices = {"evaluation.options.filtered": [False, True], "evaluation.options.tie_tolerance": [0.0, 1e9],
               "evaluation.options.sides": ["head", "tail"], "evaluation.filter_validation_when_testing": [True, False],
               "restriction.relations": ["ngo", "treaties"], "drop_unseen": [False, True]}[path]
    db = tmp_path / "p.db"
    with pytest.raises(InvalidInputError, match=f"{path}.*changes how trials are evaluated"):
        hpo_pipeline(**{**TINY, "search_space": {path: choices}}, n_trials=2, storage=f"sqlite:///{db}")
    assert not db.exists()


def test_speed_only_evaluation_options_can_be_searched(tmp_path):
    space = {"evaluation.options.batch_size": [16, 64]}
    res = hpo_pipeline(**{**TINY, "search_space": space}, n_trials=2, sampler="grid",
                       storage=f"sqlite:///{tmp_path / 'b.db'}")
    values = [t.value for t in res.study.trials]
    assert len(values) == 2 and values[0] == pytest.approx(values[1], abs=1e-12)  # same model, same protocol


@pytest.mark.parametrize("choices", [[8, 4, 4], [4, 8, 4.0], ["tail", "tail"], [0.1, True, 1]])
def test_repeated_categorical_choices_are_refused(tmp_path, choices):
    """Optuna records a choice by the index of the first equal one: [4, 4, 8] drew 4 twice as often and
    sampler='grid' trained it twice; [1, True] recorded the trial that ran with True as 1."""
    from kgeval.workflow.search_space import normalize_space

    with pytest.raises(InvalidInputError, match=f"choice {choices[-1]!r} is given twice"):
        normalize_space({"x.y": choices})
    db = tmp_path / "r.db"
    with pytest.raises(InvalidInputError, match="given twice"):
        hpo_pipeline(**{**TINY, "search_space": {"dim": [8, 4, 4]}}, n_trials=1, storage=f"sqlite:///{db}")
    assert not db.exists()


def test_a_keyword_fixed_value_is_not_searched_silently(tmp_path):
    """model_kwargs={'dim': 16} with a space over dim trained dims 4 and 8 and never 16; the default space
    (dims 32..128) overrode it too."""
    base = {k: v for k, v in TINY.items() if k != "search_space"}
    db = tmp_path / "k.db"
    with pytest.raises(InvalidInputError, match="'model.dim' is both given as a keyword argument"):
        hpo_pipeline(**base, model_kwargs={"dim": 16}, search_space={"dim": [4, 8]}, n_trials=1,
                     storage=f"sqlite:///{db}")
    assert not db.exists()
    res = hpo_pipeline(**base, model_kwargs={"dim": 4}, n_trials=1, sampler="random", storage=f"sqlite:///{db}")
    assert "model.dim" not in res.best_params and res.best_config.model.options["dim"] == 4


def test_search_space_is_checked_as_trials_combine_its_values(tmp_path):
    """Values were probed one parameter at a time against the base: {'training.loop': ['lcwa', 'slcwa'],
    'training.label_smoothing': [0.0, 0.1]} passed and the search died with a TrialError at trial 1
    (slcwa + 0.1) after training trial 0; stopper='early' for 2 epochs with a space over
    early_stopping.frequency [1] was refused ('every 10 epochs but training runs 2') though no trial
    would run the default frequency."""
    base = {k: v for k, v in TINY.items() if k not in ("search_space", "epochs")}
    db = tmp_path / "c.db"
    with pytest.raises(InvalidInputError, match="training.loop='slcwa', training.label_smoothing=0.1.*together"):
        hpo_pipeline(**base, epochs=1, n_trials=4, sampler="grid", storage=f"sqlite:///{db}",
                     search_space={"training.loop": ["lcwa", "slcwa"], "training.label_smoothing": [0.0, 0.1]})
    assert not db.exists()
    res = hpo_pipeline(**base, epochs=2, stopper="early", n_trials=2, sampler="grid", storage=f"sqlite:///{db}",
                       search_space={"early_stopping.patience": [1, 2], "early_stopping.frequency": [1]})
    assert sorted(t.params["early_stopping.patience"] for t in res.study.trials) == [1, 2]
    assert all(t.user_attrs["config"]["early_stopping"]["frequency"] == 1 for t in res.study.trials)
    with pytest.raises(InvalidInputError, match="the base configuration.*never evaluate"):  # the space does not mend it
        hpo_pipeline(**base, epochs=2, stopper="early", n_trials=1, storage=f"sqlite:///{tmp_path / 'd.db'}",
                     search_space={"early_stopping.patience": [1, 2]})
