"""Run directories read without trusting them (issue 31): files that disagree (class 1), manifests and
run files that point outside the run, are not regular files, are huge or nested without end (class 2).

The oracle of every number is the rank table itself, read here with numpy alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from patience import scaled

import kgeval
from run_oracle import oracle_mrr
from kgeval.cli import main
from kgeval.errors import InvalidInputError
from kgeval.rankfile import read_rank_file
from kgeval.report import build_report
from kgeval.workflow import CorruptRunError, load_run
from kgeval.workflow.runs import verify_manifest, write_manifest

MRR = "both.realistic.inverse_harmonic_mean_rank"


def load_run_results(run):
    from kgeval.workflow.runs import load_run_results as load

    return load(run)


def copy(saved: Path, tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(saved, tmp_path / name, symlinks=True))


def edit_json(run: Path, name: str, change, *, manifest: bool = True) -> None:
    """Change ``name``'s JSON with ``change(data)`` and regenerate the manifest (as an attacker would)."""
    path = run / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    if manifest:
        write_manifest(run)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ------------------------------------------------------------------ class 1: one source of truth
def test_intact_run_report_compare_evaluate_agree_with_the_rank_table(saved, tmp_path):
    truth = oracle_mrr(saved)
    report = build_report([saved], num_resamples=200)
    row = next(r for r in report.runs[0].headline if r["key"] == MRR)
    assert row["value"] == pytest.approx(truth, rel=1e-12)
    assert row["ci_low"] < truth < row["ci_high"]
    other = copy(saved, tmp_path, "twin")
    table = kgeval.compare(saved, other, metrics=("mrr",), num_resamples=100, seed=0)
    records = table.to_dict("records") if hasattr(table, "to_dict") else table
    assert records[0]["value_a"] == pytest.approx(truth, rel=1e-12)
    res = cli("evaluate", "--model-file", saved, "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["metrics"][MRR] == pytest.approx(truth, rel=1e-12)


@pytest.mark.parametrize("change, what", [
    (lambda d: d["metrics"].__setitem__(MRR, 0.99), MRR),
    (lambda d: d["metrics"].__setitem__("head.realistic.hits_at_10", 0.5), "head.realistic.hits_at_10"),
    (lambda d: d["metrics"].__setitem__("both.realistic.p_inverse_harmonic_mean_rank", 0.5),
     "p_inverse_harmonic_mean_rank"),
    (lambda d: d["null_moments"]["both"]["inverse_harmonic_mean_rank"].__setitem__("expected_value", 0.3),
     "null mean"),
    (lambda d: d["protocol"].__setitem__("num_tasks", 7), "num_tasks"),
])
def test_results_that_disagree_with_the_rank_table_are_refused_by_every_command(saved, tmp_path, change, what):
    run = copy(saved, tmp_path)
    edit_json(run, "results.json", change)
    verify_manifest(run)  # the regenerated manifest passes: only the agreement check can see it
    with pytest.raises(CorruptRunError, match=rf"results.json disagrees with rank_table.npz.*{what}"):
        build_report([run], num_resamples=200)
    with pytest.raises(CorruptRunError, match="disagrees with rank_table.npz"):
        kgeval.compare(run, copy(saved, tmp_path, "twin"), metrics=("mrr",), num_resamples=100)
    for args in (["report", run, "-o", tmp_path / "r.json"], ["compare", run, saved, "--resamples", "100"],
                 ["evaluate", "--model-file", run]):
        res = cli(*args)
        assert res.exit_code == 2 and "disagrees with rank_table.npz" in res.output, (args, res.output)
    assert not (tmp_path / "r.json").exists()


def test_evaluate_says_when_the_model_is_not_the_one_of_the_rank_table(saved, tmp_path):
    """model.pt replaced by another seed's (same configuration), manifest rewritten: evaluate showed other
    numbers than report and compare without a word."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        other = kgeval.pipeline(dataset="nations", model="distmult", model_kwargs={"dim": 8}, epochs=2, random_seed=7,
                                progress=False).save(tmp_path / "other")
    run = copy(saved, tmp_path)
    shutil.copy(other / "model.pt", run / "model.pt")
    write_manifest(run)
    res = cli("evaluate", "--model-file", run, "--format", "json")
    assert res.exit_code == 0, res.output
    assert "ranks differ from the saved rank table" in res.output and f"{oracle_mrr(saved):.4f} saved" in res.output
    res = cli("evaluate", "--model-file", saved, "--format", "json")  # intact: the same ranks, no warning
    assert res.exit_code == 0 and "differ" not in res.output, res.output


def test_a_manifest_must_list_every_run_file(saved, tmp_path):
    run = copy(saved, tmp_path)
    (run / "manifest.json").write_text(json.dumps({"format": "kgeval-run-manifest", "version": 1, "files": {}}))
    with pytest.raises(CorruptRunError, match="does not list config.json, results.json, rank_table.npz, model.pt"):
        load_run(run)
    manifest = json.loads((saved / "manifest.json").read_text())
    del manifest["files"]["results.json"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptRunError, match=r"does not list results.json,"):
        load_run(run)
    res = cli("evaluate", "--model-file", run)
    assert res.exit_code == 2 and "does not list results.json" in res.output


# ------------------------------------------------------------------ class 2: paths, file kinds, sizes, nesting
@pytest.mark.parametrize("name", ["/proc/self/pagemap", "/dev/zero", "../run2/config.json", "sub/x", ".", "..", ""])
def test_manifest_entries_outside_the_run_are_refused_fast(saved, tmp_path, name):
    run = copy(saved, tmp_path)
    edit_json(run, "manifest.json", lambda d: d["files"].__setitem__(name, {"sha256": "0" * 64, "bytes": 0}),
              manifest=False)
    start = time.monotonic()
    with pytest.raises(CorruptRunError, match="not a file name inside the run directory"):
        load_run(run)
    for args in (["evaluate", "--model-file", run], ["compare", run, saved], ["report", run, "-o", tmp_path / "r.md"]):
        res = cli(*args)
        assert res.exit_code == 2 and "not a file name inside" in res.output, res.output
    assert time.monotonic() - start < scaled(30)  # /proc/self/pagemap was read forever


@pytest.mark.parametrize("entry", [None, [], "x", {"sha256": 1, "bytes": 0}, {"sha256": "0", "bytes": -1},
                                   {"sha256": "0", "bytes": True}, {"sha256": "0"}])
def test_manifest_entries_of_the_wrong_shape_are_refused(saved, tmp_path, entry):
    run = copy(saved, tmp_path)
    edit_json(run, "manifest.json", lambda d: d["files"].__setitem__("config.json", entry), manifest=False)
    with pytest.raises(CorruptRunError, match="the entry of 'config.json' is not"):
        load_run(run)


def test_listed_files_that_leave_the_run_or_are_not_regular_are_refused(saved, tmp_path):
    run = copy(saved, tmp_path)
    (run / "losses.json").unlink()
    (run / "losses.json").symlink_to("/dev/zero")
    with pytest.raises(CorruptRunError, match="losses.json is a link leaving the run directory"):
        load_run(run)
    (run / "losses.json").unlink()
    os.mkfifo(run / "losses.json")  # a reader of a FIFO waits for a writer forever
    with pytest.raises(CorruptRunError, match="losses.json is not a regular file"):
        load_run(run)


def test_a_run_without_manifest_still_reads_no_device_or_fifo(saved, tmp_path):
    run = copy(saved, tmp_path)
    (run / "manifest.json").unlink()
    (run / "config.json").unlink()
    (run / "config.json").symlink_to("/dev/zero")  # was a MemoryError after reading all memory
    with pytest.warns(UserWarning, match="no manifest.json"), \
            pytest.raises(CorruptRunError, match="config.json is a link leaving the run directory"):
        load_run(run)
    (run / "config.json").unlink()
    os.mkfifo(run / "config.json")
    with pytest.warns(UserWarning), pytest.raises(CorruptRunError, match="config.json is not a regular file"):
        load_run(run)
    (run / "config.json").unlink()
    shutil.copy(saved / "config.json", run / "config.json")
    (run / "rank_table.npz").unlink()
    os.mkfifo(run / "rank_table.npz")
    with pytest.warns(UserWarning), pytest.raises(CorruptRunError, match="rank_table.npz is not a regular file"):
        load_run_results(run)


def test_a_symlink_loop_is_a_named_error(saved, tmp_path):
    run = copy(saved, tmp_path)
    (run / "losses.json").unlink()
    (run / "losses.json").symlink_to("losses.json")
    with pytest.raises(CorruptRunError, match="losses.json cannot be read"):
        load_run(run)


def test_a_symlink_inside_the_run_is_followed(saved, tmp_path):
    run = copy(saved, tmp_path)
    (run / "config.json").rename(run / "config-real.json")
    (run / "config.json").symlink_to("config-real.json")
    assert load_run(run).config.model.name == "distmult"


@pytest.mark.parametrize("name", ["config.json", "results.json", "manifest.json"])
@pytest.mark.parametrize("text", ["[" * 100_000, "{\"a\":" * 100_000, "[" * 65 + "]" * 65])
def test_deep_nesting_is_a_named_error(saved, tmp_path, name, text):
    run = copy(saved, tmp_path)
    (run / name).write_text(text)
    if name != "manifest.json":
        write_manifest(run)
    with pytest.raises(InvalidInputError, match=rf"{name}.*nested deeper than 64 levels"):
        load_run_results(run)


def test_oversized_json_is_refused_before_reading_it_whole(saved, tmp_path, monkeypatch):
    from kgeval.workflow import run_files

    run = copy(saved, tmp_path)
    monkeypatch.setattr(run_files, "MAX_RUN_JSON_BYTES", 1000)  # config.json is ~2 kB
    with pytest.raises(InvalidInputError, match=r"config.json: not a kgeval pipeline configuration \(larger than 1,"):
        load_run(run)


def test_replicate_sets_list_only_directories_inside_them(saved, tmp_path):
    from kgeval.workflow.replicates import REPLICATES_FILE, load_replicates

    root = tmp_path / "set"
    root.mkdir()
    copy(saved, root, "seed1")
    outside = copy(saved, tmp_path, "elsewhere")
    for runs in (["seed1", str(outside)], ["seed1", "../elsewhere"], ["seed1", "."]):
        (root / REPLICATES_FILE).write_text(json.dumps({"runs": runs}))
        with pytest.raises(InvalidInputError, match="which is not a directory inside"):
            load_replicates(root)
    (root / REPLICATES_FILE).write_text(json.dumps({"runs": ["seed1"]}))
    assert load_replicates(root) == [root / "seed1"]


def test_rank_files_must_be_regular_files(tmp_path):
    fifo = tmp_path / "ranks.tsv"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInputError, match="cannot read rank file .*: not a regular file"):
        kgeval.RankTable.load(fifo)
    with pytest.raises(InvalidInputError, match="cannot read rank file .*: not a regular file"):
        read_rank_file(fifo)
    npz = tmp_path / "ranks.npz"
    os.mkfifo(npz)
    with pytest.raises(InvalidInputError, match="cannot read rank file .*: not a regular file"):
        kgeval.RankTable.load(npz)


@pytest.mark.multiprocess  # a fresh interpreter
def test_the_cli_refuses_a_run_with_a_dev_zero_config_in_a_subprocess(saved, tmp_path):
    """The whole command, memory-limited: before, it read /dev/zero until MemoryError (or the OOM killer)."""
    run = copy(saved, tmp_path)
    (run / "config.json").unlink()
    (run / "config.json").symlink_to("/dev/zero")
    write_manifest(run)  # skips the link: the manifest must then still list config.json
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30));"
            "from kgeval.cli import main; sys.argv = ['kgeval', 'evaluate', '--model-file', sys.argv[1]]; main()")
    proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=scaled(300),
                          env={**os.environ, "PYTHONPATH": str(Path(kgeval.__file__).parents[1])})
    assert proc.returncode == 2, proc.stderr
    assert "does not list config.json" in proc.stderr


# ------------------------------------------------------------------ siblings: other JSON readers
def test_hpo_best_configuration_is_read_bounded(tmp_path):
    from kgeval.workflow.hpo import check_output_study
    from kgeval.workflow.runs import OutputDirectoryError

    best = tmp_path / "best_pipeline_config.json"
    best.symlink_to("/dev/zero")  # was read until memory ran out
    with pytest.raises(OutputDirectoryError, match="best_pipeline_config.json: .*not a regular file"):
        check_output_study(tmp_path, "study", "sqlite:///x.db")
    best.unlink()
    best.write_text("[" * 100_000)  # was a RecursionError traceback
    with pytest.raises(OutputDirectoryError, match="nested deeper than 64 levels"):
        check_output_study(tmp_path, "study", "sqlite:///x.db")


def test_hpo_set_values_nested_without_end_are_a_named_error():
    res = cli("hpo", "--dataset", "nations", "--model", "distmult", "--set", "training.batch_size=" + "[" * 100_000,
              "--trials", "1")
    assert res.exit_code == 2 and "--set training.batch_size: the value is nested too deeply" in res.output


def test_results_load_json_refuses_non_finite_literals(saved, tmp_path):
    from kgeval.results import Results

    key = '"both.realistic.hits_at_1": '
    text = (saved / "results.json").read_text().replace(key, key + 'NaN, "x": ', 1)
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(InvalidInputError, match="NaN is not a JSON number"):
        Results.load_json(tmp_path / "r.json")
