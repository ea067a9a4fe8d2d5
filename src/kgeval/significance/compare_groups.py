"""Is model A better than model B *on a group of tasks*? :func:`compare_groups`, the paired comparison
of :func:`~kgeval.significance.compare.compare` on each group of a breakdown.

Every model's rank tables are split by the same grouping (:func:`kgeval.breakdowns.group_tasks`: relation
categories, entity-degree buckets, named relation groups, single relations); each group is compared by
``compare`` on its sub-tables, so a group's row is exactly the comparison of the two models restricted to
that group's tasks. The multiple-testing correction runs over the rows of *all* groups (per level): with
four categories and two metrics, eight tests form one family, so "A beats B on N-1 relations" is not the
luck of having looked at four groups. :func:`verdicts` says it in words.
"""

from __future__ import annotations

import math

from ..breakdowns import Grouping, GroupingData, group_tasks
from ..errors import InvalidInputError
from .align import Model, TaskMismatchError
from .compare import COLUMNS, DEFAULT_METRICS, _models, compare
from .corrections import check_correction, correct

__all__ = ["compare_groups", "verdicts", "GROUP_COLUMNS"]

#: the columns of a grouped comparison: the group, then :data:`~kgeval.significance.compare.COLUMNS`
GROUP_COLUMNS = ("group", *COLUMNS)


def _groupings(models: list[Model], by, data: GroupingData) -> list[list[Grouping]]:
    """The grouping of every rank table of every model; all must have the same groups of the same sizes
    (the same tasks: compare refuses other tasks anyway, this says which group differs)."""
    out = [[group_tasks(t, by, data) for t in m.tables] for m in models]
    ref = out[0][0]
    for m, gs in zip(models, out):
        for g in gs:
            if g.labels != ref.labels or g.sizes() != ref.sizes():
                raise TaskMismatchError(f"{models[0].name!r} and {m.name!r} do not have the same tasks in the groups "
                                        f"of this breakdown ({ref.sizes()} vs {g.sizes()})")
    return out


def compare_groups(results_a, results_b, *more, by, data: GroupingData, metrics=DEFAULT_METRICS,
                   side: str = "both", rank_type: str = "realistic", test: str = "permutation",
                   num_resamples: int = 10_000, seed=None, correction: str | None = "holm", baseline=None,
                   confidence: float = 0.95):
    """The paired comparison of :func:`~kgeval.significance.compare.compare`, one block of rows per group.

    Parameters
    ----------
    results_a, results_b, *more
        The models, as ``compare`` takes them (Results, RankTables, replicate lists, ``(name, model)``).
    by : str or mapping
        The grouping (:func:`kgeval.breakdowns.group_tasks`): ``"category"``, ``"frequency"``,
        ``"query_frequency"``, ``"relation"`` or ``{group name: relations}``.
    data : kgeval.breakdowns.GroupingData
        The counted and evaluated triples, relation names, threshold and buckets
        (:func:`kgeval.breakdowns.grouping_data`).
    metrics, side, rank_type, test, num_resamples, seed, baseline, confidence
        As :func:`~kgeval.significance.compare.compare`, for every group.
    correction : str or None
        ``"holm"`` (default), ``"bh"`` or None, over the rows of all groups together (per level).

    Returns
    -------
    pandas.DataFrame or list of dict
        :data:`GROUP_COLUMNS`: the group, then compare's columns; ``attrs["rule"]`` (a DataFrame) says how
        the groups were made, ``attrs["notes"]`` which groups have no tasks.

    Examples
    --------
    >>> import numpy as np
    >>> from kgeval import RankTable
    >>> from kgeval.breakdowns import GroupingData
    >>> rng = np.random.default_rng(0)
    >>> rel, C = np.repeat([0, 1], 40), np.full(80, 30)
    >>> a = RankTable.from_ranks(rng.integers(1, 31, 80), num_candidates=C, relation=rel)
    >>> b = RankTable.from_ranks(rng.integers(1, 31, 80), num_candidates=C, relation=rel)
    >>> rows = compare_groups(a, b, by={"first": [0]}, data=GroupingData(), metrics=["mrr"], num_resamples=200,
    ...                       seed=0)
    >>> list(rows["group"])
    ['first', 'other']
    """
    correction = check_correction(correction)
    if not isinstance(data, GroupingData):
        raise InvalidInputError(f"data must be a GroupingData (kgeval.breakdowns.grouping_data), got "
                                f"{type(data).__name__}")
    models = _models([results_a, results_b, *more])  # named once, so every group's rows name them alike
    groupings = _groupings(models, by, data)
    ref = groupings[0][0]
    records, empty, unweighted = [], [], []
    for label in ref.labels:
        if not ref.mask(label).any():
            empty.append(label)
            continue
        first = models[0].tables[0]
        if first.weight is not None and not (first.weight[ref.mask(label)] > 0).any():
            unweighted.append(label)  # no weighted mean on the group: nothing to compare (a table refuses it)
            continue
        parts = [Model(m.name, [t.subset(g.mask(label)) for t, g in zip(m.tables, gs)], m.protocol, m.dataset,
                       m.replicated, m.path) for m, gs in zip(models, groupings)]
        table = compare(*parts, metrics=metrics, side=side, rank_type=rank_type, test=test,
                        num_resamples=num_resamples, seed=seed, correction=None, baseline=baseline,
                        confidence=confidence)
        rows = table.to_dict("records") if hasattr(table, "to_dict") else list(table)
        records += [{"group": label, **r} for r in rows]
    for level in ("task", "run"):
        idx = [i for i, r in enumerate(records) if r["level"] == level]
        for i, p in zip(idx, correct([records[i]["p_value"] for i in idx], correction)):
            records[i]["p_corrected"] = float(p)
    notes = [f"no tasks in: {', '.join(empty)}"] if empty else []
    if unweighted:
        notes.append(f"every task has weight 0 in: {', '.join(unweighted)} (not compared)")
    return _table(records, ref.rule, notes)


