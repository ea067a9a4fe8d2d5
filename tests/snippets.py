"""Run the code examples of a Markdown page (README.md, docs/**/*.md) as written, in document order.

The rules, shared by tests/test_readme.py and tests/docs/test_doc_examples.py:

- ```` ```python ```` blocks run in one namespace per page, in a temporary working directory;
- each ``kgeval ...`` command of a ```` ```bash ```` (``sh``, ``shell``, ``console``) block runs
  through the CLI in-process; training commands get one epoch (``hpo`` one trial) to stay fast,
  and the ``<run>`` placeholder is the newest run under ``./kgeval-output``; other shell lines
  (``pip install``, ``pytest``, ``torchrun``) are not run;
- a block whose first line is ``# not run: <reason>`` is skipped (a reader still sees why);
- ``kgeval.pipeline`` runs one epoch, so pages can show realistic training calls.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

_BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
_FAST = {"pipeline": ["--epochs", "1"], "hpo": ["--trials", "1", "--epochs", "1"]}
SHELL = ("bash", "sh", "shell", "console")


def blocks(page: Path) -> list[tuple[int, str, str]]:
    """(line, language, code) of every fenced block of ``page``."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in _BLOCK.finditer(text)]


def skipped(code: str) -> bool:
    return code.lstrip().startswith("# not run:")


def kgeval_commands(code: str) -> list[list[str]]:
    """The argument lists of the ``kgeval`` commands of a shell block (``$ `` prompts allowed)."""
    commands = []
    for line in code.splitlines():
        line = line.removeprefix("$ ")
        for part in line.split("&&"):
            args = shlex.split(part, comments=True)
            if args[:1] == ["kgeval"]:
                commands.append(args[1:])
    return commands


def run_cli(args: list[str], where: Path) -> str:
    from kgeval.cli import main

    args = list(args)
    if args and args[0] in _FAST:
        args += _FAST[args[0]]
    runs = sorted((where / "kgeval-output").glob("*"), key=lambda p: p.stat().st_mtime)
    args = [a.replace("<run>", runs[-1].name) if runs else a for a in args]
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, f"kgeval {shlex.join(args)} failed:\n{res.output}"
    return res.output


def run_page(page: Path, where: Path, monkeypatch) -> int:
    """Run every example of ``page`` inside ``where``; return how many blocks/commands ran."""
    import kgeval

    monkeypatch.chdir(where)
    real = kgeval.pipeline
    monkeypatch.setattr(kgeval, "pipeline", lambda *a, **kw: real(*a, **{**kw, "epochs": 1}), raising=False)
    namespace: dict = {"__name__": f"__{page.stem}__"}
    ran, done = 0, set()
    for line, lang, code in blocks(page):
        if skipped(code):
            continue
        if lang == "python":
            exec(compile(code, f"{page.name}:{line}", "exec"), namespace)  # noqa: S102 - our own pages
            ran += 1
        elif lang in SHELL:
            for args in kgeval_commands(code):
                if tuple(args) not in done:  # a page may repeat a command it showed before
                    run_cli(args, where)
                    done.add(tuple(args))
                    ran += 1
    return ran
