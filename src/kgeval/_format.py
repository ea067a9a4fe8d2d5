"""Number formatting for every table kgeval prints (CLI, Markdown, LaTeX, HTML): a leaf module, so
results, the statistics below them and the reports above them format alike without importing each other."""

from __future__ import annotations

import math

__all__ = ["EMPTY", "format_value", "truthful", "format_p"]

EMPTY = "—"


def format_value(v: float | None) -> str:
    """Four decimals in the usual range, scientific notation outside it; None is :data:`EMPTY`.

    Rounding never makes a value look exact: a value that four decimals would round onto a whole
    number it is not (a hits@10 of 0.99996 as ``1.0000``, an MR of 1.00004 as ``1.0000``) gets the
    decimals that tell it apart (``0.99996``). Zero is ``0.0000`` whatever its sign; NaN and the
    infinities are ``nan``, ``inf`` and ``-inf``. Machine-readable outputs (CSV, JSON, the HTML
    ``data-value`` attributes) keep the full ``repr`` instead.
    """
    if v is None:
        return EMPTY
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0.0000"  # -0.0 too: "-0.0000" reads as a negative value
    if not 1e-3 <= abs(v) < 1e5:
        return f"{v:.3e}"
    for digits in range(4, 18):
        text = f"{v:.{digits}f}"
        shown = float(text)
        if shown == v or shown != round(shown):
            return text
    return repr(v)


def truthful(text: str, v: float) -> str:
    """``text`` (``v`` formatted with any fixed precision) unless the rounding misleads: a text
    reading as a whole number ``v`` is not (``1.000`` for 0.99996) becomes ``repr(v)``, and a
    negative zero (``-0.00`` for -0.001) loses its sign."""
    try:
        shown = float(text)
    except ValueError:
        return text
    if not math.isfinite(shown) or shown == v:
        return text.lstrip("-") if shown == 0 else text
    if shown == round(shown):
        return repr(float(v))
    return text


def format_p(log10_p: float) -> str:
    """``0.0123``, ``3.2e-07``, or ``5.0e-413`` for values below float range (from the log).

    One form for every table (CLI, Markdown, LaTeX, HTML): four decimals down to 0.001 (through
    :func:`format_value`, so a p of 0.99998 is not shown as 1.0000), two
    significant digits with a two-digit exponent below. ``n/a`` for NaN or None, ``0`` for an
    exact zero (log10 = -inf).
    """
    if log10_p is None or math.isnan(log10_p):
        return "n/a"
    if log10_p == -math.inf:
        return "0"
    if log10_p >= -3:
        return format_value(10**log10_p)
    exponent = math.floor(log10_p)
    mantissa = round(10 ** (log10_p - exponent), 1)
    if mantissa >= 10:  # 9.96e-401 rounds up: 1.0e-400, not 10.0e-401
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.1f}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
