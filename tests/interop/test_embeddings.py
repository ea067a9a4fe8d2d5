"""Plain embedding matrices -> kgeval models (from_embeddings) and `kgeval evaluate --entity-embeddings`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kgeval.data import get_dataset
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.models import from_embeddings

sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))
from cli_helpers import run  # noqa: E402

RNG = np.random.default_rng(0)


def _reference(interaction, ent, rel, h, r, t):
    """Each interaction's published formula, written out on numpy arrays (d = complex width)."""
    if interaction == "distmult":
        return float(np.sum(ent[h] * rel[r] * ent[t]))
    if interaction == "transe":
        return -float(np.linalg.norm(ent[h] + rel[r] - ent[t]))
    d = ent.shape[1] // 2
    eh, et = ent[h, :d] + 1j * ent[h, d:], ent[t, :d] + 1j * ent[t, d:]
    if interaction == "complex":
        return float(np.real(np.sum(eh * (rel[r, :d] + 1j * rel[r, d:]) * np.conj(et))))
    return -float(np.linalg.norm(eh * np.exp(1j * rel[r]) - et))  # rotate: relation phases


@pytest.mark.parametrize("interaction", ["distmult", "transe", "complex", "rotate"])
def test_scores_follow_the_interaction_formula(interaction):
    ent = RNG.normal(size=(7, 6))
    rel = RNG.normal(size=(3, 3 if interaction == "rotate" else 6))
    model = from_embeddings(interaction, ent, rel)
    tails = model.score_tails(torch.tensor([2]), torch.tensor([1]))[0].detach().double().numpy()
    heads = model.score_heads(torch.tensor([1]), torch.tensor([4]))[0].detach().double().numpy()
    np.testing.assert_allclose(tails, [_reference(interaction, ent, rel, 2, 1, t) for t in range(7)], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(heads, [_reference(interaction, ent, rel, h, 1, 4) for h in range(7)], rtol=1e-5, atol=1e-5)


def test_complex_dtype_input_equals_re_im_layout():
    z = RNG.normal(size=(5, 3)) + 1j * RNG.normal(size=(5, 3))
    w = RNG.normal(size=(2, 3)) + 1j * RNG.normal(size=(2, 3))
    a = from_embeddings("complex", z, w)
    b = from_embeddings("complex", np.hstack([z.real, z.imag]), np.hstack([w.real, w.imag]))
    assert torch.equal(a.score_tails([0, 1], [1, 0]), b.score_tails([0, 1], [1, 0]))


@pytest.mark.parametrize("ent, rel, kwargs, match", [
    (np.zeros((5, 4)), np.zeros((2, 4)), {"num_entities": 6}, "5 rows but the dataset has 6 entities"),
    (np.zeros((5, 3)), np.zeros((2, 3)), {}, "even width"),
    (np.zeros((5, 4), dtype=np.int64), np.zeros((2, 4)), {}, "must hold floats"),
    (np.full((5, 4), np.nan), np.zeros((2, 4)), {}, "NaN"),
    (np.zeros((5, 4)), np.zeros((2, 6)), {}, "width 4"),
    (np.zeros(4), np.zeros((2, 4)), {}, "2-d"),
])
def test_bad_matrices_are_named_errors(ent, rel, kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        from_embeddings("complex", ent, rel, **kwargs)


def test_unknown_interaction():
    with pytest.raises(UnknownNameError, match="complex"):
        from_embeddings("conve", np.zeros((2, 2)), np.zeros((1, 2)))


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".pt"])
def test_cli_evaluates_embedding_files_like_the_model(tmp_path, suffix):
    ds = get_dataset("nations")
    ent = RNG.normal(size=(ds.num_entities, 8)).astype(np.float32)
    rel = RNG.normal(size=(ds.num_relations, 8)).astype(np.float32)
    paths = []
    for name, arr in (("ent", ent), ("rel", rel)):
        p = tmp_path / f"{name}{suffix}"
        {".npy": lambda: np.save(p, arr), ".npz": lambda: np.savez(p, arr),
         ".pt": lambda: torch.save(torch.from_numpy(arr), p)}[suffix]()
        paths.append(p)
    out = tmp_path / "run"
    res = run("evaluate", "-d", "nations", "--entity-embeddings", paths[0], "--relation-embeddings", paths[1],
              "--interaction", "distmult", "-o", out, "--format", "json")
    assert res.exit_code == 0, res.output
    from kgeval.workflow.evaluation import evaluate_model

    direct = evaluate_model(from_embeddings("distmult", ent, rel), ds, split="test", progress=False)
    saved = json.loads(res.output)["metrics"]
    assert saved == json.loads(json.dumps(saved))  # plain JSON
    assert (out / "rank_table.npz").exists() and (out / "results.json").exists()
    from kgeval.ranks import RankTable

    table = RankTable.load(out / "rank_table.npz")
    np.testing.assert_array_equal(table.optimistic, direct.rank_table.optimistic)
    np.testing.assert_array_equal(table.pessimistic, direct.rank_table.pessimistic)


