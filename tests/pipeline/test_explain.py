"""kgeval.explain on two evaluations of one model (issue 28's acceptance case): realistic vs LibKGE's rounded
mean rank, filtered vs filtered with test, unseen triples kept vs dropped. Each effect is checked against an
independent evaluation or a hand computation; the effects and the interaction add up to the total."""

from __future__ import annotations

import numpy as np
import pytest

import kgeval
from kgeval.data import Dataset
from kgeval.data.unseen import unseen_mask
from kgeval.models import from_embeddings

M = ("mrr", "mr", "hits@1", "hits@3", "hits@10")


def _hand(table, rank_type="realistic"):
    lo, hi = table.optimistic.astype(float), table.pessimistic.astype(float)
    r = (lo + hi) / 2 if rank_type == "realistic" else lo + np.floor((hi - lo + 1) / 2)
    return {"mrr": np.mean(1 / r), "mr": np.mean(r), "hits@1": np.mean(r <= 1), "hits@3": np.mean(r <= 3),
            "hits@10": np.mean(r <= 10)}


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(7)
    lab = lambda a: [(f"e{h:02d}", f"r{r}", f"e{t:02d}") for h, r, t in a]  # noqa: E731
    train = rng.integers(0, 14, (150, 3)) % [14, 3, 14]
    valid = np.column_stack([rng.integers(0, 18, 60), rng.integers(0, 3, 60), rng.integers(0, 18, 60)])
    test = np.column_stack([rng.integers(0, 16, 60), rng.integers(0, 3, 60), rng.integers(0, 16, 60)])
    ds = Dataset.from_labeled_arrays(lab(train), lab(valid), lab(test), name="tiny")
    # integer embeddings in {-1, 0, 1}: DistMult scores with many exact ties
    model = from_embeddings("distmult", rng.integers(-1, 2, (ds.num_entities, 3)).astype(float),
                            rng.integers(-1, 2, (ds.num_relations, 3)).astype(float))
    mask = unseen_mask(ds.training, ds.validation)
    assert 0 < mask.sum() < len(mask)
    return ds, model, mask


def _eval(model, triples, filters, **kw):
    return kgeval.evaluate(model, triples, filter_triples=filters, progress=False, **kw)


def test_rank_type_alone_is_exact(setup):
    ds, model, _ = setup
    a = _eval(model, ds.validation, {"training": ds.training})
    b = _eval(model, ds.validation, {"training": ds.training})
    b.protocol["headline_rank_type"] = "rounded_mean"  # what a preset's protocol record states
    e = kgeval.explain(a, b)
    assert e.comparable is True and [d.facet for d in e.differences] == ["rank_type"]
    want = {m: _hand(a.rank_table, "rounded_mean")[m] - _hand(a.rank_table)[m] for m in M}
    assert e.effects.single["rank_type"] == pytest.approx(want, abs=1e-12)
    assert e.effects.total == pytest.approx(want, abs=1e-12)
    assert e.effects.unexplained == pytest.approx(dict.fromkeys(M, 0.0), abs=1e-12)
    assert want["mrr"] != 0  # the ties are there


def test_filter_with_test_alone_is_exact(setup):
    ds, model, _ = setup
    a = _eval(model, ds.validation, {"training": ds.training})
    b = _eval(model, ds.validation, {"training": ds.training, "testing": ds.testing})
    e = kgeval.explain(a, b, model=model, dataset=ds)
    assert [d.facet for d in e.differences] == ["filter"]
    want = {m: _hand(b.rank_table)[m] - _hand(a.rank_table)[m] for m in M}
    assert e.effects.single["filter"] == pytest.approx(want, abs=1e-12)
    assert e.effects.unexplained == pytest.approx(dict.fromkeys(M, 0.0), abs=1e-12)
    assert want["mrr"] > 0  # filtering more answers only lowers ranks
    # without the model the effect is said to be unmeasurable, not guessed
    e2 = kgeval.explain(a, b)
    assert e2.effects.single == {} and "model" in e2.not_measured["filter"]


