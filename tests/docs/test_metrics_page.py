"""The metrics page (docs/guide/metrics.md) states what the code does: every key of its table resolves,
the median row says which moments exist, and the p-value floor is described as computed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "metrics.md"


def _metric_table_rows() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## Every key, and what is exact\n")
    return [line for line in text[start:text.index("\n## ", start + 1)].splitlines() if line.startswith("| ")][2:]


def test_every_key_in_the_metric_table_resolves():
    """Each backticked name in the metrics page's table is a metric key or synonym."""
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
    """The page said non-exact p-values are the normal approximation; where the normal tail is below
    P[every rank 1] = Π 1/Cᵢ that bound is reported instead (3 perfect tasks of 50, 50, 40 candidates:
    1e-05, where the normal tail of z = 9.7 is 1.2e-22)."""
    from kgeval import RankTable
    from kgeval.results import Results

    res = Results(RankTable.from_ranks(ranks=[1, 1, 1], num_candidates=[50, 50, 40]))
    p = res.p_value("both.realistic.mrr")
    # abs=0: p = 1e-5, and approx's default abs=1e-12 would allow 1e-7 of it
    assert p.value == pytest.approx(1 / (50 * 50 * 40), rel=1e-12, abs=0) and "least possible" in p.method
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    assert "or the least possible p-value Π 1/Cᵢ (every rank 1) where the normal tail falls below it" in text
