"""Every command's --help renders: no literal '%%' (click does not %-format help strings: the
pipeline's --replicates help printed 't-based 95%% CI')."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kgeval.cli import main


@pytest.mark.parametrize("command", [[], *[[name] for name in main.commands]])
def test_help_renders_without_printf_escapes(command):
    res = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "%%" not in res.output, res.output


def test_replicates_help_names_the_interval():
    res = CliRunner().invoke(main, ["pipeline", "--help"], terminal_width=400)
    assert "t-based 95% CI" in res.output