def test_all_three_differences_add_up(setup):
    ds, model, mask = setup
    a = _eval(model, ds.validation, {"training": ds.training})
    b = _eval(model, ds.validation, {"training": ds.training, "testing": ds.testing}, drop_unseen=True)
    b.protocol["headline_rank_type"] = "rounded_mean"
    e = kgeval.explain(a, b, model=model, dataset=ds)
    assert e.comparable is True and "unseen" in e.verdict
    assert [d.facet for d in e.differences] == ["rank_type", "filter", "unseen"]
    base = _hand(a.rank_table)
    # unseen alone: the kept triples ranked with the dropped ones still filtered (an independent evaluation)
    kept = _eval(model, ds.validation[~mask], {"training": ds.training, "dropped": ds.validation[mask]})
    # together: that evaluation with the test triples filtered too, read as rounded mean ranks
    joint = _eval(model, ds.validation[~mask], {"training": ds.training, "testing": ds.testing,
                                                "dropped": ds.validation[mask]})
    for m in M:
        assert e.effects.single["unseen"][m] == pytest.approx(_hand(kept.rank_table)[m] - base[m], abs=1e-12)
        assert e.effects.joint[m] == pytest.approx(_hand(joint.rank_table, "rounded_mean")[m] - base[m], abs=1e-12)
        total = _hand(b.rank_table, "rounded_mean")[m] - base[m]
        assert e.effects.total[m] == pytest.approx(total, abs=1e-12)
        single = sum(e.effects.single[f][m] for f in ("rank_type", "filter", "unseen"))
        assert single + e.effects.interaction[m] + e.effects.unexplained[m] == pytest.approx(total, abs=1e-12)
    text = str(e)
    for words in ("rank type", "filter sets", "unseen entities", "interaction", "unexplained"):
        assert words in text


def test_dropped_against_kept_is_measured_from_the_kept_table(setup):
    ds, model, mask = setup
    a = _eval(model, ds.validation, {"training": ds.training}, drop_unseen=True)
    b = _eval(model, ds.validation, {"training": ds.training})
    e = kgeval.explain(a, b, dataset=ds)
    assert e.measured_from == "B"
    kept_rows = _hand(b.rank_table.subset(~mask[b.rank_table.triple_index]))
    for m in M:  # B's setting (keep) minus A's (drop), seen from B's table
        assert e.effects.single["unseen"][m] == pytest.approx(_hand(b.rank_table)[m] - kept_rows[m], abs=1e-12)


def test_other_triples_are_not_comparable_first(setup):
    ds, model, _ = setup
    a = _eval(model, ds.validation, {"training": ds.training})
    b = _eval(model, ds.testing, {"training": ds.training, "validation": ds.validation})
    e = kgeval.explain(a, b)
    assert e.comparable is False and e.effects is None
    assert str(e).splitlines()[2].startswith("not comparable: different test triples")


def test_published_number_and_preset(setup):
    ds, model, _ = setup
    a = _eval(model, ds.validation, {"training": ds.training})
    paper = {"name": "paper", "mrr": 0.3, "protocol": {"rank_type": "pessimistic", "sides": ["tail"]}}
    e = kgeval.explain(a, paper)
    assert [d.facet for d in e.differences] == ["rank_type", "sides"]
    tail = a.rank_table.select_side("tail")
    assert e.effects.joint["mrr"] == pytest.approx(np.mean(1 / tail.pessimistic) - _hand(a.rank_table)["mrr"])
    assert e.effects.total["mrr"] == pytest.approx(0.3 - _hand(a.rank_table)["mrr"])
    e = kgeval.explain(a, "libkge")
    assert {d.facet for d in e.differences} >= {"rank_type", "ties"}
    with pytest.raises(kgeval.UnknownNameError, match="libkge"):
        kgeval.explain(a, "libkg")
