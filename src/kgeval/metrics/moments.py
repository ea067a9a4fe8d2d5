"""Null-model moments of rank transformations, from prefix sums.

Under the null model each rank is uniform, rᵢ ~ U{1..Cᵢ}, independently. For a rank
transformation f,

    E[f(rᵢ)]   = S₁(Cᵢ) / Cᵢ,           S_k(n) = Σ_{j=1..n} f(j)^k
    Var[f(rᵢ)] = S₂(Cᵢ) / Cᵢ − E[f(rᵢ)]²

so one prefix-sum array up to max C serves every task: O(n + max C), never O(Σ Cᵢ).
The same prefix sums give the exact expectation under uniformly random tie-breaking:
for r uniform on the integers [o, p], E[f(r)] = (S₁(p) − S₁(o − 1)) / (p − o + 1).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

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


def uniform_range_mean(prefix: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Mean of f over the integers ``low..high`` (inclusive) given ``prefix`` of f."""
    return (prefix[high] - prefix[low - 1]) / (high - low + 1)


# ---------------------------------------------------------------------------- power moments
_SERIES_TERMS = 20  # |a·ln C| ≤ 1 ⇒ remainder ≤ e/21! < 1e-19


def log_power_moment(num_candidates: np.ndarray, exponent, low: np.ndarray | None = None) -> np.ndarray:
    """``log E[r^a]`` per task for r uniform on ``low..C`` (``low`` defaults to 1).

    ``exponent`` is a scalar or one exponent per task. A few distinct exponents use one
    prefix sum of j^a each. Many distinct exponents (weighted geometric means, aᵢ = wᵢ/W)
    would cost O(Σ Cᵢ) done naively (PyKEEN's approach); instead, for |aᵢ ln Cᵢ| ≤ 1 we
    expand j^a = Σ_m (a ln j)^m / m!, so Σ_{j≤C} j^a = Σ_m a^m/m! · L_m(C) with 20 shared
    prefix sums L_m. Since Σ aᵢ = 1 fewer than ln(max C) tasks can exceed that bound;
    those are summed directly.

    Computed in extended precision (``np.longdouble``): geometric-mean variances are
    differences of nearly equal products (Var/E² ~ 1/n), and float64 loses ~6 digits
    there for n ~ 10⁴. The result is a longdouble array; sum it before converting.
    """
    ld = np.longdouble
    c = np.asarray(num_candidates, dtype=np.int64)
    lo = np.ones_like(c) if low is None else np.asarray(low, dtype=np.int64)
    count = (c - lo + 1).astype(ld)
    a = np.asarray(exponent, dtype=np.float64)
    max_n = int(c.max())
    if a.ndim == 0:
        p = power_prefix(float(a), max_n, ld)
        return np.log(p[c] - p[lo - 1]) - np.log(count)
    uniq = np.unique(a)
    if uniq.size <= 8:
        out = np.empty(c.shape, dtype=ld)
        for value in uniq:
            sel = a == value
            p = power_prefix(float(value), max_n, ld)
            out[sel] = np.log(p[c[sel]] - p[lo[sel] - 1]) - np.log(count[sel])
        return out
    # many exponents: series for the small ones, direct sums for the few large ones
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
    for m in range(terms + 1):
        if m > 0:
            coef = coef * a / m
        if m == 0:
            total += count
            continue
        lp = log_power_prefix(m, max_n, ld)
        total += np.where(small, coef * (lp[c] - lp[lo - 1]), 0.0)
    for i in np.flatnonzero(~small):
        j = np.arange(lo[i], c[i] + 1, dtype=ld)
        total[i] = np.sum(j ** a[i])
    return np.log(total) - np.log(count)


