"""Cross-checks of the workflow against independent computations: the best checkpoint and its
reported validation value, configuration booleans, and a saved run re-evaluated by ``kgeval evaluate``."""

from __future__ import annotations

import json
import warnings

import pytest

import kgeval.metrics
from kgeval.errors import InvalidInputError
from kgeval.workflow import PipelineConfig
from kgeval.workflow.pipeline import pipeline, replicates

FAST = dict(dataset="nations", model="distmult", model_kwargs={"dim": 8}, progress=False)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@pytest.mark.parametrize(("metric", "pick"), [("mr", min), ("tail.pessimistic.hits@1", max)])
def test_reported_model_is_the_best_checkpoint_by_the_stopping_metric(metric, pick):
    """The restored model is the best evaluation of the history (min for mean rank, max for hits),
    and evaluating it on validation gives exactly the recorded best value."""
    r = pipeline(**FAST, epochs=8, training_kwargs={"batch_size": 64}, optimizer_kwargs={"lr": 0.05},
                 stopper="early", stopper_kwargs={"frequency": 2, "patience": 5, "metric": metric},
                 evaluation_split="valid")
    values = [v for _, v in r.training.metric_history]
    assert len(values) == 4 and len(set(values)) > 1  # a real choice was made
    assert r.training.best_metric == pick(values)
    assert r.training.best_epoch == r.training.metric_history[values.index(pick(values))][0]
    assert r.results.get_metric(metric) == r.training.best_metric
    assert r.config.early_stopping.options["larger_is_better"] is (pick is max)


def test_a_stopping_direction_against_the_metric_is_refused_before_training():
    with pytest.raises(InvalidInputError, match="worst checkpoint"):
        pipeline(**FAST, epochs=1, stopper="early", stopper_kwargs={"metric": "mr", "larger_is_better": True})


@pytest.mark.parametrize("section", [{"drop_unseen": "false"}, {"drop_unseen": 0},
                                     {"evaluation": {"filter_validation_when_testing": "false"}},
                                     {"evaluation": {"filter_validation_when_testing": 1}}])
def test_configuration_booleans_are_not_read_by_truthiness(section):
    """``bool("false")`` is True: a JSON/--set "false" silently meant the opposite protocol."""
    with pytest.raises(InvalidInputError, match="must be True or False"):
        PipelineConfig.from_dict({"model": {"name": "distmult"}, **section})


def test_kwargs_booleans_too():
    with pytest.raises(InvalidInputError, match="filter_validation_when_testing must be True or False"):
        pipeline(**FAST, epochs=1, filter_validation_when_testing="no")


@pytest.mark.parametrize("options", [{"filtered": False, "sides": ["tail"], "tie_tolerance": 0.5},
                                     {"num_negatives": 5, "seed": 3}])
def test_cli_reevaluation_of_a_run_reproduces_its_results(tmp_path, options):
    """``kgeval evaluate --model-file RUN`` evaluates as the run did. It used to drop the run's
    evaluation options: a run evaluated unfiltered (MRR 0.259) was re-evaluated filtered (0.458)."""
    from click.testing import CliRunner

    from kgeval.cli import main

    r = pipeline(**FAST, epochs=2, evaluation_relation_whitelist=["embassy", "ngo", "intergovorgs"],
                 filter_validation_when_testing=False, evaluation_kwargs=options)
    r.save(tmp_path / "run")
    out = CliRunner().invoke(main, ["evaluate", "--model-file", str(tmp_path / "run"), "--format", "json"])
    assert out.exit_code == 0, out.output
    again = json.loads(out.output)
    assert again["metrics"] == json.loads(json.dumps(_payload(r.results)))
    assert again["protocol"]["num_triples"] == r.results.protocol["num_triples"]


