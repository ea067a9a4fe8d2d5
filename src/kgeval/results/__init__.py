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

- ``rounded_mean``: LibKGE's integer rank ``optimistic + floor((pessimistic - optimistic + 1) / 2)``,
  computed when the protocol preset is ``libkge`` (or on request, ``results["both.rounded_mean.mrr"]``).

Under a protocol preset (``protocol["preset"]``, :mod:`kgeval.presets`) a key without a rank type
(``mrr``, ``hits@10``, ``tail.mr``) resolves to that tool's rank type (:attr:`Results.rank_type`):
pessimistic for TorchKGE, rounded_mean for LibKGE; kgeval's own values keep their full keys.

Sides: ``head``, ``tail`` and ``both`` (the pooled tasks of the two sides). A table
without sides reports only ``both``.

The container holds values, the protocol and the null moments and resolves keys; the
computation lives in :mod:`.compute`, JSON in :mod:`.io`, text tables in :mod:`.render`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .._compat import install_hint
from .. import metrics as _metrics
from ..errors import InvalidInputError, UnknownNameError, unknown_name
from .. import presets as _presets
from ..keys import ALL_RANK_TYPES, RANK_TYPE_SYNONYMS, RANK_TYPES, SIDES, MetricKey, flat_key, parse_key
from ..metrics.base import Metric, NullMoments
from ..protocol import RANK_TYPE_MEANINGS, EvaluationProtocol
from ..ranks import RankTable
from . import io as _io
from .compute import approximate_keys, compute_values, relation_breakdown
from .inference import flat_p_values, p_value, p_value_keys
from .render import HEADLINE, describe_protocol, format_value, metric_table

__all__ = ["Results", "MetricKey", "HEADLINE", "compute_values", "describe_protocol", "metric_table"]

def _p_value_key(side: str, rank_type: str, name: str, prefix: str) -> str | None:
    """The flat key a p-value (``p_``) or its log10 (``log10_p_``) of metric ``name`` is saved
    under (an adjusted or z variant has its base metric's), or None for an unknown name."""
    try:
        metric = _metrics.get(name)
    except (UnknownNameError, InvalidInputError):
        return None
    base = getattr(metric, "base", metric)
    return p_value_keys(side, rank_type, base.key)[prefix == "log10_p_"]


def _rank_type(rank_type) -> str:
    """A rank type or its synonym (``best``, ``worst``, ``avg``, any case) as its canonical name."""
    name = RANK_TYPE_SYNONYMS.get(str(rank_type).strip().lower()) if isinstance(rank_type, str) else None
    if name is None:
        raise unknown_name("rank type", rank_type, list(RANK_TYPE_SYNONYMS))
    return name


def _preset_rank_type(protocol) -> str:
    """The rank type the protocol's preset reports (realistic without one, or for a name this version lacks)."""
    name = (protocol or {}).get("preset") if hasattr(protocol, "get") else None
    return _presets.PRESETS[name].rank_type if name in _presets.PRESETS else "realistic"


def _check_extra(extra) -> None:
    """Extra values may not name a metric Results computes: ``extra={"both.realistic.mrr": 0.8}``
    made ``results["mrr"]`` 0.8, ``to_flat_dict`` and ``results["both.realistic.inverse_harmonic_mean_rank"]``
    another value and the summary table the computed one."""
    for key in extra or {}:
        try:
            side, rank_type, name = parse_key(key)
            metric = _metrics.get(name)
        except (UnknownNameError, InvalidInputError):
            continue
        raise InvalidInputError(
            f"extra value {key!r} names the metric {flat_key(side, rank_type, metric.key)!r}, which Results "
            "computes from the rank table; give the extra value another name"
        )


