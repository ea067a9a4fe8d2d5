"""Power sums ``Σ_{j=lo..hi} j^a`` in O(1) per task, for any size of ``hi``.

Null moments of rank metrics are sums of f(j) over 1..C. Below :data:`EXACT_MAX` they are read
from exact prefix sums (:mod:`.moments`); beyond it a prefix array would cost O(max C) memory
(10⁷ candidates: gigabytes), so the sum over ``j ≥ B`` uses the Euler–Maclaurin formula

    Σ_{j=l..h} f(j) = ∫_l^h f + (f(l) + f(h))/2 + Σ_{k=1..K} B₂ₖ/(2k)! · (f⁽²ᵏ⁻¹⁾(h) − f⁽²ᵏ⁻¹⁾(l)) + R_K

with f(x) = x^a, f⁽ᵐ⁾(x) = a(a−1)…(a−m+1) x^{a−m} and ∫_l^h x^a dx = l^{a+1}·expm1((a+1)·ln(h/l))/(a+1)
(stable through a = −1, where it is ln(h/l)). |B₂ₖ|/(2k)! ≈ 2/(2π)^{2k}, so with l ≥ B = 32 and
K = 14 the remainder is below (|a| + 2K)^{2K−1} / (2π·32)^{2K} ≈ 10⁻¹⁹ of the sum for |a| ≤ 4
(10⁻¹⁶ for |a| = 20); the terms j < B are added directly. Everything is computed in
``np.longdouble``; the tests compare with mpmath and with the exact prefix sums on both sides of
:data:`EXACT_MAX`. For a whole exponent a ≥ 0 the series terminates: the formula is exact.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb, factorial

import numpy as np

#: sums over 1..C with C above this come from Euler–Maclaurin, below it from exact prefix sums
EXACT_MAX = 2**16
#: first index summed by Euler–Maclaurin; 1..B−1 are added directly
EM_BASE = 32
EM_TERMS = 14
_LD = np.longdouble


def _bernoulli_even(k_max: int) -> list[Fraction]:
    """``B₂ₖ/(2k)!`` for k = 1..k_max, exact (recurrence B_m = −Σ_{i<m} C(m+1, i) Bᵢ / (m+1))."""
    b = [Fraction(1)]
    for m in range(1, 2 * k_max + 1):
        b.append(-sum(comb(m + 1, i) * b[i] for i in range(m)) / (m + 1))
    return [b[2 * k] / factorial(2 * k) for k in range(1, k_max + 1)]


_EM_COEF = [_LD(f.numerator) / _LD(f.denominator) for f in _bernoulli_even(EM_TERMS)]


def euler_maclaurin_power_sum(lo, hi, a) -> np.ndarray:
    """``Σ_{j=lo..hi} j^a`` by Euler–Maclaurin, for ``lo ≥ EM_BASE`` (longdouble, elementwise).

    Two ``powl`` per element (l^a, h^a; the derivative powers follow by multiplying with 1/x):
    extended-precision pow is slow, and this runs once per task above EXACT_MAX.
    """
    lo, hi, a = (np.asarray(v, dtype=_LD) for v in (lo, hi, a))
    lo, hi, a = np.broadcast_arrays(lo, hi, a)
    if lo.size and np.all(lo == lo.flat[0]) and np.all(a == a.flat[0]):
        la = np.full(lo.shape, lo.flat[0] ** a.flat[0])  # one task-independent lower end
    else:
        la = lo**a
    ha = hi**a
    a1 = a + 1
    span = np.log1p((hi - lo) / lo)  # ln(h/l) without cancellation for h ≈ l
    safe = np.where(a1 == 0, 1, a1)
    integral = lo * la * np.where(a1 == 0, span, np.expm1(a1 * span) / safe)
    total = integral + 0.5 * (la + ha)
    # term k is ≲ 2((|a| + 2k)/(2π·lo))^{2k} of the sum: stop once that is below 1e-21
    amax, lmin = float(np.max(np.abs(a), initial=0.0)), float(np.min(lo, initial=EM_BASE))
    terms = next((k for k in range(1, EM_TERMS + 1) if ((amax + 2 * k) / (2 * np.pi * lmin)) ** (2 * k) < 1e-21), EM_TERMS)
    inv_l2, inv_h2 = 1 / (lo * lo), 1 / (hi * hi)
    pl, ph = la / lo, ha / hi  # x^{a−m} for m = 1, 3, 5, …
    ff = a
    for k, coef in enumerate(_EM_COEF[:terms], start=1):
        m = 2 * k - 1
        if k > 1:
            ff = ff * (a - (m - 2)) * (a - (m - 1))  # a(a−1)…(a−m+1)
            pl, ph = pl * inv_l2, ph * inv_h2
        if not np.any(ff):
            break  # whole a ≥ 0: the expansion has terminated, the sum is exact
        total = total + coef * ff * (ph - pl)
    return total


def power_sum_range(lo, hi, a) -> np.ndarray:
    """``Σ_{j=lo..hi} j^a`` elementwise for 1 ≤ lo ≤ hi (any size), O(1) per element.

    Terms below :data:`EM_BASE` are summed directly, the rest by Euler–Maclaurin.
    Returns ``np.longdouble``.
    """
    lo, hi, a = np.broadcast_arrays(*(np.asarray(v, dtype=_LD) for v in (lo, hi, a)))
    out = np.zeros(lo.shape, dtype=_LD)
    small = lo < EM_BASE
    if small.any():
        j = np.arange(1, EM_BASE, dtype=_LD)
        ls, hs, as_ = lo[small], hi[small], a[small]
        part = np.empty(ls.shape, dtype=_LD)
        step = max(1, 2**20 // j.size)  # bound the task × j block
        for s in range(0, ls.size, step):
            sl = slice(s, s + step)
            inside = (j[None, :] >= ls[sl, None]) & (j[None, :] <= hs[sl, None])
            part[sl] = np.where(inside, j[None, :] ** as_[sl, None], 0).sum(axis=1)
        out[small] = part
    tail = hi >= EM_BASE
    if tail.any():
        start = np.maximum(lo[tail], EM_BASE)
        out[tail] += euler_maclaurin_power_sum(start, hi[tail], a[tail])
    return out


def _log_power_polys(m: int, orders: int) -> list[list[int]]:
    """Coefficients (by power of ℓ) of Pₙ with dⁿ/dxⁿ (ln x)^m = x^{−n} Pₙ(ln x), n = 0..orders:
    P₀ = ℓ^m, Pₙ₊₁ = Pₙ' − n·Pₙ (exact integers)."""
    polys = [[0] * m + [1]]
    for n in range(orders):
        p = polys[-1]
        polys.append([(i + 1) * p[i + 1] - n * p[i] if i + 1 < len(p) else -n * p[i] for i in range(len(p))])
    return polys


