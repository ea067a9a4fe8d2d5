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


def test_colons_in_file_and_array_names(nations, tmp_path):
    """A file whose name holds ':' loads (whole, or FILE:NAME); an array name holding ':' (a .pt dict's
    'enc:ent') was cut at its own ':', and the existing m.pt was refused as 'k.pt:enc:ent: no such file'."""
    ds, ent, rel = nations
    want = _direct(ds, ent, rel)
    np.save(tmp_path / "a:b.npy", ent)
    np.savez(tmp_path / "c:d.npz", ent=ent, rel=rel)
    torch.save({"enc:ent": torch.from_numpy(ent), "rel": torch.from_numpy(rel)}, tmp_path / "k.pt")
    for i, (e, r) in enumerate([(tmp_path / "a:b.npy", f"{tmp_path / 'c:d.npz'}:rel"),
                                (f"{tmp_path / 'c:d.npz'}:ent", f"{tmp_path / 'k.pt'}:rel"),
                                (f"{tmp_path / 'k.pt'}:enc:ent", f"{tmp_path / 'c:d.npz'}:rel")]):
        out = tmp_path / f"run{i}"
        res = _evaluate(e, r, out=out)
        assert res.exit_code == 0, res.output
        np.testing.assert_array_equal(RankTable.load(out / "rank_table.npz").optimistic, want.optimistic)
    source = json.loads((tmp_path / "run2" / "config.json").read_text())["source"]
    assert source["entity"] == str((tmp_path / "k.pt").resolve()) and source["entity_array"] == "enc:ent"
    res = _evaluate(f"{tmp_path / 'k.pt'}:enc:nope", tmp_path / "a:b.npy")
    assert res.exit_code == 2 and "has no array 'enc:nope'; it holds ['enc:ent', 'rel']" in res.output, res.output


def test_python_load_array_names_its_keyword(tmp_path):
    from kgeval.models.embeddings import ArrayChoiceError, load_array

    np.savez(tmp_path / "m.npz", a=np.zeros((2, 2)), b=np.ones((2, 2)))
    with pytest.raises(ArrayChoiceError, match=r"holds 2 arrays \['a', 'b'\]; name the one to use with key="):
        load_array(tmp_path / "m.npz")
    np.testing.assert_array_equal(load_array(tmp_path / "m.npz", key="b"), np.ones((2, 2)))


def _shuffled(nations, seed=5):
    """The tables with their rows in a random order, and the label of each row."""
    ds, ent, rel = nations
    rng = np.random.default_rng(seed)
    pe, pr = rng.permutation(ds.num_entities), rng.permutation(ds.num_relations)
    return ent[pe], rel[pr], [ds.entity_labels[i] for i in pe], [ds.relation_labels[i] for i in pr]


def _write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_id_files_map_rows_to_the_dataset_labels(nations, tmp_path):
    """Rows in any order other than the dataset's sorted labels were evaluated as if they were in it, silently
    (no way to say which row is which label): these shuffled tables gave MRR 0.3770 for their true 0.3385."""
    ds, ent, rel = nations
    want = _direct(ds, ent, rel)
    sent, srel, ent_labels, rel_labels = _shuffled(nations)
    np.save(tmp_path / "e.npy", sent)
    np.save(tmp_path / "r.npy", srel)
    e, r = tmp_path / "e.npy", tmp_path / "r.npy"
    layouts = {
        "one label per line": (_write(tmp_path / "e.txt", ent_labels), _write(tmp_path / "r.txt", rel_labels)),
        # LibKGE's .del: row<TAB>label, here in reverse order of the rows
        "row<TAB>label": (_write(tmp_path / "e.del", [f"{i}\t{x}" for i, x in enumerate(ent_labels)][::-1]),
                          _write(tmp_path / "r.del", [f"{i}\t{x}" for i, x in enumerate(rel_labels)])),
    }
    import gzip  # PyKEEN's entity_to_id.tsv.gz: a header line, gzip

    for kind, labels in (("entity", ent_labels), ("relation", rel_labels)):
        with gzip.open(tmp_path / f"{kind}_to_id.tsv.gz", "wt") as fh:
            fh.write("id\tlabel\n" + "".join(f"{i}\t{x}\n" for i, x in enumerate(labels)))
    layouts["pykeen"] = (tmp_path / "entity_to_id.tsv.gz", tmp_path / "relation_to_id.tsv.gz")
    for name, (eids, rids) in layouts.items():
        out = tmp_path / name.replace(" ", "_").replace("<TAB>", "_")
        res = _evaluate(e, r, "--entity-ids", eids, "--relation-ids", rids, out=out)
        assert res.exit_code == 0, (name, res.output)
        table = RankTable.load(out / "rank_table.npz")
        np.testing.assert_array_equal(table.optimistic, want.optimistic, err_msg=name)
        np.testing.assert_array_equal(table.pessimistic, want.pessimistic, err_msg=name)
        source = json.loads((out / "config.json").read_text())["source"]
        assert source["entity_ids"] == str(eids.resolve()) and source["relation_ids"] == str(rids.resolve())
    # the same tables without id files are read in the wrong order: other ranks (what the id files prevent)
    out = tmp_path / "no_ids"
    assert _evaluate(e, r, out=out).exit_code == 0
    assert not np.array_equal(RankTable.load(out / "rank_table.npz").optimistic, want.optimistic)