def test_cli_reevaluation_of_a_validation_run_stays_on_validation(tmp_path):
    """A run evaluated on validation (as a search evaluates: test never read) was re-evaluated on test
    by ``kgeval evaluate --model-file RUN``: 201 test triples (Nations) instead of its 199 validation ones,
    other numbers than its results.json. ``--split test`` still asks for test explicitly."""
    from click.testing import CliRunner

    from kgeval.cli import main

    r = pipeline(**FAST, epochs=2, evaluation_split="valid")
    r.save(tmp_path / "run")
    out = CliRunner().invoke(main, ["evaluate", "--model-file", str(tmp_path / "run"), "--format", "json"])
    assert out.exit_code == 0, out.output
    again = json.loads(out.output)
    assert again["split"] == "valid"
    assert again["metrics"] == json.loads(json.dumps(_payload(r.results)))
    assert again["protocol"]["num_triples"] == r.results.protocol["num_triples"] == len(r.dataset.validation)
    out = CliRunner().invoke(main, ["evaluate", "--model-file", str(tmp_path / "run"), "--split", "test",
                                    "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["protocol"]["num_triples"] == len(r.dataset.testing)


def _payload(results):
    from kgeval.cli.common import metrics_payload

    return metrics_payload(results)


def test_a_query_metric_can_drive_early_stopping():
    """The pipeline pre-resolved the direction with a lookup that refused precision_at_k (UnknownNameError)."""
    r = pipeline(**FAST, epochs=2, stopper="early", stopper_kwargs={"metric": "tail.precision_at_3", "frequency": 1},
                 evaluation_kwargs={"query_metrics_k": [3]})
    assert len(r.training.metric_history) == 2 and r.config.early_stopping.options["larger_is_better"] is True


def _reference_mrr(model, triples, known, num_entities):
    """Filtered realistic MRR over both sides by plain sets: a candidate is dropped when its triple is
    known, the true answer never; realistic rank = (optimistic + pessimistic) / 2."""
    import numpy as np
    import torch

    known = {tuple(int(x) for x in row) for row in known}
    reciprocal = []
    with torch.no_grad():
        for h, r, t in triples.tolist():
            tails = model.score_tails(torch.tensor([h]), torch.tensor([r]))[0].double().numpy()
            heads = model.score_heads(torch.tensor([r]), torch.tensor([t]))[0].double().numpy()
            for scores, true, triple in ((tails, t, lambda e: (h, r, e)), (heads, h, lambda e: (e, r, t))):
                keep = np.array([e == true or triple(e) not in known for e in range(num_entities)])
                optimistic = 1 + np.sum((scores > scores[true]) & keep)
                pessimistic = np.sum((scores >= scores[true]) & keep)
                reciprocal.append(2 / (optimistic + pessimistic))
    return float(np.mean(reciprocal))


def test_filter_sets_of_validation_and_test_against_plain_sets():
    """Validation filters train + valid; test filters train + valid + test (train + test without
    validation filtering): the pipeline's numbers against a set-based reference."""
    import numpy as np

    from kgeval.data import get_dataset
    from kgeval.workflow.evaluation import evaluate_model

    ds = get_dataset("nations")
    r = pipeline(**FAST, epochs=1)
    tr, va, te = ds.training, ds.validation, ds.testing
    assert r.results.get_metric("mrr") == pytest.approx(
        _reference_mrr(r.model, te, np.concatenate([tr, va, te]), ds.num_entities), rel=1e-12)
    for split, filter_valid, known in (("valid", True, [tr, va]), ("test", False, [tr, te])):
        got = evaluate_model(r.model, ds, split=split, filter_validation_when_testing=filter_valid)
        expected = _reference_mrr(r.model, va if split == "valid" else te, np.concatenate(known), ds.num_entities)
        assert got.get_metric("mrr") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("device", "match"), [("gpu", "not a torch device"), ("cuda:x", "not a torch device"),
                                               (3, "device must be a name")])
def test_a_bad_device_is_a_named_error(device, match):
    """These were a RuntimeError from inside ``model.to`` after the dataset was loaded."""
    with pytest.raises(InvalidInputError, match=match):
        pipeline(**FAST, epochs=1, device=device)


def test_an_unavailable_device_is_refused_before_training(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InvalidInputError, match="CUDA is not available"):
        pipeline(**FAST, epochs=1, device="cuda")


def test_replicates_are_the_single_runs_of_their_seeds_and_summarise_them():
    """Replicate i is exactly ``pipeline(seed=seed + i)`` (options and restriction included) and the
    summary is the mean / sample sd / t interval of those runs' values."""
    import numpy as np
    from scipy.stats import t

    kw = dict(FAST, epochs=1, random_seed=11, evaluation_relation_whitelist=["embassy", "ngo"],
              evaluation_kwargs={"sides": ["tail"], "tie_tolerance": 1e-3})
    rep = replicates(**kw, num_replicates=2)
    singles = [pipeline(**{**kw, "random_seed": s}) for s in (11, 12)]
    assert rep.seeds == [11, 12]
    for run, single in zip(rep.runs, singles):
        assert run.results.to_flat_dict() == pytest.approx(single.results.to_flat_dict(), nan_ok=True, rel=0, abs=0)
    for key in ("tail.realistic.inverse_harmonic_mean_rank", "tail.realistic.arithmetic_mean_rank"):
        x = np.array([s.results.get_metric(key) for s in singles])
        half = t.ppf(0.975, 1) * x.std(ddof=1) / np.sqrt(2)
        s = rep.summary[key]
        assert s["values"] == x.tolist() and len(set(s["values"])) == 2
        vr = kgeval.metrics.get(key.split(".")[-1]).value_range  # the interval is clipped to the range
        assert (s["mean"], s["sd"], s["ci_low"], s["ci_high"]) == pytest.approx(
            (x.mean(), x.std(ddof=1), max(x.mean() - half, vr.lower), min(x.mean() + half, vr.upper)), rel=1e-12)


def test_early_stopping_that_would_never_evaluate_is_refused():
    """frequency 10 (the default) with 3 epochs trained the last-epoch model without one validation
    evaluation (best_epoch None), although early stopping was asked for."""
    with pytest.raises(InvalidInputError, match="never evaluate"):
        pipeline(**FAST, epochs=3, stopper="early")
    with pytest.raises(InvalidInputError, match="never evaluate"):
        pipeline(**FAST, epochs=3, stopper="early", stopper_kwargs={"frequency": 4})
    r = pipeline(**FAST, epochs=3, stopper="early", stopper_kwargs={"frequency": 3})
    assert r.training.best_epoch == 3


def test_replicate_intervals_stay_in_the_metric_range():
    """The t interval of a few seeds left the metric's range: hits@1 of (1, 1, 0.9) reached 1.11, MR of (1, 1, 1.9) 0.01."""
    import numpy as np
    from scipy.stats import t

    from kgeval.ranks import RankTable
    from kgeval.results import Results
    from kgeval.workflow.replicates import summarise

    def run(ranks):
        r = np.asarray(ranks)
        return Results(RankTable.from_ranks(r, r, num_candidates=np.full(r.size, 50)))

    runs = [run([1] * 10), run([1] * 10), run([1] * 9 + [10])]  # hits@1 1, 1, 0.9; MR 1, 1, 1.9
    s = summarise(runs)
    h1 = s["both.realistic.hits_at_1"]
    half = t.ppf(0.975, 2) * np.std([1, 1, 0.9], ddof=1) / np.sqrt(3)
    assert h1["ci_high"] == 1.0 and h1["ci_low"] == pytest.approx(2.9 / 3 - half, rel=1e-12)
    mr = s["both.realistic.arithmetic_mean_rank"]
    assert mr["ci_low"] == 1.0 and mr["ci_high"] > 1.9  # MR >= 1
