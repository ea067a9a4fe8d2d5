"""Metric keys: ``side.rank_type.metric`` (PyKEEN's grammar), with synonyms.

Any part may be omitted (defaults: side ``both``, rank type ``realistic``) and the parts
may come in any order: ``mrr``, ``tail.mrr``, ``pessimistic.hits@10``,
``both.realistic.inverse_harmonic_mean_rank``, ``left.best.mr`` all parse.
"""

from __future__ import annotations

from .errors import unknown_name

SIDES = ("head", "tail", "both")
RANK_TYPES = ("optimistic", "pessimistic", "realistic", "expected")
DEFAULT_SIDE = "both"
DEFAULT_RANK_TYPE = "realistic"

SIDE_SYNONYMS = {"head": "head", "left": "head", "tail": "tail", "right": "tail", "both": "both"}
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
}


def parse_key(key: str) -> tuple[str, str, str]:
    """Split a metric key into ``(side, rank_type, metric_name)``; the metric name is
    returned as written (resolve it with :func:`kgeval.metrics.get`)."""
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
    return side or DEFAULT_SIDE, rank_type or DEFAULT_RANK_TYPE, ".".join(rest)


def flat_key(side: str, rank_type: str, metric_key: str) -> str:
    return f"{side}.{rank_type}.{metric_key}"
