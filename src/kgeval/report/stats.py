"""Uncertainty and significance for a report, through the significance API.

``Results.confidence_interval``, ``Results.p_value`` and ``kgeval.compare`` are looked up on
use: a kgeval without one of them reports the cell as missing and says why (:data:`MISSING`)
instead of computing a substitute here.
"""

from __future__ import annotations

from ..errors import KGEvalError

#: why a cell is empty when the significance API lacks the function
MISSING = {
    "ci": "confidence intervals need Results.confidence_interval (not in this kgeval)",
    "p": "p-values need Results.p_value (not in this kgeval)",
    "compare": "the pairwise comparison needs kgeval.compare (not in this kgeval)",
}


def confidence_interval(results, key: str, *, confidence: float, num_resamples: int, seed: int):
    """``(low, high)`` of ``key`` by BCa bootstrap over evaluation triples, or None where unavailable."""
    fn = getattr(results, "confidence_interval", None)
    if fn is None:
        return None
    try:
        low, high = fn(key, confidence=confidence, method="bca", num_resamples=num_resamples, seed=seed)
    except KGEvalError:  # a metric without a resampling rule: the cell stays empty
        return None
    return float(low), float(high)


def p_value(results, key: str):
    """``(p, log10 p, method)`` of ``key`` against chance, or None where unavailable."""
    fn = getattr(results, "p_value", None)
    if fn is None:
        return None
    try:
        p = fn(key)
    except KGEvalError:  # no null moments for this metric
        return None
    return float(p.value), float(p.log10), str(p.method)


def compare(results: list, names: list[str], metrics: tuple[str, ...], *, num_resamples: int, seed: int):
    """The pairwise comparison table as a list of records, or None when kgeval.compare is absent."""
    import kgeval

    fn = getattr(kgeval, "compare", None)
    if fn is None or len(results) < 2:
        return None
    table = fn(*results, metrics=metrics, num_resamples=num_resamples, seed=seed)
    records = table.to_dict("records") if hasattr(table, "to_dict") else list(table)
    # model columns name the runs by position: say which run is which
    for row in records:
        for col in ("model_a", "model_b", "a", "b"):
            if isinstance(row.get(col), int) and 0 <= row[col] < len(names):
                row[col] = names[row[col]]
    return records
