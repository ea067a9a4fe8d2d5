"""The cache of what evaluations derive from their known triples (kgeval.evaluation.known_cache):
keyed by content, so an evaluation after a change gives what an uncached one gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

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
    # strided and int32 arrays are read in blocks (never copied whole): the same key
    assert known_cache.fingerprint([a[::-1], b.astype(np.int32)], ne, nr) == key
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
    # the distinct count, the second side's index and, where the id checks took the fingerprint
    # (compiled pass loaded), the first side's index
    assert known_cache.held()[0] == (3 if count_kernel.kernel_ready() else 2)
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
               {"restrict_relations": [0, 2]}, {"num_negatives": 7, "seed": 3}, {"entity_chunk_size": 16}):
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


def _kernel():
    count_kernel._load()
    if not count_kernel.kernel_ready():
        pytest.skip("numba is not importable")


@pytest.mark.parametrize("where", ["triples", "filter"])
@pytest.mark.parametrize("col, value, what", [(0, 60, "head"), (2, -1, "tail"), (1, 3, "relation"), (0, -5, "head")])
def test_the_id_check_in_the_fingerprint_pass_names_the_first_bad_triple(where, col, value, what):
    """The compiled pass that takes the fingerprint also checks the ids (one pass, not two): a bad id
    gets check_ids' error, naming the set, the id and the triple, from the evaluation too."""
    from kgeval.errors import InvalidInputError
    from kgeval.triples import check_ids

    _kernel()
    model, test, train = _case(seed=3)
    bad = (test if where == "triples" else train).copy()
    bad[7, col] = value
    sets = [("triples", bad), ("train", train)] if where == "triples" else [("triples", test), ("train", bad)]
    with pytest.raises(InvalidInputError) as plain:
        check_ids(*sets[0 if where == "triples" else 1], 60, 3)
    with pytest.raises(InvalidInputError) as fused:
        known_cache.checked_fingerprint(sets, 60, 3)
    assert str(fused.value) == str(plain.value)
    assert what in str(plain.value) and str(value) in str(plain.value)
    with pytest.raises(InvalidInputError, match=f"{what} id {value} of triple 7"):
        evaluate_ranks(model, sets[0][1], filter_triples={"train": sets[1][1]}, progress=False)


def test_the_fingerprint_pass_keys_as_the_plain_fingerprint_or_steps_aside():
    from kgeval.errors import InvalidInputError

    _kernel()
    _, test, train = _case(seed=4)
    named = [("triples", test), ("train", train), ("empty", np.zeros((0, 3), np.int64))]
    key = known_cache.checked_fingerprint(named, 60, 3)
    assert key == known_cache.fingerprint([a for _, a in named], 60, 3)
    assert key == (test.shape[0] + train.shape[0], 60, 3) + known_cache._fingerprint_numpy([test, train], 60, 3)
    # a strided view (pandas' column-major .values) is read in blocks: the key of its rows
    strided = [("triples", test), ("train", np.asfortranarray(train)), ("half", train[::2])]
    assert known_cache.checked_fingerprint(strided, 60, 3) == known_cache.fingerprint([test, train, train[::2]], 60, 3)
    bad = np.asfortranarray(train.copy())
    bad[11, 2] = 60
    with pytest.raises(InvalidInputError, match="tail id 60 of triple 11"):
        known_cache.checked_fingerprint([("triples", test), ("train", bad)], 60, 3)
    # unknown relations: not taken here (the caller checks the ids itself)
    assert known_cache.checked_fingerprint(named, 60, None) is None


