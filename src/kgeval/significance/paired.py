"""Paired tests of two models on the same resampling units: the engines of :mod:`.compare`.

A metric is *decomposable* when it is ``g(Σᵢ wᵢ f(rᵢ) / Σᵢ wᵢ)`` (hits@k, MR, MRR, IAMR, HMR,
power means; GMR/IGMR with ``f = log``, ``g = exp(±x)``). Then one unit ``u`` (an evaluation
triple: its head and tail tasks) contributes ``Sᵤ = Σ_{i∈u} wᵢ f(rᵢ)`` and weight
``Wᵤ = Σ_{i∈u} wᵢ``, the same ``Wᵤ`` for both models (same tasks, same weights). The paired
difference on the additive scale is ``D = Σᵤ dᵤ / Σᵤ Wᵤ`` with ``dᵤ = Sᵤᴬ − Sᵤᴮ``.

- :func:`permutation_test`: under H₀ (the models are exchangeable within a unit) every sign
  pattern ``sᵤ = ±1`` is equally likely; the two-sided p-value is
  ``P(|Σ sᵤ dᵤ| ≥ |Σ dᵤ|)``. Exact over all ``2ⁿ`` patterns for ``n ≤ 20`` units, otherwise
  ``(b + 1) / (R + 1)`` with ``b`` of ``R`` random patterns at least as extreme.
- :func:`bootstrap_differences`: ``R`` resamples of the units with replacement, the same
  units for both models; returns the metric difference ``M(A*) − M(B*)`` of each resample.
  Works for every metric (non-decomposable ones, e.g. the median rank, are recomputed per
  resample with the multiplicities as task weights).
- :func:`wilcoxon_test`: ``scipy.stats.wilcoxon`` on the per-unit differences ``dᵤ / Wᵤ``.

All resampling is chunked to about :data:`CHUNK_ENTRIES` matrix entries (~32 MB of float64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..metrics.base import Metric
from ..metrics.means import TransformedMean, _GeometricBase

CHUNK_ENTRIES = 1 << 22
#: largest number of units whose sign patterns are enumerated exactly
EXACT_MAX_UNITS = 20


def decomposition(metric: Metric):
    """``(f, g)`` of a decomposable metric (see the module docstring), else None."""
    if isinstance(metric, TransformedMean):
        return metric.f, metric.g
    if isinstance(metric, _GeometricBase):
        sign = metric.sign
        return np.log, lambda x: np.exp(sign * x)
    return None


@dataclass(frozen=True)
class PairedTasks:
    """Two models' ranks on the same aligned tasks, and each task's unit (0..num_units-1).

    ``ranks_a`` / ``ranks_b`` have one row per replicate (training seed) of the model: a
    model's value is the mean of its replicates' values, and its unit contributions are
    averaged over its replicates (one row = an ordinary single run)."""

    ranks_a: np.ndarray
    ranks_b: np.ndarray
    num_candidates: np.ndarray | None
    weight: np.ndarray  # task weights (ones when the tables carry none)
    unit: np.ndarray
    num_units: int

    def unit_sums(self, f) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(Sᴬ, Sᴮ, W)`` per unit for the per-task transform ``f`` (averaged over replicates)."""
        k = self.num_units

        def sums(ranks):
            return np.mean([np.bincount(self.unit, self.weight * f(r), minlength=k) for r in ranks], axis=0)

        return sums(self.ranks_a), sums(self.ranks_b), np.bincount(self.unit, self.weight, minlength=k)

    def _values(self, metric: Metric, w: np.ndarray) -> tuple[float, float]:
        c = self.num_candidates
        return (float(np.mean([metric.compute(r, c, w) for r in self.ranks_a])),
                float(np.mean([metric.compute(r, c, w) for r in self.ranks_b])))

    def values(self, metric: Metric) -> tuple[float, float]:
        """Each model's metric value (the mean over its replicates)."""
        return self._values(metric, self.weight / self.weight.sum())


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


def _multiplicities(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    return rng.multinomial(n, np.full(n, 1.0 / n), size=rows).astype(np.float64)


def bootstrap_differences(tasks: PairedTasks, metric: Metric, *, num_resamples: int,
                          rng: np.random.Generator) -> np.ndarray:
    """``M(A*) − M(B*)`` for ``num_resamples`` paired unit resamples (NaN where a resample has no weight)."""
    parts = decomposition(metric)
    n = tasks.num_units
    out = np.empty(num_resamples)
    done, step = 0, _chunk_rows(n)
    if parts is not None:
        f, g = parts
        sa, sb, w = tasks.unit_sums(f)
        while done < num_resamples:
            rows = min(step, num_resamples - done)
            m = _multiplicities(rng, rows, n)
            tw = m @ w
            with np.errstate(divide="ignore", invalid="ignore"):
                out[done:done + rows] = g((m @ sa) / tw) - g((m @ sb) / tw)
            done += rows
        return out
    for b in range(num_resamples):  # any metric: recompute with multiplicities as task weights
        tw = tasks.weight * _multiplicities(rng, 1, n)[0][tasks.unit]
        if tw.sum() <= 0:
            out[b] = math.nan
            continue
        va, vb = tasks._values(metric, tw / tw.sum())
        out[b] = va - vb
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
