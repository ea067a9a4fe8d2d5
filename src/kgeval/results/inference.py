"""p-values of a :class:`~kgeval.results.Results` against the null model, and their flat keys.

Flat keys: ``<side>.<rank_type>.p_<metric key>`` holds the one-sided p-value against chance and
``<side>.<rank_type>.log10_p_<metric key>`` its base-10 logarithm (finite even where the p-value
underflows to 0.0; see :mod:`kgeval.significance.pvalues`). ``to_flat_dict(p_values=True)``, the
saved JSON and the summary table carry them for the :data:`P_VALUE_METRICS` with realistic ranks;
the default flat dict does not (exact methods cost up to ~0.2 s each at 40k tasks, ~10x all values
together). :meth:`Results.p_value` computes any one, with the null moments the result already holds.
"""

from __future__ import annotations

import numpy as np

from .. import metrics as _metrics
from ..errors import InvalidInputError, UnknownNameError
from ..keys import flat_key, parse_key
from ..metrics.derived import DerivedMetric, _centred

#: base metrics whose p-values (realistic ranks) go into ``to_flat_dict(p_values=True)`` and the summary table
P_VALUE_METRICS = ("inverse_harmonic_mean_rank", "hits_at_1", "hits_at_3", "hits_at_10", "arithmetic_mean_rank",
                   "inverse_geometric_mean_rank")


def p_value_keys(side: str, rank_type: str, metric_key: str) -> tuple[str, str]:
    """The flat keys of a p-value and of its log10."""
    return flat_key(side, rank_type, f"p_{metric_key}"), flat_key(side, rank_type, f"log10_p_{metric_key}")


def p_value(results, key: str, method: str = "auto"):
    """:class:`~kgeval.significance.pvalues.PValue` of the value ``key`` names (see Results.p_value)."""
    from ..significance.pvalues import PValue, null_p_value

    side, rank_type, name = parse_key(key)
    metric = _metrics.get(name)
    if isinstance(metric, DerivedMetric):  # adjusted / z variants: the same event as their base
        metric = metric.base
    value = results.get_metric(flat_key(side, rank_type, metric.key))
    table = results.rank_table
    if table is None:
        null = results.null_moments.get(side, {}).get(metric.key)
        z = None
        if null is not None and null.mean is not None and null.variance:
            # M − E as (M − opt) + (opt − E) where the saved moments state opt − E (see metrics.derived)
            z = float(_centred(metric, value, null) / np.sqrt(null.variance) * (1 if metric.increasing else -1))
        saved = results._saved_p.get(p_value_keys(side, rank_type, metric.key)[1])
        if saved is not None and method == "auto":  # the p-value computed with the rank table, as saved
            return PValue(float(10.0**saved), float(saved), "as saved with the results (no rank table here)", z)
        if z is None:
            raise InvalidInputError(f"{key!r}: no rank table and no saved null moments to compute a p-value from")
        from scipy import stats

        return PValue(float(stats.norm.sf(z)), float(stats.norm.logsf(z) / np.log(10)),
                      "normal approximation (saved null moments; no rank table)", z)
    part = table if side == "both" else table.select_side(side)
    if part.num_candidates is None:
        raise InvalidInputError(f"{key!r}: the rank table has no num_candidates, so no null model")
    from .compute import side_moments

    return null_p_value(metric, value, part.num_candidates, part.weight, method=method,
                        moments_of=lambda m: side_moments(table, side, m, part))


def flat_p_values(results) -> dict[str, float]:
    """``{p key: p, log10 key: log10 p}`` of :data:`P_VALUE_METRICS` for every side (realistic ranks);
    those a loaded result was saved with, as saved."""
    if results._saved_p:
        return dict(results._saved_p)
    out: dict[str, float] = {}
    if results.rank_table is None or results.rank_table.num_candidates is None:
        return out
    for side in results.sides:
        for key in P_VALUE_METRICS:
            if results.value(side, "realistic", key) is None:
                continue
            try:
                p = results.cached_p_value(flat_key(side, "realistic", key))
            except (InvalidInputError, UnknownNameError):
                continue
            pk, lk = p_value_keys(side, "realistic", key)
            out[pk], out[lk] = p.value, p.log10
    return out
