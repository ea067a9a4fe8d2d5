"""Computing every metric value of a rank table: the one null-moment path.

For each side the weights are normalised once, the :class:`NullMoments` of each wrapped base
metric is computed once (``Metric.null_moments``: E and Var together; bases that no requested
wrapper needs are skipped, since their moments can cost more than all values together), each
base value once per rank type, and every wrapper (adjusted, z, expectation-normalised) is then ``metric.adjust(value,
moments)`` — an affine map, no further moment computation.

The moments depend on a side's candidate counts and weights only, and they are the costliest part
of a result (the geometric means' log-moment series, the Laplace quadratures of IAMR and HMR): they
are kept per rank table, side and base metric (:func:`side_moments`), so a second result, a key
computed on demand or a p-value of the same table reuses them. A :class:`RankTable` cannot change
(frozen, read-only columns), so a kept moment cannot go stale; it lives as long as its table.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .._validation import Side
from ..keys import RANK_TYPES, MetricKey
from ..metrics.base import UNKNOWN, Metric, NullMoments, check_weights
from ..metrics.derived import DerivedMetric
from ..ranks import RankTable


def _base_of(metric: Metric) -> Metric:
    return metric.base if isinstance(metric, DerivedMetric) else metric


#: {table: {(side, metric class, metric key): NullMoments}}; keyed by identity (RankTable has eq=False)
_MOMENTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MOMENTS_LOCK = threading.Lock()


def side_moments(table: RankTable, side: str, base: Metric, part: RankTable | None = None) -> NullMoments:
    """The null moments of base metric ``base`` on ``side`` (``head``, ``tail``, ``both``) of ``table``,
    computed once per table, side and metric (``part``: ``table.select_side(side)`` if already at hand).
    :data:`~kgeval.metrics.base.UNKNOWN` without candidate counts."""
    if table.num_candidates is None:
        return UNKNOWN
    key = (side, type(base), base.key)
    with _MOMENTS_LOCK:
        kept = _MOMENTS.setdefault(table, {})
        hit = kept.get(key)
    if hit is None:
        part = table.select_side(side) if part is None else part
        w = None if part.weight is None else check_weights(part.weight, len(part))
        hit = base._null_moments(part.num_candidates, w)
        with _MOMENTS_LOCK:
            kept[key] = hit
    return hit


def _side_values(
    table: RankTable, metrics: Sequence[Metric], rank_types: Sequence[str], moments_of: Callable[[Metric], NullMoments]
) -> tuple[dict[tuple[str, str], float], dict[str, NullMoments]]:
    """``(rank_type, metric_key) -> value`` and ``base_key -> NullMoments`` for one side (``table``),
    the moments from ``moments_of(base)``."""
    c = table.num_candidates
    w = None if table.weight is None else check_weights(table.weight, len(table))
    ranks = {rt: table.ranks(rt) for rt in rank_types if rt != "expected"}
    lo, hi = table.optimistic, table.pessimistic
    null: dict[str, NullMoments] = {}
    base_values: dict[tuple[str, str], float | None] = {}
    out: dict[tuple[str, str], float] = {}
    for metric in metrics:
        base = _base_of(metric)
        derived = metric is not base
        if derived and base.key not in null:
            null[base.key] = UNKNOWN if c is None else moments_of(base)
        moments = null.get(base.key, UNKNOWN)
        if derived and (c is None or metric.coefficients(moments) is None):
            continue
        for rt in rank_types:
            bk = (base.key, rt)
            if bk not in base_values:
                if base.needs_candidates and c is None:
                    base_values[bk] = None
                elif rt == "expected":
                    base_values[bk] = base._tie_expectation(lo, hi, c, w)
                else:
                    base_values[bk] = base._compute(ranks[rt], c, w)
            v = base_values[bk]
            if v is not None:
                out[(rt, metric.key)] = float(metric.adjust(v, moments) if derived else v)
    return out, null


def _has_weight(table: RankTable, side: str) -> bool:
    # checked on the full table: a subset whose weights are all zero is not a valid RankTable
    if table.weight is None:
        return True
    w = table.select_side("both").weight if side == "both" else table.weight[table.side == Side.parse(side)]
    return bool(np.any(w > 0))


def compute_values(
    table: RankTable,
    metrics: Sequence[Metric],
    *,
    sides: Iterable[str] | None = None,
    rank_types: Iterable[str] = RANK_TYPES,
) -> tuple[dict[MetricKey, float], dict[str, dict[str, NullMoments]]]:
    """All defined ``(side, rank_type, metric_key) -> value`` pairs, and the null moments of
    every wrapped base metric per side (``{side: {base_key: NullMoments}}``; empty without
    num_candidates)."""
    if sides is None:
        sides = [*table.sides] + (["both"] if table.has_entity_tasks else [])
    rank_types = list(rank_types)
    values: dict[MetricKey, float] = {}
    null: dict[str, dict[str, NullMoments]] = {}
    for side in sides:
        if not _has_weight(table, side):
            continue  # every task of this side has weight 0: no weighted mean is defined (was NaN)
        part = table.select_side(side)
        side_values, side_null = _side_values(
            part, metrics, rank_types, lambda base, side=side, part=part: side_moments(table, side, base, part))
        values.update({MetricKey(side, rt, key): v for (rt, key), v in side_values.items()})
        if table.num_candidates is not None:
            null[side] = side_null
    return values, null


def approximate_keys(null: dict[str, dict[str, NullMoments]]) -> list[str]:
    """Base metrics whose stated null moments are approximations (on any side)."""
    return sorted({k for per_side in null.values() for k, m in per_side.items() if m.mean is not None and not m.exact})


def relation_breakdown(table: RankTable, metrics: Sequence[Metric], rank_type: str) -> dict[int, dict[str, float]]:
    """``{relation_id: {metric_key: value}}`` over ``table`` (NaN where undefined)."""
    out = {}
    for rel in np.unique(table.relation):
        sel = table.relation == rel
        vals = {}
        if table.weight is None or np.any(table.weight[sel] > 0):  # else: no weighted mean (NaN)
            vals, _ = compute_values(table.subset(sel), metrics, sides=["both"], rank_types=[rank_type])
        out[int(rel)] = {m.key: vals.get(("both", rank_type, m.key), float("nan")) for m in metrics}
    return out
