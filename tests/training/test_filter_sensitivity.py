"""Filter-set sensitivity in validation loops: the early stopper and HPO record the validation metric filtered
with train + valid and, when asked, "filtered with test" too, and say which one selected the model. The values
are checked against ranks computed by brute force from the model's full score rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgeval.data import get_dataset
from kgeval.errors import InvalidInputError
from kgeval.models import from_embeddings
from kgeval.training import EarlyStopper


def _brute_mrr(model, triples, known) -> float:
    """Filtered realistic MRR from the full score rows (both sides), known answers removed by hand."""
    known = {tuple(map(int, x)) for x in known}
    rr = []
    with torch.no_grad():
        for h, r, t in np.asarray(triples):
            for side in ("tail", "head"):
                if side == "tail":
                    s = model.score_tails(torch.tensor([h]), torch.tensor([r]))[0].numpy()
                    true, other = t, [e for e in range(len(s)) if (h, r, e) in known and e != t]
                else:
                    s = model.score_heads(torch.tensor([r]), torch.tensor([t]))[0].numpy()
                    true, other = h, [e for e in range(len(s)) if (e, r, t) in known and e != h]
                keep = np.ones(len(s), bool)
                keep[other] = False
                keep[true] = False
                opt = 1 + np.sum(s[keep] > s[true])
                pes = opt + np.sum(s[keep] == s[true])
                rr.append(1 / ((opt + pes) / 2))
    return float(np.mean(rr))


@pytest.fixture(scope="module")
def nations():
    ds = get_dataset("nations")
    rng = np.random.default_rng(0)
    # rounded embeddings: exact ties between candidates
    model = from_embeddings("distmult", np.round(rng.normal(size=(14, 4))), np.round(rng.normal(size=(55, 4))))
    return ds, model


def test_stopper_records_both_filters_exactly(nations):
    ds, model = nations
    stopper = EarlyStopper(ds.validation, {"training": ds.training}, test_triples=ds.testing, frequency=1)
    stopper.evaluate(model, 1)
    (rec,) = stopper.records
    base = np.concatenate([ds.training, ds.validation])
    assert rec["filtered"] == pytest.approx(_brute_mrr(model, ds.validation, base), abs=1e-12)
    assert rec["filtered_with_test"] == pytest.approx(
        _brute_mrr(model, ds.validation, np.concatenate([base, ds.testing])), abs=1e-12)
    assert rec["filtered_with_test"] > rec["filtered"]  # more known answers removed: better ranks
    assert stopper.history == [(1, rec["filtered"])] and "training + validation" in stopper.selected_by


def test_select_mode_selects_by_the_value_filtered_with_test(nations):
    ds, model = nations
    stopper = EarlyStopper(ds.validation, [ds.training], test_triples=ds.testing, filtered_with_test="select")
    stopper.evaluate(model, 10)
    rec = stopper.records[0]
    assert stopper.best_metric == rec["filtered_with_test"] == stopper.best_metric_with_test
    assert "test triples" in stopper.selected_by and "LibKGE" in stopper.selected_by


def test_without_test_triples_nothing_more_is_computed_and_asking_is_refused(nations):
    ds, model = nations
    stopper = EarlyStopper(ds.validation, [ds.training])
    stopper.evaluate(model, 10)
    assert stopper.records[0]["filtered_with_test"] is None
    with pytest.raises(InvalidInputError, match="test_triples"):
        EarlyStopper(ds.validation, [ds.training], filtered_with_test="select")
    with pytest.raises(InvalidInputError, match="record"):
        EarlyStopper(ds.validation, [ds.training], test_triples=ds.testing, filtered_with_test="yes")


def test_pipeline_records_and_says_which_selected():
    from kgeval.workflow.pipeline import pipeline

    res = pipeline(dataset="nations", model="distmult", epochs=2, progress=False, stopper="early",
                   stopper_kwargs={"frequency": 1, "patience": 5, "filtered_with_test": "record"},
                   model_kwargs={"dim": 8})
    tr = res.training.to_dict()
    assert "training + validation" in tr["selected_by"]
    assert [r["epoch"] for r in tr["validation_records"]] == [1, 2]
    assert all(r["filtered_with_test"] >= r["filtered"] for r in tr["validation_records"])
    best = next(r for r in tr["validation_records"] if r["epoch"] == tr["best_epoch"])
    assert tr["best_metric"] == best["filtered"] and tr["best_metric_with_test"] == best["filtered_with_test"]


def test_hpo_trial_records_both_values():
    pytest.importorskip("optuna")
    from kgeval.workflow.hpo import hpo_pipeline

    res = hpo_pipeline(dataset="nations", model="distmult", epochs=2, n_trials=1, search_space={"model.dim": [8]},
                       sampler="random", pruner="none", storage="sqlite://", filtered_with_test=True)
    rec = res.study.trials[0].user_attrs["validation"]
    assert rec["filtered"] == res.study.trials[0].value
    assert rec["filtered_with_test"] >= rec["filtered"]
    assert "training + validation" in rec["selected_by"]
