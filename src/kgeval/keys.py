"""Metric keys: ``side.rank_type.metric[.k]`` (PyKEEN's grammar), with synonyms.

Any part may be omitted (defaults: side ``both``, rank type ``realistic``) and side and rank
type may come in either order: ``mrr``, ``tail.mrr``, ``pessimistic.hits@10``,
``both.realistic.inverse_harmonic_mean_rank``, ``left.best.mr``, and PyKEEN's
``head.best.hits_at_k.3`` (k after the name) all parse. Rank-type synonyms follow PyKEEN:
best = optimistic, worst = pessimistic, avg/average = realistic; LibKGE's ``rounded_mean_rank``,
``best_rank`` and ``worst_rank`` name rounded_mean, optimistic and pessimistic.
"""

from __future__ import annotations

import difflib
from typing import NamedTuple

from .errors import unknown_name

SIDES = ("head", "tail", "both", "relation")
#: the rank types every :class:`~kgeval.Results` computes
RANK_TYPES = ("optimistic", "pessimistic", "realistic", "expected")
#: integer rank types a tool reports (:mod:`kgeval.presets`): computed when a protocol preset asks for them,
#: or on request (``results["both.rounded_mean.mrr"]``); ``rounded_mean`` is LibKGE's rounded mean rank
EXTRA_RANK_TYPES = ("rounded_mean",)
#: every rank type a key may name
ALL_RANK_TYPES = RANK_TYPES + EXTRA_RANK_TYPES
DEFAULT_SIDE = "both"
DEFAULT_RANK_TYPE = "realistic"
#: the metric early stopping and hyper-parameter search optimise by default (MRR of both sides)
DEFAULT_METRIC = "both.realistic.inverse_harmonic_mean_rank"

SIDE_SYNONYMS = {"head": "head", "left": "head", "tail": "tail", "right": "tail", "both": "both",
                 "relation": "relation"}
RANK_TYPE_SYNONYMS = {
    "optimistic": "optimistic",
    "best": "optimistic",
    "pessimistic": "pessimistic",
    "worst": "pessimistic",
    "realistic": "realistic",
    "avg": "realistic",
    "average": "realistic",
    "expected": "expected",
    "exp": "expected",
    "random_tie_breaking": "expected",
    "rounded_mean": "rounded_mean",
    "rounded_mean_rank": "rounded_mean",  # LibKGE's tie_handling names
    "best_rank": "optimistic",
    "worst_rank": "pessimistic",
}


class MetricKey(NamedTuple):
    """The address of one value: side, rank type and metric (PyKEEN's ``RankBasedMetricKey``)."""

    side: str
    rank_type: str
    metric: str


def parse_key(key: str, *, default_rank_type: str = DEFAULT_RANK_TYPE) -> MetricKey:
    """Split a metric key into ``(side, rank_type, metric_name)``; the metric name is
    returned as written (resolve it with :func:`kgeval.metrics.get`). A key that names no rank
    type gets ``default_rank_type``."""
    if not isinstance(key, str) or not key.strip():
        raise unknown_name("metric", str(key), [])
    side = rank_type = None
    rest = []
    for part in key.strip().split("."):
        p = part.strip().lower()
        if side is None and p in SIDE_SYNONYMS and not rest:
            side = SIDE_SYNONYMS[p]
        elif rank_type is None and p in RANK_TYPE_SYNONYMS and not rest:
            rank_type = RANK_TYPE_SYNONYMS[p]
        else:
            rest.append(part.strip())
    if not rest:
        raise unknown_name("metric", key, [])
    # a metric name holds no dot except PyKEEN's trailing ".k": any other leading part is a
    # misspelt side or rank type
    named = rest[:-1] if len(rest) == 2 and rest[1].isdigit() else rest
    if len(named) > 1:
        raise _unknown_qualifier(named[0], side is None, rank_type is None)
    return MetricKey(side or DEFAULT_SIDE, rank_type or default_rank_type, ".".join(rest))


def _unknown_qualifier(part: str, side_open: bool, rank_type_open: bool):
    """Name the misspelt part as a side or a rank type, whichever it resembles (or is still missing)."""
    sides = list(SIDE_SYNONYMS) if side_open else []
    types = list(RANK_TYPE_SYNONYMS) if rank_type_open else []
    best = difflib.get_close_matches(part.lower(), sides + types, n=1, cutoff=0.5)
    if not best and sides and types:
        return unknown_name("side or rank type", part, sides + types)
    if (best and best[0] in SIDE_SYNONYMS and side_open) or not types:
        return unknown_name("side", part, sides or list(SIDE_SYNONYMS))
    return unknown_name("rank type", part, types)


def flat_key(side: str, rank_type: str, metric_key: str) -> str:
    return f"{side}.{rank_type}.{metric_key}"
