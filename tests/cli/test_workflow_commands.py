"""The workflow commands through click's CliRunner: pipeline, evaluate, datasets, hpo, errors."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from kgeval.cli import main

from cli_helpers import headline_mrr, run

FAST = ["--model", "distmult", "--epochs", "3", "--dim", "16"]


def test_pipeline_prints_table_protocol_and_writes_output(trained):
    out, text = trained
    for needle in ("MRR", "Hits@10", "AMRI", "z-MRR", "adjusted MRR", "MR (arithmetic_mean_rank)",
                   "test split, 201 triples", "filtered: evaluation (201) + training (1,592) + validation (199)",
                   "sides head + tail", "rank types: optimistic, pessimistic, realistic", "table: realistic ranks"):
        assert needle in text
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "losses.json", "manifest.json", "model.pt",
                                                    "rank_table.npz", "results.json"]


def test_pipeline_says_when_it_evaluated_an_earlier_checkpoint(tmp_path):
    """Early stopping restores its best checkpoint even when it runs every epoch: 7 epochs, validation at 3
    and 6, the numbers and model.pt are epoch 6's, but the report said only 'training: 7 epochs'."""
    args = ["pipeline", "-d", "nations", "--model", "distmult", "--epochs", "7", "--dim", "8", "--early-stopping",
            "--frequency", "3", "--patience", "5"]
    res = run(*args, "-o", tmp_path / "a")
    assert res.exit_code == 0, res.output
    losses = json.loads((tmp_path / "a" / "losses.json").read_text())["training"]
    assert losses["epochs_run"] == 7 and not losses["stopped_early"] and losses["best_epoch"] in (3, 6)
    assert f"evaluated the best validation checkpoint (epoch {losses['best_epoch']})" in res.output
    res = run(*args, "-o", tmp_path / "b", "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["best_epoch"] == losses["best_epoch"]
    res = run("pipeline", "-d", "nations", "--model", "distmult", "--epochs", "2", "--dim", "8", "-o", tmp_path / "c")
    assert "checkpoint" not in res.output


def test_evaluate_saved_model_reproduces_numbers(trained):
    out, text = trained
    again = run("evaluate", "--model-file", out)
    assert again.exit_code == 0, again.output
    assert headline_mrr(again.output) == headline_mrr(text)
    from_file = run("evaluate", "--model-file", out / "model.pt", "--dataset", "nations", "--format", "json")
    assert from_file.exit_code == 0, from_file.output
    payload = json.loads(from_file.output)
    assert f"{payload['metrics']['both.realistic.inverse_harmonic_mean_rank']:.4f}" == headline_mrr(text)
    valid = run("evaluate", "--model-file", out, "--split", "valid")
    assert valid.exit_code == 0 and "validation split, 199 triples" in valid.output


def test_pipeline_json_and_default_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run("pipeline", "-d", "nations", *FAST, "--format", "json", "--relation-whitelist",
              "militaryalliance,embassy,intergovorgs")
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert 0 < payload["metrics"]["both.realistic.inverse_harmonic_mean_rank"] <= 1
    assert len(payload["configuration"]["restriction"]["relations"]) == 3
    [out] = (tmp_path / "kgeval-output").iterdir()
    assert out.name.startswith("nations-distmult-") and (out / "model.pt").is_file()


def test_datasets_lists_statistics_and_availability(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEVAL_DATA", str(tmp_path))
    res = run("datasets")
    assert res.exit_code == 0, res.output
    assert re.search(r"nations\s+14\s+55\s+1,592\s+199\s+201\s+packaged", res.output)
    assert re.search(r"fb15k-237\s+14,541\s+237\s+272,115\s+17,535\s+20,466\s+no", res.output)
    assert "KGEVAL_DATA" in res.output
    one = run("datasets", "kinships", "--format", "json")
    assert one.exit_code == 0 and json.loads(one.output)["num_entities"] == 104


def test_hpo_command(tmp_path):
    storage = f"sqlite:///{tmp_path / 'h.db'}"
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"dim": [8, 16]}))
    args = ["hpo", "-d", "nations", "-m", "distmult", "--trials", "1", "--epochs", "2", "--storage", storage,
            "--search-space", space]
    res = run(*args)
    assert res.exit_code == 0, res.output
    assert "best validation" in res.output and "model.dim" in res.output
    res2 = run(*args, "--format", "json")
    assert res2.exit_code == 0, res2.output
    assert json.loads(res2.output)["trials"] == {"complete": 2}  # resumed the same study


