"""G(u, C) = Σ_{j≤C} e^{−u/j} and the harmonic numbers H_m(C) = Σ_{j≤C} j^{−m}, O(1) per element.

C·φ_C(u) for f(j) = 1/j (HMR) in the Laplace transform of :mod:`kgeval.metrics.laplace`: one value
per distinct (C, weight) pair and quadrature node, whatever C is, so the null moments' cost never
grows with the number of candidates.
"""

from __future__ import annotations

import math

import numpy as np

from .asymptotics import EM_BASE, _EM_COEF

_SERIES_MAX_U = 2.0  # G(u, C) by its power series in u below this (C ≥ EM_BASE)
_SERIES_TERMS = 30  # 2³⁰/30! < 1e-23
_EM_K = 10  # Euler–Maclaurin terms for e^{−u/x} from x = 32: remainder < 1e-21
_H_CACHE: dict = {}


def _log_phi_reciprocal(u, c):
    return np.log(reciprocal_exp_sum(u, c)) - np.log(c)


def reciprocal_exp_sum(u, c) -> np.ndarray:
    """``G(u, C) = Σ_{j=1..C} e^{−u/j}`` elementwise (u ≥ 0, any C), O(1) per element.

    - C ≥ 32 and u ≤ 2: the series Σ_m (−u)^m/m! · H_m(C), H_m(C) = Σ_{j≤C} j^{−m} (all terms
      but the first are ≤ e²·ln C ≪ C, so no cancellation);
    - otherwise the terms j < 32 directly and the rest by Euler–Maclaurin with
      ∫ e^{−u/x} dx = x E₂(u/x) and derivatives g⁽ᵐ⁾(x) = e^{−y} x^{−m} Qₘ(y), y = u/x,
      Qₘ(y) = Σₖ (−1)^{m+k} L(m, k) yᵏ (Lah numbers L(m, k) = C(m−1, k−1) m!/k!), bounded by
      2^{m−1} m!/x^m: 10 terms from x = 32 leave < 1e-21 absolute (each term ≤ 1).
    """
    uniq = np.unique(np.asarray(c, dtype=np.float64))  # before broadcasting: pairs, not pairs × nodes
    u, c = np.broadcast_arrays(np.asarray(u, dtype=np.float64), np.asarray(c, dtype=np.float64))
    out = np.empty(u.shape)
    series = (c >= EM_BASE) & (u <= _SERIES_MAX_U)
    if series.any():
        cs, us = c[series], u[series]
        inv = np.searchsorted(uniq, cs)
        acc = np.zeros(us.shape)
        for m in range(_SERIES_TERMS, -1, -1):  # nested form of Σ H_m (−u)^m / m!
            acc = _harmonic(uniq, m)[inv] + acc * (-us) / (m + 1)
        out[series] = acc
    rest = ~series
    if rest.any():
        out[rest] = _direct_plus_em(u[rest], c[rest])
    return out


def _harmonic(c: np.ndarray, m: int) -> np.ndarray:
    """H_m(C) = Σ_{j≤C} j^{−m} in float64: C, ψ(C+1) + γ, ζ(m) − ζ(m, C+1) (no cancellation:
    the series path has C ≥ 32, where ζ(m, C+1) ≪ ζ(m))."""
    from scipy.special import digamma, zeta  # lazy: a slow import that most results never need

    if m == 0:
        return c
    key = (m, c.dtype.str, c.shape, c.tobytes())  # the same pairs come back for every block of nodes
    hit = _H_CACHE.get(key)
    if hit is None:
        hit = np.asarray(digamma(c + 1.0) + np.euler_gamma if m == 1 else zeta(float(m)) - zeta(float(m), c + 1.0))
        hit.flags.writeable = False  # shared by later calls: never changed in place
        if len(_H_CACHE) > 4 * _SERIES_TERMS:
            _H_CACHE.clear()
        _H_CACHE[key] = hit
    return hit


def _direct_plus_em(u: np.ndarray, c: np.ndarray) -> np.ndarray:
    from scipy.special import expn  # lazy: a slow import that most results never need

    j = np.arange(1, EM_BASE, dtype=np.float64)
    total = np.where(j[None, :] <= c[:, None], np.exp(-u[:, None] / j[None, :]), 0.0).sum(axis=1)
    tail = c >= EM_BASE
    if not tail.any():
        return total
    lo, hi, ut = float(EM_BASE), c[tail], u[tail]
    part = hi * expn(2, ut / hi) - lo * expn(2, ut / lo) + 0.5 * (np.exp(-ut / lo) + np.exp(-ut / hi))
    for k in range(1, _EM_K + 1):
        m = 2 * k - 1
        part += float(_EM_COEF[k - 1]) * (_deriv(ut, hi, m) - _deriv(ut, lo, m))
    total[tail] += part
    return total


def _deriv(u, x, m: int) -> np.ndarray:
    """m-th derivative of e^{−u/x} in x: e^{−y} x^{−m} Σₖ (−1)^{m+k} L(m, k) yᵏ, y = u/x."""
    y = u / x
    poly = np.zeros_like(y)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(m, 0, -1):  # Horner in y
            lah = math.comb(m - 1, k - 1) * math.factorial(m) // math.factorial(k)
            poly = (poly + (-1) ** (m + k) * lah) * y
        val = np.exp(-y) * poly / np.power(x, m)
    return np.where(y > 700.0, 0.0, val)  # e^{−y} underflows first: the term is 0
