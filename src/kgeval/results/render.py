"""Text rendering of results: one table renderer and one protocol line.

:func:`metric_table` takes a headline list (metric names or ``(label, name)`` pairs), so the
Python API (:meth:`Results.summary_table`) and the command line print the same table.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._escape import plain_text
from .._format import EMPTY, format_p, format_value, truthful  # noqa: F401 (public here too)

#: the headline metrics of :meth:`Results.summary_table`
HEADLINE = (
    "inverse_harmonic_mean_rank",
    "hits_at_1",
    "hits_at_3",
    "hits_at_10",
    "arithmetic_mean_rank",
    "inverse_geometric_mean_rank",
    "adjusted_arithmetic_mean_rank_index",
    "adjusted_inverse_harmonic_mean_rank",
    "z_inverse_harmonic_mean_rank",
    "p_inverse_harmonic_mean_rank",
)

def metric_table(
    results,
    metrics: Sequence[str | tuple[str, str]] = HEADLINE,
    *,
    rank_type: str = "realistic",
    sides: Sequence[str] | None = None,
    footer: bool = True,
) -> str:
    """One row per metric, one column per side; rows with no value on any side are dropped.

    ``metrics`` holds names (the row label is the metric's key) or ``(label, name)`` pairs; a name
    ``p_<metric>`` is the one-sided p-value of that metric against chance (:meth:`Results.p_value`).
    ``footer`` appends the rank type and :func:`describe_protocol` of the results' protocol.
    """
    from ..metrics import get

    sides = list(results.sides if sides is None else sides)
    rows = []
    for item in metrics:
        label, name = item if isinstance(item, tuple) else (None, item)
        if name.startswith("p_"):
            key = "p_" + get(name[2:]).key
            cells = [_p_cell(results, side, rank_type, key[2:]) for side in sides]
        else:
            key = get(name).key
            cells = [format_value(results.value(side, rank_type, key)) for side in sides]
        if any(c != EMPTY for c in cells):
            rows.append((plain_text(label or key), cells))  # a newline or ESC in a label: not a new row
    width = max([len("metric")] + [len(r[0]) for r in rows])
    lines = [f"{'metric':<{width}}  " + "  ".join(f"{s:>10}" for s in sides)]
    lines.append("-" * len(lines[0]))
    lines += [f"{k:<{width}}  " + "  ".join(f"{c:>10}" for c in cells) for k, cells in rows]
    if footer:
        lines += ["", f"rank type: {rank_type}; " + describe_protocol(results.protocol)]
    return "\n".join(lines)


def _p_cell(results, side: str, rank_type: str, base_key: str) -> str:
    """The formatted p-value against chance, or the empty mark where there is none."""
    from ..errors import KGEvalError

    if results.value(side, rank_type, base_key) is None:
        return EMPTY
    try:
        return format_p(results.cached_p_value(f"{side}.{rank_type}.{base_key}").log10)
    except KGEvalError:
        return EMPTY


def describe_protocol(protocol: dict) -> str:
    """One line naming the protocol: filtering, sides, candidates, weighting."""
    if hasattr(protocol, "describe"):
        return protocol.describe()
    parts = []
    if protocol.get("preset") not in (None, "kgeval"):
        parts.append(f"protocol preset: {plain_text(str(protocol['preset']))}")
    if "filtered" in protocol:
        parts.append("filtered" if protocol["filtered"] else "unfiltered")
    sets = (protocol.get("filter") or {}).get("sets") if isinstance(protocol.get("filter"), dict) else None
    if sets:
        parts.append("filter sets: " + " + ".join(f"{plain_text(s['name'])} ({s['num_triples']:,})" for s in sets))
    parts.append(f"sides: {', '.join(map(plain_text, protocol.get('sides', [])))}")
    if "num_tasks" in protocol:
        parts.append(f"{protocol['num_tasks']} tasks")
    if protocol.get("weighted"):
        parts.append("weighted")
    unseen = protocol.get("unseen")
    if isinstance(unseen, dict) and isinstance(unseen.get("triples"), int):
        parts.append(f"{unseen['triples']:,} triples unseen in training ({unseen.get('policy')})")
    nc = protocol.get("num_candidates")
    if nc:
        parts.append(f"candidates: {nc}")
    return "; ".join(parts)
