"""The metric base class, the null-model moments record and input validation.

A rank-based metric is ``M = g(⊕ᵢ f(rᵢ))`` (Hoyt, Berrendorf et al., 2022, "A Unified
Framework for Rank-based Evaluation Metrics for Link Prediction in Knowledge Graphs"): a rank
transformation f, a weighted aggregation ⊕ and a post-transformation g. Weights are scaling
factors normalised by their sum, as in PyKEEN: ``Σ wᵢ f(rᵢ) / Σ wᵢ``.

Every metric states its expectation and variance under the null model ``rᵢ ~ U{1..Cᵢ}``
(independently) through one method, :meth:`Metric.null_moments`, which returns a
:class:`NullMoments` record: ``None`` for a moment the metric cannot state, and ``exact``
saying whether the stated ones are exact or analytic approximations. :meth:`Metric.monte_carlo`
gives a seeded simulation estimate with confidence intervals for every metric.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._validation import as_1d, check_positive_int, check_seed, check_weights as _check_relative_weights
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
class NullMoments:
    """E[M] and Var[M] under the null model rᵢ ~ U{1..Cᵢ} (independent).

    ``mean`` / ``variance`` are ``None`` where the metric cannot state them analytically (a
    Monte Carlo estimate is still available through :meth:`Metric.monte_carlo`); ``exact`` says
    whether the stated ones are exact (True) or analytic approximations (False).

    ``optimum_gap`` is ``optimum − E[M]`` (the metric's best value minus its expectation) where the
    metric computes it without forming that difference, else ``None``. Where E is close to the
    optimum (tasks with one candidate carrying most of the weight) ``optimum − mean`` keeps only
    mean's absolute rounding; the adjusted index ``(M − E)/(optimum − E)`` and the z-score's
    ``M − E`` use this field instead (:mod:`.derived`).
    """

    mean: float | None = None
    variance: float | None = None
    exact: bool = False
    optimum_gap: float | None = None

    def to_dict(self) -> dict:
        out = {"expected_value": self.mean, "variance": self.variance, "exact": self.exact}
        if self.optimum_gap is not None:
            out["optimum_gap"] = self.optimum_gap
        return out

    @classmethod
    def from_dict(cls, d: dict) -> NullMoments:
        """Inverse of :meth:`to_dict`; a dict without ``optimum_gap`` (written before it existed) loads
        with ``optimum_gap=None``."""

        def num(x):
            return None if x is None else float(x)

        return cls(num(d.get("expected_value")), num(d.get("variance")), bool(d.get("exact", False)),
                   num(d.get("optimum_gap")))


#: the moments of a metric that states none
UNKNOWN = NullMoments()


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
    arr = as_1d(name, values)
    if arr.dtype.kind not in "iuf":
        raise InvalidInputError(f"{name} must be numeric, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


def check_ranks(ranks, name: str = "ranks") -> np.ndarray:
    r = as_float_array(name, ranks)
    if r.size == 0:
        raise InvalidInputError(f"{name} are empty: at least one ranking task is needed")
    bad = ~np.isfinite(r)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidInputError(f"{name} contain a non-finite value ({r[i]}) at position {i}")
    if r.min() < 1:
        i = int(np.argmin(r))
        raise InvalidInputError(f"{name} must be >= 1 (ranks are 1-based), got {r[i]} at position {i}")
    return r


#: num_candidates must fit int64 with room for sums (and exactly in a float64 rank comparison)
MAX_CANDIDATES = 2**62


def check_candidates(num_candidates, n: int | None = None, *, required: bool = True, ranks=None):
    if num_candidates is None:
        if required:
            raise InvalidInputError("this metric needs num_candidates (the number of candidates of each task)")
        return None
    c = as_float_array("num_candidates", num_candidates)
    if n is not None and np.ndim(num_candidates) == 0:  # one count for every task; a list keeps its length
        c = np.repeat(c, n)
    if c.size == 0:
        raise InvalidInputError("num_candidates is empty: at least one ranking task is needed")
    if n is not None and c.size != n:
        raise InvalidInputError(f"length mismatch: {n} ranks but {c.size} num_candidates")
    if not np.all(np.isfinite(c)) or np.any(c != np.round(c)) or c.min() < 1:
        raise InvalidInputError("num_candidates must be whole numbers >= 1")
    if c.max() > MAX_CANDIDATES:
        i = int(np.argmax(c))
        raise InvalidInputError(f"num_candidates: {c[i]:g} at position {i} is too large (at most 2**62)")
    if ranks is not None and np.any(ranks > c):
        i = int(np.flatnonzero(ranks > c)[0])
        raise InvalidInputError(f"rank above its number of candidates at position {i} ({ranks[i]} > {c[i]:.0f})")
    return c.astype(np.int64)


def check_weights(weights, n: int):
    """Validate weights and return them normalised to sum 1 (None stays None).

    Weights are relative: they are rescaled by their maximum before summing (see
    :func:`kgeval._validation.check_weights`), so weights of 1e308 each are fine.
    """
    if weights is None:
        return None
    w = as_float_array("weights", weights)
    if w.size != n:
        raise InvalidInputError(f"length mismatch: {n} ranks but {w.size} weights")
    return _check_relative_weights("weights", w, normalise=True)


# np.sum(w * x) rather than np.dot: BLAS ddot on a busy machine spins threads, far slower than
# the plain reduction at these sizes
# dividing by Σw (≈ 1 after normalisation) keeps a weighted mean of equal values exactly equal to
# them (Σw·1 / Σw = 1), so e.g. perfect ranks give MR = 1, not 0.9999999999999999
def wmean(x: np.ndarray, w: np.ndarray | None) -> float:
    return float(np.mean(x)) if w is None else float(np.sum(w * x) / np.sum(w))


def wsum_sq(v: np.ndarray, w: np.ndarray | None) -> float:
    """Variance of a weighted mean of independent terms with variances ``v``: Σ wᵢ² vᵢ for ``w``
    normalised to sum 1 (the private metric methods' contract; the public ones normalise first)."""
    return float(np.sum(v)) / v.size**2 if w is None else float(np.sum(w * w * v))


class Metric:
    """Base class: subclasses implement :meth:`_compute` and, where they can,
    :meth:`_null_moments` and :meth:`_tie_expectation`.

    Public and private halves: the public methods (``__call__`` / :meth:`compute`,
    :meth:`null_moments`, :meth:`tie_expectation`, :meth:`expected_value`, :meth:`variance`, …)
    validate their arrays and normalise the weights (:func:`check_weights`: relative, any
    positive scale; negative, NaN, all-zero or wrong-length weights are an
    :class:`~kgeval.errors.InvalidInputError`). They call the private ones, which take
    *validated* arrays and weights summing to 1 and are what internal callers that already hold
    such arrays use (:mod:`kgeval.results.compute`, :mod:`kgeval.significance`): validation
    costs O(n) per call, paid once per table there instead of once per metric.

    Synonyms live in the registry (:mod:`kgeval.metrics.registry`), the single source:
    :attr:`synonyms` asks it.
    """

    key: str = ""
    name: str = ""
    increasing: bool = False
    value_range: ValueRange = ValueRange(-math.inf, math.inf, False, False)
    #: the best attainable value (perfect ranks); None if it depends on the data
    optimum: float | None = None
    needs_candidates: bool = False
    supports_weights: bool = True
    description: str = ""

    def __init_subclass__(cls, **kwargs):
        # a subclass overriding a public front end would skip its validation (and Results,
        # which calls the private methods, would skip the override): say so at class creation
        super().__init_subclass__(**kwargs)
        for public in ("compute", "null_moments", "tie_expectation"):
            if public in vars(cls):
                raise TypeError(
                    f"{cls.__name__} overrides {public}; metrics implement _{public} (validated arrays, "
                    f"weights summing to 1), which the public {public} calls after validating its input"
                )

    #: key -> synonyms; the registry installs its lookup when it is imported (with :mod:`kgeval.metrics`),
    #: so the base class does not import the registry that imports every metric class
    _synonyms_of: ClassVar[Callable[[str], tuple[str, ...]]] = staticmethod(lambda key: ())

    @property
    def synonyms(self) -> tuple[str, ...]:
        """The names :func:`kgeval.metrics.get` resolves to this metric's key (from the registry)."""
        return Metric._synonyms_of(self.key)

    # ------------------------------------------------------------------ evaluation
    def __call__(self, ranks, num_candidates=None, weights=None) -> float:
        """The metric of ``ranks`` (``Σ wᵢ f(rᵢ) / Σ wᵢ`` for the means: weights are relative)."""
        r = check_ranks(ranks)
        c = check_candidates(num_candidates, r.size, required=self.needs_candidates, ranks=r)
        w = check_weights(weights, r.size)
        return self._compute(r, c, w)

    def compute(self, ranks, num_candidates=None, weights=None) -> float:
        """The same as calling the metric: validates, weights are relative (normalised here)."""
        return self(ranks, num_candidates, weights)

    def _compute(self, ranks: np.ndarray, num_candidates, weights) -> float:
        """Evaluate on validated arrays: float64 ranks, int64 candidates or None, weights
        normalised to sum 1 or None."""
        raise NotImplementedError

    # ------------------------------------------------------------------ null model
    def null_moments(self, c, w=None) -> NullMoments:
        """E[M] and Var[M] under rᵢ ~ U{1..Cᵢ}, computed together (see :meth:`_null_moments`).

        ``c``: the numbers of candidates (whole numbers ≥ 1); ``w``: relative weights (any positive
        scale) or None for unweighted. Fields the metric cannot state are None.
        """
        c = check_candidates(c)
        return self._null_moments(c, check_weights(w, c.size))

    def _null_moments(self, c: np.ndarray, w: np.ndarray | None) -> NullMoments:
        """:meth:`null_moments` on *validated* arrays: ``c`` the int64 numbers of candidates
        (≥ 1), ``w`` the weights normalised to sum 1, or None for unweighted."""
        return UNKNOWN

    def expected_value(self, num_candidates, weights=None, *, num_samples: int | None = None, seed: int = 0) -> float:
        """E[M] under rᵢ ~ U{1..Cᵢ}: closed form or analytic approximation when available,
        else a Monte Carlo estimate when ``num_samples`` is given."""
        return self._null_moment("mean", num_candidates, weights, num_samples, seed)

    def variance(self, num_candidates, weights=None, *, num_samples: int | None = None, seed: int = 0) -> float:
        """Var[M] under the null model (see :meth:`expected_value`)."""
        return self._null_moment("variance", num_candidates, weights, num_samples, seed)

    def _null_moment(self, which: str, num_candidates, weights, num_samples, seed) -> float:
        c = check_candidates(num_candidates)
        w = check_weights(weights, c.size)
        value = getattr(self._null_moments(c, w), which)
        if value is not None:
            return value
        if num_samples is None:
            what = "expectation" if which == "mean" else "variance"
            raise NoClosedFormError(
                f"{self.key}: no analytic {what} for these inputs; pass num_samples= for a Monte Carlo estimate"
            )
        estimate = self.monte_carlo(c, weights, num_samples=num_samples, seed=seed)
        return getattr(estimate, which)

    def std(self, num_candidates, weights=None, **kwargs) -> float:
        return math.sqrt(self.variance(num_candidates, weights, **kwargs))

    # ------------------------------------------------------------------ random tie-breaking
    def tie_expectation(self, lo, hi, c=None, w=None) -> float | None:
        """Exact E[M] when each rank is uniform on the integers [loᵢ, hiᵢ] (the ``expected``
        rank type; ``lo`` / ``hi`` the optimistic / pessimistic ranks, ``c`` the numbers of
        candidates), or None where no exact form is known (validates; weights are relative)."""
        return self._tie_expectation(*self._tie_inputs(lo, hi, c, w))

    def _tie_expectation(self, lo: np.ndarray, hi: np.ndarray, c, w) -> float | None:
        """:meth:`tie_expectation` on *validated* arrays (int64 ranks with lo ≤ hi ≤ c, ``w``
        normalised to sum 1 or None)."""
        return None

    def _tie_inputs(self, optimistic, pessimistic, num_candidates, weights):
        lo = check_ranks(optimistic, "optimistic ranks")
        hi = check_ranks(pessimistic, "pessimistic ranks")
        for name, r in (("optimistic", lo), ("pessimistic", hi)):
            if np.any(r != np.floor(r)):  # the int64 cast below would truncate (2.5 -> 2)
                i = int(np.flatnonzero(r != np.floor(r))[0])
                raise InvalidInputError(
                    f"{name} ranks must be whole numbers, got {r[i]} at position {i} "
                    "(pass optimistic and pessimistic ranks, not realistic ones)"
                )
        if lo.size != hi.size:
            raise InvalidInputError(f"length mismatch: {lo.size} optimistic but {hi.size} pessimistic ranks")
        if np.any(hi < lo):
            raise InvalidInputError("pessimistic rank below optimistic rank")
        c = check_candidates(num_candidates, lo.size, required=self.needs_candidates, ranks=hi)
        w = check_weights(weights, lo.size)
        return lo.astype(np.int64), hi.astype(np.int64), c, w

    def expected_under_ties(self, optimistic, pessimistic, num_candidates=None, weights=None) -> float:
        """:meth:`tie_expectation` that raises :class:`NoClosedFormError` where no exact form is known."""
        value = self.tie_expectation(optimistic, pessimistic, num_candidates, weights)
        if value is None:
            raise NoClosedFormError(f"{self.key}: no exact expectation under random tie-breaking")
        return value

    # ------------------------------------------------------------------ simulation
    def sample_values(self, num_candidates, weights=None, *, num_samples: int = 1000, seed: int = 0) -> np.ndarray:
        """The metric on ``num_samples`` rank arrays drawn from the null model (seeded)."""
        num_samples = check_positive_int("num_samples", num_samples)
        seed = check_seed("seed", seed)
        c = check_candidates(num_candidates)
        w = check_weights(weights, c.size)
        rng = np.random.default_rng(seed)
        out = np.empty(num_samples, dtype=np.float64)
        for s in range(num_samples):
            ranks = np.floor(rng.random(c.size) * c).astype(np.float64) + 1.0
            out[s] = self._compute(ranks, c, w)
        return out

    def monte_carlo(self, num_candidates, weights=None, *, num_samples: int = 1000, seed: int = 0) -> MonteCarloEstimate:
        """Seeded Monte Carlo estimate of E[M] and Var[M] with 95% confidence intervals
        (normal interval for the mean; chi-square interval for the variance)."""
        from scipy import stats

        if check_positive_int("num_samples", num_samples) < 2:
            raise InvalidInputError(f"num_samples must be at least 2, got {num_samples}")
        x = self.sample_values(num_candidates, weights, num_samples=num_samples, seed=seed)
        m, v = float(x.mean()), float(x.var(ddof=1))
        half = 1.959963984540054 * math.sqrt(v / num_samples)
        dof = num_samples - 1
        vci = (dof * v / stats.chi2.ppf(0.975, dof), dof * v / stats.chi2.ppf(0.025, dof))
        return MonteCarloEstimate(m, (m - half, m + half), v, (float(vci[0]), float(vci[1])), num_samples, seed)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r})"