def _poly(coef: list[int], x: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape, dtype=_LD)
    for c in reversed(coef):
        out = out * x + _LD(c)
    return out


def log_power_sums(hi, m: int) -> np.ndarray:
    """``Σ_{j=1..hi} (ln j)^m`` elementwise (longdouble, O(1) per element, any ``hi`` ≥ 1).

    Terms j < :data:`EM_BASE` directly, the rest by Euler–Maclaurin with ∫ ℓ^m dx = x·Qₘ(ℓ),
    Qₘ(ℓ) = Σᵢ (−1)ⁱ m!/(m−i)! ℓ^{m−i}, and the derivatives of :func:`_log_power_polys`; the
    k-th correction is ≲ ((2k + m)/(2π·32))^{2k} of the sum (< 1e-21 with 14 terms for m ≤ 24).
    """
    hi = np.asarray(hi, dtype=_LD)
    j = np.arange(1, EM_BASE, dtype=_LD)
    lj = np.log(j) ** m if m else np.ones(j.shape, dtype=_LD)
    head = np.where(j[None, :] <= hi.reshape(-1, 1), lj[None, :], 0).sum(axis=1).reshape(hi.shape)
    tail = hi >= EM_BASE
    if not tail.any():
        return head
    h = hi[tail]
    lo = _LD(EM_BASE)
    lh, ll = np.log(h), np.log(lo)
    q = [(-1) ** i * factorial(m) // factorial(m - i) for i in range(m + 1)]  # coefficient of ℓ^{m−i}
    qpoly = [q[m - k] for k in range(m + 1)]  # by power of ℓ
    total = h * _poly(qpoly, lh) - lo * _poly(qpoly, np.asarray(ll)) + 0.5 * (lh**m + ll**m)
    polys = _log_power_polys(m, 2 * EM_TERMS - 1)
    for k, coef in enumerate(_EM_COEF, start=1):
        n = 2 * k - 1
        total = total + coef * (_poly(polys[n], lh) / h**n - _poly(polys[n], np.asarray(ll)) / lo**n)
    out = head.copy()
    out[tail] += total
    return out
