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


def confidence_interval(results, key: str, *, confidence: float, num_resamples: int, seed: int,
                        why: list | None = None):
    """``(low, high)`` of ``key`` by BCa bootstrap over evaluation triples, or None where unavailable;
    the reason of a refused interval is appended to ``why`` (for the report's notes)."""
    fn = getattr(results, "confidence_interval", None)
    if fn is None:
        return None
    try:
        low, high = fn(key, confidence=confidence, method="bca", num_resamples=num_resamples, seed=seed)
    except KGEvalError as exc:  # a metric without a resampling rule, a BCa level beyond the resamples: empty
        if why is not None:
            why.append(str(exc))
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


def compare(runs, metrics: tuple[str, ...], *, num_resamples: int, seed: int, confidence: float = 0.95):
    """``(records, notes)``: ``kgeval.compare`` on every pair of runs of the same dataset, or None
    when kgeval.compare is absent. Runs on different datasets or protocols are not paired; a group
    that compare refuses (other tasks, other protocol) is left out with a note saying why."""
    from ..significance.compare import compare as fn

    groups: dict[str, list] = {}
    for run in runs:
        groups.setdefault(run.dataset, []).append(run)
    records, notes = [], []
    for dataset, group in groups.items():
        if len(group) < 2:
            continue
        try:
            table = fn(*[(r.name, r.results) for r in group], metrics=metrics, num_resamples=num_resamples, seed=seed,
                       confidence=confidence)
        except KGEvalError as exc:
            notes.append(f"runs on {dataset} not compared: {exc}")
            continue
        records += table.to_dict("records") if hasattr(table, "to_dict") else list(table)
    return records, notes
