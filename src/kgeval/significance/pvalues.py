"""One-sided p-values of a metric value against the null model (better than chance?).

Null model (Hoyt, Berrendorf et al. 2022, §4): the ranks are independent, rᵢ ~ U{1..Cᵢ}. The p-value of an
observed value m is the probability, under the null, of a value *at least as good*:
P(M ≥ m) for metrics where larger is better (MRR, hits@k, IGMR, …), P(M ≤ m) for the others
(MR, GMR, HMR, …).

Methods, chosen by :func:`null_p_value` (``method="auto"``):

- **exact: Poisson-binomial** — unweighted hits@k. n·hits@k = Σ I[rᵢ ≤ k] is a sum of
  independent Bernoulli(pᵢ), pᵢ = min(k, Cᵢ)/Cᵢ, computed under an exponential tilt that
  centres the distribution on the observed count, so even a tail of 1e-500000 comes out
  exactly in log space. Tasks with equal pᵢ form one binomial; up to
  :data:`DIRECT_HITS_MAX_GROUPS` distinct pᵢ the binomials are convolved directly, above by a
  tree of batched FFT products (a direct convolution of FB15k-237's ~12,500 distinct Cᵢ took
  ~3 s per p-value; the tree ~0.1 s). Up to :data:`EXACT_HITS_MAX_TASKS` tasks.
- **exact: convolution** — unweighted MR. n·MR = Σ rᵢ is a sum of independent discrete
  uniforms; its distribution is the product of their generating functions, evaluated by one
  FFT of the support (tasks with equal Cᵢ share one factor, raised to their count). Below the
  mean the uniforms are exponentially tilted towards the observed sum first (as for hits@k),
  so FFT rounding (~1e-16 absolute) stays small relative to the tail even at 1e-1000. Used
  while the support is at most :data:`EXACT_MR_MAX_SUPPORT` points and support × distinct Cᵢ
  at most :data:`EXACT_MR_MAX_WORK` (~0.5 s on an idle core; 5·10⁷ took 34 s under load).
- **normal approximation** — everything else (weighted tables, other metrics, larger inputs):
  z = ±(m − E)/σ with the metric's own null moments
  (signed so larger is better), p = Φ(−z), computed as ``norm.logsf`` so a tiny p-value keeps
  its logarithm instead of becoming 0. Far in the tail the normal curve falls faster than the
  true distribution (MRR = 1 on 100 tasks of 50 candidates: Φ(−z) ≈ 1e-739, the truth 50⁻¹⁰⁰ ≈
  1e-170), so it is floored at P(every rank is 1) = Π 1/Cᵢ, which every value is at least as
  likely as (each metric is best when all ranks are 1): still an approximation, never below a
  bound known to hold. For few tasks it can be anti-conservative for skewed metrics: MRR on
  5 tasks (C ∈ {10, 50, 200}) gave p ≤ 0.05 in ~12% of null tables (benchmarks/pvalues.py),
  ~5% from 30 tasks on.

Tied scores make the observed n·hits@k (``expected`` ranks) or n·MR (``realistic`` ranks, half
integers) fractional, while the null's count/sum is an integer. The observed value is moved to
the neighbouring integer on the *worse* side (a count rounded down, a rank sum rounded up, after
forgiving float noise of 1e-9): the tie resolved against the model, so the p-value is
conservative (2.5 expected hits are tested as 2, never as 3, the optimistic count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from .._format import format_p  # noqa: F401 (public here too)
from ..errors import InvalidInputError
from ..metrics import get as get_metric
from ..metrics.base import Metric, check_candidates, check_weights
from ..metrics.derived import DerivedMetric, _centred
from ..metrics.means import (ArithmeticMeanRank, GeometricMeanRank, HitsAtK, InverseArithmeticMeanRank,
                             InverseGeometricMeanRank)

__all__ = ["PValue", "null_p_value", "METHODS"]

#: largest number of tasks for the exact hits@k distribution (direct convolution is O(n²))
EXACT_HITS_MAX_TASKS = 50_000
#: up to this many distinct Cᵢ the binomials are convolved directly, above by an FFT tree
DIRECT_HITS_MAX_GROUPS = 200
#: largest support (Σ Cᵢ − n + 1 points) for the exact MR distribution (one FFT of that size)
EXACT_MR_MAX_SUPPORT = 1 << 20
#: largest FFT work (support × distinct Cᵢ values) for the exact MR distribution
EXACT_MR_MAX_WORK = 10**7
METHODS = ("auto", "exact", "normal")


@dataclass(frozen=True)
class PValue:
    """A one-sided p-value: ``value`` (may underflow to 0.0 for astronomically good values),
    ``log10`` (always finite unless p = 0 exactly), ``method`` (which computation), ``z`` (the
    z-score of the value, larger = better, when the null variance is known)."""

    value: float
    log10: float
    method: str
    z: float | None = None

    def __float__(self) -> float:
        return self.value

    def __str__(self) -> str:
        return format_p(self.log10)


def _from_log10(log10_p: float, method: str, z: float | None) -> PValue:
    log10_p = min(0.0, log10_p)
    return PValue(float(10.0**log10_p), float(log10_p), method, None if z is None else float(z))


def null_p_value(metric: str | Metric, value: float, num_candidates, weights=None, *, method: str = "auto",
                 moments_of=None) -> PValue:
    """p-value of ``value`` of ``metric`` under the null model with ``num_candidates`` per task.

    ``weights``: per-task weights (relative; None = unweighted). ``method``: ``"auto"`` (exact
    where tractable, else normal), ``"exact"`` (refuses where no exact method applies) or
    ``"normal"``. Adjusted and z variants take the p-value of their base metric (the same event).
    ``moments_of``: optional ``metric -> NullMoments`` of these very tasks and weights, already
    computed (those a result already holds), instead of computing them again.
    """
    m = get_metric(metric) if isinstance(metric, str) else metric
    if isinstance(m, DerivedMetric):
        raise InvalidInputError(
            f"p-values are defined for base metrics; {m.key!r} is a transformation of {m.base.key!r}: "
            f"ask for the p-value of {m.base.key!r} with its value"
        )
    if method not in METHODS:
        raise InvalidInputError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
        raise InvalidInputError(f"the value of {m.key} must be a finite number, got {value!r}")
    if float(value) not in m.value_range:
        raise InvalidInputError(f"{value!r} is not a possible value of {m.key} (range {m.value_range})")
    c = check_candidates(num_candidates)
    w = None if weights is None else check_weights(weights, c.size)
    if w is not None and np.allclose(w, w[0]):
        w = moments_of = None  # equal weights are the unweighted mean (the given moments are the weighted ones)
    moments = m._null_moments(c, w) if moments_of is None else moments_of(m)
    if moments.mean is None or moments.variance is None:
        raise InvalidInputError(f"{m.key} has no null-model moments, so no p-value against chance")
    z = _z(m, float(value), moments)
    partner = _RECIPROCALS.get(type(m))
    if partner is not None:
        # IAMR ≥ m is MR ≤ 1/m (IGMR: GMR ≤ 1/m), the same event: its p-value, exact for MR. The
        # normal curve on the reciprocal's own scale is far too thin in its upper tail (IAMR on 200
        # tasks: 2.8e-46 where the exact MR p-value of the same rankings is 2.1e-19)
        p = null_p_value(partner(), 1.0 / float(value), c, None if w is None else weights, method=method,
                         moments_of=moments_of)
        return PValue(p.value, p.log10, f"{p.method} (of {partner.key} = 1/value: the same event)", z)
    exact = _exact(m, float(value), c, w, method)
    if exact is not None:
        return _from_log10(exact[0], exact[1], z)
    if method == "exact":
        raise InvalidInputError(
            f"no exact null distribution for {m.key}{' with weights' if w is not None else ''} on {c.size} tasks "
            f"(exact: unweighted hits@k up to {EXACT_HITS_MAX_TASKS} tasks, unweighted MR up to "
            f"{EXACT_MR_MAX_SUPPORT} support points and {EXACT_MR_MAX_WORK:.0e} support x distinct-C work); "
            f"use method='normal'"
        )
    if z is None:  # no spread under the null: every ranking gives the expectation
        return PValue(1.0, 0.0, "degenerate: the metric is constant under the null", None)
    label = "normal approximation" + ("" if moments.exact else " (approximate null moments)")
    log10_best = -float(np.log10(c.astype(np.float64)).sum())  # weights do not change the best outcome
    log10_normal = float(stats.norm.logsf(z)) / math.log(10)
    if log10_normal < log10_best:
        # the normal tail is far below what any ranking can reach (P[every rank 1] = Π 1/Cᵢ): the
        # true p lies at or above this bound, so say that it is the bound, not an approximation of p
        label += ", below the least possible p-value Π 1/Cᵢ (every rank 1): that bound is reported"
    return _from_log10(max(log10_normal, log10_best), label, z)


#: metrics that are the reciprocal of another (``M = 1/M'``): their p-value is that of ``M'`` at
#: ``1/value``. HMR = 1/MRR is not mapped: both are normal approximations (MRR's anti-conservative,
#: HMR's conservative in the upper tail), and neither is exact
_RECIPROCALS = {InverseArithmeticMeanRank: ArithmeticMeanRank, InverseGeometricMeanRank: GeometricMeanRank}


def _z(m: Metric, value: float, moments) -> float | None:
    sd = math.sqrt(max(0.0, moments.variance))
    if sd == 0:
        return None
    # M − E as (M − opt) + (opt − E) where the moments state opt − E (as the z_ wrappers do): near the
    # optimum value − E kept only E's rounding
    z = _centred(m, value, moments) / sd
    return z if m.increasing else -z


def _exact(m: Metric, value: float, c: np.ndarray, w, method: str) -> tuple[float, str] | None:
    """``(log10 p, label)`` from an exact distribution, or None where none applies."""
    if method == "normal" or w is not None:
        return None
    if isinstance(m, HitsAtK) and c.size <= EXACT_HITS_MAX_TASKS:
        log10_p = _hits_tail(m, value, c)
        # a tail below double range (log10 = -inf) is left to the normal approximation's logarithm
        return None if log10_p == -math.inf else (log10_p, "exact: Poisson-binomial")
    if type(m) is ArithmeticMeanRank:
        support = int(c.sum()) - c.size + 1
        if support <= EXACT_MR_MAX_SUPPORT and support * np.unique(c).size <= EXACT_MR_MAX_WORK:
            return _mr_tail(value, c), "exact: convolution"
    return None


def _observed_integer(x: float, worse) -> int:
    """An observed (possibly fractional) count or sum as the neighbouring integer on the worse side
    (``worse``: math.floor for counts, math.ceil for rank sums); float noise of 1e-9 forgiven."""
    r = round(x)
    return int(r) if abs(x - r) < 1e-9 * max(1.0, abs(x)) else int(worse(x))


def _hits_tail(m: HitsAtK, value: float, c: np.ndarray) -> float:
    """log10 P(Σ Bernoulli(pᵢ) ≥ x) for the observed count x, exactly, in log space.

    Above the mean the tail is computed under the exponentially tilted distribution
    pᵢ' = pᵢe^θ / (1 − pᵢ + pᵢe^θ) whose mean is x (θ by root finding): its probabilities near x
    are O(1), so the direct convolution neither underflows nor loses precision, and
    log P(X = j) = log P'(X = j) + Σ log(1 − pᵢ + pᵢe^θ) − θj undoes the tilt exactly.
    """
    n = c.size
    x = _observed_integer(value * n, math.floor)
    k = min(m.k, 2**62)
    sure = int(np.count_nonzero(c <= k))  # pᵢ = 1: always a hit
    need = x - sure
    if need <= 0:
        return 0.0
    values, counts = np.unique(c[c > k], return_counts=True)
    if need > counts.sum():
        return -math.inf  # more hits than tasks that can miss: impossible (only for x > n)
    probs = k / values.astype(np.float64)
    weights = counts.astype(np.float64)  # a float dot product (an int one is not BLAS)
    theta = 0.0
    if need > float(np.dot(counts, probs)):
        def excess(t):
            odds = probs * math.exp(t)
            return float(np.dot(weights, odds / (1 - probs + odds))) - need
        hi = 1.0
        while excess(hi) < 0:
            hi *= 2
        theta = optimize.brentq(excess, 0.0, hi, xtol=1e-12)
    tilted = probs * math.exp(theta) / (1 - probs + probs * math.exp(theta))
    if tilted.size <= DIRECT_HITS_MAX_GROUPS:
        pmf = np.ones(1)
        for p_, cnt in zip(tilted, counts):
            pmf = np.convolve(pmf, stats.binom.pmf(np.arange(cnt + 1), cnt, p_))
    else:
        pmf = _bernoulli_sum_pmf(np.repeat(tilted, counts))
    j = np.arange(need, pmf.size)
    with np.errstate(divide="ignore"):
        log_terms = np.log(pmf[need:]) - theta * j
    log_mgf = float(np.dot(counts, np.log1p(probs * math.expm1(theta))))
    log_tail = float(special.logsumexp(log_terms)) + log_mgf
    return min(0.0, log_tail / math.log(10))


def _bernoulli_sum_pmf(probs: np.ndarray) -> np.ndarray:
    """pmf of a sum of independent Bernoulli(probs): the product Π(1 − p + pz) by a tree of
    batched FFT multiplications, O(n log² n). FFT rounding is ~1e-16 of the largest term, which
    the tilt has made the terms around the observed count: the tail keeps its relative accuracy."""
    polys = np.stack([1.0 - probs, probs], axis=1)
    while polys.shape[0] > 1:
        if polys.shape[0] % 2:  # pad with the polynomial 1
            polys = np.vstack([polys, np.eye(1, polys.shape[1])])
        length = 2 * polys.shape[1] - 1
        size = 1 << (length - 1).bit_length()
        spectrum = np.fft.rfft(polys[0::2], size) * np.fft.rfft(polys[1::2], size)
        polys = np.clip(np.fft.irfft(spectrum, size)[:, :length], 0.0, None)
    return polys[0]


def _mr_tail(value: float, c: np.ndarray) -> float:
    """log10 P(Σ rᵢ ≤ s) for the observed sum s, rᵢ ~ U{1..Cᵢ}, exactly, in log space.

    One FFT of the product of generating functions. Below the mean the uniforms are tilted,
    q_θ(r) ∝ e^{θr} (θ < 0, found so that the tilted mean sum is s), which puts O(1) mass near s:
    the FFT's ~1e-16 absolute rounding is then small *relative* to the terms that matter, and
    log P(S = j) = log P_θ(S = j) − θj + Σ log E[e^{θrᵢ}] undoes the tilt exactly.
    """
    n = c.size
    s = _observed_integer(value * n, math.ceil)
    support = int(c.sum()) - n + 1
    if s - n >= support - 1:
        return 0.0
    values, counts = np.unique(c, return_counts=True)
    if s <= n:  # every rank 1: the one outcome with the smallest sum
        return -float(np.dot(counts, np.log10(values.astype(np.float64))))
    theta = 0.0 if s - n >= (support - 1) / 2 else _mr_tilt(s - n, values, counts)
    size = 1 << int(math.ceil(math.log2(support)))
    spectrum = np.ones(size // 2 + 1, dtype=np.complex128)
    log_mgf = 0.0  # Σ log E[e^{θ(rᵢ−1)}]
    for cv, cnt in zip(values, counts):
        u = np.exp(theta * np.arange(int(cv)))  # U{1..C} shifted to start at 0, tilted
        total = u.sum()
        log_mgf += int(cnt) * math.log(total / cv)
        spectrum *= np.fft.rfft(u / total, size) ** int(cnt)
    pmf = np.fft.irfft(spectrum, size)[: s - n + 1]
    j = np.arange(pmf.size)
    with np.errstate(divide="ignore"):
        log_terms = np.log(np.clip(pmf, 0.0, None)) - theta * j
    log_tail = float(special.logsumexp(log_terms)) + log_mgf
    return min(0.0, log_tail / math.log(10))


def _mr_tilt(target: float, values: np.ndarray, counts: np.ndarray) -> float:
    """θ < 0 with Σ E_θ[rᵢ − 1] = target, rᵢ − 1 ~ a geometric e^{θk} truncated to 0..Cᵢ−1."""
    cv = values.astype(np.float64)

    def excess(t):
        # mean of the truncated geometric: q/(1−q) − C q^C/(1−q^C), q = e^t, via expm1 for small |t|
        if abs(t) * cv.max() < 1e-6:
            means = (cv - 1) / 2 + t * (cv**2 - 1) / 12
        else:
            means = math.exp(t) / -math.expm1(t) - cv * np.exp(cv * t) / -np.expm1(cv * t)
        return float(np.dot(counts, means)) - target

    lo = -1.0
    while excess(lo) > 0:
        lo *= 2
    return optimize.brentq(excess, lo, 0.0, xtol=1e-12)
