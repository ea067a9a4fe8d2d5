"""Pass-1 true scores predicted from a float32 product's rounding (:mod:`kgeval.evaluation.predicted`):
the chains reproduce torch's products here, every prediction is verified against the in-batch score
(a miss is re-ranked, many misses turn prediction off), and rank tables never depend on it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from kgeval.errors import InvalidInputError
from kgeval.evaluation import count_kernel, evaluate_ranks, full, predicted
from kgeval.models import DistMult, from_embeddings, get_model

NE, NR = 300, 4


@pytest.fixture(autouse=True)
def kernel():
    if not count_kernel._load():
        pytest.skip("numba is not importable: nothing is predicted")


def _reference(q, c, rows, cols, b):
    """The chains of :func:`count_kernel.chain_dots`, one Python float at a time."""
    out = np.empty(len(rows), dtype=np.float32)
    d = q.shape[1]
    for t, (i, j) in enumerate(zip(rows, cols)):
        total = None
        for k0 in range(0, d, b):
            acc = np.float32(0.0)
            for k in range(k0, min(d, k0 + b)):
                acc = np.float32(float(q[i, k]) * float(c[j, k]) + float(acc))
            total = acc if total is None else np.float32(total + acc)
        out[t] = total
    return out


@pytest.mark.parametrize("n", [3, 62])  # the kernel runs four tasks at a time, then the rest one by one
@pytest.mark.parametrize("d,b", [(1, 1), (7, 7), (7, 3), (64, 64), (200, 100), (200, 64)])
def test_chain_dots_are_the_stated_chains(d, b, n):
    rng = np.random.default_rng(d + b)
    q = rng.standard_normal((5, d), dtype=np.float32)
    c = rng.standard_normal((9, d), dtype=np.float32) * np.float32(1e3)
    rows, cols = rng.integers(0, 5, n), rng.integers(0, 9, n)
    got = count_kernel.chain_dots(q, c, rows, cols, b)
    assert np.array_equal(got, _reference(q, c, rows, cols, b))
    # chain lengths round differently (the test above could not pass for the wrong one)
    if b < d:
        assert not np.array_equal(got, count_kernel.chain_dots(q, c, rows, cols, d))
    # exact on small integers, whatever the chains
    qi, ci = np.round(q * 4).astype(np.float32), np.round(c).astype(np.float32)
    assert np.array_equal(count_kernel.chain_dots(qi, ci, rows, cols, b),
                          (qi[rows].astype(np.float64) * ci[cols]).sum(1).astype(np.float32))


def test_chain_dots_refuse_other_arrays():
    q = np.zeros((2, 3), dtype=np.float64)
    assert count_kernel.chain_dots(q, q, np.zeros(1, np.int64), np.zeros(1, np.int64), 3) is None
    f = np.zeros((3, 2), dtype=np.float32).T  # not C-contiguous
    assert count_kernel.chain_dots(f, f, np.zeros(1, np.int64), np.zeros(1, np.int64), 3) is None


@pytest.mark.parametrize("d", [8, 64, 128, 200, 256, 400])
def test_calibrated_chains_reproduce_torch_products_of_the_evaluators_shapes(d):
    """The premise, on this machine: every entry of the evaluator's blocks (1,024 x 1,024 chunks on one
    thread, 4,096 x 256 tall chunks, a 2-thread product) is the chain sum."""
    b = predicted.chain_length(d)
    if b is None:
        pytest.skip(f"no chain length reproduces this BLAS's products of width {d}: nothing is predicted")
    rng = np.random.default_rng(100 + d)
    c = torch.from_numpy(rng.standard_normal((1024, d), dtype=np.float32))
    for m, n, threads in ((1024, 1024, 1), (4096, 256, 1), (300, 1024, 2)):
        q = torch.from_numpy(rng.standard_normal((m, d), dtype=np.float32))
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            S = torch.matmul(q, c[:n].t()).numpy()
        finally:
            torch.set_num_threads(before)
        rows, cols = rng.integers(0, m, 3000), rng.integers(0, n, 3000)
        assert np.array_equal(count_kernel.chain_dots(q.numpy(), c.numpy(), rows, cols, b), S[rows, cols])


def _graph(seed=0, n=400):
    rng = np.random.default_rng(seed)
    allt = rng.integers(0, [NE, NR, NE], size=(n + 600, 3))
    return allt[n:], allt[:n]  # train, test


def _rows(table):
    return {a: np.asarray(getattr(table, a)).tolist() for a in ("triple_index", "side", "optimistic", "pessimistic",
                                                                 "num_candidates")}


def _spy(monkeypatch):
    """Counts of pass-1 calls that predicted (and that did not)."""
    calls = {"predicted": 0, "scored": 0}
    real = full.predicted_scores
    lock = threading.Lock()  # the two sides may count at once (side threads): += on a dict item is not atomic

    def spy(*a, **k):
        out = real(*a, **k)
        with lock:
            calls["scored" if out is None else "predicted"] += 1
        return out

    monkeypatch.setattr(full, "predicted_scores", spy)
    return calls


@pytest.mark.parametrize("name,kw", [("distmult", {}), ("complex", {}), ("tucker", {"relation_dim": 5}),
                                     ("distmult", {"inverse_relations": True})])
@pytest.mark.parametrize("filtered", [True, False])
def test_predicted_pass_one_gives_the_rank_table_of_whole_rows(name, kw, filtered, monkeypatch):
    model = get_model(name, NE, NR, dim=24, seed=3, **kw).eval()
    train, test = _graph(1)
    ev = lambda **o: evaluate_ranks(model, test, filter_triples=[train], filtered=filtered, progress=False,  # noqa: E731
                                    check_consistency=False, **o).rank_table
    ref = ev()  # whole rows: the true score is read from the row
    calls = _spy(monkeypatch)
    chunked = ev(entity_chunk_size=37, batch_size=64)
    assert calls["predicted"] > 0 and (calls["scored"] == 0 or name == "tucker")  # TuckER's heads: no product
    assert _rows(chunked) == _rows(ref)
    monkeypatch.setenv("KGEVAL_PREDICT_TRUE", "0")
    before = dict(calls)
    assert _rows(ev(entity_chunk_size=37, batch_size=64)) == _rows(ref)
    assert calls["predicted"] == before["predicted"]


def test_predicted_pass_one_with_ties_restriction_and_a_memory_mapped_table(tmp_path, monkeypatch):
    """Integer embeddings (scores tie: a true score one ulp off would move every tie), a restriction
    to an entity subset (answer columns are positions among the allowed entities), a mapped table."""
    rng = np.random.default_rng(7)
    ent = rng.integers(-2, 3, size=(NE, 6)).astype(np.float32)
    rel = rng.integers(-2, 3, size=(NR, 6)).astype(np.float32)
    np.save(tmp_path / "ent.npy", ent)
    train, test = _graph(2)
    allowed = np.unique(np.concatenate([test[:, 0], test[:, 2], rng.integers(0, NE, 50)]))
    calls = _spy(monkeypatch)
    for table in (ent, np.load(tmp_path / "ent.npy", mmap_mode="r")):
        model = from_embeddings("distmult", table, rel)
        for extra in ({}, {"restrict_entities": allowed}):
            ref = evaluate_ranks(model, test, filter_triples=[train], progress=False, **extra).rank_table
            got = evaluate_ranks(model, test, filter_triples=[train], progress=False, entity_chunk_size=29,
                                 **extra).rank_table
            assert _rows(got) == _rows(ref)
    assert calls["predicted"] > 0 and calls["scored"] == 0


@pytest.mark.parametrize("sides", ["0", "1"])
def test_mispredictions_are_reranked_and_turn_prediction_off(monkeypatch, sides):
    """Every prediction one ulp high: each is caught by the in-batch check and re-ranked exactly, and
    the first batch's misses stop prediction for the rest of the evaluation (with the sides ranked at
    once, ``KGEVAL_PARALLEL_SIDES=1``, each side's first batch may start before the other's misses are found)."""
    monkeypatch.setenv("KGEVAL_PARALLEL_SIDES", sides)
    model = get_model("distmult", NE, NR, dim=16, seed=5).eval()
    train, test = _graph(3)
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False).rank_table
    assert predicted.chain_length(16) is not None  # calibrated before the kernel is broken below
    real = count_kernel.chain_dots
    monkeypatch.setattr(predicted, "chain_dots", lambda *a: np.nextafter(real(*a), np.float32(np.inf)))
    calls = _spy(monkeypatch)
    redo, scored = [], []
    exact, answers = full._rank_chunks_exact, full.answer_scores
    monkeypatch.setattr(full, "_rank_chunks_exact", lambda *a, **k: redo.append(1) or exact(*a, **k))
    monkeypatch.setattr(full, "answer_scores", lambda *a, **k: scored.append(1) or answers(*a, **k))
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False, entity_chunk_size=50, batch_size=40)
    assert _rows(got.rank_table) == _rows(ref)
    # the first batch was predicted (all wrong: re-ranked), every later one scored its answers (whose
    # narrow products may round another way here and there: re-ranked as well)
    first = 1 if sides == "0" else calls["predicted"]
    assert first in (1, 2) and calls == {"predicted": first, "scored": 0} and redo and len(scored) > 10


def test_a_rare_miss_is_reranked_and_prediction_stays_on(monkeypatch):
    """One miss in a batch of 400 tasks (under 1 in MISS_RATE): re-ranked, and prediction goes on."""
    assert 400 > predicted.MISS_RATE
    model = get_model("distmult", NE, NR, dim=16, seed=6).eval()
    train, test = _graph(4, n=800)
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False).rank_table
    assert predicted.chain_length(16) is not None
    real = count_kernel.chain_dots

    def one_off(*a):  # one miss in each batch of ~400 tasks; none in the 2-task remainder batch a side may have,
        # where one miss is over 1 in MISS_RATE and turns prediction off: last of its side when the sides ran in
        # turn, but with the sides at once it could come before the other side's batches (predicted 3, not >= 4)
        out = real(*a)
        if len(out) > predicted.MISS_RATE:
            out[len(out) // 2] = np.nextafter(out[len(out) // 2], np.float32(np.inf))
        return out

    monkeypatch.setattr(predicted, "chain_dots", one_off)
    calls = _spy(monkeypatch)
    misses, lock, redo = [], threading.Lock(), full.redo_batch

    def count_misses(nq, task_q, differ, known):  # (tasks, misses) of each batch re-ranked
        with lock:
            misses.append((int(task_q.shape[0]), int(differ.numel())))
        return redo(nq, task_q, differ, known)

    monkeypatch.setattr(full, "redo_batch", count_misses)
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False, entity_chunk_size=50, batch_size=400)
    assert _rows(got.rank_table) == _rows(ref)
    # only the injected misses were re-ranked: a side's 2-task remainder batch (2 query rows) is not predicted,
    # as MKL rounds products of so few rows another way -- it missed both predictions, every run, and turned
    # prediction off for the rest of the evaluation, before the other side's last batch in ~1 run of 10
    assert misses and all(n > predicted.MISS_RATE and m == 1 for n, m in misses), misses
    assert calls["predicted"] >= 4 and calls["scored"] == 0, (calls, misses)  # >= 2 batches x 2 sides


def test_only_plain_float32_products_are_predicted():
    """A distance model, a subclass with its own arithmetic, float64 weights: no product to predict."""
    class Shifted(DistMult):
        def _tails_from(self, h_rows, r, cand_rows, out=None):
            return super()._tails_from(h_rows, r, cand_rows) + 1.0

    h, r = torch.tensor([0, 5]), torch.tensor([1, 2])
    ids = torch.tensor([3, 7, 8])
    with torch.inference_mode():
        for name in ("distmult", "complex", "tucker"):
            model = get_model(name, NE, NR, dim=8, seed=1).eval()
            q, c = model.prepare_tails(h, r).product(ids)
            assert torch.equal(q @ c.t(), model.score_tails(h, r, entities=ids))
            assert model.prepare_tails(h, r).rows(1, 2).product(ids)[0].shape[0] == 1
        for model in (get_model("transe", NE, NR, dim=8, seed=1), get_model("rotate", NE, NR, dim=8, seed=1),
                      Shifted(NE, NR, dim=8)):
            assert model.prepare_tails(h, r).product(ids) is None
        assert get_model("tucker", NE, NR, dim=8, seed=1).eval().prepare_heads(r, h).product(ids) is None
        wide = get_model("distmult", NE, NR, dim=8, seed=1).double()
        sc = type("SC", (), {"device": torch.device("cpu"), "allowed": None, "predicts_true": True})()
        assert predicted.predicted_scores(sc, wide.prepare_tails(h, r), torch.tensor([0, 1]), torch.tensor([3, 4])) is None


def test_short_rows_are_chunked_only_where_the_true_scores_are_predicted(monkeypatch):
    """Rows of 5,000 entities: a product model is ranked in tall chunks (no pass-1 products), a distance
    model in whole rows (its pass 1 would score ~#rows / #columns extra), and so is either with
    prediction off."""
    rng = np.random.default_rng(8)
    ne = 5000
    test = np.stack([rng.integers(0, ne, 400), rng.integers(0, NR, 400), rng.integers(0, ne, 400)], 1)
    chunk = lambda model: evaluate_ranks(model, test, progress=False).protocol["entity_chunk_size"]  # noqa: E731
    distmult = get_model("distmult", ne, NR, dim=8, seed=1).eval()
    assert chunk(distmult) == 2560  # 2^20 entries / 400 rows = 2,621 columns, down to a multiple of 64
    assert full._CPU_CHUNK_BLOCK // 400 // full._CPU_CHUNK_ALIGN * full._CPU_CHUNK_ALIGN == 2560
    assert chunk(get_model("transe", ne, NR, dim=8, seed=1).eval()) is None
    monkeypatch.setenv("KGEVAL_PREDICT_TRUE", "0")
    assert chunk(distmult) is None


def test_tall_chunked_batches_are_of_equal_size(monkeypatch):
    """5,000 tasks per side over 5,000 entities: one batch of two row blocks of 2,500 rows in 384-column
    chunks (2^20 / 2,500 = 419, down to a multiple of 64), not blocks of 4,096 tasks and a remainder of
    904 -- with the rank table of whole rows."""
    rng = np.random.default_rng(9)
    ne, n = 5000, 5000
    test = np.stack([rng.integers(0, ne, n), rng.integers(0, NR, n), rng.integers(0, ne, n)], 1)
    model = get_model("distmult", ne, NR, dim=8, seed=1).eval()
    sizes = []
    count_chunks = full.count_chunks

    def spy(ctx, sc, ent, rel, task_q, *rest, row_block=None, **kw):
        sizes.append((sc.side, task_q.shape[0], ent.shape[0], row_block))
        return count_chunks(ctx, sc, ent, rel, task_q, *rest, row_block=row_block, **kw)

    monkeypatch.setattr(full, "count_chunks", spy)
    out = evaluate_ranks(model, test, progress=False)
    assert out.protocol["entity_chunk_size"] == 384
    for side in {s for s, *_ in sizes}:
        per = [x for x in sizes if x[0] == side and x[3] is not None]  # (not a re-ranked query's exact pass)
        assert len(per) == 1 and per[0][1] == n, per  # one batch of every task, one walk
        rows, row_block = per[0][2], per[0][3]
        assert row_block == 2500 and -(-rows // row_block) == 2, per  # two blocks of ~2,500 query rows
    monkeypatch.setattr(full, "count_chunks", count_chunks)
    monkeypatch.setenv("KGEVAL_PREDICT_TRUE", "0")  # whole rows
    whole = evaluate_ranks(model, test, progress=False).rank_table
    for a in ("optimistic", "pessimistic", "num_candidates"):
        assert np.array_equal(np.asarray(getattr(out.rank_table, a)), np.asarray(getattr(whole, a)))


def test_bad_switch_is_named(monkeypatch):
    monkeypatch.setenv("KGEVAL_PREDICT_TRUE", "yes")
    model = get_model("distmult", NE, NR, dim=8, seed=1).eval()
    train, test = _graph(5)
    with pytest.raises(InvalidInputError, match="KGEVAL_PREDICT_TRUE must be 0 or 1, got 'yes'"):
        evaluate_ranks(model, test, progress=False, entity_chunk_size=50)


def test_entity_shards_score_their_own_pass_one():
    """An entity shard's side takes query rows from other ranks, not ids: never predicted or planned so."""
    from kgeval.evaluation.scoring import SideScorer
    from kgeval.evaluation.sharded import ShardSideScorer

    assert SideScorer.predicts_true and not ShardSideScorer.predicts_true
    ctx = type("Ctx", (), {"predict_true": True})()
    shard = type("SC", (), {"predicts_true": False, "device": torch.device("cpu"), "prepare": print})()
    assert predicted.predictable(ctx, shard) is False
    assert predicted.predicted_scores(shard, object(), torch.tensor([0]), torch.tensor([1])) is None


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(["distmult", "complex", "tucker"]), ne=st.integers(2, 60), dim=st.integers(1, 70),
       n=st.integers(1, 80), chunk=st.integers(1, 70), ties=st.booleans(), filtered=st.booleans(),
       seed=st.integers(0, 2**16))
