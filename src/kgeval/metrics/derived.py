"""Chance-adjusted metrics: generic wrappers over any base metric with a null expectation.

For a base metric M with null expectation E and variance σ² (seed 004, §4.1):

- expectation normalisation  M* = M / E            (AMR = MR / E[MR]; for MR, GMR, HMR)
- adjusted index             M* = (M − E) / (opt − E)   (AMRI, adjusted MRR, adjusted hits@k…)
- z-score                    z  = ±(M − E) / σ     (signed so that larger is better)

All three are affine in M with constants that depend only on the candidate counts, so
E and Var of the wrapper follow exactly: E[index] = 0, E[z] = 0, Var[z] = 1,
Var[index] = Var[M]/(opt − E)², E[M*] = 1, Var[M*] = Var[M]/E².

A degenerate denominator (opt = E or σ = 0) means M is deterministic under the null and
equals E, so the wrapper is 0 (PyKEEN's convention too).
"""

from __future__ import annotations

import math

from .base import Metric, ValueRange


def _ratio(num: float, den: float) -> float:
    if den == 0:
        return 0.0
    return num / den


class DerivedMetric(Metric):
    """Base for wrappers; ``self.base`` is the wrapped metric."""

    def __init__(self, base: Metric):
        self.base = base
        self.needs_candidates = True
        self.supports_weights = base.supports_weights
        self.supports_expected_rank = base.supports_expected_rank
        exact = base.closed_expectation
        self.closed_expectation = exact
        self.approximate_expectation = not exact and base.approximate_expectation

    def has_expectation(self, weighted: bool = False) -> bool:
        return self.base.has_expectation(weighted)

    def constants(self, c, w) -> tuple[float, float]:
        """(shift, scale) such that the wrapper is (M − shift) / scale."""
        raise NotImplementedError

    def transform(self, value: float, c, w) -> float:
        shift, scale = self.constants(c, w)
        return _ratio(value - shift, scale)

    def compute(self, ranks, num_candidates, weights) -> float:
        return self.transform(self.base.compute(ranks, num_candidates, weights), num_candidates, weights)

    def _expected_under_ties(self, lo, hi, c, w) -> float:
        return self.transform(self.base._expected_under_ties(lo, hi, c, w), c, w)


class ExpectationNormalized(DerivedMetric):
    def __init__(self, base: Metric):
        super().__init__(base)
        self.key = f"adjusted_{base.key}"
        self.name = f"Adjusted {base.name}"
        self.synonyms = tuple(f"a{s}" for s in base.synonyms if len(s) <= 5)
        self.increasing = base.increasing
        self.value_range = ValueRange(0, math.inf, True, False)
        self.optimum = None
        self.closed_variance = base.closed_expectation and base.closed_variance
        self.approximate_variance = not self.closed_variance and base.has_variance()
        self.description = f"{base.key} / E[{base.key}] (expectation-normalised; 1 = random)"

    def has_variance(self, weighted: bool = False) -> bool:
        return self.base.has_variance(weighted)

    def constants(self, c, w):
        return 0.0, self.base._expectation(c, w)

    def _expectation(self, c, w) -> float:
        return 1.0

    def _variance(self, c, w) -> float:
        e = self.base._expectation(c, w)
        return _ratio(self.base._variance(c, w), e * e)


class AdjustedIndex(DerivedMetric):
    def __init__(self, base: Metric):
        super().__init__(base)
        # PyKEEN naming: adjusted_<key> for increasing metrics, adjusted_<key>_index for decreasing ones
        self.key = f"adjusted_{base.key}" if base.increasing else f"adjusted_{base.key}_index"
        self.name = f"Adjusted {base.name} Index"
        self.synonyms = tuple(f"a{s}" for s in base.synonyms if len(s) <= 5) if base.increasing else tuple(
            f"a{s}i" for s in base.synonyms if len(s) <= 5
        )
        self.increasing = True
        self.value_range = ValueRange(-math.inf, 1, False, True)
        self.optimum = 1.0
        self.closed_variance = base.closed_expectation and base.closed_variance
        self.approximate_variance = not self.closed_variance and base.has_variance()
        self.description = f"({base.key} − E) / ({base.optimum:g} − E): 1 = perfect, 0 = random"

    def has_variance(self, weighted: bool = False) -> bool:
        return self.base.has_variance(weighted)

    def constants(self, c, w):
        e = self.base._expectation(c, w)
        return e, self.base.optimum - e

    def _expectation(self, c, w) -> float:
        return 0.0

    def _variance(self, c, w) -> float:
        e = self.base._expectation(c, w)
        return _ratio(self.base._variance(c, w), (self.base.optimum - e) ** 2)


class ZScore(DerivedMetric):
    def __init__(self, base: Metric):
        super().__init__(base)
        self.key = f"z_{base.key}"
        self.name = f"z-{base.name}"
        self.synonyms = tuple(f"z{s}" for s in base.synonyms if len(s) <= 5)
        self.increasing = True
        self.value_range = ValueRange(-math.inf, math.inf, False, False)
        self.optimum = None
        exact = base.closed_expectation and base.closed_variance
        self.closed_expectation = self.closed_variance = exact
        self.approximate_expectation = self.approximate_variance = not exact
        self.description = f"±({base.key} − E) / σ, signed so that larger is better"

    def has_expectation(self, weighted: bool = False) -> bool:
        return self.base.has_expectation(weighted) and self.base.has_variance(weighted)

    has_variance = has_expectation

    def constants(self, c, w):
        e = self.base._expectation(c, w)
        sd = math.sqrt(max(self.base._variance(c, w), 0.0))
        return e, (sd if self.base.increasing else -sd)

    def _expectation(self, c, w) -> float:
        return 0.0

    def _variance(self, c, w) -> float:
        return 1.0 if self.base._variance(c, w) > 0 else 0.0
