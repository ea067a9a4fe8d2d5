"""The cache of what evaluations derive from their known triples (kgeval.evaluation.known_cache):
keyed by content, so an evaluation after a change gives what an uncached one gives."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval.evaluation import count_kernel, evaluate_ranks, known_cache
from kgeval.models import from_embeddings


@pytest.fixture(autouse=True)
def _fresh_cache():
    known_cache.clear()
    yield
    known_cache.clear()


def _triples(rng, n, ne, nr):
    return np.stack([rng.integers(0, ne, n), rng.integers(0, nr, n), rng.integers(0, ne, n)], 1)


def test_fingerprint_is_a_multiset_key_and_the_kernel_computes_numpys_bit_for_bit(monkeypatch):
    monkeypatch.setattr(known_cache, "_BLOCK", 1000)  # numpy's blocks: several per set, one partial
    count_kernel._load()
    if not count_kernel.kernel_ready():
        pytest.skip("numba is not importable")
    rng = np.random.default_rng(0)
    ne, nr = 300, 7
    a, b = _triples(rng, 5000, ne, nr), _triples(rng, 1234, ne, nr)
    key = known_cache.fingerprint([a, b], ne, nr)
    assert key == (6234, ne, nr) + known_cache._fingerprint_numpy([a, b], ne, nr)
    # rows and sets in another order, split otherwise: the same multiset, the same key
    both = np.concatenate([a, b])[rng.permutation(6234)]
    assert known_cache.fingerprint([both[:10], both[10:], both[:0]], ne, nr) == key
    # two triples swapping tails keep every column sum and code sum, and still change the key
    c = a.copy()
    i, j = np.flatnonzero(c[:, 2] != c[0, 2])[:1].tolist() + [0]
    c[[i, j], 2] = c[[j, i], 2]
    assert (c.sum(0) == a.sum(0)).all()
    assert known_cache.fingerprint([c, b], ne, nr) != key
    # one triple repeated is another multiset (the count differs), one id changed another key
    assert known_cache.fingerprint([a, b, a[:1]], ne, nr) != key
    d = a.copy()
    d[17, 1] = (d[17, 1] + 1) % nr
    assert known_cache.fingerprint([d, b], ne, nr)[3:] != key[3:]
    # the same ids of another graph size code differently
    assert known_cache.fingerprint([a, b], ne + 1, nr) != key


def test_no_key_when_codes_overflow_or_the_cache_is_off(monkeypatch):
    t = np.array([[0, 0, 1]])
    assert known_cache.fingerprint([t], 3_000_000_000, 2) is None  # (h·R + r)·E + t can pass 2^63
    monkeypatch.setenv("KGEVAL_FILTER_CACHE", "0")
    assert known_cache.fingerprint([t], 10, 2) is None


def _case(seed=0, ne=60, nr=3, n_test=80, n_train=900):
    rng = np.random.default_rng(seed)
    model = from_embeddings("distmult", rng.standard_normal((ne, 8), dtype=np.float32),
                            rng.standard_normal((nr, 8), dtype=np.float32))
    return model, _triples(rng, n_test, ne, nr), _triples(rng, n_train, ne, nr)


def _run(model, test, train, **kw):
    out = evaluate_ranks(model, test, filter_triples=train, progress=False, **kw)
    t = out.rank_table
    return (np.asarray(t.optimistic).copy(), np.asarray(t.pessimistic).copy(), np.asarray(t.num_candidates).copy(),
            out.protocol.num_known_triples)


def _same(x, y):
    return all(np.array_equal(a, b) for a, b in zip(x[:3], y[:3])) and x[3] == y[3]


@pytest.mark.parametrize("kernel", ["numba", "torch"])
def test_an_array_changed_in_place_is_evaluated_as_changed(monkeypatch, kernel):
    """The filter array is the same object with other content: the cached index and count of the
    first evaluation must not be used (they would silently filter the old triples)."""
    monkeypatch.setenv("KGEVAL_COUNT_KERNEL", kernel)
    model, test, train = _case()
    first = _run(model, test, train)
    assert known_cache.held()[0] == 2  # the distinct count and the second side's index
    assert _same(_run(model, test, train), first)  # a hit: the same answer
    # make some test queries' known answers change: training triples get the heads / relations of
    # test triples (tails kept), and one training triple is dropped in favour of a duplicate
    train[:40, :2] = test[:40, :2]
    train[-1] = train[0]
    again = _run(model, test, train)
    monkeypatch.setenv("KGEVAL_FILTER_CACHE", "0")
    uncached = _run(model, test, train.copy())
    assert _same(again, uncached)
    assert not _same(again, first)  # the change mattered: a stale entry would have been caught


def test_hits_give_the_uncached_results_for_every_option_that_keys_the_index(monkeypatch):
    model, test, train = _case(seed=1)
    for kw in ({}, {"sides": "head"}, {"sides": "tail"}, {"restrict_entities": np.arange(0, 60, 2)},
               {"restrict_relations": [0, 2]}):
        cached = [_run(model, test, train, **kw) for _ in range(2)]
        monkeypatch.setenv("KGEVAL_FILTER_CACHE", "0")
        plain = _run(model, test, train, **kw)
        monkeypatch.delenv("KGEVAL_FILTER_CACHE")
        assert _same(cached[0], plain) and _same(cached[1], plain), kw
    # other test triples, same filter: the count is shared, the index is another entry
    n = known_cache.held()[0]
    _run(model, test[:50], train)
    assert known_cache.held()[0] > n


def test_the_cache_is_bounded_and_can_be_off(monkeypatch):
    model, test, train = _case(seed=2)
    for i in range(known_cache.MAX_ENTRIES + 3):
        _run(model, test, np.concatenate([train, [[i, 0, i]]]))
    assert known_cache.held()[0] == known_cache.MAX_ENTRIES
    known_cache.clear()
    monkeypatch.setattr(known_cache, "MAX_PAIRS", 10)  # every index holds more pairs: only counts kept
    _run(model, test, train)
    assert known_cache.held() == (1, 0)
    known_cache.clear()
    monkeypatch.setenv("KGEVAL_FILTER_CACHE", "0")
    _run(model, test, train)
    assert known_cache.held() == (0, 0)
