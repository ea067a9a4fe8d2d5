"""The output-directory guard of hpo_pipeline / HPOResult.save / kgeval hpo -o DIR: one directory holds one
study's best_pipeline_config.json and trials.json, and another study's are never replaced without --overwrite."""

from __future__ import annotations

import json

import pytest

from kgeval.workflow.hpo import check_output_study, hpo_pipeline
from kgeval.workflow.runs import OutputDirectoryError

FILES = ("best_pipeline_config.json", "trials.json")
FAST = {"dataset": "nations", "model": "distmult", "epochs": 1, "pruner": "none"}


def _files(out):
    return {name: (out / name).read_bytes() for name in FILES}


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_in_memory_storage_runs_without_heartbeat_errors():
    """With an in-memory storage each trial's heartbeat thread opened its own, empty in-memory database and died
    with 'no such table: trial_heartbeats' (a StorageInternalError traceback per trial on stderr)."""
    res = hpo_pipeline(**FAST, n_trials=2, storage="sqlite://")
    assert [t.state.name for t in res.study.trials] == ["COMPLETE", "COMPLETE"]


@pytest.mark.parametrize("memory", ["sqlite://", "sqlite:///:memory:"])
def test_in_memory_study_does_not_replace_another_runs_results(tmp_path, memory):
    """An in-memory storage is a new database on every run, but two such runs into one output directory with one
    study name looked alike to the guard: the second (1 trial) silently replaced the first's files (2 trials,
    its best configuration lost). Now the second is refused before any trial, unless overwrite=True."""
    out = tmp_path / "out"
    first = hpo_pipeline(**FAST, n_trials=2, storage=memory, output_dir=out)
    kept = _files(out)
    assert len(json.loads(kept["trials.json"])) == 2
    with pytest.raises(OutputDirectoryError, match="in-memory database") as info:
        hpo_pipeline(**FAST, n_trials=1, storage=memory, output_dir=out)
    assert "overwrite" in str(info.value)
    assert _files(out) == kept
    first.save(out)  # the run that wrote them may write them again
    assert _files(out) == kept
    other = hpo_pipeline(**FAST, n_trials=1, storage=memory)  # no output_dir: its save is the one refused
    with pytest.raises(OutputDirectoryError, match="in-memory database"):
        other.save(out)
    assert _files(out) == kept
    other.save(out, overwrite=True)
    assert len(json.loads((out / "trials.json").read_text())) == 1
    hpo_pipeline(**FAST, n_trials=1, storage=memory, output_dir=out, overwrite=True)


def test_study_made_anew_in_a_deleted_database_does_not_replace_the_old_results(tmp_path):
    """The sibling with a file database: kgeval-hpo.db deleted (or replaced by a copy of another), the next search
    of the same name made a new study there and replaced the old study's files. The saved study_id tells them
    apart; refused before any trial."""
    out = tmp_path / "out"
    first = hpo_pipeline(**FAST, n_trials=2, output_dir=out)
    kept = _files(out)
    (out / "kgeval-hpo.db").unlink()
    with pytest.raises(OutputDirectoryError, match="another study of the same name") as info:
        hpo_pipeline(**FAST, n_trials=1, output_dir=out)
    assert "overwrite" in str(info.value)
    assert _files(out) == kept
    saved = json.loads(kept["best_pipeline_config.json"])
    assert saved["study_id"] == first.study_id and len(first.study_id) == 32
    hpo_pipeline(**FAST, n_trials=1, output_dir=tmp_path / "fresh")
    resumed = hpo_pipeline(**FAST, n_trials=1, output_dir=tmp_path / "fresh")  # the same study resumes
    assert len(json.loads((tmp_path / "fresh" / "trials.json").read_text())) == 2
    assert json.loads((tmp_path / "fresh" / "best_pipeline_config.json").read_text())["study_id"] == resumed.study_id


def test_cli_in_memory_refused_and_overwrite(tmp_path):
    from click.testing import CliRunner

    from kgeval.cli import main

    def run(*args):
        return CliRunner().invoke(main, [str(a) for a in args])

    out = tmp_path / "out"
    args = ["hpo", "-d", "nations", "-m", "distmult", "--epochs", "1", "--trials", "1", "--storage", "sqlite://",
            "-o", out]
    res = run(*args)
    # the hint said 'resume: run again with --storage sqlite://', which starts a new, empty study
    assert res.exit_code == 0 and "run again with --storage sqlite://" not in res.output, res.output
    assert "in-memory database (sqlite://), gone when this process ends: it cannot be resumed" in res.output
    kept = _files(out)
    res = run(*args)
    assert res.exit_code == 2 and "in-memory database" in res.output and "--overwrite" in res.output, res.output
    assert _files(out) == kept
    res = run(*args, "--overwrite")
    assert res.exit_code == 0, res.output
    assert json.loads((out / "best_pipeline_config.json").read_text())["study_id"] != json.loads(kept[FILES[0]])[
        "study_id"]