def test_relation_ids_with_inverse_rows(nations, tmp_path):
    """2R relation rows (row r + R the inverse of r, in the file's numbering): the id file names the R relations."""
    ds, ent, _ = nations
    rng = np.random.default_rng(2)
    rel2 = rng.normal(size=(2 * ds.num_relations, 6)).astype(np.float32)
    perm = rng.permutation(ds.num_relations)
    shuffled = np.concatenate([rel2[:ds.num_relations][perm], rel2[ds.num_relations:][perm]])
    np.save(tmp_path / "e.npy", ent)
    np.save(tmp_path / "r.npy", shuffled)
    rids = _write(tmp_path / "r.txt", [ds.relation_labels[i] for i in perm])
    out = tmp_path / "run"
    res = _evaluate(tmp_path / "e.npy", tmp_path / "r.npy", "--relation-ids", rids, out=out)
    assert res.exit_code == 0, res.output
    from kgeval.workflow.evaluation import evaluate_model

    direct = evaluate_model(from_embeddings("distmult", ent, rel2, inverse_relations=True), ds, split="test",
                            progress=False).rank_table
    np.testing.assert_array_equal(RankTable.load(out / "rank_table.npz").optimistic, direct.optimistic)


@pytest.mark.parametrize("which, lines, message", [
    ("entity", lambda L: L[:-1], "--entity-ids {f} lists 13 entity labels but --entity-embeddings has 14 rows"),
    ("entity", lambda L: L + ["usa"], "label 'usa' is listed twice (lines 13 and 15)"),
    ("entity", lambda L: L[:-1] + ["atlantis"], "--entity-ids {f}: 1 of its labels are not entities of dataset Nations: "
                                                      "'atlantis'"),
    ("entity", lambda L: L[:5] + [""] + L[5:-1], "--entity-ids {f}, line 6: an empty line"),
    ("entity", lambda L: [f"{i}\t{x}" for i, x in enumerate(L)][:-1] + ["0\tusa"], "row 0 is listed twice"),
    ("entity", lambda L: [f"{i + 1}\t{x}" for i, x in enumerate(L)], "row(s) 0 are not listed, row(s) 14 are beyond"),
    ("entity", lambda L: [f"{i}\t{x}" for i, x in enumerate(L)][:-1] + [L[-1]], "line 14: expected 'row<TAB>label'"),
    # '²'.isdigit() is True but int('²') a ValueError: a traceback instead of the named error
    ("entity", lambda L: [f"{i}\t{x}" for i, x in enumerate(L)][:-1] + [f"\u00b2\t{L[-1]}"],
     "line 14: expected 'row<TAB>label'"),
    ("relation", lambda L: L[:-1], "--relation-ids {f} lists 54 relation labels but --relation-embeddings has 55 "
                                   "rows (expected 54, or 108 with inverse relations)"),
    ("relation", lambda L: [], "--relation-ids {f}: the file lists no labels"),
])
def test_id_file_errors_are_named(nations, tmp_path, which, lines, message):
    ds, ent, rel = nations
    np.save(tmp_path / "e.npy", ent)
    np.save(tmp_path / "r.npy", rel)
    labels = list(ds.entity_labels if which == "entity" else ds.relation_labels)
    f = _write(tmp_path / "ids.txt", lines(labels))
    res = _evaluate(tmp_path / "e.npy", tmp_path / "r.npy", f"--{which}-ids", f)
    assert res.exit_code == 2 and message.format(f=f) in res.output and "Traceback" not in res.output, res.output


