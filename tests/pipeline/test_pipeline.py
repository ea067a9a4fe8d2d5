"""pipeline(): end to end on Nations, saving/reloading, determinism, test isolation, whitelists."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import kgeval
import kgeval.evaluation
from kgeval.data import Dataset, get_dataset
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.models import load_model
from kgeval.workflow.evaluation import evaluate_model
from kgeval.workflow.pipeline import PipelineResult, pipeline

# tiny, fast settings: a few epochs of DistMult on Nations take well under a second
FAST = dict(model="distmult", model_kwargs={"dim": 16}, epochs=3, progress=False)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@pytest.fixture(scope="module")
def nations_run():
    return pipeline(dataset="nations", **FAST)


def _rows(arr) -> set[tuple[int, int, int]]:
    return {tuple(int(x) for x in row) for row in np.asarray(arr).reshape(-1, 3)}


def test_end_to_end_save_reload_reevaluate(nations_run, tmp_path):
    r = nations_run
    assert isinstance(r, PipelineResult)
    mrr = r.results.get_metric("mrr")
    assert 0 < mrr <= 1 and r.results.get_metric("igmr") <= mrr
    assert 0 <= r.results.get_metric("tail.pessimistic.hits@10") <= 1
    assert len(r.losses) == 3 and r.training.epochs_run == 3
    assert set(r.timings) >= {"training", "evaluation"}
    assert r.results.protocol["num_triples"] == len(get_dataset("nations").testing)

    out = r.save(tmp_path / "run")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "losses.json", "manifest.json", "model.pt",
                                                    "rank_table.npz", "results.json"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["configuration"]["model"]["name"] == "distmult" and meta["configuration"]["seed"] == 42
    assert set(meta["versions"]) >= {"kgeval", "torch", "numpy", "python"}
    assert meta["dataset"]["hashes"] == get_dataset("nations").hashes()
    assert json.loads((out / "losses.json").read_text())["losses"] == pytest.approx(r.losses)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left

    reloaded = load_model(out / "model.pt")
    again = evaluate_model(reloaded, "nations", split="test")
    assert again.to_flat_dict() == pytest.approx(r.results.to_flat_dict(), nan_ok=True)
    loaded = kgeval.Results.load_json(out / "results.json")
    assert loaded.get_metric("mrr") == pytest.approx(mrr)


def test_pipeline_is_a_plain_function():
    import kgeval.workflow.pipeline as module  # importing the module must not shadow the function

    assert kgeval.pipeline is module.pipeline


def test_determinism_same_seed_same_numbers():
    a = pipeline(dataset="nations", random_seed=7, **FAST)
    b = pipeline(dataset="nations", random_seed=7, **FAST)
    c = pipeline(dataset="nations", random_seed=8, **FAST)
    assert a.losses == b.losses
    assert a.results.to_flat_dict() == pytest.approx(b.results.to_flat_dict(), nan_ok=True, rel=0, abs=0)
    assert a.losses != c.losses


def test_save_refuses_non_empty_and_is_atomic(nations_run, tmp_path, monkeypatch):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    with pytest.raises(InvalidInputError, match="not empty"):
        nations_run.save(target)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]

    def broken_save(path, **labels):
        raise OSError("disk full")

    monkeypatch.setattr(nations_run.model, "save", broken_save)
    with pytest.raises(InvalidInputError, match=r"cannot save the run: writing \S+fresh/model.pt failed: disk full"):
        nations_run.save(tmp_path / "fresh")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]  # neither target nor temp dir remains


def _recording_evaluate(monkeypatch):
    calls = []
    real = kgeval.evaluation.evaluate

    def spy(scorer, triples, **kwargs):
        filters = kwargs.get("filter_triples", ())
        arrays = list(filters.values()) if isinstance(filters, dict) else list(filters)
        calls.append((np.asarray(triples).copy(), [np.asarray(a).copy() for a in arrays]))
        return real(scorer, triples, **kwargs)

    monkeypatch.setattr(kgeval.evaluation, "evaluate", spy)
    return calls


def test_early_stopping_never_reads_test(monkeypatch):
    ds = get_dataset("nations")
    only_test = _rows(ds.testing) - _rows(ds.training) - _rows(ds.validation)
    assert only_test
    calls = _recording_evaluate(monkeypatch)
    r = pipeline(dataset=ds, stopper="early", stopper_kwargs={"frequency": 1, "patience": 2}, **{**FAST, "epochs": 4})
    assert len(calls) >= 2  # stopper evaluations + the final test evaluation
    *stopping, final = calls
    for triples, filters in stopping:
        seen = _rows(triples).union(*(_rows(f) for f in filters))
        assert not seen & only_test
        assert _rows(triples) == _rows(ds.validation)
    assert _rows(final[0]) == _rows(ds.testing)
    assert r.training.best_epoch is not None


def test_test_split_cannot_influence_training_or_selection():
    ds = get_dataset("nations")
    rng = np.random.default_rng(0)
    garbage = np.stack([rng.integers(0, ds.num_entities, 50), rng.integers(0, ds.num_relations, 50),
                        rng.integers(0, ds.num_entities, 50)], axis=1)
    poisoned = Dataset(name="poisoned", training=ds.training, validation=ds.validation, testing=garbage,
                       entity_labels=ds.entity_labels, relation_labels=ds.relation_labels)
    kw = dict(stopper="early", stopper_kwargs={"frequency": 1, "patience": 1}, **{**FAST, "epochs": 4})
    a = pipeline(dataset=ds, **kw)
    b = pipeline(dataset=poisoned, **kw)
    assert a.losses == b.losses
    assert a.training.metric_history == b.training.metric_history
    assert a.training.best_epoch == b.training.best_epoch
    # and the validation-split evaluation used by HPO is identical too
    va = pipeline(dataset=ds, evaluation_split="valid", **FAST).results.to_flat_dict()
    vb = pipeline(dataset=poisoned, evaluation_split="valid", **FAST).results.to_flat_dict()
    assert va == pytest.approx(vb, nan_ok=True, rel=0, abs=0)


def test_filtering_protocol(monkeypatch):
    ds = get_dataset("nations")
    calls = _recording_evaluate(monkeypatch)
    pipeline(dataset=ds, **FAST)
    pipeline(dataset=ds, filter_validation_when_testing=False, **FAST)
    (_, with_valid), (_, without_valid) = calls
    assert [len(f) for f in with_valid] == [len(ds.training), len(ds.validation)]
    assert [len(f) for f in without_valid] == [len(ds.training)]


def test_whitelists_restrict_triples_and_candidates():
    ds = get_dataset("nations")
    ents = ["usa", "uk", "china", "india", "ussr", "egypt", "israel"]
    rels = ["militaryalliance", str(ds.relation_to_id["embassy"]), ds.relation_to_id["intergovorgs"]]
    r = pipeline(dataset="nations", evaluation_entity_whitelist=ents, evaluation_relation_whitelist=rels, **FAST)
    table = r.results.rank_table
    ent_ids = [ds.entity_to_id[e] for e in ents]
    rel_ids = sorted({ds.relation_to_id["militaryalliance"], ds.relation_to_id["embassy"],
                      ds.relation_to_id["intergovorgs"]})
    expected = ds.testing[np.isin(ds.testing[:, 1], rel_ids) & np.isin(ds.testing[:, 0], ent_ids)
                          & np.isin(ds.testing[:, 2], ent_ids)]
    assert 0 < len(expected) < len(ds.testing)
    assert len(table) == 2 * len(expected)
    assert table.num_candidates.max() <= len(ents)
    assert r.configuration["evaluation_relation_whitelist"] == rel_ids


def test_whitelist_errors():
    with pytest.raises(UnknownNameError, match="militaryalliance"):
        pipeline(dataset="nations", evaluation_relation_whitelist=["militaryaliance"], **FAST)
    with pytest.raises(InvalidInputError, match="matches none"):
        # two entities that never form a test triple with each other under this relation
        pipeline(dataset="nations", evaluation_entity_whitelist=["burma"], **FAST)
    with pytest.raises(InvalidInputError, match="outside"):
        pipeline(dataset="nations", evaluation_relation_whitelist=[999], **FAST)


def test_bad_arguments():
    with pytest.raises(UnknownNameError, match="complex"):
        pipeline(dataset="nations", model="complx", progress=False)
    with pytest.raises(UnknownNameError, match="nations"):
        pipeline(dataset="natons", model="distmult", progress=False)
    with pytest.raises(InvalidInputError, match="training_kwargs"):
        pipeline(dataset="nations", training_kwargs={"lr": 0.1}, **FAST)
    with pytest.raises(InvalidInputError, match="stopper_kwargs"):
        pipeline(dataset="nations", stopper_kwargs={"patience": 2}, **FAST)
    with pytest.raises(InvalidInputError, match="unknown option.*bogus"):
        pipeline(dataset="nations", training_kwargs={"bogus": 1}, **FAST)
    with pytest.raises(InvalidInputError, match="unknown option.*patiense"):
        pipeline(dataset="nations", stopper="early", stopper_kwargs={"patiense": 2}, **FAST)
    with pytest.raises(InvalidInputError, match="split"):
        pipeline(dataset="nations", evaluation_split="train", **FAST)
    empty_test = Dataset.from_labeled_arrays([["a", "r", "b"]], [["b", "r", "a"]], None)
    with pytest.raises(InvalidInputError, match="no testing triples"):
        pipeline(dataset=empty_test, **FAST)


def test_model_from_other_dataset_is_rejected(nations_run):
    with pytest.raises(InvalidInputError, match="another dataset"):
        evaluate_model(nations_run.model, "kinships")
