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
- :func:`bootstrap_t_p_value`: the bootstrap-t test of ``D`` (decomposable metrics):
  ``t* = (D* − D̂) / se*`` against ``t̂ = D̂ / se``; :func:`bootstrap_p_value`: the centred
  percentile test ``|D* − D̂| ≥ |D̂|`` of any metric (liberal with few units).
- :func:`wilcoxon_test`: ``scipy.stats.wilcoxon`` on the per-unit differences ``dᵤ / Wᵤ``.

:func:`sign_flip_p_values` and :func:`paired_bootstrap` take many columns (every metric of every
pair of models) and use *one* set of draws for all of them: per chunk of resamples, one matrix
product of the sign bits / unit multiplicities with all columns. Sign patterns are random bits
(``rng.bytes``); bootstrap resamples are ``n`` uniform unit indices per resample (``rng.integers``)
counted per unit by ``bincount`` (the multinomial multiplicities, drawn far faster than by
``rng.multinomial``). All resampling is chunked to about :data:`CHUNK_ENTRIES` matrix entries
(~32 MB of float64), so memory does not grow with ``num_resamples``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

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

    @cached_property
    def units(self) -> np.ndarray:
        return evaluation_units(self.tables_a[0])

    @property
    def num_units(self) -> int:
        return int(self.units.max()) + 1

    def unit_sums(self, metric: Metric):
        """``(Sᴬ, Sᴮ, W, g, replicates)`` per unit, or None if ``metric`` does not decompose: ``Sᴬ``,
        ``Sᴮ`` averaged over replicates (the additive scale of the tests), ``replicates`` each
        replicate's sums ``((Sᴬ₁, ...), (Sᴮ₁, ...))`` where a model has several (else None): a
        replicated model's value is the mean of its replicates' ``g(S/W)``, which differs from
        ``g(mean S / W)`` where ``g`` is not affine (GMR: the geometric mean of the replicates' GMRs)."""
        units = self.units
        stats = [[unit_statistics(t, metric, self.rank_type, units) for t in tables]
                 for tables in (self.tables_a, self.tables_b)]
        if stats[0][0] is None:
            return None
        sa, sb = (replicate_mean([s.sums for s in group]) for group in stats)
        reps = None
        if len(stats[0]) > 1 or len(stats[1]) > 1:
            reps = tuple(tuple(s.sums for s in group) for group in stats)
        return sa, sb, stats[0][0].weights, stats[0][0].finish, reps

    def values(self, metric: Metric, unit_indices: np.ndarray | None = None) -> tuple[float, float]:
        """Each model's metric value (the mean over its replicates), on the listed units if given."""
        if unit_indices is None:
            def one(t):
                return float(metric(t.ranks(self.rank_type), t.num_candidates, t.weight))
        else:
            units = self.units

            def one(t):
                return metric_on_units(t, metric, self.rank_type, unit_indices, units)
        return (float(replicate_mean([one(t) for t in self.tables_a])), float(replicate_mean([one(t) for t in self.tables_b])))


def replicate_mean(values, axis: int = 0):
    """The mean over replicates (along ``axis``), summed in sorted order: the same replicates listed in
    another order give the same bits. ``np.mean`` in list order gave a model and itself with its 3
    seeds reordered per-unit differences of ~1e-17, so the permutation test p = 0.87 (not 1), Cohen's
    d_z = 0.06 and an MR difference of -5.7e-14 instead of 0."""
    x = np.asarray(values, dtype=np.float64)
    if x.shape[axis] == 1:
        return np.take(x, 0, axis=axis)
    return np.sort(x, axis=axis).mean(axis=axis)


