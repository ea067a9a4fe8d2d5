"""Null-model moments of rank transformations f(j) = j^a, from prefix sums.

Under the null model each rank is uniform, rᵢ ~ U{1..Cᵢ}, independently, so

    E[f(rᵢ)]   = S₁(Cᵢ) / Cᵢ,           S_k(n) = Σ_{j=1..n} f(j)^k
    Var[f(rᵢ)] = S₂(Cᵢ) / Cᵢ − E[f(rᵢ)]²

and for r uniform on the integers [o, p] (random tie-breaking) E[f(r)] = (S₁(p) − S₁(o − 1)) / (p − o + 1).
Up to C = :data:`~kgeval.metrics.asymptotics.EXACT_MAX` one exact prefix-sum array serves every
task: O(n + min(max C, EXACT_MAX)), never O(Σ Cᵢ). Larger C use the Euler–Maclaurin sums of
:mod:`.asymptotics` (O(1) per task, agreeing with the prefix sums to ~1e-18 at the threshold),
so memory never grows with C; C is handled in floating point up to 2⁶³ (no int64 overflow).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from .asymptotics import EXACT_MAX, euler_maclaurin_power_sum, log_power_sums, power_sum_range

# prefix sums are cheap but shared by many metrics of one result: keep a small LRU cache
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 64


def prefix_sum(key: tuple, fn: Callable[[np.ndarray], np.ndarray], max_n: int, dtype=np.float64) -> np.ndarray:
    """``P[n] = Σ_{j=1..n} fn(j)`` for n = 0..max_n (``P[0] = 0``), cached under ``key``.

    A cached array for a larger n is reused (prefix sums are prefixes of each other).
    """
    max_n = int(max_n)
    key = (*key, np.dtype(dtype).str)
    hit = _CACHE.get(key)
    if hit is not None and hit.shape[0] > max_n:
        _CACHE.move_to_end(key)
        return hit
    j = np.arange(1, max_n + 1, dtype=dtype)
    out = np.empty(max_n + 1, dtype=dtype)
    out[0] = 0.0
    np.cumsum(fn(j), out=out[1:])
    out.flags.writeable = False  # shared by every later caller: an in-place change would corrupt them all
    _CACHE[key] = out
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return out


def power_prefix(a: float, max_n: int, dtype=np.float64) -> np.ndarray:
    """Generalised harmonic numbers ``H_{-a}(n) = Σ_{j≤n} j^a`` for n = 0..max_n."""
    a = float(a)
    if a == 0.0:
        return np.arange(max_n + 1, dtype=dtype)
    if a == 1.0:
        n = np.arange(max_n + 1, dtype=dtype)
        return n * (n + 1) / 2
    return prefix_sum(("pow", a), lambda j: j ** dtype(a), max_n, dtype)


def log_power_prefix(m: int, max_n: int, dtype=np.float64) -> np.ndarray:
    """``L_m(n) = Σ_{j≤n} (ln j)^m`` for n = 0..max_n."""
    return prefix_sum(("logpow", int(m)), lambda j: np.log(j) ** m, max_n, dtype)


# ---------------------------------------------------------------------------- power moments
_SERIES_TERMS = 20  # |a·ln C| ≤ 1 ⇒ remainder ≤ e/21! < 1e-19


def power_sums(num_candidates, exponent, low=None) -> np.ndarray:
    """``Σ_{j=low..C} j^a`` per task (``low`` defaults to 1), as ``np.longdouble``.

    ``exponent`` is a scalar or one exponent per task. Tasks with C ≤ :data:`EXACT_MAX` read
    exact prefix sums (memory O(min(max C, EXACT_MAX))); larger ones use Euler–Maclaurin
    (:func:`~kgeval.metrics.asymptotics.power_sum_range`, O(1) per task), so no allocation
    grows with C. C may be anything up to 2⁶³ (computed in floating point, never in int64).
    """
    c = np.asarray(num_candidates)
    lo = np.ones(c.shape, dtype=np.int64) if low is None else np.asarray(low)
    a = np.asarray(exponent, dtype=np.float64)
    big = c > EXACT_MAX
    if not big.any():
        return _exact_power_sums(c.astype(np.int64), a, lo.astype(np.int64))
    out = np.empty(c.shape, dtype=np.longdouble)
    if a.ndim == 0:  # Σ_{j≤EXACT_MAX} exactly or nearly, Euler–Maclaurin from EXACT_MAX + 1 (few terms needed there)
        lb, cb = lo[big].astype(np.int64), c[big]
        if np.all(lb == 1):
            # the null moments: one number per exponent, Σ_{j≤EXACT_MAX} j^a by Euler–Maclaurin from
            # j = 32 (< 1e-19 relative, see .asymptotics) instead of an exact prefix array of 65,536
            # extended-precision powers per exponent (most of the default result's time otherwise:
            # GMR/IGMR use 12 exponents)
            head = power_sum_range(1, EXACT_MAX, a)[()]
        else:  # ranges (random tie-breaking) start anywhere: the exact prefix array
            p = power_prefix(float(a), EXACT_MAX, np.longdouble)
            head = np.where(lb <= EXACT_MAX, p[EXACT_MAX] - p[np.minimum(lb, EXACT_MAX + 1) - 1], 0)
        out[big] = head + euler_maclaurin_power_sum(np.maximum(lb, EXACT_MAX + 1), cb, a)
    else:
        out[big] = power_sum_range(lo[big], c[big], a[big])
    if not big.all():
        small = ~big
        out[small] = _exact_power_sums(c[small].astype(np.int64), a if a.ndim == 0 else a[small], lo[small].astype(np.int64))
    return out


def _exact_power_sums(c: np.ndarray, a: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """:func:`power_sums` for C ≤ EXACT_MAX from prefix sums.

    A few distinct exponents use one prefix sum of j^a each. Many distinct exponents (weighted
    geometric means, aᵢ = wᵢ/W) would cost O(Σ Cᵢ) done naively (PyKEEN's approach); instead,
    for |aᵢ ln Cᵢ| ≤ 1 we expand j^a = Σ_m (a ln j)^m / m!, so Σ_{j≤C} j^a = Σ_m a^m/m! · L_m(C)
    with 20 shared prefix sums L_m. Since Σ aᵢ = 1 fewer than ln(max C) tasks can exceed that
    bound; those use :func:`power_sum_range`.
    """
    ld = np.longdouble
    max_n = int(c.max())
    if a.ndim == 0:
        p = power_prefix(float(a), max_n, ld)
        return p[c] - p[lo - 1]
    uniq = np.unique(a)
    if uniq.size <= 8:
        out = np.empty(c.shape, dtype=ld)
        for value in uniq:
            sel = a == value
            p = power_prefix(float(value), max_n, ld)
            out[sel] = p[c[sel]] - p[lo[sel] - 1]
        return out
    # many exponents: series for the small ones, Euler–Maclaurin for the few large ones
    a = np.broadcast_to(a, c.shape)
    small = np.abs(a) * np.log(np.maximum(c, 2)) <= 1.0
    total = np.zeros(c.shape, dtype=ld)
    coef = np.ones(c.shape, dtype=ld)
    # terms needed: remainder after M terms ≤ x^(M+1)/(M+1)! · e^x with x = max |a ln C| ≤ 1
    x = float(np.max(np.where(small, np.abs(a) * np.log(np.maximum(c, 2)), 0.0)))
    terms, rem = 0, 1.0
    while terms < _SERIES_TERMS and rem * math.e > 1e-20:
        terms += 1
        rem *= x / (terms + 1)
    total += (c - lo + 1).astype(ld)
    for m in range(1, terms + 1):
        coef = coef * a / m
        lp = log_power_prefix(m, max_n, ld)
        total += np.where(small, coef * (lp[c] - lp[lo - 1]), 0.0)
    if not small.all():
        total[~small] = power_sum_range(lo[~small], c[~small], a[~small])
    return total


def log_power_moment(num_candidates: np.ndarray, exponent, low: np.ndarray | None = None) -> np.ndarray:
    """``log E[r^a]`` per task for r uniform on ``low..C`` (``low`` defaults to 1); see :func:`power_sums`.

    Computed in extended precision (``np.longdouble``): geometric-mean variances are
    differences of nearly equal products (Var/E² ~ 1/n), and float64 loses ~6 digits
    there for n ~ 10⁴. The result is a longdouble array; sum it before converting.
    """
    c = np.asarray(num_candidates)
    if low is None and np.ndim(exponent) == 0 and c.size >= 4096 and int(c.max()) <= EXACT_MAX:
        # one log per distinct C instead of per task (10⁷ tasks): a table over 1..max C, gathered
        n = np.arange(int(c.max()) + 1, dtype=np.longdouble)
        n[0] = 1
        sums = power_prefix(float(exponent), n.size - 1, np.longdouble)[: n.size]
        with np.errstate(divide="ignore"):  # C = 0 never occurs; its entry is unused
            return np.log(sums / n)[c]
    lo = np.ones(c.shape, dtype=np.int64) if low is None else np.asarray(low)
    count = c.astype(np.longdouble) - lo.astype(np.longdouble) + 1
    return np.log(power_sums(c, exponent, lo)) - np.log(count)


#: |a|·ln C up to this: :func:`log_moment_spread` by the centred series (else the direct difference)
_SPREAD_SERIES_MAX = 0.5
_SPREAD_TERMS = 24  # 2·x^{K−1}e^x/(K+1)! < 1e-20 at x = 0.5 from K = 17


def _per_distinct(fn, c: np.ndarray, exponent):
    """``fn(c, exponent)`` computed once per distinct candidate count where one exponent serves every task
    (unweighted), else None (compute it per task)."""
    if np.ndim(exponent) == 0 and c.size > 1:
        uc, inv = np.unique(c, return_inverse=True)
        if uc.size < c.size:
            return fn(uc, exponent)[inv.reshape(c.shape)]
    return None


def _series_split(c: np.ndarray, exponent):
    """``(a, out, x, series, direct)`` per task: the exponents, a longdouble result of zeros, ``x = |a|·ln C``,
    and the tasks (C > 1) computed from the central-moment series (``x ≤ _SPREAD_SERIES_MAX``) or directly."""
    a = np.broadcast_to(np.asarray(exponent, dtype=np.float64), c.shape)
    x = np.abs(a) * np.log(np.maximum(c, 1).astype(np.float64))
    series = (c > 1) & (x <= _SPREAD_SERIES_MAX)
    return a, np.zeros(c.shape, dtype=np.longdouble), x, series, (c > 1) & ~series


def log_moment_spread(num_candidates, exponent) -> np.ndarray:
    """``ln E[r^{2a}] − 2 ln E[r^a] = ln(1 + Var[r^a]/E[r^a]²) ≥ 0`` per task (longdouble).

    The geometric means' variance is E² · expm1(Σ of these). As a difference of the two logs it
    keeps only their absolute accuracy (~1e-19) while it is ~a²·Var[ln r]: for n unweighted tasks
    (a = 1/n) the sum lost ~n²·1e-19 relative (Var[GMR] 2.2e-6 off at 10⁶ tasks of 14,541
    candidates, 1.2e-8 at 10⁵). Where |a|·ln C ≤ 1/2 it is computed from the central moments
    μₖ of L = ln r (from the sums of (ln j)^k: :func:`log_power_prefix`, or
    :func:`~kgeval.metrics.asymptotics.log_power_sums` above EXACT_MAX):
    E[r^{a}]·e^{−a·E[L]} = 1 + G(a), G(a) = Σ_{k≥2} aᵏ μₖ/k! = E[e^{y} − 1 − y] ≥ 0 (y = a(L − E[L])),
    and the spread is log1p(G(2a)) − 2·log1p(G(a)) (≈ 2a²μ₂ − a²μ₂: no cancellation). Above that
    the direct difference loses at most ~4ε·ln C·E[L]/(|a|·Var[L]) ≲ 1e-15.
    """
    c = np.asarray(num_candidates, dtype=np.int64)
    once = _per_distinct(log_moment_spread, c, exponent)
    if once is not None:
        return once
    a, out, x, series, direct = _series_split(c, exponent)
    if direct.any():
        cd, ad = c[direct], a[direct]
        out[direct] = log_power_moment(cd, 2 * ad) - 2 * log_power_moment(cd, ad)
    if not series.any():
        return out
    cs, as_ = c[series], a[series].astype(np.longdouble)
    _, cent = _log_central_moments(cs, float(x[series].max()))
    g1 = _centred_series(cent, as_)
    g2 = _centred_series(cent, 2 * as_)
    out[series] = np.log1p(g2) - 2 * np.log1p(g1)
    return out


def log_power_moment_accurate(num_candidates, exponent) -> np.ndarray:
    """``ln E[r^a]`` per task (longdouble) to its own relative accuracy, also where it is tiny (|a| ≪ 1:
    :func:`log_power_moment` keeps ~1e-19 absolute, 3e-10 relative of ln E[r^{1e-9}] at C = 2). Where
    |a|·ln C ≤ 1/2 it is a·E[L] + log1p(G(a)) with L = ln r, G(a) = Σ_{k≥2} aᵏ μₖ/k! (see
    :func:`log_moment_spread`): both terms have the sign of a. Else :func:`log_power_moment`."""
    c = np.asarray(num_candidates, dtype=np.int64)
    once = _per_distinct(log_power_moment_accurate, c, exponent)
    if once is not None:
        return once
    a, out, x, series, direct = _series_split(c, exponent)
    if direct.any():
        out[direct] = log_power_moment(c[direct], a[direct])
    if series.any():
        cs, as_ = c[series], a[series].astype(np.longdouble)
        mean_l, cent = _log_central_moments(cs, float(x[series].max()))
        out[series] = as_ * mean_l + np.log1p(_centred_series(cent, as_))
    return out


def _centred_series(cent: np.ndarray, a: np.ndarray) -> np.ndarray:
    """G(a) = Σ_{k≥2} aᵏ μₖ/k! per task (Horner in a), ``cent`` from :func:`_log_central_moments`."""
    terms = cent.shape[0] - 1
    g = np.zeros(a.shape, dtype=np.longdouble)
    for k in range(terms, 1, -1):
        g = (g + cent[k] / math.factorial(k)) * a
    return g * a


#: recent :func:`_log_central_moments` results: the geometric means ask for the same candidate counts
#: four times per side (GMR and IGMR, each its E and its spread), a quarter of a result's cost
_CENTRAL_CACHE: OrderedDict = OrderedDict()
_CENTRAL_CACHE_SIZE = 8


def _log_central_moments(cs: np.ndarray, xmax: float) -> tuple[np.ndarray, np.ndarray]:
    """(E[L], central moments μₖ of L = ln r, k = 0..K, rows) per task of ``cs`` (C > 1), longdouble;
    K the fewest terms with 2·xmax^{K−1}e^{xmax}/(K+1)! < 1e-20 (xmax = max |a|·ln C ≤ 1/2).
    Read-only arrays, kept for the next call with the same counts and K."""
    terms = next((k for k in range(2, _SPREAD_TERMS) if 2 * xmax ** (k - 1) * math.exp(xmax) < 1e-20 * math.factorial(k + 1)), _SPREAD_TERMS)
    key = (terms, cs.dtype.str, cs.shape, cs.tobytes())
    hit = _CENTRAL_CACHE.get(key)
    if hit is not None:
        return hit
    out = _central_moments_of(cs, terms)
    for arr in out:
        arr.flags.writeable = False  # shared by later callers
    _CENTRAL_CACHE[key] = out
    while len(_CENTRAL_CACHE) > _CENTRAL_CACHE_SIZE:
        _CENTRAL_CACHE.popitem(last=False)
    return out


def _central_moments_of(cs: np.ndarray, terms: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_log_central_moments` with ``terms`` = K, computed."""
    # raw moments E[L^m], m = 1..terms, per distinct C
    uc, inv = np.unique(cs, return_inverse=True)
    raw = np.empty((terms + 1, uc.size), dtype=np.longdouble)
    raw[0] = 1
    small = uc <= EXACT_MAX
    ucf = uc.astype(np.longdouble)
    for m in range(1, terms + 1):
        if small.any():
            raw[m, small] = log_power_prefix(m, int(uc[small].max()), np.longdouble)[uc[small]] / ucf[small]
        if not small.all():
            raw[m, ~small] = log_power_sums(uc[~small], m) / ucf[~small]
    # central moments μₖ = Σᵢ C(k, i) E[L^i] (−E[L])^{k−i}
    neg_mean = -raw[1]
    cent = np.zeros((terms + 1, uc.size), dtype=np.longdouble)
    for k in range(2, terms + 1):
        acc = np.zeros(uc.size, dtype=np.longdouble)
        power = np.ones(uc.size, dtype=np.longdouble)
        for i in range(k, -1, -1):  # i = k..0: (−E[L])^{k−i} grows with the loop
            acc += math.comb(k, i) * raw[i] * power
            power = power * neg_mean
        cent[k] = acc
    return raw[1][inv], cent[:, inv]


def _per_value_table(c: np.ndarray, exponent) -> tuple[np.ndarray, np.ndarray] | None:
    """(E[r^a], Var[r^a]) for every C = 0..max C as float64 tables, when max C ≤ EXACT_MAX and a
    is a scalar: a gather per task then costs what the old prefix lookup did (10⁷ tasks)."""
    a = np.asarray(exponent, dtype=np.float64)
    if a.ndim or c.size < 4096 or int(c.max()) > EXACT_MAX:
        return None
    n = np.arange(int(c.max()) + 1, dtype=np.longdouble)
    n[0] = 1
    m1 = power_prefix(float(a), n.size - 1, np.longdouble)[: n.size] / n
    m2 = power_prefix(2 * float(a), n.size - 1, np.longdouble)[: n.size] / n
    return m1.astype(np.float64), np.maximum(m2 - m1 * m1, 0).astype(np.float64)


def power_moment(num_candidates, exponent, low=None) -> np.ndarray:
    """``E[r^a] = Σ_{j=low..C} j^a / (C − low + 1)`` per task, as float64 (see :func:`power_sums`)."""
    c = np.asarray(num_candidates)
    table = None if low is not None else _per_value_table(c, exponent)
    if table is not None:
        return table[0][c]
    lo = np.ones(c.shape, dtype=np.int64) if low is None else np.asarray(low)
    count = c.astype(np.longdouble) - lo.astype(np.longdouble) + 1
    return (power_sums(c, exponent, lo) / count).astype(np.float64)


def power_variance(num_candidates, exponent) -> np.ndarray:
    """``Var[r^a] = E[r^{2a}] − E[r^a]²`` per task (longdouble difference, float64 result)."""
    c = np.asarray(num_candidates)
    table = _per_value_table(c, exponent)
    if table is not None:
        return table[1][c]
    count = c.astype(np.longdouble)
    m1 = power_sums(c, exponent) / count
    m2 = power_sums(c, 2 * np.asarray(exponent, dtype=np.float64)) / count
    return np.maximum(m2 - m1 * m1, 0).astype(np.float64)


# ---------------------------------------------------------------------------- power means
#: |p · ln r| below this: r^p and Σ wᵢ rᵢ^p are finite normal float64 numbers (e^600 ≈ 1e260)
_DIRECT_EXPONENT = 600.0
#: |p| below this: 1 + p·ln r loses digits that (Σ wᵢ rᵢ^p)^(1/p) amplifies by 1/p; use expm1/log1p
_SMALL_P = 1e-3


def power_mean(r: np.ndarray, w: np.ndarray | None, p: float) -> np.ndarray:
    """``(Σ wᵢ rᵢ^p)^(1/p)`` over the last axis of the ranks ``r`` (``w`` summing to 1, or None for
    the plain mean), without overflow or loss of digits.

    The direct form is used where it is exact enough and r^p is a normal number (every ordinary
    p and rank); for |p·ln r| > 600 (r^p overflows or underflows: p = 400 with rank 10 gave inf,
    p = −200 with ranks ≥ 100 a ZeroDivisionError) the sum is scaled by its largest term,
    ``exp((T + ln Σ wᵢ e^{tᵢ − T}) / p)`` with tᵢ = p ln rᵢ and T = max tᵢ, and for |p| < 10⁻³
    ``exp(log1p(Σ wᵢ expm1(tᵢ)) / p)`` keeps the digits (p = 1e-9: 8e-8 relative error before).
    """
    r = np.asarray(r, dtype=np.float64)

    def mean(x):
        return x.mean(axis=-1) if w is None else np.sum(w * x, axis=-1) / np.sum(w)

    t = p * np.log(r)
    if abs(p) < _SMALL_P:
        return np.exp(np.log1p(mean(np.expm1(t))) / p)
    if np.max(np.abs(t), initial=0.0) <= _DIRECT_EXPONENT:
        return mean(r**p) ** (1.0 / p)
    top = np.max(t, axis=-1, keepdims=True)
    return np.exp((top[..., 0] + np.log(mean(np.exp(t - top)))) / p)
