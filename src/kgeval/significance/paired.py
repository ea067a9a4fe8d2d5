"""Paired tests of two models on the same resampling units: the engines of :mod:`.compare`.

A metric is *decomposable* when :func:`.units.unit_statistics` gives its per-unit sufficient
statistics: one unit ``u`` (an evaluation triple: its head and tail tasks) contributes
``Sᵤ = Σ_{i∈u} wᵢ h(rᵢ)`` and weight ``Wᵤ = Σ_{i∈u} wᵢ``, the same ``Wᵤ`` for both models
(same tasks, same weights), and the metric is ``g(Σ Sᵤ / Σ Wᵤ)``. The paired difference on the
additive scale is ``D = Σᵤ dᵤ / Σᵤ Wᵤ`` with ``dᵤ = Sᵤᴬ − Sᵤᴮ``.

- :func:`permutation_test`: under H₀ (the models are exchangeable within a unit) every sign
  pattern ``sᵤ = ±1`` is equally likely; the two-sided p-value is
  ``P(|Σ sᵤ dᵤ| ≥ |Σ dᵤ|)``. Exact over all ``2ⁿ`` patterns for ``n ≤ 20`` units, otherwise
  ``(b + 1) / (R + 1)`` with ``b`` of ``R`` random patterns at least as extreme.
- :func:`bootstrap_differences`: ``R`` resamples of the units with replacement, the same
  units for both models; returns the metric difference ``M(A*) − M(B*)`` of each resample.
  Works for every metric (non-decomposable ones, e.g. the median rank, are recomputed on each
  resampled table by :func:`.units.metric_on_units`).
- :func:`wilcoxon_test`: ``scipy.stats.wilcoxon`` on the per-unit differences ``dᵤ / Wᵤ``.

All resampling is chunked to about :data:`CHUNK_ENTRIES` matrix entries (~32 MB of float64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..metrics.base import Metric
from ..ranks import RankTable
from .units import evaluation_units, metric_on_units, unit_statistics

CHUNK_ENTRIES = 1 << 22
#: largest number of units whose sign patterns are enumerated exactly
EXACT_MAX_UNITS = 20
_PROBE = RankTable.from_ranks([1])


def decomposable(metric: Metric) -> bool:
    """Whether ``metric`` has per-unit sufficient statistics (:func:`.units.unit_statistics`)."""
    return unit_statistics(_PROBE, metric, "optimistic") is not None


@dataclass(frozen=True)
class PairedTasks:
    """Two models' rank tables on the same aligned tasks (one side selected) and their units.

    ``tables_a`` / ``tables_b`` hold one table per replicate (training seed) of the model: a
    model's value is the mean of its replicates' values, and its unit contributions are
    averaged over its replicates (one table = an ordinary single run)."""

    tables_a: list
    tables_b: list
    rank_type: str

    @property
    def units(self) -> np.ndarray:
        return evaluation_units(self.tables_a[0])

    @property
    def num_units(self) -> int:
        return int(self.units.max()) + 1

    def unit_sums(self, metric: Metric):
        """``(Sᴬ, Sᴮ, W, g)`` per unit (averaged over replicates), or None if ``metric`` does not decompose."""
        units = self.units
        stats = [[unit_statistics(t, metric, self.rank_type, units) for t in tables]
                 for tables in (self.tables_a, self.tables_b)]
        if stats[0][0] is None:
            return None
        sa, sb = (np.mean([s.sums for s in group], axis=0) for group in stats)
        return sa, sb, stats[0][0].weights, stats[0][0].finish

    def values(self, metric: Metric, unit_indices: np.ndarray | None = None) -> tuple[float, float]:
        """Each model's metric value (the mean over its replicates), on the listed units if given."""
        if unit_indices is None:
            def one(t):
                return float(metric(t.ranks(self.rank_type), t.num_candidates, t.weight))
        else:
            units = self.units

            def one(t):
                return metric_on_units(t, metric, self.rank_type, unit_indices, units)
        return (float(np.mean([one(t) for t in self.tables_a])), float(np.mean([one(t) for t in self.tables_b])))


