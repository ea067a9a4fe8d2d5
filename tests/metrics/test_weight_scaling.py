"""Weights are relative on every public metric method, not only on ``__call__``.

``compute``, ``null_moments`` and ``tie_expectation`` trusted their weights to sum to 1: ``[2, 2, 2]``
or ``[1, 3]`` gave a silently wrong variance (Σwᵢ²vᵢ without the 1/(Σw)²), a wrong IAMR/HMR/GMR
expectation, and negative or NaN weights passed through. They now validate and normalise like
``__call__`` / ``expected_value``; the trusted computations are the private ``_compute`` /
``_null_moments`` / ``_tie_expectation`` that Results and the significance code call with
weights they have already normalised.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kgeval import metrics
from kgeval.errors import InvalidInputError, NoClosedFormError

C = np.array([5, 9, 14, 3, 30, 7])
RANKS = np.array([1.0, 3.0, 2.5, 3.0, 11.0, 1.0])
LO = np.array([1, 3, 2, 3, 10, 1])
HI = np.array([1, 4, 3, 3, 12, 2])
RAW = np.array([1.0, 2.0, 0.5, 1.0, 3.0, 0.0])  # one zero weight: allowed
W = RAW / RAW.sum()
SCALES = (0.5, 3.0, 1e6)
METRICS = [m for m in (metrics.get(k) for k in metrics.names()) if m.supports_weights]
IDS = [m.key for m in METRICS]


def close(a, b):
    if a is None or b is None:
        return a is b
    return a == pytest.approx(b, rel=1e-12, abs=1e-300)


def value(fn, *args):
    """fn(*args), or None where the metric states no closed form (the weighted median's index)."""
    try:
        return fn(*args)
    except NoClosedFormError:
        return None


@pytest.mark.parametrize("k", SCALES)
@pytest.mark.parametrize("m", METRICS, ids=IDS)
def test_compute_and_null_moments_ignore_the_scale_of_weights(m, k):
    ref_value = value(m.compute, RANKS, C, W)
    assert close(value(m.compute, RANKS, C, k * W), ref_value), "compute"
    assert close(value(m, RANKS, C, k * W), ref_value), "__call__"
    ref = m.null_moments(C, W)
    scaled = m.null_moments(C, k * W)
    assert close(scaled.mean, ref.mean), "mean"
    assert close(scaled.variance, ref.variance), "variance"
    assert scaled.exact == ref.exact
    if ref.mean is not None:
        assert close(m.expected_value(C, k * W), ref.mean)
    if ref.variance is not None:
        assert close(m.variance(C, k * W), ref.variance)


@pytest.mark.parametrize("m", METRICS, ids=IDS)
def test_integer_weights_are_relative(m):
    """[2, 2, ...] is the unweighted mean; [1, 3, ...] is [0.25, 0.75, ...] (the brief's examples)."""
    twos = m.null_moments(C, np.full(C.size, 2))
    ones = m.null_moments(C, np.ones(C.size))
    assert close(twos.mean, ones.mean) and close(twos.variance, ones.variance)
    raw = np.array([1, 3, 1, 3, 1, 3])
    a, b = m.null_moments(C, raw), m.null_moments(C, raw / raw.sum())
    assert close(a.mean, b.mean) and close(a.variance, b.variance)
    assert close(value(m.compute, RANKS, C, raw), value(m.compute, RANKS, C, raw / raw.sum()))


@pytest.mark.parametrize("k", SCALES)
@pytest.mark.parametrize("m", METRICS, ids=IDS)
def test_tie_expectation_ignores_the_scale_of_weights(m, k):
    ref = m.tie_expectation(LO, HI, C, W)
    assert close(m.tie_expectation(LO, HI, C, k * W), ref)
    if ref is not None:
        assert close(m.expected_under_ties(LO, HI, C, k * W), ref)


BAD = [
    (np.array([1.0, -1.0, 1.0, 1.0, 1.0, 1.0]), r"weights must be non-negative, got -1\.0 at position 1"),
    (np.array([1.0, 1.0, math.nan, 1.0, 1.0, 1.0]), r"weights contain a NaN or infinite value \(nan\) at position 2"),
    (np.array([1.0, 1.0, 1.0, math.inf, 1.0, 1.0]), r"NaN or infinite value \(inf\) at position 3"),
    (np.ones(5), r"length mismatch: 6 .* but 5 weights"),
    (np.zeros(6), r"weights are all zero"),
]


@pytest.mark.parametrize("m", METRICS, ids=IDS)
def test_bad_weights_are_named_errors_on_every_public_method(m):
    for w, match in BAD:
        with pytest.raises(InvalidInputError, match=match):
            m.compute(RANKS, C, w)
        with pytest.raises(InvalidInputError, match=match):
            m.null_moments(C, w)
        with pytest.raises(InvalidInputError, match=match):
            m.tie_expectation(LO, HI, C, w)
        with pytest.raises(InvalidInputError, match=match):
            m.expected_value(C, w)


def test_null_moments_and_compute_validate_their_other_arrays():
    mr = metrics.get("mr")
    with pytest.raises(InvalidInputError, match="whole numbers >= 1"):
        mr.null_moments(np.array([3, 0]))
    with pytest.raises(InvalidInputError, match=">= 1"):
        mr.compute(np.array([0.0, 1.0]), None, None)
    with pytest.raises(InvalidInputError, match="rank above its number of candidates"):
        mr.compute(np.array([1.0, 6.0]), np.array([5, 5]), None)
    with pytest.raises(InvalidInputError, match="pessimistic rank below optimistic"):
        mr.tie_expectation(np.array([2, 1]), np.array([1, 1]), np.array([5, 5]), None)


def test_a_subclass_cannot_override_a_public_front_end():
    """Overriding ``null_moments`` would bypass its validation, and Results (which calls
    ``_null_moments``) would silently ignore the override."""
    with pytest.raises(TypeError, match="overrides null_moments; metrics implement _null_moments"):

        class Bad(metrics.ArithmeticMeanRank):
            def null_moments(self, c, w=None):
                return super().null_moments(c, w)

    class Good(metrics.ArithmeticMeanRank):
        def _compute(self, ranks, num_candidates, weights):
            return 2 * super()._compute(ranks, num_candidates, weights)

    assert Good()([1, 3], None, [1, 3]) == 2 * 2.5