@pytest.mark.parametrize(
    "args, message",
    [
        (["pipeline", "-d", "natons", *FAST], "Did you mean: nations"),
        (["pipeline", "-d", "nations", "-m", "complx"], "Did you mean: complex"),
        (["pipeline", "-d", "nations", *FAST, "--patience", "2"], "--early-stopping"),
        (["pipeline", "-d", "nations", *FAST, "--stopping-metric", "mr"], "--stopping-metric needs --early-stopping"),
        (["pipeline", "-d", "nations", *FAST, "--early-stopping", "--stopping-metric", "mrrr"], "mrrr"),
        (["pipeline", "-d", "nations", *FAST, "--entity-whitelist", "burma"], "matches none"),
        (["pipeline", "-d", "nations", *FAST, "--relation-whitelist", "nosuchrelation"], "unknown relation"),
        # '²'.isdigit() is True but int('²') a ValueError: a traceback, exit 1
        (["pipeline", "-d", "nations", *FAST, "--relation-whitelist", "\u00b2"], "unknown relation"),
        (["pipeline", "-d", "nations", *FAST, "--entity-whitelist", "usa,\u00b2"], "unknown entity"),
        (["evaluate", "--model-file", "{bad}", "--dataset", "nations"], "not a readable kgeval model file"),
        (["evaluate", "--model-file", "{bad}"], "--dataset is required"),
        (["evaluate", "--model-file", "{empty_dir}"], "no config.json"),
        (["hpo", "-d", "nations", "-m", "distmult", "--trials", "1", "--storage", "nosuchdb://x"], "cannot open"),
        (["datasets", "wn19"], "Did you mean"),
    ],
)
def test_errors_are_one_line_exit_2(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"this is not a model")
    (tmp_path / "empty").mkdir()
    args = [a.replace("{bad}", str(bad)).replace("{empty_dir}", str(tmp_path / "empty")) for a in args]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and message in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "kgeval-output").exists()  # nothing half-written


def test_model_from_another_dataset(trained):
    out, _ = trained
    res = run("evaluate", "--model-file", out, "--dataset", "umls")
    assert res.exit_code == 2 and "another dataset" in res.output


def test_directory_dataset_round_trip(tmp_path):
    import shutil
    from importlib import resources

    data = tmp_path / "mygraph"
    data.mkdir()
    for stem in ("train", "valid", "test"):
        src = resources.files("kgeval.data").joinpath("builtin", "nations", f"{stem}.txt")
        (data / f"{stem}.tsv").write_bytes(src.read_bytes())
    out = tmp_path / "run"
    res = run("pipeline", "-d", data, *FAST, "--output", out)
    assert res.exit_code == 0, res.output
    assert json.loads((out / "config.json").read_text())["configuration"]["dataset"] == str(data)
    shutil.copytree(out, tmp_path / "copy")
    again = run("evaluate", "--model-file", tmp_path / "copy")  # dataset found again from config.json
    assert again.exit_code == 0, again.output
    assert headline_mrr(again.output) == headline_mrr(res.output)


def test_json_inputs_with_a_byte_order_mark_are_read(tmp_path):
    """Windows editors save JSON with a UTF-8 BOM; json.loads refused it ('Unexpected UTF-8 BOM')."""
    from kgeval._json import read_json

    path = tmp_path / "space.json"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"model.dim": [4, 8]}')
    assert read_json(path) == {"model.dim": [4, 8]}


@pytest.mark.parametrize("command", ["pipeline", "hpo"])
def test_seed_out_of_range_names_the_option(command):
    from click.testing import CliRunner

    from kgeval.cli import main

    res = CliRunner().invoke(main, [command, "--dataset", "nations", "--model", "distmult", "--seed", "-1"])
    assert res.exit_code == 2 and res.output.startswith("error: --seed must be an integer in [0, 2**32), got -1")


def test_json_payload_holds_every_number_the_table_prints(trained):
    """--format json left out the table's 'p vs chance' row: the p-value was printed as text only."""
    from kgeval.cli.common import HEADLINE_METRICS
    from kgeval.results import Results

    out, _ = trained
    text, as_json = run("evaluate", "--model-file", out), run("evaluate", "--model-file", out, "--format", "json")
    assert text.exit_code == 0 and as_json.exit_code == 0, text.output + as_json.output
    payload = json.loads(as_json.output)["metrics"]
    saved = Results.load_json(out / "results.json")
    for label, name in HEADLINE_METRICS:
        row = next(ln for ln in text.output.splitlines() if ln.startswith(f"{label} ({name})"))
        printed = row[len(f"{label} ({name})"):].split()
        for side, shown in zip(("head", "tail", "both"), printed):
            key = f"{side}.realistic.{name}"
            assert payload[key] == saved[key]
            assert float(shown) == pytest.approx(payload[key], rel=0.06, abs=5e-5), key
    assert payload["both.realistic.log10_p_inverse_harmonic_mean_rank"] == \
        saved["both.realistic.log10_p_inverse_harmonic_mean_rank"]


