"""A batch's queries are prepared on one thread when one-thread walkers score it and the preparation
is light (an OpenMP region would leave a spinning worker on a core the walkers need), on the
caller's threads otherwise (:meth:`kgeval.evaluation.scoring.SideScorer.prepared`)."""

from __future__ import annotations

import torch

from kgeval.evaluation import scoring
from kgeval.evaluation.scoring import SideScorer
from kgeval.models import get_model
from kgeval.ranks import SIDE_TAIL

NE, NR = 50, 3


def _side(model, threads=2):
    sc = SideScorer(model, SIDE_TAIL, num_entities=NE, device=torch.device("cpu"), allowed=None, threads=threads)
    seen = []
    real = sc.prepare

    def spy(*q):
        seen.append((int(q[0].shape[0]), torch.get_num_threads()))
        return real(*q)

    sc.prepare = spy
    return sc, seen


def test_light_preparations_run_on_one_thread_under_walkers_only():
    model = get_model("distmult", NE, NR, dim=8, seed=0).eval()
    assert model.light_prepare is True
    ent, rel = torch.arange(40) % NE, torch.arange(40) % NR
    with torch.inference_mode():
        ref = model.score_prepared(model.prepare_tails(ent, rel))
        sc, seen = _side(model)
        got = sc.prepared(ent, rel, walkers=2)
        assert torch.equal(model.score_prepared(got), ref)
        assert seen == [(40, 1)]  # declared light: one thread under walkers
        seen.clear()
        sc.prepared(ent, rel)  # one walker: the caller's threads
        assert seen == [(40, 2)]


def test_heavy_preparations_keep_the_callers_threads():
    """TuckER declares its preparation heavy (a core-tensor product): it keeps the caller's threads; so does
    a scorer that declares nothing. No timing decides it."""
    model = get_model("tucker", NE, NR, dim=8, seed=0).eval()
    assert model.light_prepare is False
    ent, rel = torch.arange(300) % NE, torch.arange(300) % NR
    sc, seen = _side(model)
    with torch.inference_mode():
        sc.prepared(ent, rel, walkers=2)
    assert seen == [(300, 2)]
    # one-thread callers are never switched
    sc1, seen1 = _side(get_model("distmult", NE, NR, dim=8, seed=0).eval(), threads=1)
    with torch.inference_mode():
        sc1.prepared(ent, rel, walkers=2)
    assert seen1 == [(300, 1)]


class _Prepared:
    """A plain scorer (no kgeval Model) offering prepared queries by duck typing."""

    num_entities, num_relations, light_prepare = NE, NR, True

    def __init__(self):
        self.m = get_model("distmult", NE, NR, dim=8, seed=0).eval()

    def score_tails(self, h, r, entities=None):
        return self.m.score_tails(h, r, entities=entities)

    def score_heads(self, r, t, entities=None):
        return self.m.score_heads(r, t, entities=entities)

    def prepare_tails(self, h, r):
        return self.m.prepare_tails(h, r)

    def prepare_heads(self, r, t):
        return self.m.prepare_heads(r, t)

    def score_prepared(self, prepared, entities=None, out=None):
        return self.m.score_prepared(prepared, entities, out)


class _OwnTails(_Prepared):
    def score_tails(self, h, r, entities=None):  # scores its own way: never bypassed by prepared queries
        return super().score_tails(h, r, entities=entities) + 1


def test_prepared_queries_are_duck_typed_and_never_bypass_an_override():
    from kgeval.models.base import Model

    sc = SideScorer(_Prepared(), SIDE_TAIL, num_entities=NE, device=torch.device("cpu"), allowed=None, threads=1)
    assert sc.prepare is not None and sc.light_prepare
    own = SideScorer(_OwnTails(), SIDE_TAIL, num_entities=NE, device=torch.device("cpu"), allowed=None, threads=1)
    assert own.prepare is None

    class Shifted(type(get_model("distmult", NE, NR, dim=8))):
        def score_tails(self, *a, **k):
            return Model.score_tails(self, *a, **k) + 1

    m = Shifted(NE, NR, dim=8)
    assert SideScorer(m, SIDE_TAIL, num_entities=NE, device=torch.device("cpu"), allowed=None, threads=1).prepare is None
    assert scoring.own_prepare(object(), "score_tails", "prepare_tails", "score_prepared") is None