def _table(records: list[dict], rule: str, notes: list[str]):
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        return records
    df = pd.DataFrame.from_records(records, columns=list(GROUP_COLUMNS))
    df.attrs["rule"], df.attrs["notes"] = rule, notes
    return df


def _p(p) -> str:
    from .._format import format_p

    return "n/a" if p is None or (isinstance(p, float) and math.isnan(p)) else (
        format_p(math.log10(p)) if p > 0 else "0")


def verdicts(table, alpha: float = 0.05) -> list[str]:
    """One sentence per pair of models and metric (task level): on which groups each model is better at the
    corrected ``p < alpha``, and on which neither is.

    Examples
    --------
    >>> rows = [dict(group="N-1", model_a="A", model_b="B", metric="mrr", level="task", difference=0.1,
    ...              higher_is_better=True, p_corrected=0.003),
    ...         dict(group="1-N", model_a="A", model_b="B", metric="mrr", level="task", difference=0.02,
    ...              higher_is_better=True, p_corrected=0.41)]
    >>> verdicts(rows)
    ['mrr: A beats B on N-1 (p = 0.0030); no significant difference on 1-N (p = 0.4100)']
    """
    records = table.to_dict("records") if hasattr(table, "to_dict") else list(table)
    out = []
    keys = list(dict.fromkeys((r["model_a"], r["model_b"], r["metric"]) for r in records if r["level"] == "task"))
    for a, b, metric in keys:
        rows = [r for r in records if (r["model_a"], r["model_b"], r["metric"]) == (a, b, metric)
                and r["level"] == "task"]
        wins: dict[str, list[str]] = {a: [], b: [], "": []}
        for r in rows:
            p = r["p_corrected"]
            significant = p is not None and not math.isnan(p) and p < alpha and r["difference"] != 0
            better_a = (r["difference"] > 0) == bool(r["higher_is_better"])
            wins[(a if better_a else b) if significant else ""].append(f"{r['group']} (p = {_p(p)})")
        parts = [f"{x} beats {y} on {', '.join(wins[x])}" for x, y in ((a, b), (b, a)) if wins[x]]
        if wins[""]:
            parts.append(f"no significant difference on {', '.join(wins[''])}")
        out.append(f"{metric}: " + "; ".join(parts))
    return out
