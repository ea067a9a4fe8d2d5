"""Breakdowns of a :class:`~kgeval.results.Results` by group of tasks, each group with the full metric set.

The groups come from :mod:`kgeval.breakdowns`; each group's numbers are those of ``Results`` on the
group's sub-table ``table.subset(mask)``, so nothing here is a second implementation of a statistic:

- ``value``: the metric on the group's tasks (one side, one rank type);
- ``expected``: its expectation under the null model (ranks uniform on 1..C_i over the *group's* candidate
  counts), ``adjusted``: the adjusted index ``(M - E) / (opt - E)``, ``z``: ``±(M - E) / sqrt(Var)``
  (signed so that larger is better), all from the group's own null moments;
- ``p_value``: one-sided, of a value at least as good under the null model (:meth:`Results.p_value`);
- ``ci_low``, ``ci_high``: the bootstrap interval over the group's evaluation triples
  (:func:`kgeval.significance.bootstrap.confidence_intervals`, BCa), empty where it is refused (one
  triple; a BCa tail beyond the resamples) with the reason in ``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import metrics as _metrics
from .._escape import plain_text
from .._format import EMPTY, format_p, format_value
from .._validation import Side, check_probability, check_seed
from ..breakdowns import Grouping
from ..errors import InvalidInputError, KGEvalError, unknown_name
from ..keys import flat_key
from ..metrics.base import UNKNOWN
from ..metrics.derived import DerivedMetric, wrapper_key

#: the columns of a breakdown row, in order
COLUMNS = ("group", "side", "metric", "num_tasks", "num_triples", "value", "ci_low", "ci_high", "expected",
           "adjusted", "z", "p_value", "log10_p", "p_method")
#: the metrics of a breakdown unless others are named
DEFAULT_METRICS = ("mrr", "hits@1", "hits@10")
#: the rank types a breakdown takes (the bootstrap needs one rank per task: not ``expected``)
RANK_TYPES = ("optimistic", "pessimistic", "realistic")


@dataclass(frozen=True)
class BreakdownOptions:
    """What each group reports: base ``metrics``, ``sides``, ``rank_type``; intervals at ``confidence``
    (None: no intervals) from ``num_resamples`` BCa resamples drawn from ``seed``."""

    metrics: tuple = ()
    sides: tuple[str, ...] | None = None
    rank_type: str = "realistic"
    confidence: float | None = 0.95
    num_resamples: int = 1000
    seed: int | None = 0


def options(metrics=DEFAULT_METRICS, sides=None, rank_type="realistic", confidence=0.95, num_resamples=1000,
            seed=0) -> BreakdownOptions:
    """Checked :class:`BreakdownOptions` (metric names resolved to base metrics, sides and rank type named)."""
    from ..keys import RANK_TYPE_SYNONYMS
    from ..significance.bootstrap import check_num_resamples

    names = [metrics] if isinstance(metrics, str) else list(metrics or ())
    if not names:
        raise InvalidInputError("metrics: name at least one metric")
    bases = []
    for name in names:
        metric = _metrics.get(name)
        metric = metric.base if isinstance(metric, DerivedMetric) else metric  # a group reports both anyway
        if metric.key not in [b.key for b in bases]:
            bases.append(metric)
    rt = RANK_TYPE_SYNONYMS.get(str(rank_type).strip().lower())
    if rt not in RANK_TYPES:
        raise unknown_name("rank type", rank_type, RANK_TYPES)
    if sides is not None:
        sides = (sides,) if isinstance(sides, str) else tuple(sides)
        for s in sides:
            if s not in ("head", "tail", "both"):
                raise unknown_name("side", s, ("head", "tail", "both"))
    if confidence is not None:
        confidence = check_probability("confidence", confidence)
        num_resamples = check_num_resamples("num_resamples", num_resamples, confidence, "bca")
    seed = check_seed("seed", seed, allow_none=True)
    return BreakdownOptions(tuple(bases), sides, rt, confidence, num_resamples, seed)


@dataclass
class Breakdown:
    """The metrics of every group of a grouping: one row per group, side and metric (:data:`COLUMNS`).

    ``by`` and ``rule`` say how the groups were made (printed with the table); ``members`` the relations of
    each group (where groups are sets of relations); ``notes`` what was left out and why.
    """

    by: str
    rule: str
    rows: list[dict]
    rank_type: str = "realistic"
    confidence: float | None = 0.95
    num_resamples: int = 1000
    members: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def groups(self) -> list[str]:
        """The groups with tasks, in table order."""
        return list(dict.fromkeys(r["group"] for r in self.rows))

    def row(self, group: str, metric: str = "mrr", side: str = "both") -> dict:
        """The row of one group, metric and side."""
        key = _metrics.get(metric).key
        for r in self.rows:
            if r["group"] == group and r["side"] == side and r["metric"] == key:
                return r
        raise unknown_name("breakdown row", f"{group}/{side}/{metric}",
                           [f"{r['group']}/{r['side']}/{r['metric']}" for r in self.rows])

    def to_dict(self) -> dict:
        """The JSON form: ``by``, ``rule``, ``rank_type``, ``confidence``, ``num_resamples``, ``members``,
        ``rows`` and ``notes``."""
        return {"by": self.by, "rule": self.rule, "rank_type": self.rank_type, "confidence": self.confidence,
                "num_resamples": self.num_resamples, "members": {k: list(v) for k, v in self.members.items()},
                "rows": [dict(r) for r in self.rows], "notes": list(self.notes)}

    def to_df(self):
        """The rows as a pandas DataFrame (columns :data:`COLUMNS`; the rule in ``df.attrs["rule"]``)."""
        import pandas as pd

        df = pd.DataFrame.from_records(self.rows, columns=list(COLUMNS))
        df.attrs["rule"] = self.rule
        return df

    def __str__(self) -> str:
        return format_breakdown(self)


def _units(table) -> int:
    return len(table) if table.triple_index is None else int(np.unique(table.triple_index).size)


def _keys(metric) -> tuple[str | None, str | None]:
    """The adjusted index's and the z-score's keys of a base metric (None where it has none)."""
    out = []
    for kind in ("index", "z"):
        key = wrapper_key(kind, metric.key, metric.increasing)
        try:
            _metrics.get(key)
            out.append(key)
        except KGEvalError:
            out.append(None)
    return out[0], out[1]


def _intervals(results, keys: list[str], opts: BreakdownOptions, why: list[str], group: str) -> dict:
    """BCa intervals of ``keys`` from one set of resamples; one by one where the joint call is refused,
    so one refused metric leaves only its own cell empty."""
    from ..significance.bootstrap import confidence_intervals

    if opts.confidence is None or not keys:
        return {}
    try:
        return confidence_intervals(results, keys, opts.confidence, "bca", opts.num_resamples, opts.seed)
    except KGEvalError:
        pass
    out = {}
    for key in keys:
        try:
            out.update(confidence_intervals(results, [key], opts.confidence, "bca", opts.num_resamples, opts.seed))
        except KGEvalError as exc:
            why.append(f"{group}, {key}: no interval ({exc})")
    return out


def _side_rows(group: str, results, side: str, opts: BreakdownOptions, why: list[str]) -> list[dict]:
    from .compute import side_moments

    table = results.rank_table
    part = table.select_side(side)
    rt = opts.rank_type
    keys = [flat_key(side, rt, m.key) for m in opts.metrics if results.value(side, rt, m.key) is not None]
    cis = _intervals(results, keys if _units(part) > 1 else [], opts, why, group)
    rows = []
    for metric in opts.metrics:
        value = results.value(side, rt, metric.key)
        if value is None:
            continue
        key = flat_key(side, rt, metric.key)
        moments = UNKNOWN if table.num_candidates is None else side_moments(table, side, metric, part)
        adj_key, z_key = _keys(metric)
        p = None
        if moments.mean is not None:
            try:
                p = results.p_value(key)
            except KGEvalError as exc:
                why.append(f"{group}, {key}: no p-value ({exc})")
        ci = cis.get(key)
        rows.append({
            "group": group, "side": side, "metric": metric.key, "num_tasks": len(part), "num_triples": _units(part),
            "value": value, "ci_low": None if ci is None else ci[0], "ci_high": None if ci is None else ci[1],
            "expected": moments.mean,
            "adjusted": None if adj_key is None else results.value(side, rt, adj_key),
            "z": None if z_key is None else results.value(side, rt, z_key),
            "p_value": None if p is None else p.value, "log10_p": None if p is None else p.log10,
            "p_method": None if p is None else p.method,
        })
    return rows


def breakdown(results, grouping: Grouping, opts: BreakdownOptions) -> Breakdown:
    """The :class:`Breakdown` of ``results`` by ``grouping`` (made on ``results.rank_table``)."""
    table = results.rank_table
    if table is None:
        raise InvalidInputError("a breakdown needs the rank table (these results were loaded without one)")
    if len(grouping.codes) != len(table):
        raise InvalidInputError(f"the grouping covers {len(grouping.codes)} tasks, the rank table {len(table)}")
    wrappers = [k for m in opts.metrics for k in _keys(m) if k is not None and table.num_candidates is not None]
    rows, why, empty, single, unweighted = [], [], [], [], []
    for label in grouping.labels:
        mask = grouping.mask(label)
        if not mask.any():
            empty.append(label)
            continue
        if table.weight is not None and not np.any(table.weight[mask] > 0):
            unweighted.append(label)  # no weighted mean is defined on the group (a table refuses it)
            continue
        sub = table.subset(mask)
        # the class of ``results`` (Results): imported from here it would be an import cycle in the package
        group = type(results)(sub, metrics=[m.key for m in opts.metrics] + wrappers, rank_types=[opts.rank_type])
        if _units(sub) < 2 and opts.confidence is not None:
            single.append(label)
        sides = opts.sides or (*sub.sides, "both")
        for side in sides:
            if side == "both" or np.any(sub.side == Side.parse(side)):
                rows += _side_rows(label, group, side, opts, why)
    notes = [f"no tasks in: {', '.join(empty)}"] if empty else []
    if unweighted:
        notes.append(f"every task has weight 0 in: {', '.join(unweighted)} (no weighted mean)")
    if single:  # the bootstrap resamples evaluation triples: one triple has no sampling spread to resample
        notes.append(f"no interval where a group has one evaluation triple: {', '.join(single)}")
    return Breakdown(grouping.by, grouping.rule, rows, opts.rank_type, opts.confidence, opts.num_resamples,
                     {k: list(v) for k, v in grouping.members.items()}, notes + why)


_TITLES = {"category": "relation category", "frequency": "answer-entity frequency",
           "query_frequency": "query-entity frequency", "relation": "relation", "groups": "relation group"}


def short_name(key: str) -> str:
    """A metric's name as tables print it: ``MRR``, ``Hits@10``, ``MR``; its key where it has no short one."""
    import re

    metric = _metrics.get(key)
    if getattr(metric, "k", None) is not None and metric.key.startswith("hits_at_"):
        return f"Hits@{metric.k}"
    found = re.search(r"\(([A-Za-z0-9@]+)\)$", getattr(metric, "name", "") or "")
    return found.group(1) if found else metric.key


