"""The filter index restricted to the evaluated queries, and its O(n) membership test, against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval.filtering import FilterIndex, member_positions, query_keys, sorted_unique
from kgeval.ranks import SIDE_HEAD, SIDE_TAIL


@pytest.mark.parametrize("key_range", [50, 10**6, 10**12, 2**62])
def test_member_positions_equal_isin(key_range):
    """Ranges far beyond the hashed table (2**22) collide in it: the exact second stage must sort them out."""
    rng = np.random.default_rng(key_range % 1000)
    values = rng.integers(0, key_range, size=20_000, dtype=np.int64)
    wanted = sorted_unique(np.concatenate([rng.integers(0, key_range, 300, dtype=np.int64), values[:200]]))
    colliding = (wanted[:50] + (1 << 22)) % key_range  # same table slot as a wanted key, not wanted itself
    values = np.concatenate([values, colliding])
    np.testing.assert_array_equal(member_positions(values, wanted), np.flatnonzero(np.isin(values, wanted)))


@pytest.mark.parametrize("side", [SIDE_HEAD, SIDE_TAIL])
@pytest.mark.parametrize("num_entities", [50, 10**6, 2**40])
def test_member_rows_kernel_equals_isin_on_the_query_keys(side, num_entities):
    """The compiled one-pass membership of the triples' query keys (no n-long temporaries) finds the
    rows np.isin finds, with keys that collide in the hashed pre-filter; it declines what its
    compiled signature does not take (int32 triples, a non-contiguous view)."""
    from kgeval import filtering

    assert filtering.load_kernels()
    rng = np.random.default_rng(num_entities % 997 + side)
    R = 7
    triples = rng.integers(0, [num_entities, R, num_entities], size=(20_000, 3), dtype=np.int64)
    keys = query_keys(triples, side, R)
    wanted = sorted_unique(np.concatenate([keys[:300], rng.integers(0, num_entities * R, 200, dtype=np.int64)]))
    colliding = triples[:50].copy()  # same table slot as a wanted key, not wanted itself (most of them)
    col = 0 if side == SIDE_TAIL else 2
    colliding[:, col] = (colliding[:, col] + (1 << 22)) % num_entities
    triples = np.concatenate([triples, colliding])
    keys = query_keys(triples, side, R)
    got = filtering.member_rows(triples, col, R, wanted)
    np.testing.assert_array_equal(got, np.flatnonzero(np.isin(keys, wanted)))
    assert filtering.member_rows(triples.astype(np.int32), col, R, wanted) is None
    assert filtering.member_rows(np.asfortranarray(triples), col, R, wanted) is None


@pytest.mark.parametrize("side", [SIDE_HEAD, SIDE_TAIL])
def test_index_is_the_same_with_and_without_the_compiled_membership(side, monkeypatch):
    from kgeval import filtering

    assert filtering.load_kernels()
    rng = np.random.default_rng(side + 11)
    known = rng.integers(0, [300, 5, 300], size=(50_000, 3), dtype=np.int64)
    queries = query_keys(rng.integers(0, [300, 5, 300], size=(400, 3)), side, 5)
    a = FilterIndex(known, side=side, num_entities=300, num_relations=5, queries=queries)
    monkeypatch.setattr(filtering, "member_rows", lambda *args: None)
    b = FilterIndex(known, side=side, num_entities=300, num_relations=5, queries=queries)
    assert a.num_pairs == b.num_pairs > 0
    for name in ("keys", "indptr", "answers"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist()



@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("side", [SIDE_HEAD, SIDE_TAIL])
def test_index_of_several_sets_read_in_place_equals_the_index_of_their_concatenation(side, compiled, monkeypatch):
    """The evaluator hands the evaluation triples and each filter set as they came (no 10⁶-row copy):
    overlapping sets, an empty one, one non-contiguous (the compiled pass then falls back per array)."""
    from kgeval import filtering

    assert filtering.load_kernels()
    if not compiled:
        monkeypatch.setattr(filtering, "member_rows", lambda *args: None)
    rng = np.random.default_rng(side + 21)
    E, R = 200, 7
    sets = [rng.integers(0, [E, R, E], size=(n, 3), dtype=np.int64) for n in (300, 20_000, 0)]
    sets.append(np.asfortranarray(np.concatenate([sets[0][:100], rng.integers(0, [E, R, E], size=(900, 3))])))
    queries = query_keys(sets[0], side, R)
    whole = np.concatenate(sets)
    for q in (queries, None):
        a = FilterIndex(sets, side=side, num_entities=E, num_relations=R, queries=q)
        b = FilterIndex(whole, side=side, num_entities=E, num_relations=R, queries=q)
        assert a.num_pairs == b.num_pairs > 0
        for name in ("keys", "indptr", "answers"):
            assert getattr(a, name).tolist() == getattr(b, name).tolist()
    brute = _brute_answers(whole, side, R)
    part = FilterIndex(sets, side=side, num_entities=E, num_relations=R, queries=queries)
    for key in np.unique(queries):
        assert part.answers_of(int(key)).tolist() == sorted(brute[int(key)])

def test_member_positions_empty_inputs():
    got = member_positions(np.arange(5, dtype=np.int64), np.zeros(0, np.int64))
    assert got.tolist() == [] and got.dtype == np.int64
    assert member_positions(np.zeros(0, np.int64), np.arange(3, dtype=np.int64)).shape == (0,)


def test_sorted_unique_matches_numpy_for_int_and_other_dtypes():
    rng = np.random.default_rng(1)
    for values in (rng.integers(-5, 5, 1000), rng.integers(0, 3, 1000).astype(np.int32),
                   rng.integers(0, 9, 100).astype(np.uint16), np.zeros(0, np.int64)):
        np.testing.assert_array_equal(sorted_unique(values), np.unique(values))


@pytest.mark.parametrize("side", [SIDE_HEAD, SIDE_TAIL])
def test_index_restricted_to_queries_answers_like_the_full_one(side):
    rng = np.random.default_rng(side + 7)
    E, R = 40, 6
    known = rng.integers(0, [E, R, E], size=(3000, 3))
    evaluated = rng.integers(0, [E, R, E], size=(50, 3))
    keys = query_keys(evaluated, side, R)
    full = FilterIndex(known, side=side, num_entities=E, num_relations=R)
    part = FilterIndex(known, side=side, num_entities=E, num_relations=R, queries=keys)
    assert part.num_pairs < full.num_pairs  # it really is smaller
    for key in np.unique(keys):
        np.testing.assert_array_equal(part.answers_of(int(key)), full.answers_of(int(key)))
    other = np.setdiff1d(query_keys(known, side, R), keys)[:5]
    assert all(part.answers_of(int(k)).size == 0 for k in other)  # not asked for, not indexed


def _brute_answers(known, side, R):
    out = {}
    for h, r, t in known.tolist():
        key, ans = (h * R + r, t) if side == SIDE_TAIL else (t * R + r, h)
        out.setdefault(key, set()).add(ans)
    return out


@pytest.mark.parametrize("side", [SIDE_HEAD, SIDE_TAIL])
@pytest.mark.parametrize("E, R", [(40, 6), (87_143_637, 1_315), (3_000_000_000, 7)])
def test_index_answers_equal_brute_force_even_where_the_combined_code_overflows(side, E, R):
    """E^2 x R >= 2^63 (WikiKG90M-sized: 87M entities, 1,315 relations) would wrap the combined
    ``key * E + answer`` code around int64 and pair answers with other queries."""
    rng = np.random.default_rng(E % 97 + side)
    ids = np.concatenate([rng.integers(0, E, 40), [E - 1, E - 2, 0]])  # the largest ids too
    known = np.stack([rng.choice(ids, 400), rng.integers(0, R, 400), rng.choice(ids, 400)], 1)
    known[:, 1][:3] = R - 1
    known = np.concatenate([known, known[:50]])  # duplicates
    index = FilterIndex(known, side=side, num_entities=E, num_relations=R)
    brute = _brute_answers(known, side, R)
    assert index.num_pairs == sum(len(v) for v in brute.values())
    for key, answers in brute.items():
        assert index.answers_of(key).tolist() == sorted(answers)


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("E, R", [(40, 6), (87_143_637, 1_315), (3_000_000_000, 7)])
def test_distinct_triples_count_equals_numpy(E, R, kernel, monkeypatch):
    """With the compiled hash table (kernel loaded) and with the sort it falls back to."""
    import threading

    from kgeval import filtering
    from kgeval.evaluation import count_kernel
    from kgeval.filtering import count_distinct_triples

    if kernel:
        count_kernel._load()  # the evaluator's kernel loads the filter index's with it
        assert count_kernel.kernel_ready() and filtering._READY.is_set()
    else:
        monkeypatch.setattr(filtering, "_READY", threading.Event())  # as if not loaded

    rng = np.random.default_rng(5)
    ids = np.concatenate([rng.integers(0, E, 30), [E - 1]])
    known = np.stack([rng.choice(ids, 3000), rng.integers(0, R, 3000), rng.choice(ids, 3000)], 1)
    expected = np.unique(known, axis=0).shape[0]
    assert count_distinct_triples(known, E, R) == expected
    assert count_distinct_triples([known[:1000], known[1000:], known[:7]], E, R) == expected
    assert count_distinct_triples(known[:0], E, R) == 0
    assert count_distinct_triples([known[:0], known[:0]], E, R) == 0


@pytest.mark.parametrize("E, R", [(40, 6), (87_143_637, 1_315), (1_000_000_000, 30)])
def test_distinct_triples_sorted_in_relation_blocks_without_concatenating(E, R, monkeypatch):
    """Without the kernel, or where the code does not fit int64 (WikiKG90M-sized: relations in 2
    blocks; 10^9 entities: blocks of 9 relations), the sets are read in place in small steps and never
    stacked: the count equals a set of tuples for sets with repeats inside and across them, any layout."""
    import threading

    from kgeval import filtering as fi

    monkeypatch.setattr(fi, "_READY", threading.Event())  # as if not loaded

    def no_stacking(sets):
        raise AssertionError("the known sets were concatenated")

    monkeypatch.setattr(fi, "_stacked", no_stacking)
    rng = np.random.default_rng(11)
    for step in (1, 7, 1 << 18):
        monkeypatch.setattr(fi, "_SORT_ROWS", step)
        ids = np.concatenate([rng.integers(0, E, 25), [0, E - 1]])
        known = np.stack([rng.choice(ids, 400), rng.choice([0, R - 1, *rng.integers(0, R, 5)], 400), rng.choice(ids, 400)], 1)
        sets = [known[:150], np.asfortranarray(known[100:300]).astype(np.int64), known[:0], known[250:][::-1], known[:9]]
        expected = len({tuple(x) for a in sets for x in a.tolist()})
        assert fi.count_distinct_triples(sets, E, R) == expected


def test_distinct_triples_whose_full_codes_wrap_around_stay_apart():
    """E = 2^30, R = 30: ``(h * R + r) * E + t`` wraps modulo 2^64 and two different triples whose
    ``h * R + r`` differ by 2^34 would share one code (counted once); blocks of 7 relations keep them apart."""
    from kgeval.filtering import count_distinct_triples

    E, R = 1 << 30, 30
    k = 5 + (1 << 34)
    twins = np.array([[0, 5, 123], [k // R, k % R, 123]])
    assert len(set(((twins[:, 0] * R + twins[:, 1]) * E + twins[:, 2]).tolist())) == 1  # int64: one code for two
    assert count_distinct_triples(twins, E, R) == 2
    assert count_distinct_triples([twins, twins[::-1]], E, R) == 2


@pytest.mark.parametrize("n", [1, 4095, 4096, 70_000, 1_200_000])
def test_distinct_triples_count_in_buckets_equals_numpy(n):
    """The compiled count partitions the codes into up to 2^8 hashed buckets (from 4,096 triples on):
    sizes around the first split, a skewed set (one triple repeated a third of the time, piling up in
    one bucket) and many buckets, with the largest ids."""
    from kgeval import filtering
    from kgeval.filtering import count_distinct_triples

    filtering.load_kernels()
    E, R = 5_000, 40
    rng = np.random.default_rng(n)
    known = np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n)], 1)
    known[: n // 3] = [E - 1, R - 1, E - 1]
    known[n // 3 : n // 2] = known[n // 2 : n // 2 + (n // 2 - n // 3)]  # more repeats, apart
    expected = np.unique(known, axis=0).shape[0]
    assert filtering.count_distinct_codes([known], E, R) == expected
    assert count_distinct_triples(known, E, R) == expected
    # several sets counted together, read in place: repeats across sets, an empty and a strided one
    parts = [known[: n // 4], known[:0], np.asfortranarray(known[n // 4 : n // 2]), known[n // 2 :]]
    assert filtering.count_distinct_codes(parts, E, R) == expected
    assert count_distinct_triples(parts, E, R) == expected
    assert count_distinct_triples([known, known[: n // 2]], E, R) == expected