def _chunk_rows(n: int) -> int:
    return max(1, CHUNK_ENTRIES // max(n, 1))


def _extreme(stats: np.ndarray, observed: float, scale: float) -> int:
    # a tolerance of rounding error (``scale`` bounds the terms' magnitude), so that patterns
    # equal to the observed one count as at least as extreme whatever the summation order
    return int(np.count_nonzero(np.abs(stats) >= abs(observed) - 1e-9 * scale))


def permutation_test(d: np.ndarray, *, num_resamples: int, rng: np.random.Generator) -> tuple[float, str]:
    """Two-sided sign-flip p-value of ``Σ dᵤ`` and how it was obtained (``"exact"``/``"monte carlo"``)."""
    n = d.size
    observed, scale = float(d.sum()), float(np.abs(d).sum())
    if n <= EXACT_MAX_UNITS:
        total, b = 1 << n, 0
        bits = np.arange(n, dtype=np.int64)
        step = _chunk_rows(n)
        for start in range(0, total, step):
            codes = np.arange(start, min(total, start + step), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)
            b += _extreme(signs @ d, observed, scale)
        return b / total, "exact"
    b, done, step = 0, 0, _chunk_rows(n)
    while done < num_resamples:
        rows = min(step, num_resamples - done)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(rows, n), dtype=np.int8)
        b += _extreme(signs @ d, observed, scale)
        done += rows
    return (b + 1) / (num_resamples + 1), "monte carlo"


def bootstrap_differences(tasks: PairedTasks, metric: Metric, *, num_resamples: int,
                          rng: np.random.Generator) -> np.ndarray:
    """``M(A*) − M(B*)`` for ``num_resamples`` paired unit resamples."""
    sums = tasks.unit_sums(metric)
    n = tasks.num_units
    out = np.empty(num_resamples)
    if sums is None:  # any metric: recompute on each resampled table
        for b in range(num_resamples):
            va, vb = tasks.values(metric, rng.integers(0, n, size=n))
            out[b] = va - vb
        return out
    sa, sb, w, g = sums
    done, step = 0, _chunk_rows(n)
    while done < num_resamples:
        rows = min(step, num_resamples - done)
        m = rng.multinomial(n, np.full(n, 1.0 / n), size=rows).astype(np.float64)
        tw = m @ w
        with np.errstate(divide="ignore", invalid="ignore"):
            out[done:done + rows] = g((m @ sa) / tw) - g((m @ sb) / tw)
        done += rows
    return out


def bootstrap_p_value(diffs: np.ndarray, observed: float) -> float:
    """Two-sided p-value of the centred bootstrap: ``(#{|D* − D| ≥ |D|} + 1) / (R + 1)``
    (the resampled differences shifted to mean zero approximate the null distribution)."""
    diffs = diffs[np.isfinite(diffs)]
    if not math.isfinite(observed) or diffs.size == 0:
        return math.nan
    b = _extreme(diffs - observed, observed, abs(observed))
    return (b + 1) / (diffs.size + 1)


def wilcoxon_test(d: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """``(p, rank-biserial r)`` of the Wilcoxon signed-rank test of the per-unit differences
    ``dᵤ / Wᵤ``; ``r = (T⁺ − T⁻) / (T⁺ + T⁻)`` over the non-zero differences (positive: A larger)."""
    from scipy.stats import rankdata, wilcoxon

    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(w > 0, d / w, 0.0)
    x = x[x != 0]
    if x.size == 0:
        return 1.0, 0.0  # identical contributions: no evidence of any difference
    ranks = rankdata(np.abs(x))
    plus, minus = ranks[x > 0].sum(), ranks[x < 0].sum()
    p = float(wilcoxon(x, zero_method="wilcox", alternative="two-sided").pvalue)
    return p, float((plus - minus) / (plus + minus))


def standardised_difference(d: np.ndarray, w: np.ndarray) -> float:
    """Cohen's d_z of the per-unit differences ``dᵤ / Wᵤ``: mean / sample standard deviation
    (NaN when there is one unit or no spread)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(w > 0, d / w, 0.0)
    if x.size < 2:
        return math.nan
    sd = float(np.std(x, ddof=1))
    return float(np.mean(x) / sd) if sd > 0 else math.nan
