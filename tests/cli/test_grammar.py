"""One grammar for every ``kgeval`` command (issue 32): a shared option means the same thing everywhere,
old spellings still work with a warning, PyKEEN's spellings get a suggestion, and progress appears on a
terminal before the run ends."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kgeval.cli import main
from kgeval.cli.common import format_option
from kgeval.cli.grammar import DEPRECATED, FORMATS, PYKEEN_SPELLINGS, cli_terms

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
EXCEPTIONS = {"--seed": {"pipeline": 42, "hpo": None, "report": 0, "compare": 0, "breakdown": 0},
              "--resamples": {"report": 1000, "compare": 10000, "breakdown": 1000}}


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
    if option == "--format":  # one set, one default, one help; csv where the output is one table's rows
        for name, param in found:  # (report's --format names a file format: html, md, latex, csv, json)
            if name == "report":
                continue
            assert list(param.type.choices[:3]) == ["table", "text", "json"], (name, param.type.choices)
            assert set(param.type.choices) <= set(FORMATS) and param.default == "table", name
            assert param.help == format_option(csv="csv" in param.type.choices)(lambda: None).__click_params__[0].help
    elif option in EXCEPTIONS:
        assert defaults == EXCEPTIONS[option]
    elif option not in ("--metric", "--split", "--output"):
        assert len(set(map(repr, defaults.values()))) == 1, defaults


def test_progress_defaults_to_the_terminal():
    for name, param in _options():
        if "--progress" in param.opts:
            assert param.default is None and param.secondary_opts == ["--no-progress"], name


def test_every_option_has_a_help_for_the_reference():
    """The CLI reference (sphinx-click) prints each option's help: none is empty or unfinished."""
    for name, param in _options():
        assert param.help and param.help.strip()[0].isupper(), (name, param.opts)
        assert param.help.rstrip().endswith((".", ")", "]")), (name, param.opts, param.help)


def test_output_says_what_kind_of_path_it_is():
    kinds = {}
    for name, param in _options():
        if "--output" in param.opts:
            first = param.help.split(";")[0].split(":")[0].lower()
            kinds[name] = " or ".join(kind for kind in ("file", "directory") if kind in first) or None
    # evaluate writes a results file for a kgeval run, a new run directory for a foreign model
    assert kinds == {"pipeline": "directory", "hpo": "directory", "evaluate": "file or directory", "report": "file"}, kinds


def test_text_is_table_in_every_command():
    runner = CliRunner()
    for args in (["metrics", "--example"], ["adjust", "-d", "nations", "mrr=0.5"], ["datasets"]):
        table = runner.invoke(main, [*args, "--format", "table"])
        text = runner.invoke(main, [*args, "--format", "text"])
        default = runner.invoke(main, args)
        assert table.exit_code == text.exit_code == default.exit_code == 0, (args, table.output)
        assert table.stdout == text.stdout == default.stdout, args


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


@pytest.mark.parametrize("pykeen,ours", [("--embedding-dim", "--set model.dim=VALUE"), ("--learning-rate", "--set optimizer.lr=VALUE"),
                                         ("--training-loop", "--set training.loop=VALUE"), ("--num-epochs", "--epochs"),
                                         ("--random-seed", "--seed")])
def test_pykeen_spellings_in_hpo_get_ours_or_the_path_to_set(pykeen, ours):
    res = CliRunner().invoke(main, ["hpo", "-d", "nations", "-m", "distmult", pykeen, "3"])
    assert res.exit_code == 2 and f"No such option '{pykeen}'. Did you mean '{ours}'?" in res.output, res.output


def test_a_typo_that_is_no_pykeen_spelling_keeps_clicks_own_guess():
    res = CliRunner().invoke(main, ["pipeline", "-d", "nations", "-m", "distmult", "--epoch", "3"])
    assert res.exit_code == 2 and "No such option '--epoch'" in res.output and "--epochs" in res.output, res.output
    res = CliRunner().invoke(main, ["hpo", "-d", "nations", "--embedding-size", "3"])
    assert res.exit_code == 2 and "--set" not in res.output, res.output


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


#: a frame of the epoch bar with its loss (the results' own "training: 5 epochs ..." line is no frame)
EPOCH_BAR = re.compile(r"training:\s+\d+%\|[^\r\n]*epoch[^\r\n]*loss=")


