"""`kgeval evaluate --entity-embeddings / --relation-embeddings`: which array of a file, which row is which label."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_helpers import run

from kgeval.data import get_dataset
from kgeval.models import from_embeddings
from kgeval.ranks import RankTable


@pytest.fixture(scope="module")
def nations():
    ds = get_dataset("nations")
    rng = np.random.default_rng(11)
    ent = rng.normal(size=(ds.num_entities, 6)).astype(np.float32)
    rel = rng.normal(size=(ds.num_relations, 6)).astype(np.float32)
    return ds, ent, rel


def _direct(ds, ent, rel):
    from kgeval.workflow.evaluation import evaluate_model

    return evaluate_model(from_embeddings("distmult", ent, rel), ds, split="test", progress=False).rank_table


def _evaluate(ent, rel, *extra, out=None):
    args = ["evaluate", "-d", "nations", "--entity-embeddings", ent, "--relation-embeddings", rel,
            "--interaction", "distmult", *extra]
    return run(*args, *(["-o", out] if out is not None else []))


def test_npz_array_named_after_a_colon(nations, tmp_path):
    """One .npz holding both tables could not be evaluated: the CLI took no array name (click: 'Path
    m.npz:ent does not exist'), and m.npz alone was refused as holding 2 arrays."""
    ds, ent, rel = nations
    np.savez(tmp_path / "m.npz", ent=ent, rel=rel, extra=np.zeros(3))
    out = tmp_path / "run"
    res = _evaluate(f"{tmp_path / 'm.npz'}:ent", f"{tmp_path / 'm.npz'}:rel", out=out)
    assert res.exit_code == 0, res.output
    table, want = RankTable.load(out / "rank_table.npz"), _direct(ds, ent, rel)
    np.testing.assert_array_equal(table.optimistic, want.optimistic)
    np.testing.assert_array_equal(table.pessimistic, want.pessimistic)
    source = json.loads((out / "config.json").read_text())["source"]
    assert source["entity"] == str((tmp_path / "m.npz").resolve()) and source["entity_array"] == "ent"
    assert source["relation_array"] == "rel"
    # a .pt dict of tensors: the same syntax
    torch.save({"ent": torch.from_numpy(ent), "rel": torch.from_numpy(rel)}, tmp_path / "m.pt")
    res = _evaluate(f"{tmp_path / 'm.pt'}:ent", f"{tmp_path / 'm.pt'}:rel", "--format", "json")
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("ent_spec, message", [
    ("{m}", "--entity-embeddings {m} holds 3 arrays ['ent', 'rel', 'extra']: name the one to use as {m}:NAME, "
            "e.g. {m}:ent"),
    ("{m}:nope", "--entity-embeddings {m}:nope: {m} has no array 'nope'; it holds ['ent', 'rel', 'extra']"),
    ("{m}:", "--entity-embeddings {m}:: the array name after ':' is empty"),
    ("{e}:ent", "--entity-embeddings {e}:ent: {e} is not an .npz or .pt file; FILE:NAME names an array of an .npz "
                "file (or a tensor of a .pt dict), a .npy file holds one array"),
    ("{d}/missing.npz:ent", "--entity-embeddings {d}/missing.npz:ent: no such file"),
    ("{d}", "--entity-embeddings {d}: a directory, not an embedding file"),
])
def test_npz_array_errors_name_the_arrays(nations, tmp_path, ent_spec, message):
    _, ent, rel = nations
    np.savez(tmp_path / "m.npz", ent=ent, rel=rel, extra=np.zeros(3))
    np.save(tmp_path / "e.npy", ent)
    np.save(tmp_path / "r.npy", rel)
    names = {"m": tmp_path / "m.npz", "e": tmp_path / "e.npy", "d": tmp_path}
    res = _evaluate(ent_spec.format(**names), tmp_path / "r.npy")
    assert res.exit_code == 2 and res.output == f"error: {message.format(**names)}\n", res.output


def test_python_load_array_names_its_keyword(tmp_path):
    from kgeval.models.embeddings import ArrayChoiceError, load_array

    np.savez(tmp_path / "m.npz", a=np.zeros((2, 2)), b=np.ones((2, 2)))
    with pytest.raises(ArrayChoiceError, match=r"holds 2 arrays \['a', 'b'\]; name the one to use with key="):
        load_array(tmp_path / "m.npz")
    np.testing.assert_array_equal(load_array(tmp_path / "m.npz", key="b"), np.ones((2, 2)))
