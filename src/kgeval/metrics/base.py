"""The metric base class and input validation.

A rank-based metric is ``M = g(⊕ᵢ f(rᵢ))`` (seed 004): a rank transformation f, a
weighted aggregation ⊕ and a post-transformation g. Weights are scaling factors
normalised by their sum, as in PyKEEN: ``Σ wᵢ f(rᵢ) / Σ wᵢ``.

Every metric can state its expectation and variance under the null model
``rᵢ ~ U{1..Cᵢ}`` independently; the flags ``closed_expectation`` / ``closed_variance``
say whether those are exact, ``approximate_expectation`` / ``approximate_variance``
whether an analytic approximation is offered instead. :meth:`Metric.monte_carlo` gives a
seeded simulation estimate with confidence intervals for every metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError, NoClosedFormError


@dataclass(frozen=True)
class ValueRange:
    """The interval a metric's values lie in."""

    lower: float
    upper: float
    lower_inclusive: bool = True
    upper_inclusive: bool = True

    def __contains__(self, x: float) -> bool:
        lo = x >= self.lower if self.lower_inclusive else x > self.lower
        hi = x <= self.upper if self.upper_inclusive else x < self.upper
        return bool(lo and hi)

    def __str__(self) -> str:
        return f"{'[' if self.lower_inclusive else '('}{self.lower}, {self.upper}{']' if self.upper_inclusive else ')'}"


@dataclass(frozen=True)
class MonteCarloEstimate:
    """Simulation estimate of a metric's null distribution with 95% confidence intervals."""

    mean: float
    mean_ci: tuple[float, float]
    variance: float
    variance_ci: tuple[float, float]
    num_samples: int
    seed: int