@pytest.mark.parametrize(("space", "extra", "message"), [
    ({"dim": [4, 8]}, ["--set", "model.dim=16"], "'model.dim' is both fixed with --set"),
    ({"training.epochs": [1, 2]}, ["--epochs", "3"], "'training.epochs' is both fixed with --epochs"),
    ({"seed": [1, 2]}, ["--seed", "5"], "'seed' is both fixed with --seed"),
])
def test_hpo_refuses_a_value_both_fixed_and_searched(tmp_path, space, extra, message):
    """--set model.dim=16 with a space over dim trained dims 4 and 8 and never 16, exit 0."""
    db = tmp_path / "f.db"
    (tmp_path / "s.json").write_text(json.dumps(space))
    res = run("hpo", "-d", "nations", "-m", "distmult", "--trials", "1", "--storage", f"sqlite:///{db}",
              "--search-space", tmp_path / "s.json", *extra)
    assert res.exit_code != 0 and message in res.output, res.output
    assert not db.exists()


def test_hpo_default_space_leaves_out_what_set_fixes(tmp_path):
    """Without --search-space, --set model.dim=4 was overridden by the default space's dims (32..128)."""
    res = run("hpo", "-d", "nations", "-m", "distmult", "--trials", "1", "--epochs", "1", "--pruner", "none",
              "--storage", f"sqlite:///{tmp_path / 'd.db'}", "--set", "model.dim=4", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert "model.dim" not in out["best_params"] and out["pipeline"]["model_kwargs"]["dim"] == 4


@pytest.mark.parametrize("metric, stops_on", [(None, "both.realistic.inverse_harmonic_mean_rank"),
                                              ("hits@3", "both.realistic.hits_at_3")])
def test_hpo_printed_command_runs_an_early_stopping_search(tmp_path, metric, stops_on):
    """A space over early_stopping.* made every trial stop early, but the printed command lacked
    --early-stopping, so it failed: 'error: --patience and --frequency need --early-stopping'. A search of
    hits@3 stops its trials on hits@3: the command says so with --stopping-metric (it printed no command, as
    --early-stopping alone stops on MRR)."""
    (tmp_path / "s.json").write_text(json.dumps({"early_stopping.patience": [1], "early_stopping.frequency": [1]}))
    res = run("hpo", "-d", "nations", "-m", "distmult", "--trials", "1", "--epochs", "2", "--pruner", "none",
              "--storage", f"sqlite:///{tmp_path / 'e.db'}", "--search-space", tmp_path / "s.json",
              *(["--metric", metric] if metric else []))
    assert res.exit_code == 0, res.output
    line = [x for x in res.output.splitlines() if x.startswith("test the best configuration: kgeval pipeline")][0]
    assert ("--stopping-metric" in line) == (metric is not None), line
    again = run(*line.split("kgeval ", 1)[1].split(), "-o", tmp_path / "run", "--format", "json")
    assert again.exit_code == 0, again.output
    stopping = json.loads(again.output)["configuration"]["early_stopping"]
    from kgeval.workflow.hpo import _canonical_metric

    assert stopping["frequency"] == 1 and _canonical_metric(stopping["metric"]) == stops_on


def test_pipeline_stops_on_the_given_metric(tmp_path):
    """--stopping-metric mr: the stopper keeps the checkpoint of the smallest validation mean rank."""
    res = run("pipeline", "-d", "nations", "--model", "distmult", "--epochs", "4", "--dim", "8", "--early-stopping",
              "--frequency", "1", "--patience", "9", "--stopping-metric", "mr", "-o", tmp_path / "a")
    assert res.exit_code == 0, res.output
    training = json.loads((tmp_path / "a" / "losses.json").read_text())["training"]
    config = json.loads((tmp_path / "a" / "config.json").read_text())["configuration"]
    assert config["early_stopping"]["metric"] == "mr"
    history = dict(map(tuple, training["metric_history"]))  # epoch -> validation mean rank
    assert len(history) == 4 and all(v >= 1 for v in history.values())
    assert training["best_epoch"] == min(history, key=history.get)
    assert training["best_metric"] == min(history.values())


@pytest.mark.parametrize("command, args, message", [
    ("compare", ["--seed", "-1"], "--seed must be an integer in [0, 2**32), got -1"),
    ("compare", ["--confidence", "2"], "--confidence must be a number in (0, 1), got 2.0"),
    ("compare", ["--confidence", "nan"], "--confidence must be a number in (0, 1), got nan"),
    ("report", ["--seed", "-1"], "--seed must be an integer in [0, 2**32), got -1"),
    ("report", ["--seed", str(2**32)], f"--seed must be an integer in [0, 2**32), got {2**32}"),
    ("report", ["--confidence", "1.5"], "--confidence must be a number in (0, 1), got 1.5"),
])
def test_compare_and_report_name_their_options(trained, tmp_path, command, args, message):
    """compare --seed -1 said 'seed must be ...' and report --confidence 2 'confidence must be ...' (the Python
    arguments); report --seed -1 even wrote a report, exit 0, with every interval cell empty and no comparison."""
    out, _ = trained
    runs = [out, out] if command == "compare" else [out, "-o", tmp_path / "r.md"]
    res = run(command, *runs, *args)
    assert res.exit_code == 2 and res.output == f"error: {message}\n", res.output
    assert not (tmp_path / "r.md").exists()


def test_python_api_keeps_naming_its_arguments(trained):
    from kgeval import compare
    from kgeval.errors import InvalidInputError
    from kgeval.report import build_report

    out, _ = trained
    with pytest.raises(InvalidInputError, match=r"^seed must be an integer"):
        compare(out, out, seed=-1)
    with pytest.raises(InvalidInputError, match=r"^confidence must be a number in \(0, 1\), got 2"):
        build_report([out], confidence=2)


@pytest.mark.parametrize("content, got", [("{}", "an empty object"), ("[1]", "a JSON array"), ("3", "a JSON number")])
def test_hpo_search_space_file_is_named(tmp_path, content, got):
    """An empty or non-object --search-space file was refused as 'search_space must be a non-empty mapping'."""
    path = tmp_path / "space.json"
    path.write_text(content)
    res = run("hpo", "-d", "nations", "-m", "distmult", "--epochs", "1", "--trials", "1", "--search-space", path,
              "-o", tmp_path / "h")
    assert res.exit_code == 2 and f"--search-space {path}: expected a non-empty JSON object" in res.output, res.output
    assert got in res.output and "search_space" not in res.output.replace(str(path), "FILE")


def test_hpo_resumed_with_other_settings_names_no_python_argument(tmp_path):
    """The refusal of a resumed study with other settings ended 'or give another study_name' on the command line."""
    args = ["hpo", "-d", "nations", "-m", "distmult", "--epochs", "1", "--trials", "1", "-o", tmp_path / "h"]
    assert run(*args).exit_code == 0
    res = run(*args, "--metric", "hits@10")
    assert res.exit_code == 2 and "or give the search another study name" in res.output, res.output
    assert "study_name" not in res.output


def test_hpo_output_of_another_study_is_never_replaced(tmp_path, monkeypatch):
    """`kgeval hpo -o DIR --study-name other` (or another --model with the default study name) replaced the
    best_pipeline_config.json of DIR's study nations-distmult with its own, without a word: its best
    configuration (dim 64, lr 0.00173) was lost. Now refused before any trial; the same study resumes."""
    out = tmp_path / "h"
    args = ["hpo", "-d", "nations", "-m", "distmult", "--epochs", "1", "--trials", "1", "-o", out]
    assert run(*args).exit_code == 0
    before = {name: (out / name).read_bytes() for name in ("best_pipeline_config.json", "trials.json")}
    assert json.loads(before["best_pipeline_config.json"])["study_name"] == "nations-distmult"
    storage = f"sqlite:///{tmp_path / 'other.db'}"
    for extra in (["--study-name", "other"], ["--storage", storage], ["-m", "transe"]):
        res = run(*args, *extra)
        assert res.exit_code == 2 and f"output directory {out} holds the results of study 'nations-distmult'" \
            in res.output and "give this search another output directory" in res.output, res.output
        assert "best validation" not in res.output
        assert {name: (out / name).read_bytes() for name in before} == before
    # no trial ran for the refused searches: the other study holds none
    import optuna

    assert "other" not in optuna.study.get_all_study_names(f"sqlite:///{out / 'kgeval-hpo.db'}")
    res = run(*args, "--format", "json")  # the same study resumes and rewrites its files
    assert res.exit_code == 0 and json.loads(res.output)["trials"] == {"complete": 2}, res.output
    assert len(json.loads((out / "trials.json").read_text())) == 2
    # the same database spelled as a relative SQLite URL is the same study
    monkeypatch.chdir(tmp_path)
    res = run(*args, "--storage", "sqlite:///h/kgeval-hpo.db", "--format", "json")
    assert res.exit_code == 0 and json.loads(res.output)["trials"] == {"complete": 3}, res.output
    # a trials.json of no known study is not replaced either
    other = tmp_path / "o"
    other.mkdir()
    (other / "trials.json").write_text("[]")
    res = run("hpo", "-d", "nations", "-m", "distmult", "--epochs", "1", "--trials", "1", "-o", other)
    assert res.exit_code == 2 and "trials.json without best_pipeline_config.json" in res.output, res.output
    assert (other / "trials.json").read_text() == "[]"


def test_hpo_result_save_refuses_another_studys_directory(tmp_path):
    """The Python API's HPOResult.save: the same rule, named as a kgeval error."""
    from kgeval.workflow.hpo import hpo_pipeline
    from kgeval.workflow.runs import OutputDirectoryError

    first = hpo_pipeline(dataset="nations", model="distmult", epochs=1, n_trials=1, output_dir=tmp_path / "a")
    second = hpo_pipeline(dataset="nations", model="distmult", epochs=1, n_trials=1, output_dir=tmp_path / "b",
                          study_name="second")
    kept = (tmp_path / "a" / "best_pipeline_config.json").read_bytes()
    with pytest.raises(OutputDirectoryError, match="holds the results of study 'nations-distmult'"):
        second.save(tmp_path / "a")
    assert (tmp_path / "a" / "best_pipeline_config.json").read_bytes() == kept
    first.save(tmp_path / "a")  # its own directory: rewritten
    with pytest.raises(OutputDirectoryError, match="holds the results of study 'nations-distmult'"):
        hpo_pipeline(dataset="nations", model="distmult", epochs=1, n_trials=1, output_dir=tmp_path / "a",
                     study_name="third")


def test_hpo_relative_sqlite_storage_is_one_database_per_working_directory(tmp_path, monkeypatch):
    """--storage sqlite:///h.db names a different database in each working directory, but it was saved as typed:
    a search started from b/ with the same URL and -o DIR (a fresh study nations-distmult in b/h.db) was taken
    for a/'s study and replaced DIR's files, exit 0 (trials.json went from a/'s 2 trials to b/'s 1). Now the
    URL is made absolute when the search starts: the b/ search is refused, a/'s study resumes from b/ through
    any URL of a/h.db, and the saved storage and resume hint name a/h.db."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    out = tmp_path / "out"
    args = ["hpo", "-d", "nations", "-m", "distmult", "--epochs", "1", "-o", out, "--format", "json"]
    monkeypatch.chdir(tmp_path / "a")
    res = run(*args, "--trials", "2", "--storage", "sqlite:///h.db")
    assert res.exit_code == 0, res.output
    want = f"sqlite:///{tmp_path / 'a' / 'h.db'}"
    assert json.loads(res.output)["storage"] == want
    assert json.loads((out / "best_pipeline_config.json").read_text())["storage"] == want
    kept = {name: (out / name).read_bytes() for name in ("best_pipeline_config.json", "trials.json")}
    monkeypatch.chdir(tmp_path / "b")
    res = run(*args, "--trials", "1", "--storage", "sqlite:///h.db")
    assert res.exit_code == 2 and f"holds the results of study 'nations-distmult' in {want}" in res.output, res.output
    assert f"in sqlite:///{tmp_path / 'b' / 'h.db'}" in res.output
    assert {name: (out / name).read_bytes() for name in kept} == kept
    res = run(*args, "--trials", "1", "--storage", "sqlite:///../a/h.db")  # a/'s study, from b/
    assert res.exit_code == 0 and json.loads(res.output)["trials"] == {"complete": 3}, res.output
    assert len(json.loads((out / "trials.json").read_text())) == 3


@pytest.mark.parametrize("url, want", [
    ("sqlite:///h.db", "sqlite:///{cwd}/h.db"),
    ("sqlite+pysqlite:///x/../h.db?timeout=5", "sqlite+pysqlite:///{cwd}/h.db?timeout=5"),
    ("sqlite:////abs/h.db", "sqlite:////abs/h.db"),
    ("sqlite://", "sqlite://"),
    ("sqlite:///:memory:", "sqlite:///:memory:"),
    ("postgresql://u:p@host/db", "postgresql://u:p@host/db"),
])
def test_absolute_sqlite_url(tmp_path, monkeypatch, url, want):
    from kgeval.workflow.study import absolute_sqlite_url

    monkeypatch.chdir(tmp_path)
    assert absolute_sqlite_url(url) == want.format(cwd=tmp_path)