def _cells(r: dict, intervals: bool) -> list[str]:
    ci = [EMPTY if r["ci_low"] is None else f"[{format_value(r['ci_low'])}, {format_value(r['ci_high'])}]"]
    return [plain_text(r["group"]), r["side"], f"{r['num_tasks']:,}", short_name(r["metric"]),
            format_value(r["value"]), *(ci if intervals else []), format_value(r["expected"]),
            format_value(r["adjusted"]), format_value(r["z"]), _p_cell(r)]


def _p_cell(r: dict) -> str:
    if r["log10_p"] is None:
        return EMPTY
    # the normal approximation is marked: on a small group a skewed metric (MRR) can be far from it
    return ("~" if str(r["p_method"]).startswith("normal") else "") + format_p(r["log10_p"])


def format_breakdown(table: Breakdown) -> str:
    """The text table of a breakdown: its rule, one line per group, side and metric, then its notes."""
    intervals = table.confidence is not None
    head = ["group", "side", "tasks", "metric", "value", *([f"{100 * table.confidence:g}% CI"] if intervals else []),
            "E[chance]", "adjusted", "z", "p"]
    body = [_cells(r, intervals) for r in table.rows]
    widths = [max(len(str(row[i])) for row in [head, *body]) for i in range(len(head))]
    lines = [f"breakdown by {_TITLES.get(table.by, table.by)} ({table.rank_type} ranks)", f"rule: {table.rule}", ""]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    lines += ["", "E[chance]: the value expected of random ranks over the group's own candidates; adjusted: "
              "(value - E) / (best - E); z: (value - E) / sd, larger is better; p: one-sided, against chance "
              "(~: by the normal approximation, rough for small groups; else exact)"
              + (f"; CI: BCa bootstrap over the group's evaluation triples, {table.num_resamples:,} resamples"
                 if intervals else "")]
    lines += [f"note: {plain_text(n)}" for n in table.notes]
    return "\n".join(lines)


def breakdown_of(results, by, data, opts: BreakdownOptions) -> Breakdown:
    """:func:`breakdown` by ``by`` (a grouping name or a mapping of group names to relations) with the
    :class:`~kgeval.breakdowns.GroupingData` ``data``."""
    from ..breakdowns import group_tasks

    if results.rank_table is None:
        raise InvalidInputError("a breakdown needs the rank table (these results were loaded without one)")
    return breakdown(results, group_tasks(results.rank_table, by, data), opts)


__all__ = ["Breakdown", "BreakdownOptions", "COLUMNS", "DEFAULT_METRICS", "breakdown", "breakdown_of",
           "format_breakdown", "options"]
