"""Run directories (issue 7): manifests, dataset identity, unique names, atomic no-replace saves,
output checks before training, symlinked outputs, umask."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import warnings
from importlib import resources
from pathlib import Path

import pytest

import kgeval
from kgeval.data import get_dataset
from kgeval.errors import InvalidInputError
from kgeval.models import load_model
from kgeval.workflow import CorruptRunError, DatasetMismatchError, OutputDirectoryError, load_run
from kgeval.workflow.runs import check_dataset, check_output, default_run_name, verify_manifest

FAST = dict(model="distmult", model_kwargs={"dim": 8}, epochs=2, progress=False)


@pytest.fixture(scope="module")
def result():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return kgeval.pipeline(dataset="nations", **FAST)


def nations_copy(directory: Path, swap: tuple[str, str] | None = None, rename: tuple[str, str] | None = None) -> Path:
    """Nations as a directory; ``swap`` exchanges two entity labels, ``rename`` renames one."""
    directory.mkdir()
    for stem in ("train", "valid", "test"):
        text = resources.files("kgeval.data").joinpath("builtin", "nations", f"{stem}.txt").read_text()
        rows = [line.split("\t") for line in text.splitlines()]
        mapping = {}
        if swap:
            mapping = {swap[0]: swap[1], swap[1]: swap[0]}
        if rename:
            mapping = {rename[0]: rename[1]}
        rows = [[mapping.get(h, h), r, mapping.get(t, t)] for h, r, t in rows]
        (directory / f"{stem}.txt").write_text("".join("\t".join(row) + "\n" for row in rows))
    return directory


# ------------------------------------------------------------------ item 2: a model on another dataset
def test_other_label_maps_or_splits_are_refused(result, tmp_path):
    out = result.save(tmp_path / "run")
    run = load_run(out)
    model = run.load_model()
    assert model.entity_labels == get_dataset("nations").entity_labels
    swapped = nations_copy(tmp_path / "swapped", swap=("usa", "uk"))  # same sizes, same label set
    with pytest.raises(DatasetMismatchError, match=r"not the dataset the model was trained on.*training"):
        run.load_dataset(model, str(swapped))
    renamed = nations_copy(tmp_path / "renamed", rename=("usa", "aaa"))  # ids shift
    with pytest.raises(DatasetMismatchError, match=r"entity id 0 is 'brazil' in the training data but 'aaa'"):
        check_dataset(model, get_dataset(renamed))  # the labels in model.pt suffice, no config.json needed
    with pytest.warns(UserWarning, match="evaluating anyway"):
        ds = run.load_dataset(model, str(swapped), allow_dataset_mismatch=True)
    assert ds.num_entities == 14
    same = nations_copy(tmp_path / "same")
    check_dataset(model, get_dataset(same), run.metadata)  # identical files: accepted


# ------------------------------------------------------------------ item 3: corrupted files
def test_flipped_bytes_in_model_file_are_refused(result, tmp_path):
    out = result.save(tmp_path / "run")
    blob = bytearray((out / "model.pt").read_bytes())
    middle = len(blob) // 2
    blob[middle:middle + 100] = bytes(b ^ 0xFF for b in blob[middle:middle + 100])
    (out / "model.pt").write_bytes(bytes(blob))
    with pytest.raises(CorruptRunError, match="model.pt has changed since it was saved"):
        load_run(out)
    (out / "results.json").unlink()
    with pytest.raises(CorruptRunError, match="results.json is missing"):
        verify_manifest(out)


def test_run_without_manifest_warns_but_loads(result, tmp_path):
    out = result.save(tmp_path / "run")
    (out / "manifest.json").unlink()
    with pytest.warns(UserWarning, match="no manifest.json"):
        run = load_run(out)
    assert run.config == result.config


@pytest.mark.parametrize(("other", "match"), [
    ({"model": "complex", "model_kwargs": {"dim": 4}}, "name 'distmult' in config.json but 'complex'"),
    ({"model_kwargs": {"dim": 16}}, "dim 8 in config.json but 16"),
    ({"model_kwargs": {"dim": 8, "inverse_relations": False}}, "inverse_relations True in config.json but False"),
])
def test_a_model_file_from_another_run_is_refused(result, tmp_path, other, match):
    """model.pt copied in from another run, in a run without a manifest (or with a rewritten one): the other
    model (Nations ComplEx dim 4, test MRR 0.4323) was evaluated under this run's DistMult configuration."""
    from click.testing import CliRunner

    from kgeval.cli import main
    from kgeval.workflow.runs import write_manifest

    out = result.save(tmp_path / "run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        foreign = kgeval.pipeline(dataset="nations", **{**FAST, **other}).save(tmp_path / "foreign")
    shutil.copy(foreign / "model.pt", out / "model.pt")
    write_manifest(out)
    with pytest.raises(CorruptRunError, match=match):
        load_run(out).load_model()
    for args in (["--model-file", str(out)], ["--model-file", str(out / "model.pt"), "-d", "nations"]):
        res = CliRunner().invoke(main, ["evaluate", *args])
        assert res.exit_code == 2 and "is not the model of its run's configuration" in res.output, res.output
    shutil.copy(foreign / "model.pt", out / "model.pt")
    load_model(out / "model.pt")  # the file itself is intact: only its pairing with config.json is refused
    assert load_run(foreign).load_model().name == (other.get("model") or "distmult")


# ------------------------------------------------------------------ item 6: concurrent runs
def test_default_run_names_are_unique():
    names = {default_run_name("nations", "distmult", 1) for _ in range(2000)}  # 16 random bits collided here
    assert len(names) == 2000
    assert all(n.startswith("nations-distmult-seed1-") for n in names)


def test_racing_saves_never_replace_each_other(result, tmp_path):
    target = tmp_path / "same-name"
    barrier = threading.Barrier(4)
    outcomes = []

    def save():
        barrier.wait()
        try:
            outcomes.append(("saved", result.save(target)))
        except OutputDirectoryError as exc:
            outcomes.append(("refused", exc.saved_to))

    threads = [threading.Thread(target=save) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [kind for kind, _ in outcomes].count("saved") == 1
    assert verify_manifest(target)
    for kind, kept in outcomes:
        if kept is not None:
            assert verify_manifest(kept)  # a run that lost the race is kept beside, complete
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("foreign", [None, "theirs.txt"])
def test_target_appearing_during_the_save_is_not_replaced(result, tmp_path, monkeypatch, foreign):
    target = tmp_path / "out"
    real_save = type(result.model).save

    def save_while_another_process_creates_target(self, path, **kw):
        target.mkdir()
        if foreign:
            (target / foreign).write_text("not yours")
        real_save(self, path, **kw)

    monkeypatch.setattr(type(result.model), "save", save_while_another_process_creates_target)
    with pytest.raises(OutputDirectoryError, match="appeared while this run was saving") as info:
        result.save(target)
    assert sorted(p.name for p in target.iterdir()) == ([foreign] if foreign else [])
    assert verify_manifest(info.value.saved_to)


# ------------------------------------------------------------------ item 7: unwritable output directory
def test_output_checked_before_any_work(tmp_path):
    (tmp_path / "somefile").write_text("x")
    with pytest.raises(OutputDirectoryError, match="somefile is not a directory"):
        check_output(tmp_path / "somefile" / "out")
    for overwrite in (False, True):  # an existing file is named as such, and never replaced
        with pytest.raises(OutputDirectoryError, match="somefile exists and is a file, not a directory"):
            check_output(tmp_path / "somefile", overwrite=overwrite)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(OutputDirectoryError, match="not empty"):
        check_output(tmp_path / "busy")
    assert check_output(tmp_path / "new" / "deeper") == (tmp_path / "new" / "deeper").absolute()
    assert not (tmp_path / "new").exists()  # checking creates nothing


# ------------------------------------------------------------------ item 8: symlinked output directory
def test_symlinked_output_is_written_through(result, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "results"
    link.symlink_to(real)
    result.save(link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert verify_manifest(real) and (real / "model.pt").is_file()


# ------------------------------------------------------------------ umask
def test_run_respects_umask(result, tmp_path):
    old = os.umask(0o022)
    try:
        out = result.save(tmp_path / "run")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o644}


def test_model_save_is_atomic(result, tmp_path, monkeypatch):
    path = tmp_path / "m.pt"
    result.model.save(path)
    before = path.read_bytes()
    import torch

    def broken(obj, f, *a, **k):
        f.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        result.model.save(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["m.pt"]
    assert load_model(path).num_entities == 14


def test_not_a_run_directory(tmp_path):
    with pytest.raises(InvalidInputError, match="not a kgeval run directory"):
        load_run(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"configuration": {"model": {"name": "nosuch"}}}))
    with pytest.warns(UserWarning), pytest.raises(InvalidInputError, match="config.json: invalid configuration: unknown model"):
        load_run(tmp_path)
    shutil.rmtree(tmp_path)