def test_missing_labels_are_named(nations, tmp_path):
    """An id file naming 13 of Nations' 14 entities for a 13-row table: 'usa' has no row."""
    ds, ent, rel = nations
    np.save(tmp_path / "e.npy", ent[:-1])
    np.save(tmp_path / "r.npy", rel)
    f = _write(tmp_path / "ids.txt", ds.entity_labels[:-1])
    res = _evaluate(tmp_path / "e.npy", tmp_path / "r.npy", "--entity-ids", f)
    assert res.exit_code == 2 and f"--entity-ids {f}: 1 of dataset Nations's entities have no row: 'ussr'" in res.output, \
        res.output
    # without an id file the short table is refused by its row count
    res = _evaluate(tmp_path / "e.npy", tmp_path / "r.npy")
    assert res.exit_code == 2 and "13 rows but the dataset has 14 entities" in res.output, res.output


def test_id_files_apply_to_embedding_files_only(nations, tmp_path, trained_model_file=None):
    ds, _, _ = nations
    from kgeval.models import get_model

    path = tmp_path / "m.pt"
    get_model("distmult", ds.num_entities, ds.num_relations, dim=4, seed=0).save(
        path, entity_labels=ds.entity_labels, relation_labels=ds.relation_labels)
    f = _write(tmp_path / "ids.txt", ds.entity_labels)
    res = run("evaluate", "--model-file", path, "-d", "nations", "--entity-ids", f)
    assert res.exit_code == 2 and "--entity-ids applies to --entity-embeddings only" in res.output, res.output


def test_shard_embeddings_reads_the_rows_of_its_ids(nations):
    """--distributed entities with --entity-ids: each rank's entity ids lo..hi come from rows rows[lo:hi]."""
    from kgeval.models import shard_embeddings

    ds, ent, rel = nations
    sent, _, labels, _ = _shuffled(nations)
    rows = np.array([labels.index(x) for x in ds.entity_labels])
    whole = from_embeddings("distmult", ent, rel)
    for rank in range(3):
        part = shard_embeddings("distmult", sent, rel, rank=rank, world=3, rows=rows)
        lo, hi = part.entity_range
        assert torch.equal(part.local.entity.weight, whole.entity.weight[lo:hi])


@pytest.mark.slow  # two interpreter starts under torchrun
def test_torchrun_entities_with_id_files_equal_one_process(nations, tmp_path):
    """--distributed entities with --entity-ids / --relation-ids: each rank reads the rows of its entity ids
    (from the memory-mapped .npy), and rank 0 prints the metrics of the tables in the dataset's order."""
    from cli_helpers import torchrun_json

    ds, ent, rel = nations
    sent, srel, ent_labels, rel_labels = _shuffled(nations)
    np.save(tmp_path / "e.npy", sent)
    np.save(tmp_path / "r.npy", srel)
    args = ["evaluate", "-d", "nations", "--entity-embeddings", tmp_path / "e.npy", "--relation-embeddings",
            tmp_path / "r.npy", "--interaction", "distmult", "--entity-ids", _write(tmp_path / "e.txt", ent_labels),
            "--relation-ids", _write(tmp_path / "r.txt", rel_labels), "--format", "json"]
    got = torchrun_json(*args, "--distributed", "entities")
    np.save(tmp_path / "e0.npy", ent)
    np.save(tmp_path / "r0.npy", rel)
    res = _evaluate(tmp_path / "e0.npy", tmp_path / "r0.npy", "--format", "json")
    assert res.exit_code == 0, res.output
    assert got["metrics"] == pytest.approx(json.loads(res.output)["metrics"], rel=1e-12, nan_ok=True)
