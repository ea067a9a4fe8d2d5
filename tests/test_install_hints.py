"""Every "needs an optional package" message names the install command that works today: from a clone,
``pip install -e ".[extra]"`` (kgeval has no package-index release, so ``pip install kgeval[extra]``
would fail or fetch an unrelated package)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from kgeval import RankTable
from kgeval._compat import install_hint
from kgeval.results import Results

SRC = Path(__file__).resolve().parents[1] / "src" / "kgeval"


def test_no_message_spells_an_index_install():
    offenders = []
    for path in SRC.rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"pip install '?kgeval\[", line) and path.name != "_compat.py":
                offenders.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_hint_is_the_clone_install():
    assert install_hint("hpo", "optuna") == 'pip install -e ".[hpo]" in a clone of kgeval (or pip install optuna)'


def test_a_missing_pandas_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    results = Results(RankTable.from_ranks(ranks=[1, 2], num_candidates=[5, 5]))
    with pytest.raises(ImportError, match=re.escape('pip install -e ".[pandas]"')):
        results.to_df()


def test_a_missing_optuna_names_the_extra(monkeypatch):
    from kgeval.workflow.hpo import INSTALL_HINT

    assert 'pip install -e ".[hpo]"' in INSTALL_HINT
