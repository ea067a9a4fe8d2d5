"""The one error path of the ``kgeval`` group, for every command."""

from __future__ import annotations

import subprocess
import sys

import pytest
from patience import scaled
from click.testing import CliRunner

from kgeval.cli import main


@pytest.mark.parametrize("exc", [OSError("disk on fire"), PermissionError("no access to disk on fire")])
def test_os_errors_are_one_line_in_every_command(exc, monkeypatch, tmp_path):
    # `kgeval metrics` used to let OSError through as a traceback (only the workflow commands caught it)
    import kgeval.ranks

    def broken(*args, **kwargs):
        raise exc

    monkeypatch.setattr(kgeval.ranks.RankTable, "load", broken)
    path = tmp_path / "r.tsv"
    path.write_text("rank\n1\n")
    res = CliRunner().invoke(main, ["metrics", str(path)])
    assert res.exit_code == 2 and "error:" in res.output and "disk on fire" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_broken_pipe_exits_quietly(monkeypatch):
    import kgeval.data

    def broken(*args, **kwargs):
        raise BrokenPipeError

    monkeypatch.setattr(kgeval.data, "dataset_available", broken)
    res = CliRunner().invoke(main, ["datasets"])
    assert res.exit_code == 1 and "Traceback" not in res.output and "error" not in res.output


@pytest.mark.multiprocess  # a fresh interpreter
def test_python_dash_m_kgeval():
    import os
    from pathlib import Path

    import kgeval

    env = {**os.environ, "PYTHONPATH": str(Path(kgeval.__file__).parents[1])}  # this checkout's kgeval
    res = subprocess.run([sys.executable, "-m", "kgeval", "--help"], capture_output=True, text=True, timeout=scaled(120),
                         env=env)
    assert res.returncode == 0
    for name in ("metrics", "pipeline", "evaluate", "datasets", "hpo"):
        assert name in res.stdout


@pytest.mark.parametrize("args, message", [
    (["adjust", "--dataset", "nations", "--split", "valid", "--no-filter-validation", "mrr=0.3"], "test split only"),
    (["adjust", "--dataset", "nations", "--unfiltered", "--no-filter-validation", "mrr=0.3"], "with --unfiltered"),
    (["evaluate", "--entity-embeddings", "{ent}", "--relation-embeddings", "{rel}", "--interaction", "distmult",
      "-d", "nations", "--split", "valid", "--no-filter-validation"], "test split only"),
])
def test_no_filter_validation_where_it_changes_nothing_is_refused(args, message, tmp_path):
    """--no-filter-validation was accepted and ignored on the validation split and with --unfiltered: adjust
    --split valid printed the same E[null] = 0.3423 with and without it."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.save(tmp_path / "ent.npy", rng.normal(size=(14, 4)))
    np.save(tmp_path / "rel.npy", rng.normal(size=(55, 4)))
    args = [a.format(ent=tmp_path / "ent.npy", rel=tmp_path / "rel.npy") for a in args]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and message in res.output and "--no-filter-validation" in res.output, res.output
    assert "Traceback" not in res.output
    kept = [a for a in args if a != "--no-filter-validation"]
    assert CliRunner().invoke(main, kept).exit_code == 0  # the same command without it runs


@pytest.mark.parametrize("extra, message", [
    (["--interaction", "complex"], "--interaction applies to --entity-embeddings only, not to --model-file"),
    (["--libkge-data", "{dir}"], "--libkge-data applies to --libkge-checkpoint only"),
    (["--trust-pickle"], "--trust-pickle applies to --pykeen-dir only"),
    (["--dist-timeout", "5"], "--dist-timeout applies with --distributed only"),
])
def test_evaluate_refuses_options_its_source_does_not_read(extra, message, tmp_path):
    """evaluate --model-file M --interaction complex evaluated M's own model and ignored --interaction (so
    were --libkge-data, --trust-pickle and --dist-timeout outside their sources)."""
    from kgeval.data import get_dataset
    from kgeval.models import get_model

    ds = get_dataset("nations")
    path = tmp_path / "m.pt"
    get_model("distmult", ds.num_entities, ds.num_relations, dim=4, seed=0).save(
        path, entity_labels=ds.entity_labels, relation_labels=ds.relation_labels)
    args = ["evaluate", "--model-file", str(path), "-d", "nations"]
    assert CliRunner().invoke(main, args).exit_code == 0
    res = CliRunner().invoke(main, args + [a.format(dir=tmp_path) for a in extra])
    assert res.exit_code == 2 and message in res.output and "MRR" not in res.output, res.output


@pytest.mark.parametrize("command", [["evaluate", "--model-file", "{m}"], ["pipeline", "-d", "nations", "-m", "distmult"],
                                     ["hpo", "-d", "nations", "-m", "distmult"]])
def test_an_empty_output_path_is_refused(command, tmp_path, monkeypatch):
    """-o "" was taken as no --output: evaluate wrote nothing and pipeline wrote ./kgeval-output/..., exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    res = CliRunner().invoke(main, [a.format(m=tmp_path / "m") for a in command] + ["-o", ""])
    assert res.exit_code == 2 and "the path is empty" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # nothing written
