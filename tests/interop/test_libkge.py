"""LibKGE checkpoints written by the test in LibKGE's format (LibKGE itself is not installed):
a torch.save dict with a pickled ``kge.config.Config`` and ``model = (state_dict, meta)``."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from patience import scaled
import torch

from kgeval.data import get_dataset
from kgeval.errors import InvalidInputError
from kgeval.interop.libkge import load_libkge, read_checkpoint

sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))

DS = get_dataset("nations")
E, R, D = DS.num_entities, DS.num_relations, 6


class _Boom:
    """Pickles as a call of os.system: loading must not run it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _write(path, options, state, extra=None):
    """torch.save a LibKGE-like checkpoint; kge.config.Config exists only while saving."""
    mod = types.ModuleType("kge.config")

    class Config:
        pass

    Config.__module__, Config.__qualname__ = "kge.config", "Config"
    mod.Config = Config
    sys.modules["kge"], sys.modules["kge.config"] = types.ModuleType("kge"), mod
    try:
        cfg = Config()
        cfg.options, cfg.folder = options, str(path.parent)
        blob = {"type": "train", "epoch": 3, "valid_trace": [{"mrr": 0.1}], "config": cfg,
                "model": (state, {}), "optimizer_state_dict": {"state": {}, "param_groups": []}, "job_id": "x"}
        torch.save({**blob, **(extra or {})}, path)
    finally:
        del sys.modules["kge"], sys.modules["kge.config"]


def _ids(folder, labels, order, kind):
    (folder / f"{kind}_ids.del").write_text("".join(f"{i}\t{labels[j]}\n" for i, j in enumerate(order)))