@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal")
def test_a_terminal_sees_the_header_and_training_before_the_results(tmp_path):
    """A scripted terminal session (a pty 120 columns wide, read as the run goes): the header and a frame of the
    epoch bar with its loss arrive before the results, each while the process is still running."""
    import fcntl
    import pty
    import struct
    import termios

    from patience import env as patient_env
    from patience import scaled

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a new pty is 0 columns wide
    src = str(Path(__file__).parents[2] / "src")
    env = patient_env({**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])})
    proc = subprocess.Popen([sys.executable, "-m", "kgeval", "pipeline", "--dataset", "nations", "--model", "complex",
                             "--epochs", "5", "-o", str(tmp_path / "run")], stdin=slave, stdout=slave, stderr=slave,
                            env=env, cwd=tmp_path, close_fds=True)
    os.close(slave)
    markers = {"header": re.compile(r"kgeval pipeline: complex on Nations"), "epoch bar": EPOCH_BAR,
               "results": re.compile(r"MRR \(inverse_harmonic_mean_rank\)")}
    seen, events = b"", []
    deadline = time.monotonic() + scaled(600)
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
            for name, pattern in markers.items():
                if name not in dict(events) and pattern.search(text):
                    events.append((name, proc.poll() is None))
        elif proc.poll() is not None:
            break
    proc.wait(timeout=scaled(60))
    os.close(master)
    assert proc.returncode == 0, seen.decode(errors="replace")[-2000:]
    assert [name for name, _ in events] == ["header", "epoch bar", "results"], (events, seen[-3000:])
    assert all(running for name, running in events if name != "results"), events


def test_the_epoch_bar_marker_needs_a_bar():
    """The pty test's marker matches a tqdm frame, not the results' training line."""
    assert EPOCH_BAR.search("\rtraining:  40%|####      | 2/5 [00:01<00:01,  1.9epoch/s, loss=0.5123, s_per_epoch=0.1]")
    assert not EPOCH_BAR.search("training: 5 epochs (slcwa, dim 64, lr 0.01, seed 42), 2.1 s; final loss 0.0123")


def test_replicates_count_runs_with_the_best_so_far(tmp_path):
    runner = CliRunner()
    args = ["pipeline", "-d", "nations", "-m", "distmult", "--epochs", "1", "--replicates", "2"]
    loud = runner.invoke(main, [*args, "-o", str(tmp_path / "l"), "--progress"])
    assert loud.exit_code == 0, loud.output
    assert re.search(r"replicates: 100%\|.*2/2.*best MRR \d\.\d+ \(seed 4[23]\)", loud.stderr), loud.stderr
    assert loud.stderr.index("kgeval pipeline:") < loud.stderr.index("replicates:")
    assert "seed 42: MRR" in loud.stdout and "replicates:" not in loud.stdout
    quiet = runner.invoke(main, [*args, "-o", str(tmp_path / "q")])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr
    assert quiet.stdout.replace(str(tmp_path / "q"), "") == loud.stdout.replace(str(tmp_path / "l"), "")


def test_hpo_prints_its_header_then_counts_trials_with_the_best_so_far(tmp_path):
    pytest.importorskip("optuna")
    runner = CliRunner()
    args = ["hpo", "-d", "nations", "-m", "distmult", "--epochs", "2", "--trials", "2"]
    loud = runner.invoke(main, [*args, "-o", str(tmp_path / "l"), "--progress"])
    assert loud.exit_code == 0, loud.output
    err = loud.stderr
    assert err.startswith("hyper-parameter search: 2 trials of distmult on Nations"), err
    assert "on the validation split (199 triples, filtered with training + validation), to maximize" in err
    assert err.index("searching ") < err.index("trial 0: ") < err.index("trial 1: "), err
    assert re.search(r"trials: 100%\|.*2/2.*best \d\.\d+ \(trial [01]\)", err), err
    assert "Trial 0 finished" not in err  # Optuna's own log lines stay off: the counter says it
    quiet = runner.invoke(main, [*args, "-o", str(tmp_path / "q")])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr


def test_a_bca_refusal_names_no_python_argument_on_the_command_line():
    """kgeval report draws BCa intervals only: its notes offer --resamples, not method='percentile'."""
    import numpy as np

    from kgeval.errors import KGEvalError
    from kgeval.significance.bootstrap import _bca

    messages = []
    for dist in (np.linspace(1.0, 2.0, 100), np.r_[np.zeros(2), np.linspace(1.0, 2.0, 98)]):
        with pytest.raises(KGEvalError, match="method='percentile'") as info:  # Python names its arguments
            _bca(np.array([0.5]), dist[None, :], np.full((1, 10), 0.5), 0.95)
        messages.append(str(info.value))
    assert "num_resamples=100 is too few" in messages[1]
    cli = [cli_terms(m) for m in messages]
    assert not any("method=" in m or "num_resamples" in m for m in cli), cli
    assert cli[0].endswith("(no bias correction exists)") and cli[1].endswith("; increase --resamples"), cli


def test_cli_errors_name_options_and_python_errors_name_arguments(tmp_path):
    from kgeval.data import get_dataset
    from kgeval.errors import KGEvalError

    res = CliRunner().invoke(main, ["pipeline", "-d", "fb15k237", "-m", "distmult", "--data-dir", str(tmp_path)])
    assert res.exit_code == 2 and "pass --data-dir to look elsewhere" in res.output and "data_dir=" not in res.output
    with pytest.raises(KGEvalError, match="data_dir="):
        get_dataset("fb15k237", data_dir=tmp_path)
