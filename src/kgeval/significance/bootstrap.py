"""Confidence intervals of any metric by bootstrap over evaluation triples (``scipy.stats.bootstrap``).

The resampling unit is the evaluation triple (its head and tail task together, see :mod:`.units`);
weights (macro averages) are respected because the statistic is the weighted metric of the
resampled units. For the power-mean family the statistic is vectorised over resamples through
per-unit sufficient statistics; other metrics (median, dispersion) are evaluated resample by
resample. Resamples are drawn in batches of at most ~4·10⁶ unit indices (32 MB), so memory stays bounded
whatever ``num_resamples`` is.

Methods: ``"bca"`` (bias-corrected and accelerated, the default), ``"percentile"``, and
``"normal"`` (value ± z·se with the bootstrap standard error, clipped to the metric's range). scipy draws every resample; for the
power-mean family the BCa acceleration comes from the exact leave-one-unit-out values of the
sufficient statistics (O(U)) instead of scipy's generic jackknife, which evaluates U resamples of
U − 1 units (O(U²): ~4·10⁸ gathered values at FB15k-237's 20,466 test triples). A table whose resamples all give one
value (e.g. every rank equal) has the degenerate interval ``(v, v)``.

**How many resamples** (:func:`min_resamples`). A bound at the tail level α/2 (α = 1 − confidence)
is an order statistic of the resamples: with fewer than ``2/α`` of them (40 at 95 %, 200 at 99 %)
no resample lies beyond it and the "interval" is made of the extreme resamples, or, with one or
two resamples, collapses to a point (``num_resamples=1`` gave ``[0.4575, 0.4575]``, the estimate
itself). Fewer are refused (:class:`~kgeval.errors.InvalidInputError` stating the minimum); the
normal interval takes the same minimum (its standard error from so few resamples is no better
founded). BCa needs ``10/α`` (200 at 95 %): its bias correction is estimated from the resamples
and moves the levels into the tails. An adjusted level still below ``1/num_resamples`` (or above
``1 − 1/num_resamples``) is refused the same way, naming the count it needs; the bias correction
needs resamples on both sides of the estimate, the acceleration (the jackknife) at least 2
evaluation triples.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .. import metrics as _metrics
from .._format import truthful
from .._validation import check_positive_int, check_probability, check_seed
from ..errors import InvalidInputError
from ..keys import parse_key
from .units import affine_of, evaluation_units, metric_on_units, unit_statistics

__all__ = ["ConfidenceInterval", "confidence_interval", "confidence_intervals", "CI_METHODS", "min_resamples",
           "check_num_resamples"]

CI_METHODS = {"bca": "BCa", "percentile": "percentile", "normal": "normal"}
#: unit indices held at once (batch × units)
_BATCH_ELEMENTS = 4 * 10**6


#: resamples per unit of 1 / (1 − confidence) that each method needs (see :func:`min_resamples`)
_PER_TAIL = {"percentile": 2, "normal": 2, "bca": 10}


def min_resamples(confidence: float, method: str = "percentile") -> int:
    """The fewest bootstrap resamples that give a ``method`` interval at ``confidence``.

    Percentile (and normal): ``⌈2 / (1 − confidence)⌉`` (40 at 0.95, 200 at 0.99), so that each
    tail level ``(1 − confidence) / 2`` has at least one resample beyond it (else its bound is the
    extreme resample, or with one or two resamples the estimate itself). BCa: ``⌈10 / (1 − confidence)⌉``
    (200 at 0.95): its bias correction ``z₀`` is itself estimated from the resamples (standard error
    ≈ 1.25 / √R) and moves the tails by about twice that, so at the percentile minimum the adjusted
    tails fall beyond the extreme resample (every headline interval of a Nations run at 40)."""
    confidence = check_probability("confidence", confidence)
    if method not in CI_METHODS:
        raise InvalidInputError(f"method must be one of {', '.join(CI_METHODS)}, got {method!r}")
    # the rounding of 1 − confidence (0.050000000000000044) must not add one: ⌈40.000000000000036⌉
    return max(2, math.ceil(_PER_TAIL[method] / (1.0 - confidence) * (1 - 1e-12)))


def check_num_resamples(name: str, value, confidence: float, method: str = "percentile", *,
                        what: str | None = None) -> int:
    """``value`` as a positive int of at least :func:`min_resamples` ``(confidence, method)``, else an
    :class:`InvalidInputError` naming ``name`` (the argument or the CLI flag) and the minimum."""
    value = check_positive_int(name, value)
    need = min_resamples(confidence, method)
    if value < need:
        what = what or f"a {CI_METHODS[method]} bootstrap interval"
        rule = "10 / (1 - confidence)" if method == "bca" else "2 / (1 - confidence)"
        raise InvalidInputError(f"{name} must be at least {need} for {what} at confidence {confidence:g} "
                                f"({rule}: fewer put its bounds on the extreme resamples), got {value}")
    return value


class ConfidenceInterval(tuple):
    """``(low, high)``: unpacks as a pair; ``method``, ``confidence`` and ``num_resamples`` say how
    it was made."""

    def __new__(cls, low: float, high: float, method: str = "bca", confidence: float = 0.95, num_resamples: int = 0):
        self = super().__new__(cls, (float(low), float(high)))
        self.method, self.confidence, self.num_resamples = method, confidence, num_resamples
        return self

    @property
    def low(self) -> float:
        return self[0]

    @property
    def high(self) -> float:
        return self[1]

    def __repr__(self) -> str:
        return f"ConfidenceInterval(low={self[0]!r}, high={self[1]!r}, method={self.method!r})"

    def __str__(self) -> str:
        return f"[{truthful(f'{self[0]:.4g}', self[0])}, {truthful(f'{self[1]:.4g}', self[1])}]"


def confidence_interval(results, key: str, confidence: float = 0.95, method: str = "bca",
                        num_resamples: int = 10_000, seed: int | None = None) -> ConfidenceInterval:
    """Bootstrap interval of the value ``key`` names (see :meth:`Results.confidence_interval`)."""
    return confidence_intervals(results, [key], confidence, method, num_resamples, seed)[key]


def confidence_intervals(results, keys, confidence: float = 0.95, method: str = "bca",
                         num_resamples: int = 10_000, seed: int | None = None) -> dict[str, ConfidenceInterval]:
    """Intervals of several values from the *same* resamples: ``{key: ConfidenceInterval}``.

    Keys of one side and rank type whose metrics decompose over units share one
    ``scipy.stats.bootstrap`` call with a multi-output statistic (one draw of unit indices and one
    jackknife for all of them); the others are bootstrapped one by one.
    """
    confidence = check_probability("confidence", confidence)
    seed = check_seed("seed", seed, allow_none=True)
    if method not in CI_METHODS:
        raise InvalidInputError(f"method must be one of {', '.join(CI_METHODS)}, got {method!r}")
    num_resamples = check_num_resamples("num_resamples", num_resamples, confidence, method)
    table = results.rank_table
    if table is None:
        raise InvalidInputError("confidence intervals need the rank table (these results were loaded without one)")
    groups: dict[tuple[str, str], list] = {}
    for key in keys:
        side, rank_type, name = parse_key(key)
        metric = _metrics.get(name)
        value = results.get_metric(f"{side}.{rank_type}.{metric.key}")  # also checks the side exists
        part = table if side == "both" else table.select_side(side)
        affine = affine_of(metric, table, part)
        if affine is None:
            raise InvalidInputError(f"{key!r}: the null moments its adjustment needs are unknown")
        groups.setdefault((side, rank_type), []).append((key, value, *affine))
    out = {}
    for (side, rank_type), items in groups.items():
        part = table if side == "both" else table.select_side(side)
        bases = [it[2] for it in items]
        bounds = _base_intervals(part, bases, rank_type, confidence, method, num_resamples, seed)
        for (key, value, base, to_metric), (low, high) in zip(items, bounds):
            # the normal interval is symmetric and can leave the metric's range (MR below 1, hits@10
            # above 1); the percentile and BCa bounds are resampled values, inside it anyway
            low, high = max(low, base.value_range.lower), min(high, base.value_range.upper)
            low, high = sorted((to_metric(low), to_metric(high)))
            if not (math.isfinite(low) and math.isfinite(high)):  # scipy's degenerate-sample NaN
                low = high = float(value)
            out[key] = ConfidenceInterval(float(low), float(high), method, confidence, num_resamples)
    return out


def _base_intervals(table, metrics, rank_type, confidence, method, num_resamples, seed) -> list[tuple[float, float]]:
    """Intervals of base ``metrics`` on one table: decomposable ones together, the rest one by one."""
    units = evaluation_units(table)
    n_units = int(units.max(initial=-1)) + 1
    if n_units < 2:  # one triple has no sampling variability to speak of (scipy refuses it too)
        raise InvalidInputError(f"a bootstrap confidence interval needs at least 2 evaluation triples, got {n_units}")
    draws = _Resampling(n_units, confidence, num_resamples, seed)
    suffs = [unit_statistics(table, m, rank_type, units) for m in metrics]
    bounds: list = [None] * len(metrics)
    joint = [i for i, s in enumerate(suffs) if s is not None]
    if joint:
        sums = np.stack([suffs[i].sums for i in joint], axis=1)  # (U, K): one gather per resampled unit
        weights = suffs[joint[0]].weights
        const = bool(np.all(weights == weights[0]))
        finishes = [suffs[i].finish for i in joint]

        def statistic(idx, axis=-1):
            # unit multiplicities of each resample by one bincount, then one matrix product for all
            # metrics: much less memory traffic than gathering every metric's sums (R x U x K)
            idx = np.asarray(idx)
            lead, width = idx.shape[:-1], idx.shape[-1]
            rows = int(np.prod(lead)) if lead else 1
            flat = idx.reshape(rows, width)
            m = np.empty((rows, n_units))
            for r in range(rows):  # row by row: the counts of one resample stay in cache (5-10x faster)
                m[r] = np.bincount(flat[r], minlength=n_units)
            denom = width * weights[0] if const else (m @ weights)[:, None]
            means = (m @ sums) / denom  # (rows, K)
            out = np.stack([f(means[:, j]) for j, f in enumerate(finishes)])  # (K, rows)
            return out.reshape((len(finishes), *lead))

        centre = np.array([suffs[i].value() for i in joint])
        batch = max(1, _BATCH_ELEMENTS // max(1, n_units))
        if method == "bca":  # scipy draws the resamples; the BCa correction uses the exact jackknife
            dist = _scipy_bootstrap(statistic, True, batch, "percentile", centre, draws, distribution=True)
            jack = _jackknife([suffs[i] for i in joint])
            lows, highs = _bca(centre, dist, jack, confidence)
        else:
            lows, highs = _scipy_bootstrap(statistic, True, batch, method, centre, draws)
        for j, i in enumerate(joint):
            bounds[i] = (float(lows[j]), float(highs[j]))
    for i, m in enumerate(metrics):
        if bounds[i] is None:
            def statistic(idx, m=m):
                return metric_on_units(table, m, rank_type, idx, units)
            centre = np.array([statistic(np.arange(n_units))])
            lows, highs = _scipy_bootstrap(statistic, False, 1, method, centre, draws)
            bounds[i] = (float(np.ravel(lows)[0]), float(np.ravel(highs)[0]))
    return bounds


def _jackknife(suffs) -> np.ndarray:
    """Leave-one-unit-out values ``(K, U)`` from the sufficient statistics: (S − sᵤ) / (W − wᵤ), O(K·U)
    instead of scipy's generic jackknife, which evaluates U resamples of U − 1 units (O(U²))."""
    out = []
    for s in suffs:
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(s.finish((s.sums.sum() - s.sums) / (s.weights.sum() - s.weights)))
    return np.asarray(out)