def test_cli_rejects_wrong_entity_count(tmp_path):
    np.save(tmp_path / "e.npy", np.zeros((3, 4), dtype=np.float32))
    np.save(tmp_path / "r.npy", np.zeros((55, 4), dtype=np.float32))
    res = run("evaluate", "-d", "nations", "--entity-embeddings", tmp_path / "e.npy",
              "--relation-embeddings", tmp_path / "r.npy", "--interaction", "distmult")
    assert res.exit_code != 0 and "3 rows but the dataset has 14 entities" in res.output


@pytest.mark.parametrize("interaction, dtype", [("distmult", ">f8"), ("complex", ">c16")])
def test_non_native_byte_order_keeps_float64(interaction, dtype):
    """A big-endian float64 / complex128 table was made float32 (not == np.float64): candidates 1e-9
    apart tied, and the score differences below float32's resolution were lost."""
    ent = RNG.normal(size=(6, 4))
    ent[1:] = ent[0] + 1e-9 * RNG.normal(size=(5, 4))
    rel = RNG.normal(size=(2, 4))
    table = (ent[:, :2] + 1j * ent[:, 2:]) if dtype == ">c16" else ent
    native = from_embeddings(interaction, table.astype(dtype[1:]), rel)
    swapped = from_embeddings(interaction, table.astype(dtype), rel)
    assert swapped.entity.weight.dtype == torch.float64
    want = native.score_tails([0], [1])
    assert len(set(want[0].tolist())) == 6  # distinct in float64 (the case is meaningful)
    assert torch.equal(swapped.score_tails([0], [1]), want)


def test_non_native_float64_beyond_float32_range_is_kept():
    big = np.full((4, 2), 1e300, dtype=">f8")
    model = from_embeddings("distmult", big, np.full((1, 2), 1e-300))
    assert torch.isfinite(model.entity.weight).all()


def test_transposed_tables_are_named():
    """(dim x entities) was reported as 'relation embeddings must have width 14 for entity width 14, got 8'."""
    with pytest.raises(InvalidInputError, match=r"entity embeddings have 8 rows \(a transposed table"):
        from_embeddings("distmult", np.zeros((8, 14)), np.zeros((3, 8)), num_entities=14, num_relations=3)
    with pytest.raises(InvalidInputError, match=r"relation embeddings have 8 rows \(a transposed table"):
        from_embeddings("distmult", np.zeros((14, 8)), np.zeros((8, 3)), num_entities=14, num_relations=3)


def test_cli_transe_names_its_distance(tmp_path):
    """--interaction transe scored every file with L2 while PyKEEN's and LibKGE's TransE default to L1 (other
    ranks, silently): the CLI now takes transe-l1 / transe-l2 and refuses a bare transe."""
    from kgeval.workflow.evaluation import evaluate_model

    ds = get_dataset("nations")
    ent = RNG.normal(size=(ds.num_entities, 8)).astype(np.float32)
    rel = RNG.normal(size=(ds.num_relations, 8)).astype(np.float32)
    np.save(tmp_path / "e.npy", ent)
    np.save(tmp_path / "r.npy", rel)
    files = ("--entity-embeddings", tmp_path / "e.npy", "--relation-embeddings", tmp_path / "r.npy")
    bare = run("evaluate", "-d", "nations", *files, "--interaction", "transe")
    assert bare.exit_code != 0 and "transe-l1" in bare.output and "Traceback" not in bare.output
    tables = {}
    for p in (1, 2):
        out = tmp_path / f"run{p}"
        res = run("evaluate", "-d", "nations", *files, "--interaction", f"transe-l{p}", "-o", out, "--format", "json")
        assert res.exit_code == 0, res.output
        from kgeval.ranks import RankTable

        tables[p] = RankTable.load(out / "rank_table.npz")
        direct = evaluate_model(from_embeddings("transe", ent, rel, p=p), ds, split="test", progress=False)
        np.testing.assert_array_equal(tables[p].optimistic, direct.rank_table.optimistic)
    assert not np.array_equal(tables[1].optimistic, tables[2].optimistic)  # the distance matters
