"""KnownTriples: the filter sets built once and passed to every evaluation of a loop. Passing one gives
the rank tables and protocol of plain arrays, for every option that shapes the index, and reuses its
filter indexes and distinct count (checked by counting the builds), never a stale one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kgeval
from kgeval.errors import InvalidInputError
from kgeval.evaluation import KnownTriples, evaluate_ranks, inputs
from kgeval.models import from_embeddings


def _triples(rng, n, ne, nr):
    return np.stack([rng.integers(0, ne, n), rng.integers(0, nr, n), rng.integers(0, ne, n)], 1)


def _case(seed=0, ne=60, nr=3, n_test=80, n_train=900):
    rng = np.random.default_rng(seed)
    model = from_embeddings("distmult", rng.standard_normal((ne, 8), dtype=np.float32),
                            rng.standard_normal((nr, 8), dtype=np.float32))
    return model, _triples(rng, n_test, ne, nr), _triples(rng, n_train, ne, nr)


def _run(model, test, train, **kw):
    out = evaluate_ranks(model, test, filter_triples=train, progress=False, **kw)
    t = out.rank_table
    return (np.asarray(t.optimistic).copy(), np.asarray(t.pessimistic).copy(), np.asarray(t.num_candidates).copy(),
            out.protocol.num_known_triples, tuple(out.protocol.filter_sets))


def _same(x, y):
    return all(np.array_equal(a, b) for a, b in zip(x[:3], y[:3])) and x[3:] == y[3:]


@pytest.fixture
def builds(monkeypatch):
    """How many filter indexes and distinct counts were built (not taken from a KnownTriples)."""
    seen = {"index": 0, "distinct": 0}
    real_index, real_count = inputs.FilterIndex, inputs.count_distinct_triples

    def index(*a, **k):
        seen["index"] += 1
        return real_index(*a, **k)

    def count(*a, **k):
        seen["distinct"] += 1
        return real_count(*a, **k)

    monkeypatch.setattr(inputs, "FilterIndex", index)
    monkeypatch.setattr(inputs, "count_distinct_triples", count)
    return seen


@pytest.mark.parametrize("kw", [{}, {"sides": "head"}, {"restrict_entities": np.arange(0, 60, 2)},
                                {"restrict_relations": [0, 2]}, {"num_negatives": 7, "seed": 3},
                                {"entity_chunk_size": 16}, {"query_metrics_k": (1, 3)}, {"filtered": False}])
def test_a_known_triples_gives_the_results_of_plain_arrays_and_builds_once(kw, builds):
    model, test, train = _case(seed=1)
    plain = _run(model, test, {"train": train}, **kw)
    known = KnownTriples({"train": train})
    builds.update(index=0, distinct=0)
    first = _run(model, test, known, **kw)
    after_first = dict(builds)
    for _ in range(2):
        assert _same(_run(model, test, known, **kw), plain), kw
    assert _same(first, plain)
    assert builds == after_first  # every later evaluation reused the first's indexes and count
    filtered = kw.get("filtered", True)
    sides = 1 if "sides" in kw else 2
    assert after_first == ({"index": sides, "distinct": 1} if filtered else {"index": 0, "distinct": 0})


def test_other_evaluation_triples_or_devices_get_their_own_index(builds):
    model, test, train = _case(seed=2)
    known = KnownTriples(train)
    _run(model, test, known)
    n = dict(builds)
    assert _same(_run(model, test[:50], known), _run(model, test[:50], train))
    assert builds["index"] > n["index"] and builds["distinct"] > n["distinct"]
    changed = test.copy()
    changed[0, 2] = (changed[0, 2] + 1) % 60  # the same array shape, other content: a new entry
    assert _same(_run(model, changed, known), _run(model, changed, train))


def test_the_sets_are_copied_so_a_later_change_cannot_make_them_stale():
    model, test, train = _case(seed=3)
    known = KnownTriples([train[:400], train[400:]])
    before = _run(model, test, known)
    train[:40, :2] = test[:40, :2]  # the caller's array changes: the KnownTriples keeps what it was given
    assert _same(_run(model, test, known), before)
    assert not _same(_run(model, test, train), before)  # the change matters for plain arrays
    with pytest.raises(ValueError):
        known.sets[0][1][0, 0] = 1  # read-only
    shared = KnownTriples(train, copy=False)  # used as given: no second copy of a huge set
    assert np.shares_memory(shared.sets[0][1], train) and _same(_run(model, test, shared), _run(model, test, train))


def test_known_triples_accepts_every_filter_triples_form_and_names_bad_input():
    _, _, train = _case(seed=4)
    for form in (train, torch.as_tensor(train), [train[:10], train[10:]], {"a": train}, train.tolist()):
        assert KnownTriples(form).num_rows == train.shape[0]
    k = KnownTriples({"train": train, "valid": train[:5]})
    assert [name for name, _ in k.sets] == ["train", "valid"] and KnownTriples(k).sets is k.sets
    assert "train: 900" in repr(k)
    assert [a.shape[0] for a in k] == [900, 5]  # iterates like a list of filter arrays
    with pytest.raises(InvalidInputError):
        KnownTriples(np.zeros((3, 2), dtype=np.int64))
    model, test, _ = _case(seed=4)
    bad = KnownTriples(np.array([[0, 0, 99]]))
    with pytest.raises(InvalidInputError, match="out of range|99"):
        evaluate_ranks(model, test, filter_triples=bad, progress=False)
    assert kgeval.KnownTriples is KnownTriples
