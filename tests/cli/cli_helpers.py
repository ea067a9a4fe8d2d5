"""Helpers shared by the CLI tests: invoke `kgeval` through click's CliRunner and read the MRR
of the headline table. (A module with a unique name: test modules import it directly.)"""

from __future__ import annotations

import re

from click.testing import CliRunner

from kgeval.cli import main


def run(*args):
    """``kgeval ARGS...`` in-process; returns click's Result (exit_code, output)."""
    return CliRunner().invoke(main, [str(a) for a in args])


def headline_mrr(text: str) -> str:
    """The printed both-sides MRR of a headline table (last column of the MRR row)."""
    m = re.search(r"^MRR \(inverse_harmonic_mean_rank\)\s+\S+\s+\S+\s+(\S+)", text, re.M)
    assert m, text
    return m.group(1)