class Results:
    """Metric values of one evaluation, addressable by PyKEEN-style keys.

    ``Results(rank_table, protocol=..., extra=...)`` computes the default metric set
    (every registered metric but the power means, hits@{1,3,5,10}, all adjusted and z variants)
    for every side and rank type; :meth:`get_metric` computes any other key (``hits@7``,
    ``power_mean_rank_p2``) on demand and keeps it, so it is in :meth:`to_flat_dict` from then on. ``extra`` is a flat dict of additional values (e.g. query-level precision@k)
    merged into :meth:`to_flat_dict`. :attr:`null_moments` holds the null-model moments of
    every wrapped base metric per side (``{side: {key: NullMoments}}``). :attr:`protocol` is
    the JSON-able dict form; :attr:`evaluation_protocol` the typed record.

    Examples
    --------
    >>> from kgeval import RankTable
    >>> from kgeval.results import Results
    >>> results = Results(RankTable.from_ranks(ranks=[1, 2, 10], num_candidates=[10, 10, 100]))
    >>> round(results.get_metric("mrr"), 4)  # (1 + 1/2 + 1/10) / 3
    0.5333
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
    ):
        if rank_table is None:
            raise InvalidInputError("Results needs a rank table (use Results.load_json to read saved results)")
        for rt in rank_types:
            if rt not in ALL_RANK_TYPES:
                raise unknown_name("rank type", rt, ALL_RANK_TYPES)
        preset_type = _preset_rank_type(protocol)
        if rank_types is RANK_TYPES and preset_type not in rank_types:  # the preset's headline numbers, by default
            rank_types = (*rank_types, preset_type)
        _check_extra(extra)
        ms = _metrics.default_metrics(ks) if metrics is None else [_metrics.get(m) for m in metrics]
        values, null = compute_values(rank_table, ms, rank_types=rank_types)
        self._init(rank_table, values, null, protocol, extra)
        p = self.protocol
        # the values present decide the recorded rank types (the evaluator's list lacks 'expected')
        p["rank_types"] = list(rank_types)
        p.setdefault("sides", [*rank_table.sides, "both"])
        p.setdefault("num_tasks", len(rank_table))
        p.setdefault("weighted", rank_table.weight is not None)
        p.setdefault(
            "num_candidates",
            "given per task" if rank_table.num_candidates is not None else "unknown: adjusted and z metrics omitted",
        )
        p["approximate_null_moments"] = approximate_keys(null)
        for rt in ("realistic", "expected"):  # the layout of EvaluationProtocol.to_dict()
            if rt in rank_types:
                p.setdefault(rt, RANK_TYPE_MEANINGS[rt])

    def _init(self, rank_table, values, null, protocol, extra) -> None:
        self.rank_table = rank_table
        self._values = {MetricKey(*k): v for k, v in values.items()}
        self.null_moments: dict[str, dict[str, NullMoments]] = null
        self.protocol = protocol.to_dict() if hasattr(protocol, "to_dict") else dict(protocol or {})
        self.extra = dict(extra or {})
        self._p_values: dict = {}
        # p-values read from a file, by flat key: a result loaded without its rank table cannot redo them
        self._saved_p: dict[str, float] = {}

    @classmethod
    def from_values(cls, values, *, null_moments=None, protocol=None, extra=None, rank_table=None) -> Results:
        """A container over already computed ``{MetricKey(side, rank_type, key): value}`` (e.g. read from JSON)."""
        self = cls.__new__(cls)
        self._init(rank_table, values, dict(null_moments or {}), protocol, extra)
        return self

    @classmethod
    def from_ranks(cls, *args, protocol=None, **kwargs) -> Results:
        """Shortcut: ``Results.from_ranks(optimistic, pessimistic, num_candidates=..., side=...)``."""
        return cls(RankTable.from_ranks(*args, **kwargs), protocol=protocol)

    # ------------------------------------------------------------------ lookup
    @property
    def evaluation_protocol(self) -> EvaluationProtocol:
        """The protocol as a typed :class:`~kgeval.protocol.EvaluationProtocol` (with ``describe()``)."""
        return EvaluationProtocol.from_dict(self.protocol)

    @property
    def null_model(self) -> dict[str, dict[str, dict]]:
        """``{side: {base_key: {"expected_value", "variance", "exact"[, "optimum_gap"]}}}`` for every base
        metric with a known expectation (the dict form of :attr:`null_moments`; ``optimum_gap`` = opt − E
        computed without cancellation, where the metric has one)."""
        return {
            side: {k: m.to_dict() for k, m in per.items() if m.mean is not None}
            for side, per in self.null_moments.items()
        }

    def value(self, side: str, rank_type: str, key: str) -> float | None:
        """The stored value for canonical names, or None (nothing is computed)."""
        return self._values.get((side, rank_type, key))

    @property
    def rank_type(self) -> str:
        """The rank type of keys that name none (``mrr``, ``tail.hits@10``): the protocol preset's
        (:mod:`kgeval.presets`; ``rounded_mean`` for LibKGE, ``pessimistic`` for TorchKGE), else ``realistic``."""
        return _preset_rank_type(self.protocol)

    @property
    def preset(self) -> str:
        """The protocol preset of the evaluation (``"kgeval"`` when none was recorded)."""
        return (self.protocol or {}).get("preset") or _presets.DEFAULT

    def get_metric(self, key: str) -> float:
        """Value for a key like ``mrr``, ``tail.pessimistic.hits@10``, ``head.best.hits_at_k.3``
        or ``both.realistic.inverse_harmonic_mean_rank`` (case-insensitive; defaults: side both, rank type
        :attr:`rank_type`, i.e. realistic unless a protocol preset says otherwise)."""
        if isinstance(key, str) and key in self.extra:
            return float(self.extra[key])
        side, rank_type, name = parse_key(key, default_rank_type=self.rank_type)
        lowered = flat_key(side, rank_type, name.lower())
        if lowered in self.extra:
            return float(self.extra[lowered])
        for prefix in ("log10_p_", "p_"):  # p-values against chance (see :mod:`.inference`)
            if name.lower().startswith(prefix):
                stored = self._saved_p.get(_p_value_key(side, rank_type, name[len(prefix):], prefix))
                if stored is not None:  # as saved (loaded results: under the canonical key only)
                    return float(stored)
                p = self.cached_p_value(flat_key(side, rank_type, name[len(prefix):]))
                return p.log10 if prefix == "log10_p_" else p.value
        try:
            metric = _metrics.get(name)
        except UnknownNameError:
            extra_names = sorted({k.split(".")[-1] for k in self.extra})
            if name.lower() in extra_names:
                raise UnknownNameError(f"{key!r}: no value for side {side!r}") from None
            raise
        address = MetricKey(side, rank_type, metric.key)
        hit = self._values.get(address)
        if hit is not None:
            return hit
        if side not in SIDES or (self.rank_table is not None and side != "both" and side not in self.rank_table.sides):
            raise UnknownNameError(f"{key!r}: the results have no {side!r} side (sides: {self.sides})")
        if self.rank_table is None:
            raise UnknownNameError(f"{key!r}: not among the stored values and no rank table to compute it from")
        values, _ = compute_values(self.rank_table, [metric], sides=[side], rank_types=[rank_type])
        if address not in values:
            raise UnknownNameError(
                f"{key!r} is not defined here (e.g. adjusted/z metrics need num_candidates; "
                f"the 'expected' rank type exists only for the arithmetic-mean and geometric-mean families)"
            )
        self._values[address] = values[address]
        return values[address]

    def __getitem__(self, key: str) -> float:
        return self.get_metric(key)

    @property
    def sides(self) -> list[str]:
        return sorted({s for s, _, _ in self._values}, key=SIDES.index)

    # ------------------------------------------------------------------ inference
    def p_value(self, key: str, *, method: str = "auto"):
        """One-sided p-value of the value ``key`` names against chance (ranks independent and
        uniform on 1..Cᵢ): :class:`~kgeval.significance.pvalues.PValue` with ``value``, ``log10``,
        ``method`` (exact Poisson-binomial for hits@k, exact convolution for MR at moderate
        sizes, else the normal approximation through the z-score) and ``z``.

        ``key`` like ``"both.realistic.mrr"`` or ``"tail.pessimistic.hits@10"``; an adjusted or z
        variant gives its base metric's p-value. ``method``: ``"auto"``, ``"exact"``, ``"normal"``.
        """
        return p_value(self, key, method)

    def confidence_interval(self, key: str, confidence: float = 0.95, method: str = "bca",
                            num_resamples: int = 10_000, seed: int | None = None):
        """Bootstrap confidence interval ``(low, high)`` of the value ``key`` names, resampling
        evaluation triples (head and tail task together; weights respected) with
        ``scipy.stats.bootstrap``. ``method``: ``"bca"``, ``"percentile"`` or ``"normal"``;
        deterministic for a given ``seed``. See :mod:`kgeval.significance.bootstrap`."""
        from ..significance.bootstrap import confidence_interval

        return confidence_interval(self, key, confidence, method, num_resamples, seed)

    def cached_p_value(self, key: str):
        """:meth:`p_value` (method ``"auto"``), computed once per key."""
        if key not in self._p_values:
            self._p_values[key] = self.p_value(key)
        return self._p_values[key]

    # ------------------------------------------------------------------ export
    def to_flat_dict(self, *, p_values: bool = False) -> dict[str, float]:
        """Every value by flat key (``side.rank_type.key``), plus the extra values.

        Parameters
        ----------
        p_values : bool
            Also the p-values against chance of the headline metrics, ``<side>.realistic.p_<key>``
            and ``log10_p_<key>`` (:func:`kgeval.results.inference.flat_p_values`: exact for
            unweighted hits@k and MR where tractable, as :meth:`p_value` gives them). Off by default:
            they cost ~10x the values on a large table (at 40,932 tasks the Poisson-binomial tails
            of hits@k alone take seconds). Any one is also :meth:`p_value`, or ``results["p_mrr"]``.

        Returns
        -------
        dict
            ``{flat key: value}``; a loaded result also carries the p-values it was saved with.

        Examples
        --------
        >>> from kgeval import Results
        >>> r = Results.from_ranks([1, 2, 4], num_candidates=[10, 10, 10])
        >>> round(r.to_flat_dict()["both.realistic.hits_at_1"], 4)
        0.3333
        >>> "both.realistic.p_hits_at_1" in r.to_flat_dict(p_values=True)
        True
        """
        out = {flat_key(s, t, k): v for s, t, k, v in self._entries(p_values)}
        out.update(self.extra)
        return out

    def _entries(self, p_values: bool = False):
        """``(side, rank_type, key, value)`` of every value (and of the flat-dict p-values if ``p_values``)."""
        for (side, rt, key), v in self._values.items():
            yield side, rt, key, v
        if p_values:
            for fk, v in flat_p_values(self).items():
                yield (*fk.split(".", 2), v)

    def to_dict(self, *, p_values: bool = False) -> dict[str, dict[str, dict[str, float]]]:
        """``{side: {rank_type: {key: value}}}``; ``p_values`` as in :meth:`to_flat_dict`."""
        out: dict = {}
        for side, rt, key, v in self._entries(p_values):
            out.setdefault(side, {}).setdefault(rt, {})[key] = v
        return out

    def to_df(self, *, p_values: bool = False):
        """Long-format pandas DataFrame with columns Side, Type, Metric, Value; ``p_values`` as in
        :meth:`to_flat_dict`."""
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover
            raise ImportError(f"to_df needs pandas: {install_hint('pandas', 'pandas')}") from None
        rows = list(self._entries(p_values))
        return pd.DataFrame(rows, columns=["Side", "Type", "Metric", "Value"])

    def to_json(self) -> dict:
        """The JSON document (see :mod:`kgeval.results.io`; non-finite numbers become null on saving)."""
        return _io.to_json(self)

    def save_json(self, path: str | os.PathLike) -> Path:
        return _io.save_json(self, path)

    @classmethod
    def from_json(cls, data: dict, rank_table: RankTable | None = None, *, source: str = "results") -> Results:
        """The inverse of :meth:`to_json`: values, extra values, protocol and null moments."""
        protocol, flat, null = _io.parse(data, source)
        values, extra, saved_p = {}, {}, {}
        for k, v in flat.items():
            parts = k.split(".")
            if len(parts) == 3 and parts[0] in SIDES and parts[1] in ALL_RANK_TYPES:
                try:
                    _metrics.get(parts[2])
                    values[MetricKey(*parts)] = float(v)
                    continue
                except (UnknownNameError, InvalidInputError):
                    pass
                prefix = next((p for p in ("log10_p_", "p_") if parts[2].startswith(p)), None)
                if prefix is not None and _p_value_key(parts[0], parts[1], parts[2][len(prefix):], prefix) == k:
                    saved_p[k] = float(v)  # shown by to_flat_dict(p_values=True), as a fresh result's
                    continue
            extra[k] = v
        self = cls.from_values(values, null_moments=null, protocol=protocol, extra=extra, rank_table=rank_table)
        self._saved_p = saved_p
        return self

    @classmethod
    def load_json(cls, path: str | os.PathLike, rank_table: RankTable | None = None) -> Results:
        """Read a :meth:`save_json` file back (see :meth:`from_json`); pass the rank table to be
        able to compute keys that were not saved."""
        return cls.from_json(_io.read_json(path), rank_table, source=str(path))

    # ------------------------------------------------------------------ views
    def by_relation(
        self, metrics: Sequence[str] = ("mrr", "hits@1", "hits@10", "amri", "count"), *, side: str = "both", rank_type: str = "realistic"
    ) -> dict[int, dict[str, float]]:
        """Per-relation breakdown: ``{relation_id: {metric_key: value}}`` for the chosen side
        and rank type (needs the ``relation`` column the evaluator fills). :meth:`breakdown` with
        ``by="relation"`` gives every relation the full set: interval, null expectation, adjusted index,
        z-score and p-value, per side."""
        table = self._require_table()
        if table.relation is None:
            raise InvalidInputError("the rank table has no relation column (it was not produced by the evaluator)")
        return relation_breakdown(table.select_side(side), [_metrics.get(m) for m in metrics], _rank_type(rank_type))

    def breakdown(self, by="category", *, dataset=None, split: str = "test", train_triples=None, eval_triples=None,
                  relation_labels=None, splits=None, threshold: float = 1.5, quantiles: int = 4,
                  metrics: Sequence[str] = ("mrr", "hits@1", "hits@10"), sides: Sequence[str] | None = None,
                  rank_type: str = "realistic", confidence: float | None = 0.95, num_resamples: int = 1000,
                  seed: int | None = 0):
        """The metrics of groups of tasks, each group with its value, null expectation, adjusted index,
        z-score, p-value against chance and bootstrap interval, per side.

        Every group's numbers are these results' machinery on the group's sub-table of the rank table,
        so a group's expectation, adjusted index and z-score use the group's own candidate counts.

        Parameters
        ----------
        by : str or mapping
            ``"category"``: the relation categories 1-1 / 1-N / N-1 / N-N (Bordes et al., 2013; see
            :func:`kgeval.breakdowns.relation_categories`); ``"frequency"`` / ``"query_frequency"``: the answer
            (query) entity's degree in quantile buckets; ``"relation"``: one group per relation; or
            ``{group name: [relations]}`` (ids or names; the rest is ``"other"``).
        dataset : kgeval.data.Dataset, optional
            The dataset evaluated: its ``splits`` are counted, its ``split`` is the evaluated one, its relation
            names label the groups. Or give the arrays:
        train_triples, eval_triples : array-like of shape (n, 3), optional
            The counted triples, and the evaluated triples (row ``triple_index`` of each task; frequency only).
        relation_labels : sequence of str, optional
            The relations' names by id.
        split : str
            The evaluated split of ``dataset`` (default ``"test"``).
        splits : sequence of str, optional
            The splits of ``dataset`` categories and degrees are counted on (default ``("train",)``).
        threshold : float
            A category side is ``1`` when its mean is below it (default 1.5).
        quantiles : int
            The number of frequency buckets (default 4).
        metrics : sequence of str
            Base metrics (an adjusted or z variant stands for its base; both are reported anyway).
        sides : sequence of str, optional
            ``head``, ``tail``, ``both`` (default: every side present, and both).
        rank_type : str
            ``realistic`` (default), ``optimistic`` or ``pessimistic``.
        confidence : float or None
            The level of the BCa bootstrap intervals; None: no intervals (fast).
        num_resamples, seed
            The bootstrap's resamples (at least ``10 / (1 - confidence)``) and seed.

        Returns
        -------
        kgeval.results.breakdown.Breakdown
            One row per group, side and metric; ``str()`` is the text table with the grouping rule,
            ``to_df()`` / ``to_dict()`` the machine-readable forms.

        Examples
        --------
        >>> import numpy as np
        >>> from kgeval import RankTable, Results
        >>> table = RankTable.from_ranks([1, 3, 2, 9], num_candidates=[10, 10, 40, 40], side="tail",
        ...                              relation=[0, 0, 1, 1], triple_index=[0, 1, 2, 3])
        >>> train = np.array([[0, 0, 1], [0, 0, 2], [3, 1, 4], [5, 1, 4]])  # relation 0: 1-N, 1: N-1
        >>> b = Results(table).breakdown("category", train_triples=train, confidence=None)
        >>> row = b.row("1-N", "mrr")
        >>> row["value"], round(row["expected"], 4)  # (1 + 1/3) / 2, and H_10 / 10 over the group's 10 candidates
        (0.6666666666666666, 0.2929)
        """
        from ..breakdowns import grouping_data
        from .breakdown import breakdown_of, options

        data = grouping_data(dataset=dataset, split=split, train_triples=train_triples, eval_triples=eval_triples,
                             relation_labels=relation_labels, splits=splits, threshold=threshold, quantiles=quantiles)
        opts = options(metrics, sides, rank_type, confidence, num_resamples, seed)
        return breakdown_of(self, by, data, opts)

    def _require_table(self) -> RankTable:
        if self.rank_table is None:
            raise InvalidInputError("these results carry no rank table (loaded from JSON without one)")
        return self.rank_table

    def protocol_diff(self, other) -> list:
        """Every difference between this evaluation's protocol and ``other``'s (Results, a protocol dict):
        :class:`~kgeval.results.protocol_diff.Difference` records (facet, each side's value in words, how its
        effect can be measured); :func:`kgeval.explain` measures the effects.

        Examples
        --------
        >>> from kgeval import Results
        >>> a = Results.from_ranks([1, 2], protocol={"sides": ["head", "tail"], "tie_tolerance": 0.0})
        >>> b = Results.from_ranks([1, 2], protocol={"sides": ["tail"], "tie_tolerance": 0.0})
        >>> [d.describe() for d in a.protocol_diff(b)]
        ['sides: head + tail vs tail']
        """
        from .protocol_diff import headline_rank_type, protocol_diff

        theirs = dict(getattr(other, "protocol", other) or {})
        rank_types = (headline_rank_type(self.protocol),
                      headline_rank_type(theirs, "realistic" if isinstance(other, Results) else None))
        return protocol_diff(self.protocol, theirs, rank_types=rank_types)[0]

    def summary_table(self, metrics: Sequence[str] = HEADLINE, *, rank_type: str | None = None) -> str:
        """A readable text table: one row per metric, one column per side, and the protocol
        (see :func:`kgeval.results.render.metric_table`); ``rank_type`` defaults to :attr:`rank_type`."""
        return metric_table(self, metrics, rank_type=_rank_type(rank_type or self.rank_type))

    def __repr__(self) -> str:
        mrr = self.value("both", "realistic", "inverse_harmonic_mean_rank")
        if mrr is None:
            return f"Results({len(self._values)} values)"
        return f"Results(tasks={self.protocol.get('num_tasks')}, mrr={format_value(mrr)}, sides={self.sides})"
