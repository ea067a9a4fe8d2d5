"""`kgeval pipeline` / `kgeval evaluate` against the reliability cases of issue 7, through CliRunner."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest

from cli_helpers import run
from kgeval.workflow.runs import verify_manifest

FAST = ["--model", "distmult", "--epochs", "2", "--dim", "8"]


def _swapped_nations(directory: Path) -> Path:
    directory.mkdir()
    swap = {"usa": "uk", "uk": "usa"}
    for stem in ("train", "valid", "test"):
        text = resources.files("kgeval.data").joinpath("builtin", "nations", f"{stem}.txt").read_text()
        rows = [[swap.get(x, x) for x in line.split("\t")] for line in text.splitlines()]
        (directory / f"{stem}.txt").write_text("".join("\t".join(r) + "\n" for r in rows))
    return directory


def test_evaluate_refuses_another_dataset_unless_allowed(trained, tmp_path):
    out, _ = trained
    other = _swapped_nations(tmp_path / "swapped")
    for model_file in (out, out / "model.pt"):
        res = run("evaluate", "--model-file", model_file, "-d", other)
        assert res.exit_code == 2 and "not the dataset the model was trained on" in res.output, res.output
        assert "Traceback" not in res.output and "MRR" not in res.output
    res = run("evaluate", "--model-file", out, "-d", other, "--allow-dataset-mismatch")
    assert res.exit_code == 0, res.output
    assert "warning: dataset" in res.output and "MRR" in res.output


def test_evaluate_refuses_a_corrupted_model_file(trained, tmp_path):
    import shutil

    out, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    blob = bytearray((copy / "model.pt").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (copy / "model.pt").write_bytes(bytes(blob))
    res = run("evaluate", "--model-file", copy)
    assert res.exit_code == 2 and "model.pt has changed since it was saved" in res.output, res.output
    (copy / "manifest.json").unlink()
    (copy / "model.pt").write_bytes((out / "model.pt").read_bytes())
    res = run("evaluate", "--model-file", copy)  # an old run without a manifest: a warning, then numbers
    assert res.exit_code == 0 and "warning:" in res.output and "no manifest.json" in res.output


def test_unwritable_output_is_refused_before_training(tmp_path, monkeypatch):
    import kgeval.workflow.pipeline

    monkeypatch.setattr(kgeval.workflow.pipeline, "pipeline", lambda *a, **k: pytest.fail("trained anyway"))
    (tmp_path / "somefile").write_text("x")
    res = run("pipeline", "-d", "nations", *FAST, "-o", tmp_path / "somefile" / "out")
    assert res.exit_code == 2 and "somefile is not a directory" in res.output, res.output


def test_save_failing_after_training_keeps_the_run(tmp_path, monkeypatch, tmp_path_factory):
    import kgeval.workflow.runs as runs

    real = runs.save_run
    target = tmp_path / "out"

    def flaky(result, directory, **kw):
        if Path(directory) == target:
            raise OSError(28, "No space left on device")
        return real(result, directory, **kw)

    monkeypatch.setattr(runs, "save_run", flaky)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path_factory.mktemp("fallback")))  # not /tmp
    res = run("pipeline", "-d", "nations", *FAST, "-o", target)
    assert res.exit_code == 2, res.output
    assert "MRR (inverse_harmonic_mean_rank)" in res.output  # the metrics are printed anyway
    m = re.search(r"error: cannot save the run to \S+: No space left on device; the run was saved to (\S+) instead",
                  res.output)
    assert m, res.output
    assert verify_manifest(m.group(1))


def test_symlinked_output(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "results").symlink_to(real)
    res = run("pipeline", "-d", "nations", *FAST, "-o", tmp_path / "results")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "results").is_symlink() and verify_manifest(real)


def test_default_output_names_differ_per_seed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for seed in (1, 2):
        assert run("pipeline", "-d", "nations", *FAST, "--seed", seed).exit_code == 0
    names = sorted(p.name for p in (tmp_path / "kgeval-output").iterdir())
    assert len(names) == 2 and names[0].startswith("nations-distmult-seed1-")


@pytest.mark.parametrize(
    "args, message",
    [
        (["pipeline", "-d", "nations", *FAST, "--seed", str(2**70)], "--seed must be an integer in [0, 2**32)"),
        (["pipeline", "-d", "nations", *FAST, "--seed", "-1"], "--seed must be an integer in [0, 2**32)"),
        (["evaluate", "--model-file", "{dir}"], "not a kgeval run directory"),
        (["evaluate", "--model-file", "{dir}/missing.pt", "-d", "nations"], "does not exist"),
    ],
)
def test_errors_are_one_line(args, message, tmp_path):
    res = run(*[a.replace("{dir}", str(tmp_path)) for a in args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_hpo_and_pipeline_share_the_seed_rule(tmp_path):
    storage = f"sqlite:///{tmp_path / 'h.db'}"
    res = run("hpo", "-d", "nations", "-m", "distmult", "--trials", "1", "--epochs", "1", "--storage", storage,
              "--seed", "-1")
    assert res.exit_code == 2 and "--seed must be an integer in [0, 2**32), got -1" in res.output


def test_evaluate_output_checked_first_and_written_through_a_symlink(trained, tmp_path, monkeypatch):
    out, _ = trained
    res = run("evaluate", "--model-file", out, "-o", tmp_path / "nosuchdir" / "r.json")
    assert res.exit_code == 2 and "nosuchdir is not an existing directory" in res.output and "MRR" not in res.output
    real = tmp_path / "real.json"
    real.write_text("{}")
    (tmp_path / "link.json").symlink_to(real)
    res = run("evaluate", "--model-file", out, "-o", tmp_path / "link.json")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "link.json").is_symlink() and '"metrics"' in real.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]  # no probe or temp file left


def test_evaluate_output_says_when_it_replaces_a_file(trained, tmp_path):
    """evaluate -o over an existing results file replaced it without a word."""
    out, _ = trained
    target = tmp_path / "r.json"
    first = run("evaluate", "--model-file", out, "-o", target)
    assert first.exit_code == 0 and "replaced" not in first.output
    second = run("evaluate", "--model-file", out, "-o", target)
    assert second.exit_code == 0, second.output
    assert f"note: replaced the existing file {target}" in second.stderr
    assert "replaced" not in second.stdout  # stdout stays the table (or the JSON document)


def test_a_runs_model_file_is_evaluated_as_the_run_was(tmp_path):
    """RUN/model.pt was evaluated with bare defaults while RUN used the run's settings: a run evaluated on two
    relations gave its MRR through RUN and the MRR over all 55 relations through RUN/model.pt."""
    out = tmp_path / "wl"
    res = run("pipeline", "-d", "nations", "-m", "distmult", "--epochs", "2", "--dim", "8",
              "--relation-whitelist", "embassy,intergovorgs", "-o", out, "--format", "json")
    assert res.exit_code == 0, res.output
    trained = json.loads(res.output)["metrics"]
    for source in (["--model-file", out], ["--model-file", out / "model.pt", "-d", "nations"]):
        again = run("evaluate", *source, "--format", "json")
        assert again.exit_code == 0, again.output
        assert json.loads(again.output)["metrics"] == trained, source
    every = run("evaluate", "--model-file", out / "model.pt", "-d", "nations", "--relation-whitelist",
                "embassy,intergovorgs,militaryalliance", "--format", "json")
    assert every.exit_code == 0 and json.loads(every.output)["metrics"] != trained  # an explicit whitelist wins


def test_replicate_save_failing_after_training_keeps_the_set(tmp_path, monkeypatch, tmp_path_factory):
    """A replicate set whose save failed at its second run left OUTPUT/seed42/ alone (no seed43/, no
    replicates.json) and a bare error: every trained run but one was lost. Each replicate is now saved as it
    finishes; the one that failed goes to a temporary directory, named in the error line."""
    import kgeval.workflow.runs as runs

    real = runs.save_run
    target = tmp_path / "out"

    def flaky(result, directory, **kw):
        if result.config.seed == 43 and str(directory).startswith(str(tmp_path)):
            raise OSError(28, "No space left on device")
        return real(result, directory, **kw)

    monkeypatch.setattr(runs, "save_run", flaky)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path_factory.mktemp("fallback")))  # not /tmp
    res = run("pipeline", "-d", "nations", *FAST, "--replicates", "2", "-o", target)
    assert res.exit_code == 2, res.output
    assert not [p for p in tmp_path.rglob(".*")]  # nothing partial or hidden
    assert sorted(p.name for p in target.iterdir()) == ["seed42"] and verify_manifest(target / "seed42")
    assert re.search(r"seed 42: MRR 0\.\d+.*\nseed 43: MRR 0\.\d+", res.output), res.output  # before saving
    assert "2 replicates (seeds 42..43)" in res.output  # the summary is printed anyway
    m = re.search(r"error: cannot save \S+seed43: No space left on device; seed 42 is saved in \S+; seed 43 was "
                  r"saved to (\S+) instead", res.output)
    assert m, res.output
    assert verify_manifest(m.group(1))