def _sum_twins(ne, nr, k: int = 7):
    """Triples of codes ``{k, k}`` and ``{2k, 0}``: the same sum of codes (a key built on a linear mix
    of the codes would not tell them apart; the first finaliser until 2026-11-24, which began with a
    plain multiply, did not for ~1 in 30 small ``k``)."""
    return [np.array([[c // ne // nr, c // ne % nr, c % ne] for c in cs]) for cs in ((k, k), (2 * k, 0))]


def _python_mixes(k: int) -> tuple[int, int]:
    """The two finalisers of the module docstring on Python's unbounded ints, reduced mod 2^64: the
    published splitmix64 output function and MurmurHash3's fmix64, an independent reference."""
    m = (1 << 64) - 1
    z = (k + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    y = (k & m) ^ 0xC4CEB9FE1A85EC53
    y = ((y ^ (y >> 33)) * 0xFF51AFD7ED558CCD) & m
    y = ((y ^ (y >> 33)) * 0xC4CEB9FE1A85EC53) & m
    y ^= y >> 33
    return z, y


def test_fingerprint_sums_are_the_published_finalisers_in_both_implementations():
    """Both sums, compiled and numpy, equal splitmix64 / fmix64 computed on Python ints (mod 2^64),
    over codes from 0 to the int64 limit."""
    from kgeval.evaluation import count_kernel

    count_kernel._load()
    ne, nr = 3_037_000_499, 1  # codes up to ~9.2e18, just under 2^63
    rng = np.random.default_rng(3)
    trip = np.stack([rng.integers(0, ne, 500), np.zeros(500, np.int64), rng.integers(0, ne, 500)], 1)
    trip[:3] = [[0, 0, 0], [ne - 1, 0, ne - 1], [1, 0, 0]]
    codes = [(int(h) * nr + int(r)) * ne + int(t) for h, r, t in trip]
    sums = [sum(_python_mixes(c)[i] for c in codes) % (1 << 64) for i in (0, 1)]
    want = tuple(x - (1 << 64) if x >= 1 << 63 else x for x in sums)  # as int64
    assert known_cache._fingerprint_numpy([trip], ne, nr) == want
    assert count_kernel.fingerprint_codes([trip], ne, nr) == want


def test_fingerprint_sums_do_not_collide_on_equal_sums_of_codes():
    """No additive structure in either sum: ``{k, k}`` vs ``{2k, 0}`` for every k below 2^16 and
    10^5 random ``{a, b}`` vs ``{c, a + b - c}`` differ in both sums (a linear mix collides on all;
    the old first finaliser did on ~1 in 30 small k; a random function on ~2^-64 of them)."""
    k = np.arange(1, 1 << 16, dtype=np.int64)
    rng = np.random.default_rng(4)
    a, b, c = (rng.integers(0, 1 << 40, 100_000) for _ in range(3))
    d = a + b - c
    with np.errstate(over="ignore"):
        for mix in (known_cache.mix1, known_cache.mix2):
            assert not np.any(mix(k) + mix(k) == mix(2 * k) + mix(np.zeros_like(k)))
            assert not np.any(mix(a) + mix(b) == mix(c) + mix(d))


@pytest.mark.parametrize("kernel", ["numba", "torch"])
def test_other_layouts_of_the_same_triples_hit_and_lookalike_triples_miss(monkeypatch, kernel):
    """The second evaluation of one model: the same filter triples in another order, dtype or layout
    (Fortran order, strided slices, int32, a tensor, split into sets) are a hit, and give the first
    evaluation's results; other triples that keep what a weak key might look at (column sums, the
    set of ids per column, equal sums of codes) are a miss, and give what an
    uncached evaluation gives -- never the cached index or count of the first."""
    monkeypatch.setenv("KGEVAL_COUNT_KERNEL", kernel)
    model, test, train = _case(seed=5)
    options = ({}, {"num_negatives": 6, "seed": 1}, {"sides": "head", "restrict_entities": np.arange(0, 60, 3)},
               {"query_metrics_k": (1, 3)})
    same = {"reversed": train[::-1], "fortran": np.asfortranarray(train), "int32": train.astype(np.int32),
            "strided": np.repeat(train, 2, axis=0)[::2], "tensor": torch.as_tensor(train),
            "split": [train[:400], train[400:]], "dict": {"a": train[:10], "b": train[10:]}}
    swapped = train.copy()
    swapped[[0, 1], 2] = swapped[[1, 0], 2]
    shuffled = train.copy()
    shuffled[:, 2] = np.random.default_rng(0).permutation(shuffled[:, 2])
    twins, doubles = _sum_twins(60, 3)
    lookalike = {"mirrored": np.ascontiguousarray(train[:, ::-1]), "tails swapped": swapped,
                 "tails shuffled": shuffled, "sum twins": np.concatenate([train, twins]),
                 "sum doubles": np.concatenate([train, doubles])}
    for kw in options:
        base = _run(model, test, train, **kw)
        held = known_cache.held()
        for name, variant in same.items():
            assert _same(_run(model, test, variant, **kw), base), (kw, name)
            assert known_cache.held() == held, (kw, name)  # hits: nothing new kept
        for name, variant in lookalike.items():
            cached = _run(model, test, variant, **kw)
            monkeypatch.setenv("KGEVAL_FILTER_CACHE", "0")
            assert _same(cached, _run(model, test, np.array(variant), **kw)), (kw, name)
            monkeypatch.delenv("KGEVAL_FILTER_CACHE")
