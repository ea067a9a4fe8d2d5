"""Batches of several row blocks (:func:`kgeval.evaluation.blocks.count_chunks` ``row_block``): one walk
over (row block, column chunk) parts gives the rank table of whole rows, filtered, with several tasks
per query, through the torch counting path, and when true scores are re-ranked exactly."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval.evaluation import Tuning, evaluate_ranks, full
from kgeval.models import get_model

NE, NR, N = 5000, 3, 9000  # rows of 5,000 > 4,096 columns (CHUNKED): chunks; 9,000 tasks: 3 row blocks of 3,000
#: rows of more than 4,096 columns are chunked, in row blocks of about 4,096 queries
CHUNKED = Tuning(cpu_whole_cols=4096, cpu_block_rows=4096, row_blocks=4)
#: rows of up to 16,384 columns whole (the reference)
WHOLE = Tuning(cpu_whole_cols=1 << 14)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    test = np.stack([rng.integers(0, NE, N), rng.integers(0, NR, N), rng.integers(0, NE, N)], 1)
    test[:600, :2] = test[600:1200, :2]  # queries with two tasks each, in both sides' batches
    train = np.stack([rng.integers(0, 40, 60_000), rng.integers(0, NR, 60_000), rng.integers(0, NE, 60_000)], 1)
    train[::2, 0] = rng.integers(0, NE, 30_000)  # dense and sparse known answers
    model = get_model("distmult", NE, NR, dim=16, seed=2).eval()
    return model, test, np.concatenate([train, test[:50]])


def _table(out):
    t = out.rank_table
    return {a: np.asarray(getattr(t, a)) for a in ("optimistic", "pessimistic", "num_candidates", "triple_index")}


def _whole(model, test, train, monkeypatch):
    with monkeypatch.context() as m:  # whole rows (5,000 <= 16,384 columns)
        calls, count_chunks = [], full.count_chunks
        m.setattr(full, "count_chunks", lambda *a, **k: calls.append(1) or count_chunks(*a, **k))
        out = evaluate_ranks(model, test, filter_triples=train, progress=False, tuning=WHOLE)
        assert not calls and out.protocol.get("entity_chunk_size") is None
        return _table(out)


def _spy(monkeypatch):
    seen = []
    count_chunks = full.count_chunks

    def spy(ctx, sc, b, *rest, row_block=None, **kw):
        seen.append((b.ent.shape[0], row_block))
        return count_chunks(ctx, sc, b, *rest, row_block=row_block, **kw)

    monkeypatch.setattr(full, "count_chunks", spy)
    return seen


@pytest.mark.parametrize("counter", ["numba", "torch"])
def test_row_blocks_equal_whole_rows(data, monkeypatch, counter):
    model, test, train = data
    whole = _whole(model, test, train, monkeypatch)
    seen = _spy(monkeypatch)
    out = evaluate_ranks(model, test, filter_triples=train, progress=False, tuning=CHUNKED.replace(kernel=counter))
    blocks = [(rows, rb) for rows, rb in seen if rb is not None]
    assert len(blocks) == 2 and all(rb == 3000 and -(-rows // rb) == 3 for rows, rb in blocks), seen
    got = _table(out)
    for a in whole:
        assert np.array_equal(got[a], whole[a]), a


def test_rerank_of_a_whole_batch_goes_by_row_block(data, monkeypatch):
    """Every pass-1 true score off by one ulp: every query is re-ranked exactly, in groups of at most
    one row block, and the table is still that of whole rows."""
    model, test, train = data
    whole = _whole(model, test, train, monkeypatch)
    answer_scores = full.answer_scores

    def off(*a, **k):
        t = answer_scores(*a, **k)
        return t.new_tensor(np.nextafter(t.numpy(), np.float32(np.inf)))

    monkeypatch.setattr(full, "answer_scores", off)
    seen = _spy(monkeypatch)
    out = evaluate_ranks(model, test, filter_triples=train, progress=False, tuning=CHUNKED)
    exact = [rows for rows, rb in seen if rb is None]
    assert exact and max(exact) <= 3000, seen  # re-ranked in groups no taller than a row block
    got = _table(out)
    for a in whole:
        assert np.array_equal(got[a], whole[a]), a


@pytest.mark.parametrize("seed", range(6))
def test_rank_table_order_of_triple_indices(seed):
    """_index_order (a side's tasks back in triple order) equals a stable argsort: distinct indices (the scatter),
    repeated ones and sparse ones (the sort), empty."""
    from kgeval.evaluation import _index_order

    rng = np.random.default_rng(seed)
    upper = int(rng.integers(1, 3000))
    cases = [rng.permutation(upper), rng.choice(upper, size=max(1, upper // 3), replace=False),
             rng.integers(0, upper, size=upper), np.zeros(0, dtype=np.int64),
             rng.choice(10 * upper + 10**6, size=min(upper, 50), replace=False)]
    for values in cases:
        up = upper if values.size == 0 or values.max() < upper else int(values.max()) + 1
        assert _index_order(values, up).tolist() == np.argsort(values, kind="stable").tolist()