def _checkpoint(tmp_path, family, *, reciprocal=False, l_norm=None, extra=None):
    """A checkpoint in LibKGE row order (a permutation of the dataset's) and its id files."""
    rng = np.random.default_rng(1)
    ent_order, rel_order = rng.permutation(E), rng.permutation(R)
    _ids(tmp_path, DS.entity_labels, ent_order, "entity")
    _ids(tmp_path, DS.relation_labels, rel_order, "relation")
    n_rel = 2 * R if reciprocal else R
    ent = torch.randn(E, D, generator=torch.Generator().manual_seed(2))
    rel = torch.randn(n_rel, D // 2 if family == "rotate" else D, generator=torch.Generator().manual_seed(3))
    section = {"l_norm": l_norm} if l_norm is not None else {}
    if reciprocal:
        options = {"model": "reciprocal_relations_model",
                   "reciprocal_relations_model": {"base_model": {"type": family, **section}}}
        prefix = "_base_model."
    else:
        options = {"model": family, family: section}
        prefix = ""
    state = {f"{prefix}_entity_embedder._embeddings.weight": ent, f"{prefix}_relation_embedder._embeddings.weight": rel}
    path = tmp_path / "checkpoint_best.pt"
    _write(path, options, state, extra)
    return path, ent, rel, ent_order, rel_order


def _libkge_sp(family, s, p, o, l_norm):
    """LibKGE's score_emb(s, p, o, 'spo') formulas (kge/model/{transe,distmult,complex,rotate}.py)."""
    if family == "transe":
        return -torch.linalg.vector_norm(s + p - o, ord=l_norm, dim=-1)
    if family == "distmult":
        return (s * p * o).sum(-1)
    if family == "complex":
        p_re, p_im = p.chunk(2, dim=-1)
        o_re, o_im = o.chunk(2, dim=-1)
        s_all, r_all = torch.cat((s, s), -1), torch.cat((p_re, p, -p_im), -1)
        return (s_all * r_all * torch.cat((o, o_im, o_re), -1)).sum(-1)
    s_re, s_im = s.chunk(2, dim=-1)
    o_re, o_im = o.chunk(2, dim=-1)
    c, si = torch.cos(p), torch.sin(p)
    d_re, d_im = s_re * c - s_im * si - o_re, s_re * si + s_im * c - o_im
    return -torch.linalg.vector_norm(torch.sqrt(d_re**2 + d_im**2), ord=l_norm, dim=-1)


@pytest.mark.parametrize("family, reciprocal, l_norm", [
    ("transe", False, 1.0), ("transe", True, 2.0), ("distmult", False, None), ("complex", True, None),
    ("complex", False, None), ("rotate", False, 2.0), ("rotate", True, 2.0)])
def test_scores_equal_libkge_formulas_with_dataset_ids(tmp_path, family, reciprocal, l_norm):
    path, ent, rel, eo, ro = _checkpoint(tmp_path, family, reciprocal=reciprocal, l_norm=l_norm)
    model = load_libkge(path, DS)
    # dataset id i has LibKGE row pos[i]
    e_pos, r_pos = np.argsort(eo), np.argsort(ro)
    norm = 1.0 if l_norm is None else l_norm
    h, r, t = 3, 5, 9
    s_emb = ent[e_pos[h]].expand(E, -1)
    tails = _libkge_sp(family, s_emb, rel[r_pos[r]].expand(E, -1), ent[e_pos], norm)
    if reciprocal:  # LibKGE: score_po(p, o) = score_emb(o, p + R, s, 'sp_')
        heads = _libkge_sp(family, ent[e_pos[t]].expand(E, -1), rel[r_pos[r] + R].expand(E, -1), ent[e_pos], norm)
    else:
        heads = _libkge_sp(family, ent[e_pos], rel[r_pos[r]].expand(E, -1), ent[e_pos[t]].expand(E, -1), norm)
    torch.testing.assert_close(model.score_tails([h], [r])[0].detach(), tails, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.score_heads([r], [t])[0].detach(), heads, rtol=1e-5, atol=1e-5)


def test_loading_runs_no_pickled_code(tmp_path):
    marker = tmp_path / "pwned"
    path, *_ = _checkpoint(tmp_path, "distmult", extra={"lr_scheduler_state_dict": _Boom(marker)})
    with pytest.raises(InvalidInputError, match="refused without running its pickled code.*system"):
        read_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize("options, match", [
    ({"model": "conve"}, "'conve' is not supported; supported: complex, distmult, rotate, transe"),
    ({"model": "reciprocal_relations_model", "reciprocal_relations_model": {"base_model": {"type": "conve"}}},
     "'conve' is not supported"),
])
def test_unsupported_family_is_named(tmp_path, options, match):
    path = tmp_path / "c.pt"
    _write(path, options, {"_entity_embedder._embeddings.weight": torch.zeros(2, 2)})
    with pytest.raises(InvalidInputError, match=match):
        read_checkpoint(path)


def test_rotate_l1_and_id_mismatch_are_named(tmp_path):
    path, *_ = _checkpoint(tmp_path, "rotate")  # LibKGE's default l_norm is 1
    with pytest.raises(InvalidInputError, match="l_norm=1.0 is not supported"):
        load_libkge(path, DS)
    path, *_ = _checkpoint(tmp_path, "distmult")
    (tmp_path / "entity_ids.del").write_text("0\tnot-a-country\n" + "".join(f"{i}\tx{i}\n" for i in range(1, E)))
    with pytest.raises(InvalidInputError, match="not in the checkpoint's entity_ids.del"):
        load_libkge(path, DS)
    (tmp_path / "c.pt").write_bytes(b"not a torch file")
    with pytest.raises(InvalidInputError, match="not a readable LibKGE checkpoint"):
        read_checkpoint(tmp_path / "c.pt")


def test_cli_evaluates_a_checkpoint(tmp_path):
    from cli_helpers import run

    path, *_ = _checkpoint(tmp_path, "complex", reciprocal=True)
    res = run("evaluate", "-d", "nations", "--libkge-checkpoint", path, "--libkge-data", tmp_path)
    assert res.exit_code == 0, res.output
    assert "LibKGE model" in res.output and "MRR" in res.output


@pytest.mark.slow  # two interpreter starts under torchrun
def test_cli_distributed_tasks_equals_one_process(tmp_path):
    """``--distributed tasks``: every rank loads the whole checkpoint and ranks a share of the tasks;
    rank 0 prints one process's metrics (``--distributed entities`` refuses the checkpoint by name)."""
    import json

    from cli_helpers import run, torchrun_json

    path, *_ = _checkpoint(tmp_path, "complex", reciprocal=True)
    args = ["evaluate", "-d", "nations", "--libkge-checkpoint", path, "--libkge-data", tmp_path, "--format", "json"]
    one = run(*args)
    assert one.exit_code == 0, one.output
    many = torchrun_json(*args, "--distributed", "tasks", "--dist-timeout", str(round(scaled(60))))
    assert many["metrics"] == json.loads(one.output)["metrics"]


def test_id_files_are_decoded_like_triple_files(tmp_path):
    """entity_ids.del with a byte-order mark and CRLF endings maps as without them; a file that is not
    UTF-8 is a named error, not a UnicodeDecodeError."""
    path, ent, _, ent_order, _ = _checkpoint(tmp_path, "distmult")
    ref = load_libkge(path, DS).entity.weight.detach().clone()
    assert torch.equal(ref[ent_order], ent)  # dataset id ent_order[i] is LibKGE row i
    ids = tmp_path / "entity_ids.del"
    ids.write_bytes(b"\xef\xbb\xbf" + ids.read_bytes().replace(b"\n", b"\r\n"))
    assert torch.equal(load_libkge(path, DS).entity.weight.detach(), ref)
    ids.write_bytes(ids.read_bytes() + "99\tcaf\xe9\n".encode("latin-1"))
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        load_libkge(path, DS)


def test_packaged_model_rows_follow_its_own_ids(tmp_path):
    """``kge package`` stores the ids in row order in checkpoint['dataset']['meta']. They were ignored: an
    entity_ids.del numbering the entities differently mapped every row to another label, silently."""
    rng = np.random.default_rng(5)
    own = rng.permutation(E)  # the packaged model's row i is dataset entity own[i]
    extra = {"type": "package", "dataset": {"num_entities": E, "num_relations": R, "meta": {
        "entity_ids": [DS.entity_labels[j] for j in own], "relation_ids": list(DS.relation_labels)}}}
    path, ent, *_ = _checkpoint(tmp_path, "distmult", extra=extra)  # id files: another permutation
    with pytest.raises(InvalidInputError, match=r"numbers the entities differently.*index \d+"):
        load_libkge(path, DS)
    (tmp_path / "entity_ids.del").unlink()
    (tmp_path / "relation_ids.del").unlink()
    model = load_libkge(path, DS)  # the packaged ids alone
    assert torch.equal(model.entity.weight.detach()[own], ent)
    _ids(tmp_path, DS.entity_labels, own, "entity")  # a file that agrees is accepted
    _ids(tmp_path, DS.relation_labels, range(R), "relation")
    assert torch.equal(load_libkge(path, DS, data_dir=tmp_path).entity.weight.detach()[own], ent)


def test_reciprocal_checkpoint_with_odd_relation_rows_is_refused(tmp_path):
    """Rows r and r + R: an odd count silently dropped the last row and paired the others wrongly."""
    path, ent, rel, *_ = _checkpoint(tmp_path, "distmult", reciprocal=True)
    options = {"model": "reciprocal_relations_model",
               "reciprocal_relations_model": {"base_model": {"type": "distmult"}}}
    _write(path, options, {"_base_model._entity_embedder._embeddings.weight": ent,
                           "_base_model._relation_embedder._embeddings.weight": rel[:-1]})
    with pytest.raises(InvalidInputError, match="even number of relation rows"):
        load_libkge(path, DS)


def test_float64_checkpoint_keeps_its_precision(tmp_path):
    """_weight made every table float32: a float64 model's near-ties (1e-9 apart) became ties."""
    path, ent, rel, *_ = _checkpoint(tmp_path, "distmult")
    ent64, rel64 = ent.double(), rel.double()
    ent64[1::2] = ent64[0::2][: ent64[1::2].shape[0]] + 1e-9
    _write(path, {"model": "distmult", "distmult": {}},
           {"_entity_embedder._embeddings.weight": ent64, "_relation_embedder._embeddings.weight": rel64})
    model = load_libkge(path, DS)
    assert model.entity.weight.dtype == torch.float64


def test_read_ids_refuses_non_ascii_digit_indices_by_name(tmp_path):
    """'²'.isdigit() is True but int('²') raises: an entity_ids.del line '²<TAB>x' was a ValueError traceback."""
    from kgeval.errors import InvalidInputError
    from kgeval.interop.libkge import read_ids

    path = tmp_path / "entity_ids.del"
    path.write_text("0\ta\n²\tb\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="line 2: expected 'index<TAB>id'"):
        read_ids(path, 2, "entity")
    path.write_text("0\ta\n 1\tb\n", encoding="utf-8")
    assert read_ids(path, 2, "entity") == ["a", "b"]


def test_checkpoint_and_dataset_counts_are_named_in_english():
    """'the checkpoint has 2 entitys' read as a typo (the twin of the unknown-name plurals)."""
    from kgeval.errors import InvalidInputError
    from kgeval.interop.libkge import _rows

    with pytest.raises(InvalidInputError, match="the checkpoint has 2 entities but the dataset has 3"):
        _rows(["a", "b"], ["a", "b", "c"], "entity")
    with pytest.raises(InvalidInputError, match="the checkpoint has 2 relations but the dataset has 1"):
        _rows(["r", "s"], ["r"], "relation")


def test_read_ids_parses_as_kgeval_id_files_do(tmp_path):
    """entity_ids.del is parsed by the id files' one parser (id_files.row_label_lines). Before, its own parser:
    indices 1..3 for 3 embeddings said 'holds 3 entity ids but the checkpoint has 3' (now names index 0 missing,
    3 beyond); an id listed twice was returned (['a', 'a']: the load then blamed a dataset label 'not in the
    checkpoint's entity_ids.del'); an index listed twice said only 'expected a new index<TAB>id'; ids kept their
    surrounding spaces ('b ' never matched the dataset's 'b', whose labels are stripped as read) and tabs."""
    from kgeval.errors import InvalidInputError
    from kgeval.interop.libkge import read_ids

    path = tmp_path / "entity_ids.del"
    path.write_text("1\ta\n2\tb\n3\tc\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"holds 3 entity ids but the checkpoint has 3 entity embeddings "
                                                r"\(indices must be 0..2, each once: index\(es\) 0 are not listed, "
                                                r"index\(es\) 3 are beyond\)"):
        read_ids(path, 3, "entity")
    path.write_text("0\ta\n1\tb\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"holds 2 entity ids but the checkpoint has 3 .*index\(es\) 2 are "
                                                r"not listed\)"):
        read_ids(path, 3, "entity")
    path.write_text("0\ta\n1\ta\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="label 'a' is listed twice \\(lines 1 and 2\\)"):
        read_ids(path, 2, "entity")
    path.write_text("0\ta\n0\tb\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="line 2: index 0 is listed twice \\(lines 1 and 2\\)"):
        read_ids(path, 2, "entity")
    path.write_text("0\ta\tx\n1\tb\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="line 1: expected 'index<TAB>id' \\(an index number, a tab, an id\\)"):
        read_ids(path, 2, "entity")
    path.write_text("1\t b \n\n0\ta\n\n", encoding="utf-8")  # any order, blank lines skipped
    assert read_ids(path, 2, "entity") == ["a", "b"]
