"""The resampling unit and per-unit sufficient statistics, shared by bootstrap and comparison.

**Unit.** One evaluation triple: its head and its tail task are resampled (or swapped between two
models) together, because they share the triple and are not independent. Tasks without a triple
index (``-1``) are each their own unit.

**Sufficient statistics.** Every power-mean metric is ``g(Σᵢ wᵢ h(rᵢ) / Σᵢ wᵢ)``:

- the transformed means (:class:`~kgeval.metrics.means.TransformedMean`: MR, MRR, hits@k, IAMR,
  HMR, power means): h = f, g = the metric's post-transformation;
- the geometric means (GMR, IGMR): h = log r, g = exp(±x).

So a metric on any resample is a function of two numbers per unit, ``sums[u] = Σ_{i∈u} wᵢ h(rᵢ)``
and ``weights[u] = Σ_{i∈u} wᵢ``: with unit multiplicities m (a bootstrap draw, or 0/1 masks of a
sign-flip), ``value = g(m·sums / m·weights)``, vectorised over thousands of resamples at once.
Metrics that do not decompose (median, dispersion) are evaluated on resampled tables instead
(:func:`metric_on_units`).

Adjusted and z metrics are affine maps of their base metric with the *original* table's null
coefficients: their resampled values keep those coefficients (the null model is a property of the
evaluation protocol, not of the sampled triples).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..metrics.base import Metric, check_weights
from ..metrics.derived import DerivedMetric
from ..metrics.means import TransformedMean, _GeometricBase
from ..ranks import RankTable

__all__ = ["evaluation_units", "UnitStatistics", "unit_statistics", "metric_on_units", "unit_tasks", "affine_of"]


def evaluation_units(table: RankTable) -> np.ndarray:
    """Unit id (``0..U-1``) of every task: tasks of one evaluation triple share an id."""
    n = len(table)
    if table.triple_index is None:
        return np.arange(n)
    ids = np.asarray(table.triple_index, dtype=np.int64).copy()
    alone = ids < 0
    if alone.any():  # unknown triple: a unit of its own, numbered after every real triple
        ids[alone] = ids.max(initial=-1) + 1 + np.arange(int(alone.sum()))
    _, inverse = np.unique(ids, return_inverse=True)
    return inverse.reshape(-1)


@dataclass(frozen=True)
class UnitStatistics:
    """``sums[u]`` and ``weights[u]`` of each unit (weights rescaled to sum 1 over the table), the
    map from a weighted mean to the metric, and ``observed``: the metric on the table itself."""

    sums: np.ndarray
    weights: np.ndarray
    finish: Callable[[np.ndarray], np.ndarray]
    observed: float

    def value(self, multiplicities: np.ndarray | None = None) -> np.ndarray | float:
        """The metric on the original table (None: exactly the value :class:`~kgeval.Results`
        reports), on one resample ((U,) multiplicities) or on many ((R, U) -> R values)."""
        if multiplicities is None:
            return self.observed
        m = np.asarray(multiplicities, dtype=np.float64)
        return self.finish((m @ self.sums) / (m @ self.weights))

    def value_of_indices(self, idx: np.ndarray) -> np.ndarray:
        """The metric on resamples given as unit indices ``(..., U')`` (scipy's bootstrap layout)."""
        return self.finish(self.sums[idx].sum(-1) / self.weights[idx].sum(-1))


def affine_of(metric: Metric, table: RankTable, side_table: RankTable | None = None):
    """``(base metric, to_metric)``: ``to_metric`` maps a value of the base metric to ``metric``
    (``(base − shift) / scale`` with the table's null coefficients, identity for a base metric), or
    None where those coefficients are unknown.

    The map is the wrapper's own :meth:`~kgeval.metrics.derived.DerivedMetric.adjust`: the adjusted
    index and the z-score centre a value as ``(value − opt) + (opt − E)`` where the null moments state
    ``opt − E``, so bounds at or near the optimum keep their digits (``value − E`` kept only E's
    rounding: C = [1, 2], weights [1, 1e-9], a bound at the optimum gave index 1 ± 2e-7)."""
    if not isinstance(metric, DerivedMetric):
        return metric, float
    t = side_table if side_table is not None else table
    w = None if t.weight is None else check_weights(t.weight, len(t))
    moments = metric.base._null_moments(np.asarray(t.num_candidates, dtype=np.int64), w)
    if metric.coefficients(moments) is None:
        return None
    return metric.base, (lambda x: float(metric.adjust(float(x), moments)))


def _terms(table: RankTable, metric: Metric, rank_type: str):
    """``(h(r) per task, finish)`` of a decomposable metric and rank type, else None."""
    if rank_type == "expected":  # ties broken uniformly at random: E[f(r)], r ~ U{lo..hi}, per task
        if isinstance(metric, TransformedMean) and metric.identity_post:
            return metric.range_mean(table.optimistic, table.pessimistic), metric.g
        return None  # GMR's tie expectation is a product with exponents wᵢ/W: no unit sums
    r = np.asarray(table.ranks(rank_type), dtype=np.float64)
    if isinstance(metric, TransformedMean):
        return metric.f(r), metric.g
    if isinstance(metric, _GeometricBase):
        sign = metric.sign
        return np.log(r), (lambda x: np.exp(sign * np.asarray(x)))
    return None


def _value(table: RankTable, metric: Metric, rank_type: str, w: np.ndarray | None) -> float:
    """The metric's own computation (as :mod:`kgeval.results.compute` does it), NaN where undefined."""
    if rank_type == "expected":
        v = metric._tie_expectation(table.optimistic, table.pessimistic, table.num_candidates, w)
        return float("nan") if v is None else float(v)
    return float(metric._compute(table.ranks(rank_type), table.num_candidates, w))


def unit_statistics(table: RankTable, metric: Metric, rank_type: str,
                    units: np.ndarray | None = None) -> UnitStatistics | None:
    """Per-unit sufficient statistics of ``metric`` (a base metric), or None if it does not decompose.

    Weights are the table's (rescaled to sum 1 first, so weights of 1e308 do not overflow)."""
    parts = _terms(table, metric, rank_type)
    if parts is None:
        return None
    h, finish = parts
    units = evaluation_units(table) if units is None else units
    w = check_weights(table.weight, len(table))
    wt = np.ones(len(table)) if w is None else w
    size = int(units.max(initial=-1)) + 1
    return UnitStatistics(np.bincount(units, weights=wt * h, minlength=size),
                          np.bincount(units, weights=wt, minlength=size), finish, _value(table, metric, rank_type, w))


def unit_tasks(units: np.ndarray, unit_indices: np.ndarray) -> np.ndarray:
    """Row indices of the tasks of the listed units (with repetition), unit after unit."""
    order = np.argsort(units, kind="stable")
    sizes = np.bincount(units)
    starts = np.cumsum(sizes) - sizes
    drawn = np.asarray(unit_indices, dtype=np.int64).ravel()
    counts = sizes[drawn]
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return order[np.repeat(starts[drawn], counts) + offsets]


def metric_on_units(table: RankTable, metric: Metric, rank_type: str, unit_indices: np.ndarray,
                    units: np.ndarray | None = None) -> float:
    """``metric`` on the table made of the listed units (with repetition): the generic, slower path
    (NaN where undefined, e.g. the listed tasks carry no weight)."""
    units = evaluation_units(table) if units is None else units
    rows = unit_tasks(units, unit_indices)
    w = None if table.weight is None else table.weight[rows]
    if w is not None and not np.any(w > 0):
        return float("nan")
    return _value(table.subset(rows), metric, rank_type, check_weights(w, rows.size))