def _column_products(m: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``m @ x`` one column at a time. A BLAS matrix product rounds a column differently depending on
    its position (OpenBLAS's edge kernels: of 9-12 columns, the last ones), so a model and itself with
    its replicates listed in another order would get bootstrap bounds a rounding away from 0; a
    matrix-vector product per column treats every column alike."""
    return np.column_stack([m @ np.ascontiguousarray(x[:, c]) for c in range(x.shape[1])])


def _chunk_rows(n: int) -> int:
    return max(1, CHUNK_ENTRIES // max(n, 1))


def _extreme(stats: np.ndarray, observed, scale, axis=None):
    # a tolerance of rounding error (``scale`` bounds the terms' magnitude), so that patterns
    # equal to the observed one count as at least as extreme whatever the summation order
    return np.count_nonzero(np.abs(stats) >= np.abs(observed) - 1e-9 * np.asarray(scale), axis=axis)


def sign_flip_p_values(d: np.ndarray, *, num_resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Two-sided sign-flip p-values of the column sums of ``d`` (units x tests), all columns from
    the *same* sign patterns, and how they were obtained (``"exact"`` / ``"monte carlo"``).

    Exact enumeration of the ``2ⁿ`` patterns for ``n ≤`` :data:`EXACT_MAX_UNITS`; otherwise
    ``num_resamples`` random patterns, drawn as random bits (``rng.bytes``, one bit per unit:
    ``sᵤ = 1 − 2·bitᵤ``, every pattern equally likely), in chunks of about :data:`CHUNK_ENTRIES`
    entries; the flipped sum of each column is ``Σ dᵤ − 2·(bits @ d)``, one matrix product per
    chunk for every column."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim == 1:
        d = d[:, None]
    n, k = d.shape
    observed, scale = d.sum(axis=0), np.abs(d).sum(axis=0)
    b = np.zeros(k, dtype=np.int64)
    step = _chunk_rows(n)
    if n <= EXACT_MAX_UNITS:
        total = 1 << n
        shifts = np.arange(n, dtype=np.int64)
        for start in range(0, total, step):
            codes = np.arange(start, min(total, start + step), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> shifts) & 1)
            b += _extreme(signs @ d, observed, scale, axis=0)
        return b / total, "exact"
    done = 0
    while done < num_resamples:
        rows = min(step, num_resamples - done)
        raw = np.frombuffer(rng.bytes((rows * n + 7) // 8), dtype=np.uint8)
        bits = np.unpackbits(raw, count=rows * n).reshape(rows, n).astype(np.float64)
        b += _extreme(observed - 2.0 * (bits @ d), observed, scale, axis=0)
        done += rows
    return (b + 1) / (num_resamples + 1), "monte carlo"


def permutation_test(d: np.ndarray, *, num_resamples: int, rng: np.random.Generator) -> tuple[float, str]:
    """Two-sided sign-flip p-value of ``Σ dᵤ`` and how it was obtained (``"exact"``/``"monte carlo"``)."""
    p, how = sign_flip_p_values(np.asarray(d, dtype=np.float64)[:, None], num_resamples=num_resamples, rng=rng)
    return float(p[0]), how


def bootstrap_draws(n: int, num_resamples: int, rng: np.random.Generator):
    """Paired bootstrap resamples of ``n`` units in chunks: yields ``(indices, multiplicities)``,
    ``(rows, n)`` unit indices drawn uniformly with replacement and their counts per unit (float64,
    one ``bincount`` per row, in cache). The multiplicities buffer is reused between chunks."""
    step = min(_chunk_rows(n), num_resamples)
    counts = np.empty((step, n))
    dtype = np.int32 if n < 2**31 else np.int64
    done = 0
    while done < num_resamples:
        rows = min(step, num_resamples - done)
        idx = rng.integers(0, n, size=(rows, n), dtype=dtype)
        for r in range(rows):
            counts[r] = np.bincount(idx[r], minlength=n)
        yield idx, counts[:rows]
        done += rows


@dataclass(frozen=True)
class Job:
    """One bootstrapped difference: a metric on a pair of models (``sums``: their unit sums, or
    None when the metric does not decompose and is recomputed on every resampled table)."""

    tasks: PairedTasks
    metric: Metric
    sums: tuple | None


def paired_bootstrap(jobs: list[Job], n: int, *, num_resamples: int, rng: np.random.Generator,
                     studentize: bool = False):
    """``M(A*) − M(B*)`` of every job (columns) on the *same* ``num_resamples`` resamples of the ``n``
    units (rows). Decomposable jobs: one product of the chunk's multiplicities with every job's
    ``[Sᴬ | Sᴮ | W]``; the others: the metric on each resampled table.

    ``studentize``: also return the studentized deviations ``t* = (D* − D̂) / se*`` of the additive-scale
    difference ``D = Σ dᵤ / Σ Wᵤ`` of every decomposable job (NaN columns for the others), with
    ``se*² = Σ mᵤ (dᵤ − D* Wᵤ)² / (Σ mᵤ Wᵤ)²`` (the ratio estimator's linearisation, from three more
    columns ``d², d·W, W²`` in the same product); see :func:`bootstrap_t_p_value`."""
    out = np.empty((num_resamples, len(jobs)))
    tout = np.full((num_resamples, len(jobs)), np.nan) if studentize else None
    dec = [j for j, job in enumerate(jobs) if job.sums is not None]
    width = 6 if studentize else 3
    cols, offsets = [], []
    for j in dec:
        sa, sb, w = jobs[j].sums[:3]
        offsets.append(len(cols))
        cols += [sa, sb, w]
        if studentize:
            d = sa - sb
            cols += [d * d, d * w, w * w]
        reps = _replicate_sums(jobs[j].sums)
        if reps is not None:  # each replicate's sums: the model's value is the mean of g over them
            cols += [*reps[0], *reps[1]]
    x = np.column_stack(cols) if dec else None
    centre = {j: _additive_difference(jobs[j].sums) for j in dec}
    done = 0
    for idx, m in bootstrap_draws(n, num_resamples, rng):
        rows = m.shape[0]
        if dec:
            y = _column_products(m, x)
            with np.errstate(divide="ignore", invalid="ignore"):
                for k, j in enumerate(dec):
                    o = offsets[k]
                    ya, yb, tw = (y[:, o + i] for i in range(3))
                    g = jobs[j].sums[3]
                    reps = _replicate_sums(jobs[j].sums)
                    if reps is None:
                        out[done:done + rows, j] = g(ya / tw) - g(yb / tw)
                    else:
                        ka, kb = len(reps[0]), len(reps[1])
                        ra = y[:, o + width:o + width + ka]
                        rb = y[:, o + width + ka:o + width + ka + kb]
                        out[done:done + rows, j] = (replicate_mean(g(ra / tw[:, None]), axis=1)
                                                    - replicate_mean(g(rb / tw[:, None]), axis=1))
                    if studentize:
                        q, pq, v = (y[:, o + i] for i in range(3, 6))
                        dstar = (ya - yb) / tw
                        se = np.sqrt(np.maximum(q - 2 * dstar * pq + dstar * dstar * v, 0.0)) / tw
                        dev = dstar - centre[j]
                        # no spread and no deviation (0/0): not extreme; no spread, a deviation: ±inf
                        tout[done:done + rows, j] = np.where((se == 0) & (dev == 0), 0.0, dev / se)
        for j, job in enumerate(jobs):
            if job.sums is None:
                for r in range(rows):
                    va, vb = job.tasks.values(job.metric, idx[r])
                    out[done + r, j] = va - vb
        done += rows
    return (out, tout) if studentize else out


def _replicate_sums(sums):
    """The per-replicate sums of :meth:`PairedTasks.unit_sums`, or None (one run per model)."""
    return sums[4] if len(sums) > 4 else None


def _additive_difference(sums) -> float:
    sa, sb, w = sums[:3]
    return float((sa - sb).sum() / w.sum())


def observed_t(sums) -> float:
    """The observed studentized difference ``D̂ / se`` (0 when every ``dᵤ`` is 0, ±inf when the
    per-unit differences are all equal and non-zero)."""
    sa, sb, w = sums[:3]
    d = sa - sb
    dhat = _additive_difference(sums)
    se = math.sqrt(max(float(np.sum((d - dhat * w) ** 2)), 0.0)) / float(w.sum())
    if se == 0:
        return 0.0 if dhat == 0 else math.copysign(math.inf, dhat)
    return dhat / se


def bootstrap_differences(tasks: PairedTasks, metric: Metric, *, num_resamples: int,
                          rng: np.random.Generator) -> np.ndarray:
    """``M(A*) − M(B*)`` for ``num_resamples`` paired unit resamples."""
    job = Job(tasks, metric, tasks.unit_sums(metric))
    return paired_bootstrap([job], tasks.num_units, num_resamples=num_resamples, rng=rng)[:, 0]


def bootstrap_p_value(diffs: np.ndarray, observed: float) -> float:
    """Two-sided p-value of the centred bootstrap: ``(#{|D* − D| ≥ |D|} + 1) / (R + 1)``
    (the resampled differences shifted to mean zero approximate the null distribution).
    Liberal for few units (its null spread is the plug-in one: ~0.09 rejections at α = 0.05 with
    10 units); :func:`bootstrap_t_p_value` is used wherever the metric decomposes. NaN where every
    resample gives the observed non-zero difference (no spread)."""
    diffs = diffs[np.isfinite(diffs)]
    if not math.isfinite(observed) or diffs.size == 0:
        return math.nan
    if observed != 0 and np.all(np.abs(diffs - observed) <= 1e-12 * abs(observed)):
        # every resample gives the observed difference (one unit, or the same difference in every
        # unit): no spread to approximate the null with, so no p-value (it would be 1 / (R + 1))
        return math.nan
    b = int(_extreme(diffs - observed, observed, abs(observed)))
    return (b + 1) / (diffs.size + 1)


def bootstrap_t_p_value(tstats: np.ndarray, observed: float) -> float:
    """Two-sided p-value of the bootstrap-t (studentized) test: ``(#{|t*| ≥ |t̂|} + 1) / (R + 1)``,
    ``t̂ = D̂ / se`` (:func:`observed_t`), ``t* = (D* − D̂) / se*`` (:func:`paired_bootstrap`);
    NaN where ``se = 0`` and ``D̂ ≠ 0`` (the same difference in every unit: the bootstrap has no
    spread; the permutation test still gives its exact ``2¹⁻ⁿ``).
    Studentizing each resample carries the uncertainty of the standard error into the null
    distribution, which the centred percentile test (:func:`bootstrap_p_value`) ignores."""
    t = tstats[~np.isnan(tstats)]
    if math.isnan(observed) or t.size == 0:
        return math.nan
    if math.isinf(observed):
        # every unit has the same difference (one unit, or the same in each): every resample has
        # D* = D̂ and t* = 0, so the count would give 1 / (R + 1) however few the units; undefined
        return math.nan
    if observed == 0:
        return 1.0
    b = int(np.count_nonzero(np.abs(t) >= abs(observed) * (1 - 1e-9)))
    return (b + 1) / (t.size + 1)


def orientation(finish) -> float:
    """+1 where the metric grows with its additive-scale mean (MR, MRR, hits@k, GMR: ``g`` increasing),
    −1 where it shrinks (IAMR = 1/MR, HMR = 1/MRR, IGMR, power means with p < 0): the factor that signs
    an effect measured on the additive scale (``dᵤ``) like the metric difference A − B."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lo, hi = (float(v) for v in finish(np.array([1.0, 2.0])))
    return 1.0 if hi > lo else -1.0


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
