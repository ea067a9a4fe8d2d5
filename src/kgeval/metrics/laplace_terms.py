"""ln L(t) and its excess ln L(t) + μt per quadrature node for :mod:`kgeval.metrics.laplace`.

L(t) = Πᵢ φ_{Cᵢ}(t wᵢ) is summed in logs over the distinct (C, w) pairs. Three evaluations of
ln φ_C: closed forms for f(j) = j, :func:`~kgeval.metrics.reciprocal_sums.reciprocal_exp_sum` for
f(j) = 1/j (O(1) per pair and node), and cumulative sums over j ≤ max C for any f(j) = j^p (few
distinct weights). The excess, which the variance is computed from, is summed from per-pair terms
that are each ≥ 0, so it keeps its relative accuracy where it is tiny against μt.
"""

from __future__ import annotations

import math

import numpy as np

from .asymptotics import EXACT_MAX, _bernoulli_even
from .moments import power_sums, prefix_sum
from .reciprocal_sums import _log_phi_reciprocal


def _pair_sum(t, cv, wv, cnt, log_phi) -> np.ndarray:
    """Σ_pairs cnt · log φ_C(t·w) per node, in blocks of pairs (memory ≤ ~2²⁰ node × pair cells)."""
    out = np.zeros(t.shape)
    step = max(1, 2**20 // t.size)
    for s in range(0, cv.size, step):
        sl = slice(s, s + step)
        u = t[:, None] * wv[None, sl]
        out += log_phi(u, cv[None, sl].astype(np.float64)) @ cnt[sl]
    return out


def _log_sinhc(y: np.ndarray) -> np.ndarray:
    """``ln(sinh(y)/y)`` for y ≥ 0 to relative accuracy (≈ y²/6 near 0, where ln of the ratio
    would keep only its absolute accuracy): the series Σ 2²ᵏ B₂ₖ/(2k (2k)!) y²ᵏ below 1/2, else
    ``y − ln 2y + log1p(−e^{−2y})`` (no overflow for any y)."""
    y = np.asarray(y, dtype=np.float64)
    out = np.empty(y.shape)
    small = y < 0.5
    y2 = y[small] ** 2
    series = np.zeros(y2.shape)
    for coef in reversed(_SINHC_COEF):  # Horner in y²: (0.5/π)^{2k} < 1e-19 beyond 12 terms
        series = (series + coef) * y2
    out[small] = series
    yl = y[~small]
    out[~small] = yl - np.log(2 * yl) + np.log1p(-np.exp(-2 * yl))
    return out


_SINHC_COEF = [float(4**k * f / (2 * k)) for k, f in enumerate(_bernoulli_even(12), start=1)]


def _log_l_identity(t, cv, wv, cnt) -> np.ndarray:
    """Σ cnt · log φ_C(tw) for f(j) = j, φ_C(s) = e^{−s}(1 − e^{−sC}) / (C(1 − e^{−s})): only
    log(1 − e^{−sC}) needs every pair; the rest is summed per distinct weight and per pair once."""
    uw, inv = np.unique(wv, return_inverse=True)
    s = t[:, None] * uw[None, :]
    with np.errstate(divide="ignore"):
        out = (-s - np.log(-np.expm1(-s))) @ np.bincount(inv, weights=cnt, minlength=uw.size)
        out -= float(np.sum(cnt * np.log(cv.astype(np.float64))))
        return out + _pair_sum(t, cv, wv, cnt, lambda u, c: np.log(-np.expm1(-u * c)))


def _excess_identity(t, cv, wv, cnt) -> np.ndarray:
    """``ln L(t) + μt`` for f(j) = j: φ_C(s) = e^{−s(C+1)/2} sinh(Cs/2) / (C sinh(s/2)), so each pair
    adds cnt · (ln sinhc(Cs/2) − ln sinhc(s/2)) ≥ 0, s = tw, and C = 1 adds 0. No term cancels
    against μt: ln L itself sums terms of size ~ n·ln n to a total of ~ μt, and its excess over
    −μt would keep only ln L's absolute accuracy.
    ln sinhc(s/2) depends on the weight only: summed per distinct weight (C ≥ 2 makes the pair
    part at least 4 times the weight part, so the difference keeps its digits)."""
    keep = cv > 1
    if not keep.any():
        return np.zeros(t.shape)
    cv, wv, cnt = cv[keep], wv[keep], cnt[keep]
    uw, inv = np.unique(wv, return_inverse=True)
    out = -(_log_sinhc(0.5 * t[:, None] * uw[None, :]) @ np.bincount(inv, weights=cnt, minlength=uw.size))
    return out + _pair_sum(t, cv, wv, cnt, lambda u, c: _log_sinhc(0.5 * u * c))


_CENTRAL_K = 20  # central-moment terms for s ≤ 1: 2·e·s^{K−1}/(K+1)! < 1e-17 relative
_CENTRAL_MAX_S = 1.0  # per-pair series up to this s = t·w; ln φ_C(s) + s·m₁ above (≤ 24× cancellation)
_CENTRAL_DIRECT_C = 64  # central moments by direct sums up to this C (else from H_C^{(k)}, no cancellation)
_MATMUL_MAX_W = 8  # up to this many distinct weights in a block of pairs: the series as matrix products


def _central_coef(cv, m1, p: float = -1.0) -> np.ndarray:
    """``μ_k(C)/k!`` for k = 1..K per pair (rows k − 1): central moments of Y = j^p (p < 0),
    j ~ U{1..C}, about m1 (the pair's E[Y] as used in μ, so μ₁ is its rounding). Up to C = 64 by
    direct sums (the binomial expansion in raw moments cancels there: C = 2, p = −1 has
    μ_k = 4^{−k}, raw moments ≥ 1/2); above by the binomial expansion in the raw moments, from the
    library's exact power sums Σ j^{pk} (:func:`~kgeval.metrics.moments.power_sums`; for p = −1 and
    C ≤ EXACT_MAX :func:`_inverse_power_prefix`: H_C^{(k)} as ζ(k) − ζ(k, C + 1) agrees with them but
    imports scipy.special, a slow import most results never need); in long double where m1 > 0.1
    (p → 0: m1 up to ~1)."""
    uc, first, inv = np.unique(cv, return_index=True, return_inverse=True)
    mu = np.asarray(m1, dtype=np.float64)[first]
    k = np.arange(1, _CENTRAL_K + 1)
    out = np.zeros((_CENTRAL_K, uc.size))
    small = uc <= _CENTRAL_DIRECT_C
    if small.any():
        j = np.arange(1, _CENTRAL_DIRECT_C + 1, dtype=np.float64)
        cs = uc[small].astype(np.float64)
        d = np.where(j[None, :] <= cs[:, None], (1.0 / j if p == -1.0 else j**p)[None, :] - mu[small][:, None], 0.0)
        out[:, small] = (d[None, :, :] ** k[:, None, None]).sum(axis=2) / cs[None, :]
    big = np.flatnonzero(~small)
    if big.size:
        cb = uc[big]
        # m₁ ≤ 0.1: the binomial terms stay within ~(1.1/0.9)^k of μ_k (the j = 1 term), float64
        # suffices; above (p → 0, m₁ up to ~1) they are summed in long double
        for sel, dt in ((mu[big] <= 0.1, np.float64), (mu[big] > 0.1, np.longdouble)):
            if not sel.any():
                continue
            c_sel, m_sel = cb[sel], mu[big][sel].astype(dt)
            cf = c_sel.astype(dt)
            if p == -1.0 and int(c_sel.max()) <= EXACT_MAX:
                sums = [_inverse_power_prefix(int(i), int(c_sel.max()))[c_sel] for i in k]
            else:
                sums = [power_sums(c_sel, p * i) for i in k]
            raw = [np.ones(cf.shape, dtype=dt)] + [(s_ / c_sel.astype(np.longdouble)).astype(dt) for s_ in sums]
            neg = [np.ones(cf.shape, dtype=dt)]
            for _ in k:
                neg.append(neg[-1] * -m_sel)  # (−m₁)^i
            for kk in k:
                out[kk - 1, big[sel]] = sum(math.comb(kk, i) * raw[i] * neg[kk - i] for i in range(kk + 1)).astype(np.float64)
    return out[:, inv] / np.array([math.factorial(kk) for kk in k], dtype=np.float64)[:, None]


def _inverse_power_prefix(i: int, max_n: int) -> np.ndarray:
    """``Σ_{j≤n} j^{−i}`` for n = 0..max_n in long double, each term a product of i factors 1/j: within
    i·2⁻⁶⁴ relative of ``j ** −i`` (far below the float64 moments made of them) and much cheaper than
    long double ``**``."""

    def terms(j):
        inv = 1.0 / j
        out = inv
        for _ in range(i - 1):
            out = out * inv
        return out

    return prefix_sum(("inverse_power", i), terms, max_n, np.longdouble)


def _excess_reciprocal(t, cv, wv, cnt, m1, coef, log_phi=None) -> np.ndarray:
    """``ln L(t) + μt`` for f(j) = 1/j (or any j^p, p < 0, with its ``coef`` and ``log_phi``) as
    Σ_pairs cnt · ln E[e^{−s(Y − m₁)}] (each ≥ 0), Y = f(j), s = tw:
    for s ≤ 1 ``log1p(Σ_k (−s)^k μ_k/k!)`` (|Y − m₁| < 1, so |μ_k| ≤ μ₂ and the terms beyond K are
    below 1e-17 of the sum), else ln φ_C(s) + s·m₁. ln L + μt would sum terms ~ ln φ that
    cancel to the excess ≈ t²Var/2 and keep only ln L's absolute accuracy. ``log_phi(t)``, if
    given, is ln φ_C(tw) for all pairs (the cumulative sums), used in nodes with some s > 1."""
    out = np.zeros(t.shape)
    step = cv.size if log_phi is not None else max(1, 2**20 // t.size)
    m1 = np.asarray(m1, dtype=np.float64)
    for b in range(0, cv.size, step):
        sl = slice(b, b + step)
        s = t[:, None] * wv[None, sl]
        small = s <= _CENTRAL_MAX_S
        all_small = bool(small.all())
        ex = np.empty(s.shape)
        if all_small or small.any():
            smax = min(float(s.max()), _CENTRAL_MAX_S)
            nk = next(  # fewest terms with 2·e^s·s^{K−1}/(K+1)! < 1e-17
                (kk for kk in range(2, _CENTRAL_K) if 2 * math.exp(smax) * smax ** (kk - 1) < 1e-17 * math.factorial(kk + 1)),
                _CENTRAL_K,
            )
            uw = np.unique(wv[sl])
            if uw.size <= _MATMUL_MAX_W:  # s = t·w per weight: Σ_k (−s)^k μ_k/k! is one matrix product
                acc = np.empty(s.shape)
                powers = np.arange(1, nk + 1)
                for w in uw:
                    cols = np.flatnonzero(wv[sl] == w)
                    neg_s = -np.minimum(t * w, _CENTRAL_MAX_S)  # rows above 1 are replaced below
                    # einsum, not @: BLAS threads cost twice the CPU time at these shapes on a busy machine
                    acc[:, cols] = np.einsum("nk,kp->np", neg_s[:, None] ** powers[None, :], coef[:nk, sl][:, cols])
            else:
                acc = np.zeros(s.shape)
                for kk in range(nk, 0, -1):  # Horner: Σ_k μ_k/k! (−s)^k
                    acc = (acc + coef[kk - 1, sl][None, :]) * (-s)
            if all_small:
                ex = np.log1p(acc)
            else:
                ex[small] = np.log1p(acc[small])
        if not all_small and log_phi is not None:
            rows = ~small.all(axis=1)
            big = ~small[rows]
            ex[rows] = np.where(big, log_phi(t[rows]) + s[rows] * m1[None, :], ex[rows])
        elif not all_small:
            cs = np.broadcast_to(cv[None, sl].astype(np.float64), s.shape)[~small]
            ms = np.broadcast_to(m1[None, sl], s.shape)[~small]
            ex[~small] = _log_phi_reciprocal(s[~small], cs) + s[~small] * ms
        out += np.einsum("np,p->n", ex, cnt[sl])  # terms ≥ 0: plain sums keep their relative accuracy
    return out


def _log_phi_prefix(t, cv, wv, p: float) -> np.ndarray:
    """ln φ_C(tw) per node and pair (t.size × pairs) by the cumulative sums of :func:`_log_l_prefix`."""
    out = np.empty((t.size, cv.size))
    for w in np.unique(wv):
        sel = np.flatnonzero(wv == w)
        cs = cv[sel]
        f = np.arange(1, int(cs.max()) + 1, dtype=np.float64) ** p
        block = max(1, 2**22 // f.size)
        for start in range(0, t.size, block):
            s = t[start : start + block] * w
            pref = np.cumsum(np.exp(-s[:, None] * f[None, :]), axis=1)[:, cs - 1]
            with np.errstate(divide="ignore"):  # e^{−s·j^p} underflows at large t: ln φ = −inf, L = 0 there
                out[start : start + block, sel] = np.log(pref / cs[None, :])
    return out


def _log_l_prefix(t, cv, wv, cnt, p: float) -> np.ndarray:
    """Fast path (≤ 8 distinct weights, C ≤ 2²⁰): per node and weight, one cumulative sum
    of e^{−tw·j^p} over j ≤ max C gives C·φ_C(tw) for every C of that weight."""
    log_l = np.zeros(t.shape)
    for w in np.unique(wv):
        sel = wv == w
        cs, ns = cv[sel], cnt[sel]
        f = np.arange(1, int(cs.max()) + 1, dtype=np.float64) ** p
        block = max(1, 2**22 // f.size)  # bound memory: block × max C cells at a time
        for start in range(0, t.size, block):
            s = t[start : start + block] * w
            pref = np.cumsum(np.exp(-s[:, None] * f[None, :]), axis=1)[:, cs - 1]
            with np.errstate(divide="ignore", invalid="ignore"):  # underflow at large t: L = 0 (ln = −inf)
                log_l[start : start + block] += np.log(pref / cs[None, :]) @ ns
    return log_l
