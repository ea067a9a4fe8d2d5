"""A batch's queries are prepared on one thread when one-thread walkers score it and the preparation
is light (an OpenMP region would leave a spinning worker on a core the walkers need), on the
caller's threads otherwise (:meth:`kgeval.evaluation.scoring.SideScorer.prepared`)."""

from __future__ import annotations

import time

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
    ent, rel = torch.arange(40) % NE, torch.arange(40) % NR
    with torch.inference_mode():
        ref = model.score_prepared(model.prepare_tails(ent, rel))
        sc, seen = _side(model)
        got = sc.prepared(ent, rel, walkers=2)
        assert torch.equal(model.score_prepared(got), ref)
        assert seen == [(40, 1), (40, 1)]  # the probe (all 40 rows here), then the batch: one thread
        seen.clear()
        sc.prepared(ent, rel, walkers=2)
        assert seen == [(40, 1)]  # probed once per side scorer
        seen.clear()
        sc.prepared(ent, rel)  # one walker: the caller's threads
        assert seen == [(40, 2)]


def test_heavy_preparations_keep_the_callers_threads(monkeypatch):
    """A preparation estimated above the limit (here: a sleep of 20 us per query) keeps two threads."""
    model = get_model("distmult", NE, NR, dim=8, seed=0).eval()
    ent, rel = torch.arange(300) % NE, torch.arange(300) % NR
    sc, seen = _side(model)
    real = sc.prepare

    def slow(*q):
        time.sleep(2e-5 * int(q[0].shape[0]))
        return real(*q)

    sc.prepare = slow
    with torch.inference_mode():
        sc.prepared(ent, rel, walkers=2)
    assert sc._prepare_row_s >= 2e-5
    assert seen == [(scoring._PROBE_ROWS, 1), (300, 2)]
    # one-thread callers are never switched
    sc1, seen1 = _side(model, threads=1)
    with torch.inference_mode():
        sc1.prepared(ent, rel, walkers=2)
    assert seen1 == [(300, 1)]
