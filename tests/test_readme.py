"""Every snippet in README.md runs as written (the rules are tests/snippets.py's: python blocks in one
namespace, ``kgeval`` commands in-process with one epoch, ``<run>`` the newest run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from snippets import blocks, kgeval_commands, run_cli, run_page

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_has_snippets_of_both_kinds():
    langs = [lang for _, lang, _ in blocks(README)]
    assert "python" in langs and "bash" in langs


def test_the_readme_is_a_front_door():
    """Issue 27: at most ~150 lines; the two set-up commands first."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    setup = [code for _, lang, code in blocks(README) if lang == "bash"][:2]
    assert "kgeval pipeline --dataset nations --model complex" in setup[0]
    assert "python -m pytest" in setup[1]


def test_every_readme_snippet_runs(tmp_path, monkeypatch):
    assert run_page(README, tmp_path, monkeypatch) >= 6


@pytest.mark.parametrize("command", ["adjust --dataset fb15k237 mrr=0.356 hits@10=0.541 mr=177"])
def test_the_adjust_example_prints_the_adjusted_values(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert any(args == command.split() for _, _, code in blocks(README) for args in kgeval_commands(code))
    out = run_cli(command.split(), tmp_path)
    assert "adjusted" in out.lower() and "0.356" in out
