"""One grammar for every ``kgeval`` command (issue 32): a shared option means the same thing everywhere,
old spellings still work with a warning, PyKEEN's spellings get a suggestion, and progress appears on a
terminal before the run ends."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import click
import pytest
from click.testing import CliRunner

from kgeval.cli import main
from kgeval.cli.grammar import DEPRECATED, FORMATS, PYKEEN_SPELLINGS

#: option -> (its spellings, its type's name) in every command that has it
SHARED = {
    "--dataset": ({"--dataset", "-d"}, "text"),
    "--model": ({"--model", "-m"}, "text"),
    "--output": ({"--output", "-o"}, None),  # a file or a directory: each command's help states which
    "--metric": ({"--metric"}, "text"),
    "--resamples": ({"--resamples"}, "integer range"),
    "--seed": ({"--seed"}, "integer"),
    "--data-dir": ({"--data-dir"}, "directory"),
    "--split": ({"--split"}, "split"),
    "--side": ({"--side"}, "choice"),
    "--rank-type": ({"--rank-type"}, "text"),
    "--confidence": ({"--confidence"}, "float"),
    "--progress": ({"--progress"}, "boolean"),
    "--format": ({"--format"}, "choice"),
}
#: defaults that differ on purpose: a training seed vs the seed of a resampling; the report bootstraps an
#: interval for every headline metric of every run (1,000 resamples keep it seconds), compare's p-values
#: need the resolution of 10,000
EXCEPTIONS = {"--seed": {"pipeline": 42, "hpo": None, "report": 0, "compare": 0},
              "--resamples": {"report": 1000, "compare": 10000}}


def _options():
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option):
                yield name, param


def test_every_command_has_a_help_and_no_short_option_means_two_things():
    shorts: dict[str, set[str]] = {}
    for name, param in _options():
        long = max(param.opts, key=len)
        for opt in param.opts:
            if not opt.startswith("--"):
                shorts.setdefault(opt, set()).add(long)
    assert {k: v for k, v in shorts.items() if len(v) > 1} == {}
    for name, command in main.commands.items():
        assert command.help and CliRunner().invoke(main, [name, "--help"]).exit_code == 0


@pytest.mark.parametrize("option", sorted(SHARED))
def test_a_shared_option_is_the_same_in_every_command(option):
    spellings, type_name = SHARED[option]
    found = [(name, p) for name, p in _options() if option in p.opts]
    assert found, option
    defaults = {}
    for name, param in found:
        assert set(param.opts) == spellings, (name, param.opts)
        if type_name is not None:
            assert param.type.name == type_name, (name, param.type.name)
        defaults[name] = None if param.default is None or "UNSET" in repr(param.default) else param.default
    if option == "--format":  # each command prints a subset of one set (report's names a file format)
        for name, param in found:
            if name != "report":
                assert set(param.type.choices) <= set(FORMATS), (name, param.type.choices)
    elif option in EXCEPTIONS:
        assert defaults == EXCEPTIONS[option]
    elif option not in ("--metric", "--split", "--side", "--output"):
        assert len(set(map(repr, defaults.values()))) == 1, defaults


def test_progress_defaults_to_the_terminal():
    for name, param in _options():
        if "--progress" in param.opts:
            assert param.default is None and param.secondary_opts == ["--no-progress"], name


@pytest.mark.parametrize("command,old,new", [(c, o, n) for c, table in DEPRECATED.items() for o, n in table.items()])
def test_old_spellings_still_work_with_one_warning(command, old, new, tmp_path):
    args = {"metrics": ["metrics", "--example", "{opt}", "mrr"],
            "compare": None}[command]
    if args is None:
        pytest.skip("covered by test_compare_accepts_num_resamples")
    runner = CliRunner()
    new_res = runner.invoke(main, [a.replace("{opt}", new) for a in args])
    old_res = runner.invoke(main, [a.replace("{opt}", old) for a in args])
    assert old_res.exit_code == new_res.exit_code == 0
    assert old_res.stdout == new_res.stdout
    assert old_res.stderr.count("deprecated") == 1 and new in old_res.stderr and "deprecated" not in new_res.stderr


def test_compare_accepts_num_resamples(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "--epochs", "1", "-o", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    run = str(tmp_path / "a")
    new = runner.invoke(main, ["compare", run, run, "--metric", "mrr", "--resamples", "50", "--format", "csv"])
    old = runner.invoke(main, ["compare", run, run, "--metric", "mrr", "--num-resamples", "50", "--format", "csv"])
    assert new.exit_code == old.exit_code == 0 and new.stdout == old.stdout
    assert "--num-resamples is deprecated" in old.stderr
    few = runner.invoke(main, ["compare", run, run, "--resamples", "3"])
    assert few.exit_code == 2 and "--resamples must be at least 40" in few.output and "num_resamples" not in few.output


@pytest.mark.parametrize("pykeen,ours", sorted(PYKEEN_SPELLINGS.items()))
def test_pykeen_spellings_get_ours_suggested(pykeen, ours):
    res = CliRunner().invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", pykeen, "3"])
    assert res.exit_code == 2 and f"No such option '{pykeen}'. Did you mean '{ours}'?" in res.output, res.output


def test_no_header_in_a_pipe_and_one_when_asked(tmp_path):
    runner = CliRunner()
    quiet = runner.invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "--epochs", "1", "-o", str(tmp_path / "q")])
    assert quiet.exit_code == 0 and "kgeval pipeline:" not in quiet.stderr
    loud = runner.invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "--epochs", "1", "-o", str(tmp_path / "l"),
                                "--progress"])
    assert loud.exit_code == 0 and loud.stderr.startswith("kgeval pipeline: distmult on Nations"), loud.stderr
    assert "training" in loud.stderr and "kgeval pipeline:" not in loud.stdout


def test_evaluate_says_where_it_wrote(tmp_path):
    runner = CliRunner()
    assert runner.invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "--epochs", "1",
                                "-o", str(tmp_path / "run")]).exit_code == 0
    out = tmp_path / "valid.json"
    res = runner.invoke(main, ["evaluate", "--model-file", str(tmp_path / "run"), "--split", "valid", "-o", str(out)])
    assert res.exit_code == 0 and f"wrote {out}" in res.stdout and out.is_file()
    as_json = runner.invoke(main, ["evaluate", "--model-file", str(tmp_path / "run"), "--split", "valid",
                                   "-o", str(tmp_path / "v2.json"), "--format", "json"])
    assert as_json.exit_code == 0 and "wrote" not in as_json.output  # the JSON is the whole output
    import json

    assert json.loads(as_json.stdout)["output"] == str(tmp_path / "v2.json")


@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal")
def test_a_terminal_sees_the_header_and_training_before_the_results(tmp_path):
    """A scripted terminal session: the header and the epoch bar arrive while the run is still going."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen([sys.executable, "-m", "kgeval", "pipeline", "--dataset", "nations", "--model", "complex",
                             "--epochs", "5", "-o", str(tmp_path / "run")], stdin=slave, stdout=slave, stderr=slave,
                            env=env, cwd=tmp_path, close_fds=True)
    os.close(slave)
    seen, events = b"", []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            text = seen.decode(errors="replace")
            for marker in ("kgeval pipeline: complex on Nations", "training:", "MRR (inverse_harmonic_mean_rank)"):
                if marker in text and marker not in events:
                    events.append(marker)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0, seen.decode(errors="replace")[-2000:]
    assert events == ["kgeval pipeline: complex on Nations", "training:", "MRR (inverse_harmonic_mean_rank)"], events


def test_cli_errors_name_options_and_python_errors_name_arguments(tmp_path):
    from kgeval.data import get_dataset
    from kgeval.errors import KGEvalError

    res = CliRunner().invoke(main, ["pipeline", "-d", "fb15k237", "-m", "distmult", "--data-dir", str(tmp_path)])
    assert res.exit_code == 2 and "pass --data-dir to look elsewhere" in res.output and "data_dir=" not in res.output
    with pytest.raises(KGEvalError, match="data_dir="):
        get_dataset("fb15k237", data_dir=tmp_path)
