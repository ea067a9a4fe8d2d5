"""Every snippet in README.md runs as written, in document order, in one temporary directory.

Python blocks run in one namespace. Each ``kgeval ...`` command of a shell block runs through
the CLI in-process; training commands get one epoch (``hpo`` one trial) to stay fast, and the
``<run>`` placeholder is the run the README's ``kgeval pipeline`` line wrote. Lines that are not
``kgeval`` commands (``pip install``, ``pytest``) are not run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

import kgeval
from kgeval.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
_FAST = {"pipeline": ["--epochs", "1"], "hpo": ["--trials", "1", "--epochs", "1"]}


def _blocks() -> list[tuple[int, str, str]]:
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in _BLOCK.finditer(text)]


def _kgeval_commands(code: str) -> list[list[str]]:
    commands = []
    for line in code.splitlines():
        for part in line.split("&&"):
            args = shlex.split(part, comments=True)
            if args[:1] == ["kgeval"]:
                commands.append(args[1:])
    return commands


def _run_cli(args: list[str], where: Path) -> str:
    args = list(args)
    if args[0] in _FAST:
        args += _FAST[args[0]]
    runs = sorted((where / "kgeval-output").glob("*"), key=lambda p: p.stat().st_mtime)
    args = [a.replace("<run>", runs[-1].name) if runs else a for a in args]
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, f"kgeval {shlex.join(args)} failed:\n{res.output}"
    return res.output


def test_readme_has_snippets_of_both_kinds():
    langs = [lang for _, lang, _ in _blocks()]
    assert "python" in langs and "bash" in langs


def test_every_readme_snippet_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    real = kgeval.pipeline
    monkeypatch.setattr(kgeval, "pipeline", lambda *a, **kw: real(*a, **{**kw, "epochs": 1}), raising=False)
    namespace: dict = {"__name__": "__readme__"}
    ran, done = 0, set()
    for line, lang, code in _blocks():
        if lang == "python":
            exec(compile(code, f"README.md:{line}", "exec"), namespace)  # noqa: S102 - our own README
            ran += 1
        elif lang in ("bash", "sh", "shell"):
            for args in _kgeval_commands(code):
                if tuple(args) not in done:  # the set-up line repeats the tour's first line
                    _run_cli(args, tmp_path)
                    done.add(tuple(args))
                    ran += 1
    assert ran >= 7
    # the rank file the README writes is the one its `kgeval metrics ranks.tsv` line read
    assert (tmp_path / "ranks.tsv").is_file()


@pytest.mark.parametrize("command", ["metrics --example", "datasets"])
def test_cheap_tour_commands_print_something(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert any(args == command.split() for _, _, code in _blocks() for args in _kgeval_commands(code))
    assert _run_cli(command.split(), tmp_path).strip()


def _metric_table_rows() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Metrics\n")
    return [line for line in text[start:text.index("\n## ", start + 1)].splitlines() if line.startswith("| ")][2:]


def test_every_key_in_the_metric_table_resolves():
    """Each backticked name in the README's metric table is a metric key or synonym."""
    from kgeval import metrics

    names = [n for row in _metric_table_rows() for n in re.findall(r"`([^`(]+)`", row.split("|")[2])]
    assert len(names) > 30
    for name in names:
        metrics.get(name.replace("hits_at_k", "hits_at_3").replace("@k", "@3"))


def test_metric_table_median_row_states_what_exists():
    """The median row once read as if the median rank had a null variance and the inverse median rank
    an expectation; neither has (E[median rank] only)."""
    import numpy as np

    from kgeval import NoClosedFormError, metrics

    row = next(r for r in _metric_table_rows() if r.startswith("| median rank"))
    c = np.array([10, 20, 30, 40, 50])
    assert metrics.get("median_rank").expected_value(c) > 1
    for name, method in (("median_rank", "variance"), ("inverse_median_rank", "expected_value")):
        with pytest.raises(NoClosedFormError):
            getattr(metrics.get(name), method)(c)
    assert "E only (no variance" in row and "inverse median rank: none" in row


def test_p_value_floor_is_documented():
    """The README said non-exact p-values are the normal approximation; where the normal tail is below
    P[every rank 1] = Π 1/Cᵢ that bound is reported instead (3 perfect tasks of 50, 50, 40 candidates:
    1e-05, where the normal tail of z = 9.7 is 1.2e-22)."""
    from kgeval import RankTable
    from kgeval.results import Results

    res = Results(RankTable.from_ranks(ranks=[1, 1, 1], num_candidates=[50, 50, 40]))
    p = res.p_value("both.realistic.mrr")
    # abs=0: p = 1e-5, and approx's default abs=1e-12 would allow 1e-7 of it
    assert p.value == pytest.approx(1 / (50 * 50 * 40), rel=1e-12, abs=0) and "least possible" in p.method
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "or the least possible p-value Π 1/Cᵢ (every rank 1) where the normal tail falls below it" in text