def test_property_chunks_with_predicted_true_scores_rank_as_whole_rows(name, ne, dim, n, chunk, ties, filtered, seed):
    """Any small graph, width and chunk size: ranks with predicted pass-1 scores are those of whole rows
    (integer-valued embeddings make ties, where a wrong true score would move a rank). TuckER's head
    scores are no product: their rounding depends on the call's shape, so there only exact (integer)
    arithmetic makes whole rows and chunks comparable."""
    tucker = {"relation_dim": 3, "batch_norm": False} if name == "tucker" else {}
    model = get_model(name, ne, NR, dim=dim, seed=seed, **tucker).eval()
    if ties or tucker:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.round(p * 3))
    rng = np.random.default_rng(seed)
    allt = rng.integers(0, [ne, NR, ne], size=(n + 40, 3))
    train, test = allt[n:], allt[:n]
    ev = lambda **o: evaluate_ranks(model, test, filter_triples=[train], filtered=filtered, progress=False,  # noqa: E731
                                    check_consistency=False, **o).rank_table
    assert _rows(ev(entity_chunk_size=chunk, batch_size=max(1, n // 3))) == _rows(ev())


@pytest.mark.parametrize("width", [59, 149, 60])
def test_a_narrow_last_chunk_is_evened_out_and_predicted(width, monkeypatch):
    """300 entities in chunks of 59 (or 149) left a last chunk of 5 (2) columns, whose products MKL rounds
    another way: every answer in it missed its prediction and was re-ranked (10 of 398 tasks), and the
    batch turned prediction off. The last two chunks are now evened out: no re-rank, every batch predicted."""
    model = get_model("distmult", NE, NR, dim=16, seed=6).eval()
    train, test = _graph(4, n=800)
    ref = evaluate_ranks(model, test, filter_triples=[train], progress=False).rank_table
    assert predicted.chain_length(16) is not None
    calls = _spy(monkeypatch)
    misses, redo = [], full.redo_batch

    def count_misses(nq, task_q, differ, known):
        misses.append((int(task_q.shape[0]), int(differ.numel())))
        return redo(nq, task_q, differ, known)

    monkeypatch.setattr(full, "redo_batch", count_misses)
    got = evaluate_ranks(model, test, filter_triples=[train], progress=False, entity_chunk_size=width,
                         batch_size=400)
    assert _rows(got.rank_table) == _rows(ref)
    assert misses == [] and calls["predicted"] >= 4 and calls["scored"] == 0, (misses, calls)
    assert got.protocol["entity_chunk_size"] == width


@pytest.mark.parametrize("ncols", [1, 15, 16, 31, 32, 33, 100, 300, 1000, 14541])
@pytest.mark.parametrize("width", [1, 4, 16, 31, 32, 59, 64, 384, 1024])
def test_chunk_bounds_cover_the_columns_in_chunks_no_wider_than_asked(ncols, width):
    bounds = full.chunk_bounds(ncols, width)
    sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    assert bounds[0] == 0 and bounds[-1] == ncols and all(0 < s <= width for s in sizes)
    assert len(sizes) == -(-ncols // width)  # as many chunks as before
    if width >= 32 and len(sizes) > 1:
        assert min(sizes) >= 16
