"""Bad metric input raises InvalidInputError naming the problem; CI runs the README's test command.

RankTable/rank-file input: tests/ranks/test_rank_bad_input.py; ``kgeval metrics``: tests/cli/test_metrics_command.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kgeval import metrics
from kgeval.errors import InvalidInputError, NoClosedFormError
from kgeval.metrics import HitsAtK

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("ranks", "c", "w", "match"),
    [
        ([], None, None, "empty"),
        ([1, float("nan")], None, None, r"non-finite value \(nan\) at position 1"),
        ([1, math.inf], None, None, r"non-finite value \(inf\) at position 1"),
        ([1, 0], None, None, r">= 1 .*position 1"),
        ([-2, 1], None, None, r">= 1 .*position 0"),
        ([1, 11], [10, 10], None, r"rank above its number of candidates at position 1"),
        ([1, 2, 3], [10, 10], None, r"length mismatch: 3 ranks but 2 num_candidates"),
        ([1, 2, 3], [10], None, r"length mismatch: 3 ranks but 1 num_candidates"),  # a list is not a scalar
        ([1, 2], None, [1.0], r"length mismatch: 2 ranks but 1 weights"),
        ([1, 2], None, [1.0, -0.5], r"non-negative"),
        ([1, 2], None, [0.0, 0.0], r"all zero"),
        ([1, 2], None, [1.0, float("nan")], r"NaN or infinite"),
        ([[1, 2]], None, None, r"one-dimensional"),
        (["a", "b"], None, None, r"numeric"),
        ([1, 2], [10, 0], None, r"whole numbers >= 1"),
        ([1, 2], [10, 2.5], None, r"whole numbers >= 1"),
    ],
)
def test_metric_bad_input(ranks, c, w, match):
    with pytest.raises(InvalidInputError, match=match):
        metrics.get("mrr")(ranks, c, w)


def test_a_scalar_number_of_candidates_serves_every_task():
    m = metrics.get("adjusted_mrr")
    assert m([1, 2, 3], 10) == m([1, 2, 3], [10, 10, 10])


def test_hits_k_must_be_positive():
    with pytest.raises(InvalidInputError, match="k >= 1"):
        HitsAtK(0)
    with pytest.raises(InvalidInputError, match="k >= 1"):
        metrics.get("hits@0")
    with pytest.raises(InvalidInputError, match="k >= 1"):
        HitsAtK(-3)
    with pytest.raises(InvalidInputError, match="whole number"):
        HitsAtK(2.5)
    with pytest.raises(InvalidInputError, match="p != 0"):
        metrics.get("power_mean_rank", p=0)


@pytest.mark.parametrize("key", ["amri", "z_mrr", "adjusted_hits_at_3", "aigmr"])
def test_metric_needing_candidates_without_them(key):
    with pytest.raises(InvalidInputError, match="needs num_candidates"):
        metrics.get(key)([1, 2])


def test_null_moments_bad_input():
    mrr = metrics.get("mrr")
    with pytest.raises(InvalidInputError, match="empty"):
        mrr.expected_value([])
    with pytest.raises(InvalidInputError, match="whole numbers >= 1"):
        mrr.variance([3, 0])
    with pytest.raises(InvalidInputError, match="length mismatch"):
        mrr.expected_value([3, 4], [1.0])
    with pytest.raises(NoClosedFormError, match="num_samples"):
        metrics.get("std").expected_value([3, 4])
    with pytest.raises(InvalidInputError, match="num_samples must be at least 2"):
        mrr.monte_carlo([3, 4], num_samples=1)


def test_expected_under_ties_bad_input():
    mrr = metrics.get("mrr")
    with pytest.raises(InvalidInputError, match="pessimistic rank below optimistic"):
        mrr.expected_under_ties([3, 1], [2, 1], [5, 5])
    with pytest.raises(InvalidInputError, match="length mismatch"):
        mrr.expected_under_ties([1, 1], [2], [5, 5])
    with pytest.raises(InvalidInputError, match="rank above its number of candidates"):
        mrr.expected_under_ties([1, 1], [2, 6], [5, 5])


# ---------------------------------------------------------------------------- CI
def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text().splitlines()
    prefix = 'pip install torch==2.13.0 && pip install -e ".[test]"'
    commands = [ln.strip() for ln in readme if ln.strip().startswith(prefix)]
    assert len(commands) == 1, commands
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert commands[0] in [ln.strip() for ln in ci]
    # the fast suite, with the slowest tests listed (issue 26): no -k/-m filter of its own
    assert commands[0].endswith("python -m pytest -q --durations=25")
    # ... and CI then runs exactly what the default run deselects (issue 27): every marker pyproject.toml
    # leaves out by default is selected by .ci/run's second pytest run
    import re

    pyproject = (REPO / "pyproject.toml").read_text()  # (no tomllib before Python 3.11)
    default = re.search(r'^addopts = \[.*"-m", "([^"]+)"', pyproject, re.M).group(1)
    left_out = re.fullmatch(r"not (\w+)(?: and not (\w+))*", default) and re.findall(r"not (\w+)", default)
    assert left_out, default
    rest = [ln.strip() for ln in ci if ln.strip().startswith("python -m pytest") and " -m " in ln]
    assert len(rest) == 1, rest
    chosen = re.fullmatch(r'python -m pytest -q --durations=25 -m "(\w+(?: or \w+)*)"', rest[0])
    assert chosen and sorted(chosen.group(1).split(" or ")) == sorted(left_out), rest[0]
    declared = set(re.findall(r'^\s+"(\w+): ', pyproject, re.M))
    assert set(left_out) <= declared


def test_candidates_beyond_int64_are_refused_not_wrapped():
    """expected_value([1e20]) returned -4.6e18 (the float wrapped around in int64)."""
    with pytest.raises(InvalidInputError, match="too large"):
        metrics.get("mr").expected_value([1e20])
    with pytest.raises(InvalidInputError, match="too large"):
        metrics.get("mrr")([1.0], [1e20])


@pytest.mark.parametrize(
    "kwargs",
    [{"num_samples": 2.5}, {"num_samples": -3}, {"num_samples": True}, {"seed": -1}, {"seed": 1.5}, {"seed": "a"}],
)
def test_simulation_parameters_are_named_errors(kwargs):
    """sample_values / monte_carlo passed num_samples and seed to numpy unchecked: TypeError
    ('expected a sequence of integers'), ValueError ('negative dimensions', 'expected non-negative integer')."""
    mrr, std = metrics.get("mrr"), metrics.get("std")  # std: no closed form, expected_value simulates
    name = next(iter(kwargs))
    calls = [(mrr.sample_values, {}), (mrr.monte_carlo, {}), (std.expected_value, {"num_samples": 10})]
    for method, extra in calls:
        with pytest.raises(InvalidInputError, match=name):
            method([3, 4], **{**extra, **kwargs})


@pytest.mark.parametrize(("lo", "hi"), [([2.5], [3.0]), ([1.5], [2.7]), ([1.0, 2.0], [2.0, 3.5])])
def test_tie_expectation_refuses_fractional_ranks(lo, hi):
    """The ranks were cast to int64: tie_expectation([2.5], [3], [5]) of the MRR gave 0.4167 (ranks
    2..3) and the MR of [1.5]..[2.7] gave 1.5 (ranks 1..2), silently."""
    for key in ("mrr", "mr", "gmr", "hits@2", "z_mrr"):
        with pytest.raises(InvalidInputError, match="whole numbers"):
            metrics.get(key).tie_expectation(lo, hi, [5] * len(lo))
