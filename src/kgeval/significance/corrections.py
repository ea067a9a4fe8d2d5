"""Multiple-testing corrections of a family of p-values: :func:`correct`.

- ``"holm"``: Holm's step-down, controls the family-wise error rate. With the p-values sorted
  ascending, ``p̃₍ᵢ₎ = max_{j ≤ i} min(1, (m − j + 1) · p₍ⱼ₎)`` (i, j 1-based, m tests).
- ``"bh"``: Benjamini–Hochberg step-up, controls the false discovery rate.
  ``p̃₍ᵢ₎ = min_{j ≥ i} min(1, m · p₍ⱼ₎ / j)`` (``scipy.stats.false_discovery_control``).
- ``None``: the p-values unchanged.

NaN p-values (tests that could not be run) are not members of the family: they stay NaN and
do not count in ``m``.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidInputError, unknown_name

CORRECTIONS = ("holm", "bh")


def check_correction(correction) -> str | None:
    """The canonical name of ``correction`` (``None``, ``"holm"`` or ``"bh"``/``"fdr_bh"``)."""
    if correction is None:
        return None
    name = str(correction).strip().lower()
    if name in ("none", ""):
        return None
    name = {"fdr_bh": "bh", "benjamini-hochberg": "bh", "bonferroni-holm": "holm"}.get(name, name)
    if name not in CORRECTIONS:
        raise unknown_name("correction", correction, (*CORRECTIONS, "none"))
    return name


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values of finite ``p`` (same order as given)."""
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = (m - np.arange(m)) * p[order]
    out = np.empty(m)
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg-adjusted p-values of finite ``p`` (same order as given)."""
    from scipy.stats import false_discovery_control

    return np.asarray(false_discovery_control(p, method="bh"), dtype=np.float64)


def correct(p_values, correction) -> np.ndarray:
    """Adjusted p-values of the family ``p_values`` by ``correction`` (see the module docstring)."""
    name = check_correction(correction)
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    finite = ~np.isnan(p)
    if np.any((p[finite] < 0) | (p[finite] > 1)):
        raise InvalidInputError(f"p-values must lie in [0, 1], got {p[finite][(p[finite] < 0) | (p[finite] > 1)][0]}")
    out = p.copy()
    if name is None or not finite.any():
        return out
    out[finite] = holm(p[finite]) if name == "holm" else benjamini_hochberg(p[finite])
    return out
