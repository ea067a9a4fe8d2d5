"""Memory-mapped entity tables: from_embeddings uses them in place, the evaluator streams them in
entity chunks (same rank table as the in-memory model), and bad files / shapes / dtypes are named
errors before any scoring."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from patience import scaled
import torch

import kgeval
from kgeval.errors import InvalidInputError
from kgeval.models import base, embeddings, from_embeddings

sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))
from cli_helpers import run  # noqa: E402

NE, NR = 300, 4


def _graph(seed=0, n=120):
    rng = np.random.default_rng(seed)
    tri = np.stack([rng.integers(0, NE, n), rng.integers(0, NR, n), rng.integers(0, NE, n)], 1)
    return tri[:80], tri[80:]


def _tables(interaction, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    width = 8
    ent = rng.integers(-3, 4, size=(NE, width)).astype(dtype)  # small integers: scores are exact and tie
    rel = rng.integers(-2, 3, size=(NR, width // 2 if interaction == "rotate" else width)).astype(dtype)
    return ent, rel


def _rows(table):
    return {(int(s), int(i)): (int(o), int(p), int(n)) for s, i, o, p, n in
            zip(table.side, table.triple_index, table.optimistic, table.pessimistic, table.num_candidates)}


def _address_range(arr: np.ndarray) -> tuple[int, int]:
    lo = arr.__array_interface__["data"][0]
    return lo, lo + arr.nbytes


@pytest.mark.parametrize("interaction", ["distmult", "complex", "transe", "rotate"])
@pytest.mark.parametrize("source", ["path", "memmap", "from_file"])
def test_mapped_table_is_used_in_place_and_ranks_like_the_in_memory_model(tmp_path, interaction, source):
    ent, rel = _tables(interaction)
    path = tmp_path / "ent.npy"
    np.save(path, ent)
    if source == "path":
        given = path
    elif source == "memmap":
        given = np.load(path, mmap_mode="r")
    else:  # torch.from_file over the .npy payload (the header is a multiple of 64 bytes)
        raw = torch.from_file(str(path), shared=True, size=path.stat().st_size, dtype=torch.uint8)
        header = path.stat().st_size - ent.nbytes
        given = raw[header:].view(torch.float32).view(NE, ent.shape[1])
    model = from_embeddings(interaction, given, rel)
    assert model.entity_source is not None and model.entity.weight.requires_grad is False
    in_memory = from_embeddings(interaction, ent, rel)
    assert in_memory.entity_source is None
    train, test = _graph()
    ref = kgeval.evaluate(in_memory, test, filter_triples=train, progress=False)
    for chunk in (37, 128):
        got = kgeval.evaluate(model, test, filter_triples=train, entity_chunk_size=chunk, progress=False)
        assert _rows(got.rank_table) == _rows(ref.rank_table)
        assert got.protocol["entity_chunk_size"] == chunk
    # automatic chunking from a small memory budget gives the same table
    got = kgeval.evaluate(model, test, filter_triples=train, memory_budget=64 * 1024, progress=False)
    assert got.protocol["entity_chunk_size"] is not None
    assert _rows(got.rank_table) == _rows(ref.rank_table)


def test_streaming_never_materialises_the_table(tmp_path, monkeypatch):
    """Every candidate block the model scores is a view into the mapping of at most one chunk."""
    ent, rel = _tables("distmult")
    np.save(tmp_path / "ent.npy", ent)
    mapped = np.load(tmp_path / "ent.npy", mmap_mode="r")
    lo, hi = _address_range(mapped)
    model = from_embeddings("distmult", mapped, rel)
    w = model.entity.weight
    assert lo <= w.data_ptr() < hi  # the parameter is the mapping itself, not a copy
    blocks = []
    real_rows = base.Model._rows

    def spy(weight, candidates):
        out = real_rows(weight, candidates)
        blocks.append((out.shape[0], out.data_ptr()))
        return out

    monkeypatch.setattr(base.Model, "_rows", staticmethod(spy))
    train, test = _graph(1)
    kgeval.evaluate(model, test, filter_triples=train, entity_chunk_size=50, progress=False,
                    check_consistency=False)
    # chunks are views into the mapping; the true scores' gathered answer columns are small copies
    views = [n for n, ptr in blocks if lo <= ptr < hi]
    gathered = [n for n, ptr in blocks if not lo <= ptr < hi]
    assert views and max(views) <= 50
    assert not gathered or max(gathered) <= 64 + len(test) < NE
    assert model.entity.weight.data_ptr() == w.data_ptr()


def test_squared_norms_in_blocks_equal_the_direct_sum(monkeypatch):
    x = torch.randn(1000, 5)
    monkeypatch.setattr(base, "CHUNK_ELEMENTS", 64)
    assert torch.equal(base.squared_norms(x), (x * x).sum(-1))


def test_float16_and_complex_mapped_tables_are_converted_like_in_memory_ones(tmp_path):
    ent, rel = _tables("distmult")
    np.save(tmp_path / "half.npy", ent.astype(np.float16))
    m = from_embeddings("distmult", tmp_path / "half.npy", rel)
    assert m.entity_source is not None and m.entity.weight.dtype == torch.float32
    assert torch.equal(m.entity.weight, torch.from_numpy(ent))
    z = ent[:, :4] + 1j * ent[:, 4:]
    np.save(tmp_path / "z.npy", z.astype(np.complex64))
    a = from_embeddings("complex", tmp_path / "z.npy", rel)
    b = from_embeddings("complex", ent, rel)
    assert torch.equal(a.entity.weight, b.entity.weight)


@pytest.mark.parametrize("make, kwargs, match", [
    (lambda: np.zeros((NE, 8), np.float32), {"num_entities": NE + 1}, f"{NE} rows but the dataset has {NE + 1}"),
    (lambda: np.zeros((NE, 6), np.float32), {}, "width 6 for entity width 6, got 8"),
    (lambda: np.zeros(NE * 8, np.float32), {}, "2-d matrix"),
    (lambda: np.zeros((NE, 2, 4), np.float32), {}, "2-d matrix"),
    (lambda: np.zeros((0, 8), np.float32), {}, "non-empty"),
    (lambda: np.zeros((NE, 8), np.int32), {}, "must hold floats.*int32"),
    (lambda: np.zeros((NE, 8), bool), {}, "must hold floats.*bool"),
])
def test_bad_mapped_tables_are_named_errors(tmp_path, make, kwargs, match):
    np.save(tmp_path / "ent.npy", make())
    rel = np.zeros((NR, 8), np.float32)
    for given in (tmp_path / "ent.npy", np.load(tmp_path / "ent.npy", mmap_mode="r")):
        with pytest.raises(InvalidInputError, match=match):
            from_embeddings("distmult", given, rel, **kwargs)


def test_nan_in_a_late_block_names_its_row(tmp_path, monkeypatch):
    monkeypatch.setattr(embeddings, "_BLOCK_ELEMENTS", 64)
    ent, rel = _tables("distmult")
    ent[257, 3] = np.inf
    np.save(tmp_path / "ent.npy", ent)
    with pytest.raises(InvalidInputError, match="first in row 257"):
        from_embeddings("distmult", tmp_path / "ent.npy", rel)


def test_truncated_and_corrupt_files_are_named_errors(tmp_path):
    ent, rel = _tables("distmult")
    path = tmp_path / "ent.npy"
    np.save(path, ent)
    data = path.read_bytes()
    (tmp_path / "short.npy").write_bytes(data[: len(data) - 100])
    (tmp_path / "header.npy").write_bytes(b"\x93NUMPY\x01\x00garbage" + data[20:])
    (tmp_path / "empty.npy").write_bytes(b"")
    for name in ("short", "header", "empty"):
        with pytest.raises(InvalidInputError, match=f"{name}.npy.*not readable"):
            from_embeddings("distmult", tmp_path / f"{name}.npy", rel)
    with pytest.raises(InvalidInputError, match="does not exist"):
        from_embeddings("distmult", tmp_path / "missing.npy", rel)


def test_cli_memory_maps_an_npy_entity_table(tmp_path, monkeypatch):
    from kgeval.data import get_dataset

    ds = get_dataset("nations")
    rng = np.random.default_rng(3)
    np.save(tmp_path / "e.npy", rng.normal(size=(ds.num_entities, 8)).astype(np.float32))
    np.save(tmp_path / "r.npy", rng.normal(size=(ds.num_relations, 8)).astype(np.float32))
    seen = []
    real = embeddings.from_embeddings

    def spy(*a, **k):
        model = real(*a, **k)
        seen.append(model.entity_source)
        return model

    monkeypatch.setattr(embeddings, "from_embeddings", spy)
    res = run("evaluate", "-d", "nations", "--entity-embeddings", tmp_path / "e.npy",
              "--relation-embeddings", tmp_path / "r.npy", "--interaction", "distmult")
    assert res.exit_code == 0, res.output
    assert seen and seen[0] is not None and seen[0].endswith("e.npy")
    short = tmp_path / "short.npy"
    short.write_bytes((tmp_path / "e.npy").read_bytes()[:-40])
    res = run("evaluate", "-d", "nations", "--entity-embeddings", short,
              "--relation-embeddings", tmp_path / "r.npy", "--interaction", "distmult")
    assert res.exit_code != 0 and "not readable" in res.output


@pytest.mark.multiprocess  # a fresh interpreter
def test_from_embeddings_builds_no_meta_model_in_a_fresh_process():
    """Building the model for one entity and installing the given tables: no E x width allocation and
    no meta-device initialiser, whose first call makes torch import sympy & co. (~1.1-1.5 s once per
    process, paid by every `kgeval evaluate --entity-embeddings` until 2026-11-24). In a fresh
    interpreter: the tables are the given ones (the entity table in place), and sympy stays unloaded."""
    import subprocess

    code = """
import sys, numpy as np, torch
from kgeval.models import from_embeddings
assert "sympy" not in sys.modules
for name, width in (("distmult", 8), ("complex", 8), ("rotate", 8), ("transe", 8)):
    ent = np.arange(7 * width, dtype=np.float32).reshape(7, width) / 100
    rel = np.ones((3, width // 2 if name == "rotate" else width), np.float32) / 10
    m = from_embeddings(name, ent, rel)
    assert m.num_entities == 7 and m.entity.num_embeddings == 7 and m.num_relations == 3
    assert torch.equal(m.entity.weight, torch.from_numpy(ent)) and m.entity.weight.requires_grad
    s = m.score_tails(torch.tensor([0, 6]), torch.tensor([2, 1]))
    assert s.shape == (2, 7) and bool(torch.isfinite(s).all())
assert "sympy" not in sys.modules, "a meta-device initialiser ran"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(300))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