def _bca(centre: np.ndarray, dist: np.ndarray, jack: np.ndarray, confidence: float):
    """Bias-corrected and accelerated percentile interval (Efron & Tibshirani 1993, 14.3 and 15.4):

    z₀ = Φ⁻¹(#{θ*_b < θ̂} / B) (ties count half), a = Σ(θ̄₍.₎ − θ₍ᵢ₎)³ / (6 [Σ(θ̄₍.₎ − θ₍ᵢ₎)²]^{3/2}),
    bounds = percentiles of θ* at Φ(z₀ + (z₀ + z_α) / (1 − a(z₀ + z_α))) for α and 1 − α.
    """
    lows, highs = np.empty(centre.size), np.empty(centre.size)
    alpha = (1 - confidence) / 2
    for k in range(centre.size):
        d = dist[k]
        below = (np.count_nonzero(d < centre[k]) + 0.5 * np.count_nonzero(d == centre[k])) / d.size
        if not 0 < below < 1:
            if np.ptp(d) == 0:  # degenerate: every resample has one value (e.g. every rank equal)
                lows[k] = highs[k] = np.nan
                continue
            raise InvalidInputError(
                f"the BCa interval is undefined here: all {d.size} resamples lie on one side of the estimate "
                f"{centre[k]:.6g} (no bias correction exists); use method='percentile'")
        z0 = stats.norm.ppf(below)
        j = jack[k][np.isfinite(jack[k])]
        dev = j.mean() - j
        denom = 6.0 * np.sum(dev**2) ** 1.5
        a = np.sum(dev**3) / denom if denom > 0 else 0.0
        levels = []
        for z in (stats.norm.ppf(alpha), stats.norm.ppf(1 - alpha)):
            levels.append(stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))))
        tail = min(levels[0], 1 - levels[1])
        if not tail * d.size >= 1 - 1e-9:
            # the adjusted level is beyond every resample but the extreme one: the bound would be the
            # smallest (or largest) resample, not a quantile
            need = math.ceil(1 / tail * (1 - 1e-12)) if tail > 0 else None
            raise InvalidInputError(
                f"num_resamples={d.size} is too few for this BCa interval at confidence {confidence:g}: its "
                f"bias correction and acceleration move a tail to level {tail:.3g}, which needs "
                + (f"at least {need} resamples" if need else "more resamples than can be drawn")
                + "; increase num_resamples or use method='percentile'")
        lows[k], highs[k] = np.quantile(d, levels)
    return lows, highs


@dataclass(frozen=True)
class _Resampling:
    """What every bootstrap of one table shares: its evaluation triples (``n_units``), the interval's
    ``confidence``, and the resamples drawn (``num_resamples`` of them, from ``seed``)."""

    n_units: int
    confidence: float
    num_resamples: int
    seed: object


def _scipy_bootstrap(statistic, vectorized, batch, method, centre, draws: _Resampling, distribution: bool = False):
    rng = np.random.default_rng(draws.seed)
    confidence = draws.confidence
    scipy_method = "percentile" if method == "normal" else CI_METHODS[method]
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")  # degenerate samples give NaN: handled by the caller
        res = stats.bootstrap((np.arange(draws.n_units),), statistic, vectorized=vectorized,
                              n_resamples=draws.num_resamples, batch=batch, confidence_level=confidence,
                              method=scipy_method, rng=rng)
    if distribution:
        return np.asarray(res.bootstrap_distribution).reshape(centre.size, -1)
    if method == "normal":
        half = float(stats.norm.ppf(0.5 + confidence / 2)) * np.asarray(res.standard_error)
        return centre - half, centre + half
    return np.atleast_1d(res.confidence_interval.low), np.atleast_1d(res.confidence_interval.high)
