"""The effect of protocol differences on the headline metrics, measured on rank tables.

A :class:`State` is a rank table read under one rank type. A :class:`Step` changes one protocol
setting of a state: which rank type is read (any of :data:`RANK_TYPES` comes from a task's optimistic
and pessimistic rank), which tasks count (one side only; the triples with an entity unseen in training
dropped), or each task's ranks (the same tasks ranked again under other filter sets, joined on
``(triple_index, side)``). Steps touch different things, so they commute: applying all of them in any
order gives the same state.

:func:`measure_effects` applies each step alone (its *single effect*: metric after minus before), all of
them together (the *joint effect*), and reports the *interaction* = joint - sum of single effects: the
part no single difference explains alone (e.g. the rank type's effect is larger on the tasks that other
filter sets push down). Where the other side's own values are known, the *total* difference is theirs
minus the base's, and *unexplained* = total - joint is what no measured step accounts for (a
difference whose effect is not measurable, or a step that re-derives the other protocol only
approximately).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidInputError, unknown_name
from ..ranks import RankTable

__all__ = ["RANK_TYPES", "HEADLINE_METRICS", "State", "Step", "Effects", "headline_values", "measure_effects",
           "rank_array", "select_sides", "drop_rows", "replace_ranks", "set_rank_type"]

#: rank types a table gives: LibKGE's ``rounded_mean`` = optimistic + floor((pessimistic - optimistic + 1) / 2)
RANK_TYPES = ("optimistic", "pessimistic", "realistic", "rounded_mean", "expected")
#: the headline metrics an explanation measures
HEADLINE_METRICS = ("mrr", "mr", "hits@1", "hits@3", "hits@10")
_METRIC_NAMES = {"mrr": "inverse_harmonic_mean_rank", "mr": "arithmetic_mean_rank"}


def rank_array(table: RankTable, rank_type: str) -> np.ndarray:
    """The float64 rank of every task under ``rank_type`` (not ``expected``, which is no single rank).

    ``rounded_mean`` is LibKGE's ``rounded_mean_rank``: with ``g`` = #candidates scoring better and ``t`` =
    #candidates tying with the true answer, the answer included, its 0-based rank is ``g + t // 2``,
    i.e. 1-based ``optimistic + (pessimistic - optimistic + 1) // 2``.
    """
    lo, hi = table.optimistic, table.pessimistic
    if rank_type == "optimistic":
        return lo.astype(np.float64)
    if rank_type == "pessimistic":
        return hi.astype(np.float64)
    if rank_type == "realistic":
        return 0.5 * (lo.astype(np.float64) + hi)
    if rank_type == "rounded_mean":
        return (lo + (hi - lo + 1) // 2).astype(np.float64)
    raise unknown_name("rank type", rank_type, RANK_TYPES[:4])


def headline_values(table: RankTable, rank_type: str, metrics: Sequence[str] = HEADLINE_METRICS) -> dict[str, float]:
    """Each of ``metrics`` (``mrr``, ``mr``, ``hits@k``) of ``table`` (all its tasks) under ``rank_type``.

    Parameters
    ----------
    table : RankTable
        The tasks (their weights respected).
    rank_type : str
        One of :data:`RANK_TYPES`; ``expected`` is the exact expectation over uniformly random tie-breaking.
    metrics : sequence of str
        Headline metric names.

    Returns
    -------
    dict
        ``{metric: value}``: ``mrr`` = Σ wᵢ / rᵢ, ``mr`` = Σ wᵢ rᵢ, ``hits@k`` = Σ wᵢ [rᵢ ≤ k], weights normalised.

    Examples
    --------
    >>> t = RankTable.from_ranks(optimistic=[1, 1], pessimistic=[1, 4])
    >>> headline_values(t, "rounded_mean", ["mrr", "hits@1"])  # ranks 1 and 1 + 4 // 2 = 3
    {'mrr': 0.6666666666666666, 'hits@1': 0.5}
    """
    from .. import metrics as _metrics
    from ..metrics.base import check_weights

    w = None if table.weight is None else check_weights(table.weight, len(table))
    ranks = None if rank_type == "expected" else rank_array(table, rank_type)
    out = {}
    for name in metrics:
        metric = _metrics.get(_METRIC_NAMES.get(name, name))
        if ranks is None:
            value = metric._tie_expectation(table.optimistic, table.pessimistic, table.num_candidates, w)
            if value is None:
                raise InvalidInputError(f"{name}: no expectation over random tie-breaking")
        else:
            value = metric._compute(ranks, table.num_candidates, w)
        out[name] = float(value)
    return out


@dataclass(frozen=True)
class State:
    """A rank table read under one rank type."""

    table: RankTable
    rank_type: str

    def values(self, metrics: Sequence[str]) -> dict[str, float]:
        return headline_values(self.table, self.rank_type, metrics)


@dataclass(frozen=True)
class Step:
    """One protocol difference as a change of a :class:`State`; ``note`` says how exact the change is."""

    facet: str
    apply: Callable[[State], State]
    note: str = ""


# ---------------------------------------------------------------------------- steps
def set_rank_type(rank_type: str) -> Callable[[State], State]:
    if rank_type not in RANK_TYPES:
        raise unknown_name("rank type", rank_type, RANK_TYPES)
    return lambda s: State(s.table, rank_type)


def select_sides(sides: Sequence[str]) -> Callable[[State], State]:
    """Keep the tasks of ``sides`` (``head``/``tail``)."""
    from .._validation import Side

    codes = [int(Side.parse(x)) for x in sides]
    return lambda s: State(s.table.subset(np.isin(s.table.side, codes)), s.rank_type)


def drop_rows(triple_mask: np.ndarray) -> Callable[[State], State]:
    """Drop the tasks whose evaluation triple ``triple_mask`` marks (indexed by ``triple_index``)."""
    mask = np.asarray(triple_mask, dtype=bool)

    def apply(s: State) -> State:
        ti = _triple_index(s.table)
        if ti.max(initial=-1) >= mask.size:
            raise InvalidInputError(f"triple_index {int(ti.max())} beyond the {mask.size} evaluation triples")
        return State(s.table.subset(~mask[ti]), s.rank_type)

    return apply


def replace_ranks(other: RankTable) -> Callable[[State], State]:
    """Each task's ranks and candidate count from ``other``, the same tasks ranked under another protocol
    (joined on ``(triple_index, side)``; every task of the state must be in ``other``)."""
    keys = _keys(other)
    order = np.argsort(keys, kind="stable")
    if np.any(keys[order][1:] == keys[order][:-1]):
        raise InvalidInputError("the re-evaluated table repeats a (triple, side) task")

    def apply(s: State) -> State:
        want = _keys(s.table)
        pos = np.searchsorted(keys[order], want)
        pos = np.minimum(pos, keys.size - 1)
        rows = order[pos]
        if np.any(keys[rows] != want):
            raise InvalidInputError("the re-evaluated table lacks tasks of the explained one")
        cols = {c: getattr(s.table, c) for c in RankTable.COLUMNS}
        cols.update(optimistic=other.optimistic[rows], pessimistic=other.pessimistic[rows],
                    num_candidates=None if other.num_candidates is None else other.num_candidates[rows])
        return State(RankTable(**cols), s.rank_type)

    return apply


def _triple_index(table: RankTable) -> np.ndarray:
    ti = table.triple_index
    if ti is None or np.any(ti < 0):
        raise InvalidInputError("the rank table has no triple_index column: its tasks cannot be matched to triples")
    return ti


def _keys(table: RankTable) -> np.ndarray:
    return _triple_index(table).astype(np.int64) * 3 + (table.side.astype(np.int64) + 1)


# ---------------------------------------------------------------------------- measuring
@dataclass
class Effects:
    """Single, joint and interaction effects per metric (``{facet: {metric: value}}`` for the single ones)."""

    metrics: tuple[str, ...]
    base: dict[str, float]
    single: dict[str, dict[str, float]] = field(default_factory=dict)
    joint: dict[str, float] = field(default_factory=dict)
    interaction: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] | None = None
    unexplained: dict[str, float] | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def negated(self, base: dict[str, float]) -> Effects:
        """The same effects seen from the other side (measured from its table, reported from ``base``'s)."""
        neg = lambda d: None if d is None else {k: -v for k, v in d.items()}  # noqa: E731
        return Effects(self.metrics, base, {f: neg(d) for f, d in self.single.items()}, neg(self.joint),
                       neg(self.interaction), neg(self.total), neg(self.unexplained), dict(self.notes))

    def to_dict(self) -> dict:
        return {"metrics": list(self.metrics), "base": self.base, "single": self.single, "joint": self.joint,
                "interaction": self.interaction, "total": self.total, "unexplained": self.unexplained,
                "notes": self.notes}


def measure_effects(base: State, steps: Sequence[Step], metrics: Sequence[str] = HEADLINE_METRICS,
                    target: Mapping[str, float] | None = None) -> Effects:
    """Single, joint and interaction effects of ``steps`` on ``metrics``, starting from ``base``.

    Parameters
    ----------
    base : State
        The rank table the differences are applied to.
    steps : sequence of Step
        One per measurable difference (they commute).
    metrics : sequence of str
        Headline metric names (:func:`headline_values`).
    target : mapping, optional
        The other side's own values: then ``total`` = target - base and ``unexplained`` = total - joint.

    Returns
    -------
    Effects
        ``single[facet][m]`` = m(step(base)) - m(base); ``joint[m]`` = m(all steps(base)) - m(base);
        ``interaction[m]`` = joint - Σ single.

    Examples
    --------
    >>> t = RankTable.from_ranks(optimistic=[1, 2], pessimistic=[3, 2], side=["head", "tail"])
    >>> e = measure_effects(State(t, "realistic"), [Step("rank_type", set_rank_type("pessimistic")),
    ...                                              Step("sides", select_sides(["tail"]))], ["mr"])
    >>> e.single, e.joint, e.interaction
    ({'rank_type': {'mr': 0.5}, 'sides': {'mr': 0.0}}, {'mr': 0.0}, {'mr': -0.5})
    """
    metrics = tuple(metrics)
    v0 = base.values(metrics)
    effects = Effects(metrics, v0, notes={s.facet: s.note for s in steps if s.note})
    state = base
    for step in steps:
        single = step.apply(base).values(metrics)
        effects.single[step.facet] = {m: single[m] - v0[m] for m in metrics}
        state = step.apply(state)
    joint = state.values(metrics)
    effects.joint = {m: joint[m] - v0[m] for m in metrics}
    effects.interaction = {m: effects.joint[m] - sum(d[m] for d in effects.single.values()) for m in metrics}
    if target is not None:
        effects.total = {m: float(target[m]) - v0[m] for m in metrics if m in target}
        effects.unexplained = {m: effects.total[m] - effects.joint[m] for m in effects.total}
    return effects