# ---------------------------------------------------------------------------- inverse moments
def inverse_moments(num_candidates: np.ndarray, weights: np.ndarray | None, transform: str) -> tuple[float, float] | None:
    """``(E[1/X], E[1/X²])`` for ``X = Σ wᵢ f(rᵢ)`` (weights normalised), rᵢ ~ U{1..Cᵢ}.

    Exact up to quadrature error (< 1e-12 relative in the tests), from the Laplace identities

        E[X⁻¹] = ∫₀^∞ L(t) dt,   E[X⁻²] = ∫₀^∞ t L(t) dt,   L(t) = E[e^{−tX}] = Πᵢ φᵢ(t wᵢ)

    with φᵢ(s) = (1/Cᵢ) Σ_{j≤Cᵢ} e^{−s f(j)} — independence makes L a product. For f(j) = j
    (``transform='identity'``, X = MR) φ is a geometric series in closed form; for f(j) = 1/j
    (``'reciprocal'``, X = MRR) it is a prefix sum over j. Tasks are grouped by (Cᵢ, wᵢ), so
    one node costs O(max C) (reciprocal) or O(#distinct C) (identity). Substituting t = eʸ
    gives an analytic integrand in a strip of half-width π/2, where the trapezoid rule
    converges like exp(−π²/h); h = 0.2 leaves an error far below float precision.

    Returns None when the weights take more than 8 distinct values (then callers fall back
    to the delta method).
    """
    c = np.asarray(num_candidates, dtype=np.int64)
    n = c.size
    if weights is None:
        w_groups = [(1.0 / n, np.ones(n, dtype=bool))]
    else:
        uniq = np.unique(weights)
        if uniq.size > 8:
            return None
        w_groups = [(float(u), weights == u) for u in uniq if u > 0]
    groups = []  # (weight, distinct C values, counts)
    for w, sel in w_groups:
        cv, cnt = np.unique(c[sel], return_counts=True)
        groups.append((w, cv, cnt.astype(np.float64)))
    max_c = int(c.max())
    if transform == "identity":
        mu = sum(w * np.sum(cnt * (cv + 1) / 2.0) for w, cv, cnt in groups)
        f_min = 1.0
    elif transform == "reciprocal":
        h_prefix = power_prefix(-1.0, max_c)
        mu = sum(w * np.sum(cnt * h_prefix[cv] / cv) for w, cv, cnt in groups)
        f_min = 1.0 / max_c
    else:  # pragma: no cover
        raise ValueError(transform)
    w_min = min(w for w, _, _ in groups)
    # Integrate the residual L(t) − e^{−μt}, which is O(t²) near 0, and add the exact
    # ∫e^{−μt} = 1/μ, ∫t e^{−μt} = 1/μ²; the residual below t₀ = 10⁻⁶/μ is ~10⁻¹⁸ of the total.
    t0 = 1e-6 / mu
    y_hi = math.log(90.0 / (w_min * f_min))
    h = 0.25  # trapezoid error ~ exp(−π²/h) ≈ 7e-18
    y = np.arange(math.log(t0) + h / 2, y_hi + h, h)
    t = np.exp(y)
    log_l = np.zeros_like(t)
    with np.errstate(divide="ignore", under="ignore"):
        for w, cv, cnt in groups:
            s = t * w  # argument of φ per node
            if transform == "identity":
                # φ(s) = (1/C) Σ_{j=1..C} e^{−s j} = e^{−s} (1 − e^{−sC}) / (C (1 − e^{−s}))
                sc = s[:, None] * cv[None, :]
                log_phi = np.log(-np.expm1(-sc)) - np.log(cv)[None, :]
                log_l += (log_phi * cnt).sum(axis=1) + cnt.sum() * (-s - np.log(-np.expm1(-s)))
            else:
                j = np.arange(1, int(cv.max()) + 1, dtype=np.float64)
                for start in range(0, t.size, 32):  # bound memory: 32 nodes × max C at a time
                    blk = s[start : start + 32]
                    pref = np.cumsum(np.exp(-blk[:, None] / j[None, :]), axis=1)[:, cv - 1]
                    log_l[start : start + 32] += (np.log(pref / cv[None, :]) * cnt).sum(axis=1)
    resid = np.exp(log_l) - np.exp(-mu * t)
    # midpoint rule in y = log t on [log t₀, ∞): exponential convergence for analytic integrands
    e1 = 1.0 / mu + h * float(np.sum(resid * t))
    e2 = 1.0 / mu**2 + h * float(np.sum(resid * t * t))
    return e1, e2
