"""Results: every metric for every side and rank type, computed from a rank table.

Rank types:

- ``optimistic`` / ``pessimistic``: the best / worst position among tied candidates;
- ``realistic``: the metric of the mean of those two ranks (PyKEEN's definition);
- ``expected``: the exact expected value of the metric when ties are broken uniformly at
  random, i.e. each rank uniform on [optimistic, pessimistic]. It differs from
  ``realistic`` for any non-linear f: with 100 tied candidates (optimistic 1, pessimistic
  100) the realistic reciprocal rank is 1/50.5 = 0.0198, while the expected reciprocal rank
  is H₁₀₀/100 = 0.0519. Available for the arithmetic-mean family (hits@k, MR, MRR) and the
  geometric means (GMR, IGMR), with their adjusted and z variants.

Sides: ``head``, ``tail`` and ``both`` (the pooled tasks of the two sides). A table
without sides reports only ``both``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from . import metrics as _metrics
from .errors import InvalidInputError, NoClosedFormError, UnknownNameError, unknown_name
from .keys import RANK_TYPES, SIDES, flat_key, parse_key
from .metrics.base import Metric
from .metrics.derived import AdjustedIndex, DerivedMetric, ExpectationNormalized, ZScore
from .ranks import RankTable

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
)


class _SideContext:
    """Per-side data and a cache of null moments shared by all rank types and wrappers."""

    def __init__(self, table: RankTable):
        self.table = table
        self.c = table.num_candidates
        w = table.weight
        self.w = None if w is None else w / w.sum()
        self.weighted = w is not None
        self._ranks: dict[str, np.ndarray] = {}
        self._null: dict[tuple[str, str], float | None] = {}
        self.approximate: set[str] = set()

    def ranks(self, rank_type: str) -> np.ndarray:
        if rank_type not in self._ranks:
            self._ranks[rank_type] = self.table.ranks(rank_type)
        return self._ranks[rank_type]

    def null(self, metric: Metric, what: str) -> float | None:
        """E (``what='E'``) or Var (``'V'``) of a base metric under the null; None if unknown."""
        key = (metric.key, what)
        if key not in self._null:
            value = None
            if self.c is not None:
                ok = metric.has_expectation(self.weighted) if what == "E" else metric.has_variance(self.weighted)
                if ok:
                    try:
                        value = metric._expectation(self.c, self.w) if what == "E" else metric._variance(self.c, self.w)
                    except NoClosedFormError:
                        value = None
                if value is not None and not metric.null_is_exact(self.c, self.w):
                    self.approximate.add(metric.key)
            self._null[key] = value
        return self._null[key]

    def base_value(self, metric: Metric, rank_type: str) -> float | None:
        if metric.needs_candidates and self.c is None:
            return None
        if rank_type == "expected":
            if not metric.supports_expected_rank:
                return None
            return metric._expected_under_ties(self.table.optimistic, self.table.pessimistic, self.c, self.w)
        return metric.compute(self.ranks(rank_type), self.c, self.w)

    def derived_value(self, metric: DerivedMetric, base_value: float | None) -> float | None:
        if base_value is None or self.c is None:
            return None
        base = metric.base
        e = self.null(base, "E")
        if e is None:
            return None
        if isinstance(metric, ExpectationNormalized):
            return base_value / e if e != 0 else 0.0
        if isinstance(metric, AdjustedIndex):
            den = base.optimum - e
            return (base_value - e) / den if den != 0 else 0.0
        if isinstance(metric, ZScore):
            v = self.null(base, "V")
            if v is None:
                return None
            sd = math.sqrt(max(v, 0.0))
            if sd == 0:
                return 0.0
            return (base_value - e) / sd if base.increasing else (e - base_value) / sd
        raise TypeError(f"unknown derived metric {metric!r}")  # pragma: no cover


def compute_values(
    table: RankTable,
    metrics: Sequence[Metric],
    *,
    sides: Iterable[str] | None = None,
    rank_types: Iterable[str] = RANK_TYPES,
) -> tuple[dict[tuple[str, str, str], float], dict]:
    """All ``(side, rank_type, metric_key) -> value`` pairs that are defined, plus a dict of
    null moments per side."""
    if sides is None:
        sides = [*table.sides, "both"]
    values: dict[tuple[str, str, str], float] = {}
    null: dict[str, dict[str, dict]] = {}
    approximate: set[str] = set()
    rank_types = list(rank_types)
    for side in sides:
        ctx = _SideContext(table.select_side(side))
        base_cache: dict[tuple[str, str], float | None] = {}
        for metric in metrics:
            base = metric.base if isinstance(metric, DerivedMetric) else metric
            for rt in rank_types:
                bk = (base.key, rt)
                if bk not in base_cache:
                    base_cache[bk] = ctx.base_value(base, rt)
                v = base_cache[bk] if metric is base else ctx.derived_value(metric, base_cache[bk])
                if v is not None:
                    values[(side, rt, metric.key)] = float(v)
            if metric is base and ctx.c is not None:
                e, var = ctx.null(base, "E"), ctx.null(base, "V")
                if e is not None:
                    null.setdefault(side, {})[base.key] = {"expected_value": e, "variance": var}
        approximate |= ctx.approximate
    return values, {"null_model": null, "approximate_null_moments": sorted(approximate)}


class Results:
    """Metric values of one evaluation, addressable by PyKEEN-style keys.

    ``Results(rank_table, protocol=..., extra=...)`` computes the default metric set
    (every metric, hits@{1,3,5,10}, all adjusted and z variants) for every side and rank
    type. ``extra`` is a flat dict of additional values (e.g. query-level precision@k)
    merged into :meth:`to_flat_dict`.
    """

    def __init__(
        self,
        rank_table: RankTable | None,
        *,
        protocol: dict | None = None,
        extra: dict[str, float] | None = None,
        metrics: Sequence[str | Metric] | None = None,
        ks: Sequence[int] = _metrics.DEFAULT_KS,
        rank_types: Sequence[str] = RANK_TYPES,
        _values: dict[tuple[str, str, str], float] | None = None,
    ):
        self.rank_table = rank_table
        self.protocol = dict(protocol or {})
        self.extra = dict(extra or {})
        if _values is not None:
            self._values = dict(_values)
            return
        if rank_table is None:
            raise InvalidInputError("Results needs a rank table")
        for rt in rank_types:
            if rt not in RANK_TYPES:
                raise unknown_name("rank type", rt, RANK_TYPES)
        ms = _metrics.default_metrics(ks) if metrics is None else [_metrics.get(m) for m in metrics]
        self._values, null_info = compute_values(rank_table, ms, rank_types=rank_types)
        self.null_model = null_info["null_model"]
        self.protocol.setdefault("rank_types", list(rank_types))
        self.protocol.setdefault("sides", [*rank_table.sides, "both"])
        self.protocol.setdefault("num_tasks", len(rank_table))
        self.protocol.setdefault("weighted", rank_table.weight is not None)
        self.protocol.setdefault(
            "num_candidates",
            "given per task" if rank_table.num_candidates is not None else "unknown: adjusted and z metrics omitted",
        )
        self.protocol["approximate_null_moments"] = null_info["approximate_null_moments"]
        self.protocol.setdefault(
            "realistic", "metric of the mean of optimistic and pessimistic rank (PyKEEN)"
        )
        self.protocol.setdefault("expected", "exact expectation of the metric under uniformly random tie-breaking")

    # ------------------------------------------------------------------ lookup
    @classmethod
    def from_ranks(cls, *args, protocol=None, **kwargs) -> Results:
        """Shortcut: ``Results.from_ranks(optimistic, pessimistic, num_candidates=..., side=...)``."""
        return cls(RankTable.from_ranks(*args, **kwargs), protocol=protocol)

    def get_metric(self, key: str) -> float:
        """Value for a key like ``mrr``, ``tail.pessimistic.hits@10`` or
        ``both.realistic.inverse_harmonic_mean_rank`` (case-insensitive; defaults both/realistic)."""
        if isinstance(key, str) and key in self.extra:
            return float(self.extra[key])
        side, rank_type, name = parse_key(key)
        lowered = flat_key(side, rank_type, name.lower())
        if lowered in self.extra:
            return float(self.extra[lowered])
        try:
            metric = _metrics.get(name)
        except UnknownNameError:
            extra_names = sorted({k.split(".")[-1] for k in self.extra})
            if name.lower() in extra_names:
                raise UnknownNameError(f"{key!r}: no value for side {side!r}") from None
            raise
        hit = self._values.get((side, rank_type, metric.key))
        if hit is not None:
            return hit
        if side not in SIDES or (self.rank_table is not None and side != "both" and side not in self.rank_table.sides):
            raise UnknownNameError(f"{key!r}: the results have no {side!r} side (sides: {self.sides})")
        if self.rank_table is None:
            raise UnknownNameError(f"{key!r}: not among the stored values and no rank table to compute it from")
        values, _ = compute_values(self.rank_table, [metric], sides=[side], rank_types=[rank_type])
        if (side, rank_type, metric.key) not in values:
            raise UnknownNameError(
                f"{key!r} is not defined here (e.g. adjusted/z metrics need num_candidates; "
                f"the 'expected' rank type exists only for the arithmetic-mean and geometric-mean families)"
            )
        v = values[(side, rank_type, metric.key)]
        self._values[(side, rank_type, metric.key)] = v
        return v

    def __getitem__(self, key: str) -> float:
        return self.get_metric(key)

    @property
    def sides(self) -> list[str]:
        return sorted({s for s, _, _ in self._values}, key=SIDES.index)

    # ------------------------------------------------------------------ export
    def to_flat_dict(self) -> dict[str, float]:
        out = {flat_key(*k): v for k, v in self._values.items()}
        out.update(self.extra)
        return out

    def to_dict(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict = {}
        for (side, rt, key), v in self._values.items():
            out.setdefault(side, {}).setdefault(rt, {})[key] = v
        return out

    def to_df(self):
        """Long-format pandas DataFrame with columns Side, Type, Metric, Value."""
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover
            raise ImportError("to_df needs pandas: pip install 'kgeval[pandas]'") from None
        rows = [(s, t, k, v) for (s, t, k), v in self._values.items()]
        return pd.DataFrame(rows, columns=["Side", "Type", "Metric", "Value"])

    def to_json(self) -> dict:
        from . import __version__

        return {"kgeval_version": __version__, "protocol": self.protocol, "metrics": self.to_flat_dict()}

    def save_json(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True, default=_json_default))
        return path

    @classmethod
    def load_json(cls, path: str | os.PathLike, rank_table: RankTable | None = None) -> Results:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            flat = data["metrics"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(f"{path}: not a kgeval results file ({exc})") from None
        values, extra = {}, {}
        for k, v in flat.items():
            parts = k.split(".")
            if len(parts) == 3 and parts[0] in SIDES and parts[1] in RANK_TYPES:
                try:
                    _metrics.get(parts[2])
                    values[tuple(parts)] = float(v)
                    continue
                except (UnknownNameError, InvalidInputError):
                    pass
            extra[k] = v
        return cls(rank_table, protocol=data.get("protocol"), extra=extra, _values=values)

    # ------------------------------------------------------------------ views
    def by_relation(
        self, metrics: Sequence[str] = ("mrr", "hits@1", "hits@10", "amri", "count"), *, side: str = "both", rank_type: str = "realistic"
    ) -> dict[int, dict[str, float]]:
        """Per-relation breakdown: ``{relation_id: {metric_key: value}}`` for the chosen side
        and rank type (needs the ``relation`` column the evaluator fills)."""
        table = self._require_table()
        if table.relation is None:
            raise InvalidInputError("the rank table has no relation column (it was not produced by the evaluator)")
        ms = [_metrics.get(m) for m in metrics]
        table = table.select_side(side)
        out = {}
        for rel in np.unique(table.relation):
            sub = table.subset(table.relation == rel)
            vals, _ = compute_values(sub, ms, sides=["both"], rank_types=[rank_type])
            out[int(rel)] = {m.key: vals.get(("both", rank_type, m.key), float("nan")) for m in ms}
        return out

    def _require_table(self) -> RankTable:
        if self.rank_table is None:
            raise InvalidInputError("these results carry no rank table (loaded from JSON without one)")
        return self.rank_table

    def summary_table(self, metrics: Sequence[str] = HEADLINE, *, rank_type: str = "realistic") -> str:
        """A readable text table: one row per metric, one column per side, and the protocol."""
        sides = self.sides
        rows = []
        for name in metrics:
            m = _metrics.get(name)
            cells = []
            for s in sides:
                v = self._values.get((s, rank_type, m.key))
                cells.append("—" if v is None else _fmt(v))
            if any(c != "—" for c in cells):
                rows.append((m.key, cells))
        width = max([len("metric")] + [len(r[0]) for r in rows])
        lines = [f"{'metric':<{width}}  " + "  ".join(f"{s:>10}" for s in sides)]
        lines.append("-" * len(lines[0]))
        lines += [f"{k:<{width}}  " + "  ".join(f"{c:>10}" for c in cells) for k, cells in rows]
        lines.append("")
        lines.append(f"rank type: {rank_type}; " + describe_protocol(self.protocol))
        return "\n".join(lines)

    def __repr__(self) -> str:
        try:
            mrr = self.get_metric("both.realistic.inverse_harmonic_mean_rank")
            return f"Results(tasks={self.protocol.get('num_tasks')}, mrr={mrr:.4f}, sides={self.sides})"
        except Exception:
            return f"Results({len(self._values)} values)"


def describe_protocol(protocol: dict) -> str:
    """One line naming the protocol: filtering, sides, candidates, weighting."""
    parts = []
    if "filtered" in protocol:
        parts.append("filtered" if protocol["filtered"] else "unfiltered")
    sets = (protocol.get("filter") or {}).get("sets") if isinstance(protocol.get("filter"), dict) else None
    if sets:
        parts.append("filter sets: " + " + ".join(f"{s['name']} ({s['num_triples']:,})" for s in sets))
    parts.append(f"sides: {', '.join(protocol.get('sides', []))}")
    if "num_tasks" in protocol:
        parts.append(f"{protocol['num_tasks']} tasks")
    if protocol.get("weighted"):
        parts.append("weighted")
    nc = protocol.get("num_candidates")
    if nc:
        parts.append(f"candidates: {nc}")
    return "; ".join(parts)


def _fmt(v: float) -> str:
    if v == 0 or 1e-3 <= abs(v) < 1e5:
        return f"{v:.4f}"
    return f"{v:.3e}"


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)