def _legacy(out, **fields):
    out.mkdir(parents=True, exist_ok=True)
    (out / "best_pipeline_config.json").write_text(json.dumps(fields))


def test_saved_file_without_storage_reads_sensibly(tmp_path):
    """A best_pipeline_config.json without 'storage' was described as "study 'nations-distmult' in None"."""
    _legacy(tmp_path, study_name="nations-distmult")
    with pytest.raises(OutputDirectoryError) as info:
        check_output_study(tmp_path, "nations-distmult", "sqlite:////x/kgeval-hpo.db")
    assert "in None" not in str(info.value)
    assert "study 'nations-distmult' (its storage not recorded)" in str(info.value)
    _legacy(tmp_path, storage="sqlite:////x/kgeval-hpo.db")
    with pytest.raises(OutputDirectoryError) as info:
        check_output_study(tmp_path, "nations-distmult", "sqlite:////x/kgeval-hpo.db")
    assert "None" not in str(info.value) and "a study of unrecorded name in sqlite:////x/kgeval-hpo.db" in str(
        info.value)


def test_saved_relative_sqlite_url_is_read_against_the_working_directory(tmp_path, monkeypatch):
    """A best_pipeline_config.json written before kgeval saved SQLite URLs absolute may hold sqlite:///h.db, whose
    file depends on the working directory of that search (not recorded). It is read against the current working
    directory, and the message says so; where that names this search's database, the study there must hold the
    saved best trial (a fresh study of the same name in another directory's h.db replaced the files, exit 0)."""
    out = tmp_path / "out"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    hpo_pipeline(**FAST, n_trials=2, storage="sqlite:///h.db", output_dir=out)
    saved = json.loads((out / "best_pipeline_config.json").read_text())
    saved.pop("study_id", None)
    saved["storage"] = "sqlite:///h.db"  # as an older kgeval wrote it
    (out / "best_pipeline_config.json").write_text(json.dumps(saved))
    kept = _files(out)
    # from another directory, with another URL: refused, and the message says how the relative URL was read
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(OutputDirectoryError) as info:
        hpo_pipeline(**FAST, n_trials=1, storage="sqlite:///other.db", output_dir=out)
    assert f"read against the current working directory: sqlite:///{tmp_path / 'b' / 'h.db'})" in str(info.value)
    # from another directory, the same relative URL: a fresh study in b/h.db, not the one of the files
    with pytest.raises(OutputDirectoryError, match="does not hold its best trial") as info:
        hpo_pipeline(**FAST, n_trials=1, storage="sqlite:///h.db", output_dir=out)
    assert "relative SQLite URL" in str(info.value)
    assert _files(out) == kept
    monkeypatch.chdir(tmp_path / "a")  # where it was made: the same study resumes
    res = hpo_pipeline(**FAST, n_trials=1, storage="sqlite:///h.db", output_dir=out)
    assert len(res.study.trials) == 3 and len(json.loads((out / "trials.json").read_text())) == 3


@pytest.mark.parametrize("legacy", [False, True])
def test_a_refused_search_leaves_no_study_behind(tmp_path, legacy):
    """The guard refused a search only after it had made its study: an empty study stayed in the database, with
    this search's settings recorded, and a later search of that name with another metric was refused as "run with
    other settings" although the study had no trial. Now the guard runs before the study is made.
    ``legacy``: a file of an older kgeval without a study id (refused as not holding its best trial)."""
    import optuna

    out = tmp_path / "out"
    hpo_pipeline(**FAST, n_trials=1, output_dir=out)
    if legacy:
        saved = json.loads((out / "best_pipeline_config.json").read_text())
        del saved["study_id"]
        (out / "best_pipeline_config.json").write_text(json.dumps(saved))
    (out / "kgeval-hpo.db").unlink()
    storage = f"sqlite:///{out / 'kgeval-hpo.db'}"
    match = "does not hold its best trial" if legacy else "another study of the same name"
    with pytest.raises(OutputDirectoryError, match=match):
        hpo_pipeline(**FAST, n_trials=1, output_dir=out)
    assert optuna.get_all_study_names(storage) == []
    res = hpo_pipeline(**FAST, n_trials=1, storage=storage, metric="hits@10")  # a new search of that name
    assert [t.state.name for t in res.study.trials] == ["COMPLETE"]
    assert res.study.trials[0].value == res.best_value and res.metric == "hits@10"
