"""No command overwrites a file a run relies on (issue 31, class 4): ``-o RUN/results.json`` replaced the run's
results and left it corrupt for every later command; so did a symlink or a hard link to it."""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest
from cli_helpers import run

from kgeval.workflow import load_run

FAST = ["--model", "distmult", "--epochs", "2", "--dim", "8"]


def digests(directory) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture
def rundir(trained, tmp_path):
    return shutil.copytree(trained[0], tmp_path / "run")


@pytest.mark.parametrize("name", ["results.json", "rank_table.npz", "manifest.json", "config.json", "model.pt"])
def test_evaluate_and_report_refuse_a_run_file_as_output(rundir, name):
    before = digests(rundir)
    for args in (["evaluate", "--model-file", rundir, "-o", rundir / name],
                 ["evaluate", "--model-file", rundir / "model.pt", "--dataset", "nations", "-o", rundir / name],
                 ["report", rundir, "-o", rundir / name, "--format", "json", "--resamples", "200"]):
        res = run(*args)
        assert res.exit_code == 2, (args, res.output)
        assert f"refusing to write {rundir / name}: it is {name} of the run" in res.output, res.output
    assert digests(rundir) == before
    load_run(rundir)


def test_links_and_dot_dot_to_a_run_file_are_refused(rundir, tmp_path):
    before = digests(rundir)
    (tmp_path / "soft.json").symlink_to(rundir / "results.json")
    os.link(rundir / "results.json", tmp_path / "hard.json")
    dotdot = rundir / ".." / rundir.name / "results.json"
    for out in (tmp_path / "soft.json", tmp_path / "hard.json", dotdot):
        for args in (["evaluate", "--model-file", rundir, "-o", out],
                     ["report", rundir, "-o", out, "--format", "json", "--resamples", "200"]):
            res = run(*args)
            assert res.exit_code == 2 and "it is results.json of the run" in res.output, (out, res.output)
    assert digests(rundir) == before


def test_another_runs_files_are_protected_too(rundir, trained, tmp_path):
    other = shutil.copytree(trained[0], tmp_path / "other")
    res = run("evaluate", "--model-file", rundir, "-o", other / "results.json")
    assert res.exit_code == 2 and f"it is results.json of the run {other}" in res.output, res.output


def test_a_new_file_beside_the_run_is_written_and_the_run_stays_intact(rundir):
    res = run("evaluate", "--model-file", rundir, "-o", rundir / "re-evaluation.json")
    assert res.exit_code == 0, res.output
    res = run("report", rundir, "-o", rundir / "report.md", "--resamples", "200")
    assert res.exit_code == 0, res.output
    assert (rundir / "re-evaluation.json").is_file() and (rundir / "report.md").is_file()
    load_run(rundir)
    res = run("evaluate", "--model-file", rundir)
    assert res.exit_code == 0, res.output