def as_float_array(name: str, values) -> np.ndarray:
    arr = np.asarray(values.detach().cpu().numpy() if hasattr(values, "detach") else values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise InvalidInputError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise InvalidInputError(f"{name} must be numeric, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


def check_ranks(ranks) -> np.ndarray:
    r = as_float_array("ranks", ranks)
    if r.size == 0:
        raise InvalidInputError("ranks are empty: at least one ranking task is needed")
    bad = ~np.isfinite(r)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidInputError(f"ranks contain a non-finite value ({r[i]}) at position {i}")
    if r.min() < 1:
        i = int(np.argmin(r))
        raise InvalidInputError(f"ranks must be >= 1 (ranks are 1-based), got {r[i]} at position {i}")
    return r


def check_candidates(num_candidates, n: int | None = None, *, required: bool = True, ranks=None):
    if num_candidates is None:
        if required:
            raise InvalidInputError("this metric needs num_candidates (the number of candidates of each task)")
        return None
    c = as_float_array("num_candidates", num_candidates)
    if n is not None and c.size == 1 and n > 1:
        c = np.repeat(c, n)
    if c.size == 0:
        raise InvalidInputError("num_candidates is empty: at least one ranking task is needed")
    if n is not None and c.size != n:
        raise InvalidInputError(f"length mismatch: {n} ranks but {c.size} num_candidates")
    if not np.all(np.isfinite(c)) or np.any(c != np.round(c)) or c.min() < 1:
        raise InvalidInputError("num_candidates must be whole numbers >= 1")
    if ranks is not None and np.any(ranks > c):
        i = int(np.flatnonzero(ranks > c)[0])
        raise InvalidInputError(f"rank above its number of candidates at position {i} ({ranks[i]} > {c[i]:.0f})")
    return c.astype(np.int64)


def check_weights(weights, n: int):
    """Validate weights and return them normalised to sum 1 (None stays None)."""
    if weights is None:
        return None
    w = as_float_array("weights", weights)
    if w.size != n:
        raise InvalidInputError(f"length mismatch: {n} ranks but {w.size} weights")
    if not np.all(np.isfinite(w)):
        raise InvalidInputError("weights contain NaN or infinite values")
    if np.any(w < 0):
        raise InvalidInputError(f"weights must be non-negative, got {w[np.flatnonzero(w < 0)[0]]}")
    total = w.sum()
    if total <= 0:
        raise InvalidInputError("weights are all zero: at least one task must have positive weight")
    return w / total


# np.sum(w * x) rather than np.dot: BLAS ddot on a busy machine spins threads (15 ms for 40k
# elements measured here, against 20 µs for the plain reduction)
# dividing by Σw (≈ 1 after normalisation) keeps a weighted mean of equal values exactly equal to
# them (Σw·1 / Σw = 1), so e.g. perfect ranks give MR = 1, not 0.9999999999999999
def wmean(x: np.ndarray, w: np.ndarray | None) -> float:
    return float(np.mean(x)) if w is None else float(np.sum(w * x) / np.sum(w))


def wsum_sq(v: np.ndarray, w: np.ndarray | None) -> float:
    """Variance of a weighted mean of independent terms with variances ``v``."""
    return float(np.sum(v)) / v.size**2 if w is None else float(np.sum(w * w * v))


class Metric:
    """Base class: subclasses implement :meth:`compute` and, where they can, the null moments."""

    key: str = ""
    name: str = ""
    synonyms: tuple[str, ...] = ()
    increasing: bool = False
    value_range: ValueRange = ValueRange(-math.inf, math.inf, False, False)
    #: the best attainable value (perfect ranks); None if it depends on the data
    optimum: float | None = None
    needs_candidates: bool = False
    supports_weights: bool = True
    closed_expectation: bool = False
    closed_variance: bool = False
    approximate_expectation: bool = False
    approximate_variance: bool = False
    #: whether the exact expectation under random tie-breaking (rank type 'expected') exists
    supports_expected_rank: bool = False
    description: str = ""

    # ------------------------------------------------------------------ evaluation
    def __call__(self, ranks, num_candidates=None, weights=None) -> float:
        r = check_ranks(ranks)
        c = check_candidates(num_candidates, r.size, required=self.needs_candidates, ranks=r)
        w = check_weights(weights, r.size)
        return self.compute(r, c, w)

    def compute(self, ranks: np.ndarray, num_candidates, weights) -> float:
        """Evaluate on validated arrays (weights already normalised to sum 1)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ null model
    def expected_value(self, num_candidates, weights=None, *, num_samples: int | None = None, seed: int = 0) -> float:
        """E[M] under rᵢ ~ U{1..Cᵢ}: closed form or analytic approximation when available,
        else a Monte Carlo estimate when ``num_samples`` is given."""
        return self._null_moment("expectation", num_candidates, weights, num_samples, seed)

    def variance(self, num_candidates, weights=None, *, num_samples: int | None = None, seed: int = 0) -> float:
        """Var[M] under the null model (see :meth:`expected_value`)."""
        return self._null_moment("variance", num_candidates, weights, num_samples, seed)

    def _null_moment(self, which: str, num_candidates, weights, num_samples, seed) -> float:
        c = check_candidates(num_candidates)
        w = check_weights(weights, c.size)
        if which == "expectation":
            analytic, compute = self.closed_expectation or self.approximate_expectation, self._expectation
        else:
            analytic, compute = self.closed_variance or self.approximate_variance, self._variance
        if analytic:
            try:
                return compute(c, w)
            except NoClosedFormError:
                if num_samples is None:
                    raise
        if num_samples is None:
            raise NoClosedFormError(f"{self.key}: no closed-form {which}; pass num_samples= for a Monte Carlo estimate")
        estimate = self.monte_carlo(c, weights, num_samples=num_samples, seed=seed)
        return estimate.mean if which == "expectation" else estimate.variance

    def std(self, num_candidates, weights=None, **kwargs) -> float:
        return math.sqrt(self.variance(num_candidates, weights, **kwargs))

    def has_expectation(self, weighted: bool = False) -> bool:
        return self.closed_expectation or self.approximate_expectation

    def has_variance(self, weighted: bool = False) -> bool:
        return self.closed_variance or self.approximate_variance

    def null_is_exact(self, c: np.ndarray, w) -> bool:
        """Whether E/Var for these candidates and weights are exact (not approximations)."""
        return self.closed_expectation

    def _expectation(self, c: np.ndarray, w) -> float:
        raise NoClosedFormError(f"{self.key}: no closed-form expectation")

    def _variance(self, c: np.ndarray, w) -> float:
        raise NoClosedFormError(f"{self.key}: no closed-form variance")

    def expected_under_ties(self, optimistic, pessimistic, num_candidates=None, weights=None) -> float:
        """Exact E[M] when each rank is uniform on [optimistic, pessimistic] (random tie-breaking)."""
        lo = check_ranks(optimistic)
        hi = check_ranks(pessimistic)
        if lo.size != hi.size:
            raise InvalidInputError(f"length mismatch: {lo.size} optimistic but {hi.size} pessimistic ranks")
        if np.any(hi < lo):
            raise InvalidInputError("pessimistic rank below optimistic rank")
        c = check_candidates(num_candidates, lo.size, required=self.needs_candidates, ranks=hi)
        w = check_weights(weights, lo.size)
        return self._expected_under_ties(lo.astype(np.int64), hi.astype(np.int64), c, w)

    def _expected_under_ties(self, lo, hi, c, w) -> float:
        raise NoClosedFormError(f"{self.key}: no exact expectation under random tie-breaking")

    # ------------------------------------------------------------------ simulation
    def sample_values(self, num_candidates, weights=None, *, num_samples: int = 1000, seed: int = 0) -> np.ndarray:
        """The metric on ``num_samples`` rank arrays drawn from the null model (seeded)."""
        c = check_candidates(num_candidates)
        w = check_weights(weights, c.size)
        rng = np.random.default_rng(seed)
        out = np.empty(num_samples, dtype=np.float64)
        for s in range(num_samples):
            ranks = np.floor(rng.random(c.size) * c).astype(np.float64) + 1.0
            out[s] = self.compute(ranks, c, w)
        return out

    def monte_carlo(self, num_candidates, weights=None, *, num_samples: int = 1000, seed: int = 0) -> MonteCarloEstimate:
        """Seeded Monte Carlo estimate of E[M] and Var[M] with 95% confidence intervals
        (normal interval for the mean; chi-square interval for the variance)."""
        from scipy import stats

        if num_samples < 2:
            raise InvalidInputError("num_samples must be at least 2")
        x = self.sample_values(num_candidates, weights, num_samples=num_samples, seed=seed)
        m, v = float(x.mean()), float(x.var(ddof=1))
        half = 1.959963984540054 * math.sqrt(v / num_samples)
        dof = num_samples - 1
        vci = (dof * v / stats.chi2.ppf(0.975, dof), dof * v / stats.chi2.ppf(0.025, dof))
        return MonteCarloEstimate(m, (m - half, m + half), v, (float(vci[0]), float(vci[1])), num_samples, seed)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r})"
