"""Why do two numbers differ? :func:`explain` compares two evaluations' protocols and measures each
difference's effect on the headline metrics.

Each side is a :class:`~kgeval.Results` (with or without its rank table), a run directory (``kgeval
pipeline -o`` / ``kgeval evaluate -o``), a tool's preset name (``"pykeen"``, ``"libkge"``, ...: the
protocol that tool uses by default) or a published number with its stated protocol
(``{"mrr": 0.355, "protocol": {"rank_type": "rounded_mean", ...}}``).

First the verdict: do both evaluate the same test triples? (``tasks_sha256``, the split hashes of a run,
the triple counts; two evaluations that differ only in dropping the triples with an entity unseen in
training are the same split.) Where they do not, the numbers are not comparable and no effect is
measured. Then every protocol difference (:func:`kgeval.results.protocol_diff.protocol_diff`), and
where a rank table is at hand the effect of each on mrr, mr and hits@1/3/10, one at a time and
together (:func:`kgeval.results.effects.measure_effects`): the rank type and sides from the table, the
unseen-entity drop from the table and the training triples, the filter sets by evaluating the model
again (a run directory's model, or ``model=`` with ``dataset=``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidInputError, unknown_name
from ..presets import DEFAULT, PRESETS
from ..results.effects import HEADLINE_METRICS, RANK_TYPES, State, Step, drop_rows, headline_values, \
    measure_effects, replace_ranks, select_sides, set_rank_type
from ..results.explanation import Explanation
from ..results.protocol_diff import headline_rank_type, protocol_diff, tasks_of

__all__ = ["explain", "PRESET_PROTOCOLS", "Subject"]

def _stated(preset) -> dict[str, Any]:
    """What a preset's protocol states, in the keys of a results' protocol record (:mod:`kgeval.presets` holds each
    tool's defaults with the file and commit they follow)."""
    out: dict[str, Any] = {"rank_type": preset.rank_type, "tie_tolerance": preset.tie_tolerance,
                           "tie_rtol": preset.tie_rtol, "nan_policy": preset.nan_policy, "filtered": preset.filtered,
                           "sides": list(preset.sides), "unseen": {"policy": "dropped" if preset.drop_unseen else "kept"}}
    if preset.candidates == "given":  # OGB's given negatives: 500 per side on its link-prediction datasets
        out["sampling"] = {"num_negatives": 500}
    return out


#: What each tool's default protocol states, for ``explain(results, "libkge")``: :data:`kgeval.presets.PRESETS`
#: in the keys of a protocol record (a facet a tool's record leaves out is "not stated", never a difference).
PRESET_PROTOCOLS: dict[str, dict[str, Any]] = {name: _stated(p) for name, p in PRESETS.items() if name != DEFAULT}


@dataclass
class Subject:
    """One side of an explanation: its name, protocol, rank table and headline values (None where unknown)."""

    name: str
    protocol: dict
    rank_type: str | None
    table: Any = None  # RankTable
    values: dict[str, float] | None = None
    dataset_identity: dict | None = None
    split: str | None = None
    run: Any = None  # a workflow Run: its model and dataset load on demand
    model: Any = None
    dataset: Any = None
    data_dir: Any = None  # where the run's dataset is read from
    _loaded: dict = field(default_factory=dict)

    def model_and_dataset(self):
        """The model and dataset that produced the table (None, None where neither is at hand)."""
        if self.model is None and self.run is not None and "model" not in self._loaded:
            from ..data import get_dataset

            self._loaded["model"] = self.run.load_model()
            self.model = self._loaded["model"]
            if self.dataset is None:
                self.dataset = get_dataset(self.run.config.dataset, drop_unseen=self.run.config.drop_unseen,
                                           data_dir=self.data_dir)
        if isinstance(self.dataset, str):
            from ..data import get_dataset

            self.dataset = get_dataset(self.dataset, data_dir=self.data_dir)
        return self.model, self.dataset


def _subject(item, label: str, metrics: Sequence[str]) -> Subject:
    """A :class:`Subject` from a Results, a run directory, a preset name or a stated protocol."""
    if isinstance(item, Subject):
        return item
    if isinstance(item, (str, os.PathLike)) and os.path.isdir(item):
        from .runs import load_run_results

        run, results = load_run_results(item)
        subject = _from_results(results, Path(item).name, metrics)
        subject.run, subject.split = run, run.config.evaluation.split
        subject.dataset_identity = run.metadata.get("dataset")
        return subject
    if isinstance(item, (str, os.PathLike)) and os.path.isfile(item):
        from ..results import Results  # a results.json (kgeval evaluate -o FILE): values and protocol, no table

        return _from_results(Results.load_json(item), Path(item).name, metrics)
    if isinstance(item, str):
        key = item.strip().lower()
        if key not in PRESET_PROTOCOLS:
            raise unknown_name("preset (or run directory)", item, list(PRESET_PROTOCOLS))
        protocol = dict(PRESET_PROTOCOLS[key], preset=key)
        return Subject(f"preset {key}", protocol, headline_rank_type(protocol))
    if isinstance(item, Mapping):
        return _stated(item, label, metrics)
    if hasattr(item, "protocol") and hasattr(item, "get_metric"):
        return _from_results(item, label, metrics)
    raise InvalidInputError(f"explain: {label} must be Results, a run directory, a preset name "
                            f"({', '.join(PRESET_PROTOCOLS)}) or a dict of stated values and protocol, "
                            f"got {type(item).__name__}")


def _from_results(results, name: str, metrics: Sequence[str]) -> Subject:
    protocol = dict(results.protocol)
    rank_type = headline_rank_type(protocol)
    table = results.rank_table
    if table is not None:
        values = headline_values(table, rank_type, metrics)
    else:
        values = {}
        for m in metrics:
            try:
                values[m] = float(results.get_metric(f"both.{rank_type}.{m}"))
            except Exception:  # noqa: BLE001 - a value a loaded result does not hold is just unknown
                pass
    return Subject(name, protocol, rank_type, table, values or None)


def _stated(item: Mapping, label: str, metrics: Sequence[str]) -> Subject:
    """A published number: ``{"name": ..., "mrr": ..., "protocol": {...}}`` (or the protocol keys inline)."""
    item = dict(item)
    name = str(item.pop("name", label))
    protocol = dict(item.pop("protocol", None) or {})
    values = {}
    for key in list(item):
        if key in metrics or key in HEADLINE_METRICS:
            values[key] = float(item.pop(key))
    protocol.update(item)  # what is left states the protocol (rank_type, sides, ...)
    if isinstance(protocol.get("preset"), str) and protocol["preset"] in PRESET_PROTOCOLS:
        protocol = {**PRESET_PROTOCOLS[protocol["preset"]], **protocol}
    return Subject(name, protocol, headline_rank_type(protocol, None), values=values or None)


# ---------------------------------------------------------------------------- comparability
def comparability(a: Subject, b: Subject) -> tuple[bool | None, str]:
    """``(comparable, why)``: False where the two evaluated other test triples, None where unknown."""
    da, db = a.dataset_identity or {}, b.dataset_identity or {}
    ha, hb = da.get("hashes") or {}, db.get("hashes") or {}
    differ = [s for s in ha if s in hb and ha[s] != hb[s]]
    if differ:
        return False, f"not comparable: different datasets (the {', '.join(differ)} split(s) differ)"
    if a.split and b.split and a.split != b.split:
        return False, f"not comparable: different splits ({a.split} vs {b.split})"
    ta, tb = tasks_of(a.protocol), tasks_of(b.protocol)
    if ta.sha256 and tb.sha256 and ta.sha256 == tb.sha256:
        return True, f"comparable: the same {ta.num_triples or '?'} evaluation triples (tasks_sha256 equal)"
    explained = _unseen_explains(ta, tb)
    if explained:
        return True, explained
    if ta.sha256 and tb.sha256:
        return False, ("not comparable: different test triples (tasks_sha256 differ"
                       + (f"; {ta.num_triples} vs {tb.num_triples} triples)" if ta.num_triples != tb.num_triples
                          else ")"))
    if ta.num_triples is not None and tb.num_triples is not None and ta.num_triples != tb.num_triples:
        return False, f"not comparable: different test triples ({ta.num_triples} vs {tb.num_triples})"
    missing = a if not (ta.sha256 or ta.num_triples) else b
    if missing.protocol.get("preset"):
        return None, f"{missing.name} names a protocol, not test triples: the same triples assumed"
    return None, f"comparability unknown: {missing.name} states no evaluated triples"


def _unseen_explains(ta, tb) -> str | None:
    """Why two triple sets differing only by the unseen-entity drop are one split, or None."""
    if {ta.unseen_policy, tb.unseen_policy} != {"kept", "dropped"}:
        return None
    kept, dropped = (ta, tb) if ta.unseen_policy == "kept" else (tb, ta)
    if None in (kept.num_triples, kept.unseen_triples, dropped.num_triples):
        return None
    if kept.num_triples - kept.unseen_triples != dropped.num_triples:
        return None
    return (f"comparable: the same split up to its {kept.unseen_triples} triple(s) with an entity or relation "
            "unseen in training (kept by one, dropped by the other)")


# ---------------------------------------------------------------------------- steps
def _steps(base: Subject, target: Subject, diffs) -> tuple[list[Step], dict[str, str]]:
    """One step per difference measurable from ``base``'s table (towards ``target``), and why the others are not."""
    steps, why = [], {}
    for d in diffs:
        try:
            step = _STEP_MAKERS.get(d.facet, _not_measurable)(base, target)
        except InvalidInputError as exc:
            step = str(exc)
        if isinstance(step, Step):
            steps.append(step)
        else:
            why[d.facet] = step
    return steps, why


def _not_measurable(base: Subject, target: Subject) -> str:
    return "not measurable from rank tables: it changes the scores compared (evaluate again under the other setting)"


def _rank_type_step(base: Subject, target: Subject):
    if target.rank_type not in RANK_TYPES:
        return f"rank type {target.rank_type!r} is not derivable from optimistic/pessimistic ranks"
    return Step("rank_type", set_rank_type(target.rank_type))


def _sides_step(base: Subject, target: Subject):
    want = [s for s in ("head", "tail") if s in (target.protocol.get("sides") or ())]
    have = base.table.sides
    if not want or not set(want) < set(have):
        return f"{target.name}'s sides are not a part of {base.name}'s: re-derivable only by evaluating again"
    return Step("sides", select_sides(want))


def _unseen_step(base: Subject, target: Subject):
    policy = tasks_of(base.protocol).unseen_policy
    if policy != "kept":
        return f"{base.name} dropped the unseen triples: their ranks are not in its table"
    if tasks_of(base.protocol).unseen_triples == 0:
        return Step("unseen", lambda s: s, "no unseen triple in the table: no effect")
    _, ds = base.model_and_dataset() if base.run is not None else (None, base.dataset)
    found = _evaluated_split(ds, base.protocol)
    if found is None:
        return "needs the training triples: pass dataset= (the dataset evaluated)"
    from ..data.unseen import unseen_mask

    return Step("unseen", drop_rows(unseen_mask(ds.training, found)),
                "rows dropped from the table; the dropped triples stay filtered as known answers")


def _filter_step(base: Subject, target: Subject):
    model, ds = base.model_and_dataset()
    if model is None or ds is None:
        return "needs the model and dataset (a run directory, or model= and dataset=) to evaluate again"
    triples = _evaluated_split(ds, base.protocol)
    if triples is None:
        return f"the dataset's splits are not the triples {base.name} evaluated (tasks_sha256 differs)"
    filters, unfiltered = _filter_sets(ds, target.protocol)
    if filters is None:
        return f"{target.name}'s filter sets are not splits of the dataset"
    table = _evaluate_again(base, model, triples, filters, not unfiltered)
    return Step("filter", replace_ranks(table), "the model evaluated again under the other filter sets")


_STEP_MAKERS = {"rank_type": _rank_type_step, "sides": _sides_step, "unseen": _unseen_step, "filter": _filter_step}

_SPLIT_NAMES = {"training": "training", "train": "training", "validation": "validation", "valid": "validation",
                "testing": "testing", "test": "testing"}


def _evaluated_split(ds, protocol: Mapping) -> np.ndarray | None:
    """The split of ``ds`` whose triples (in order) are the ones ``protocol`` evaluated, None if none is."""
    from ..protocol import tasks_digest

    sha = protocol.get("tasks_sha256")
    if ds is None or not sha:
        return None
    for name in ("testing", "validation"):
        triples = ds.split(name)
        if len(triples) and tasks_digest(triples) == sha:
            return triples
    return None


def _filter_sets(ds, protocol: Mapping):
    """``({name: triples}, unfiltered)`` for the filter sets ``protocol`` names, ``(None, _)`` if one is not a split."""
    if protocol.get("filtered") is False:
        return {}, True
    sets = (protocol.get("filter") or {}).get("sets") or []
    out = {}
    for s in sets:
        name = s.get("name")
        if name == "evaluation":
            continue
        if name not in _SPLIT_NAMES:
            return None, False
        out[_SPLIT_NAMES[name]] = ds.split(_SPLIT_NAMES[name])
    return out, False


def _evaluate_again(base: Subject, model, triples, filters, filtered: bool):
    """``base``'s tasks ranked by ``model`` under other filter sets (its other options kept)."""
    import torch

    from ..evaluation import evaluate
    from ..evaluation.options import EvaluationOptions

    p = base.protocol
    if base.run is not None:
        options = base.run.config.evaluation.options
    else:
        options = EvaluationOptions(sides=tuple(p.get("sides") or ("head", "tail")),
                                    tie_tolerance=float(p.get("tie_tolerance") or 0.0))
    options = options.replace(filtered=filtered, progress=False)
    model.eval()
    with torch.no_grad():
        results = evaluate(model, triples, filter_triples=filters, options=options)
    if results.protocol.get("tasks_sha256") != p.get("tasks_sha256"):
        raise InvalidInputError("evaluating again did not rank the same tasks")
    return results.rank_table


# ---------------------------------------------------------------------------- explain
def explain(a, b, *, model=None, dataset=None, metrics: Sequence[str] = HEADLINE_METRICS,
            data_dir=None) -> Explanation:
    """Why do two evaluations' numbers differ? Every protocol difference and, where measurable, its effect.

    Parameters
    ----------
    a, b
        Each a :class:`~kgeval.Results`, a run directory, a preset name (:data:`PRESET_PROTOCOLS`) or a
        dict ``{"name": ..., "mrr": ..., "protocol": {...}}`` of a published number and its stated protocol
        (``rank_type``, ``sides``, ``filtered``, ``unseen``, ... inline work too).
    model, dataset
        The model that produced the ranks (of both sides: two evaluations of one model) and its dataset (a
        run directory supplies both): needed to measure a filter-set difference (the model ranks the same
        tasks again, checked by ``tasks_sha256``) and, ``dataset`` alone, the drop of triples with unseen
        entities (the training triples tell which they are).
    metrics
        Headline metrics to measure (``mrr``, ``mr``, ``hits@k``).
    data_dir
        Where a run's large dataset is read from (as :func:`kgeval.data.get_dataset`).

    Returns
    -------
    Explanation
        ``comparable`` / ``verdict`` first; ``differences`` (each with its facet, values and how it was
        measured); ``effects``: each difference alone (``single``), all together (``joint``), ``interaction`` =
        joint - Σ single, and where both values are known ``total`` = b - a and ``unexplained`` = total - joint.
        ``str()`` is the readable text, ``to_dict()`` the JSON form.

    Examples
    --------
    >>> import numpy as np, kgeval
    >>> table = kgeval.RankTable.from_ranks(optimistic=[1, 2, 5], pessimistic=[4, 2, 5], side=["head", "tail", "tail"])
    >>> ours = kgeval.Results(table, protocol={"sides": ["head", "tail"], "tie_tolerance": 0.0})
    >>> e = explain(ours, "libkge")
    >>> [d.facet for d in e.differences]
    ['rank_type', 'ties']
    >>> round(e.effects.single["rank_type"]["mrr"], 4)  # task 1: realistic 1/2.5 -> rounded mean 1/(1 + 4 // 2)
    -0.0222
    """
    metrics = tuple(metrics)
    sa, sb = _subject(a, "A", metrics), _subject(b, "B", metrics)
    for side in (sa, sb):  # the ranks of both sides are the one model's (checked by tasks_sha256 when used)
        side.model = side.model if model is None else model
        side.dataset = side.dataset if dataset is None else dataset
        side.data_dir = data_dir
    comparable, verdict = comparability(sa, sb)
    diffs, unknown = protocol_diff(sa.protocol, sb.protocol, rank_types=(sa.rank_type, sb.rank_type))
    out = Explanation(sa.name, sb.name, comparable, verdict, diffs, unknown, sa.values, sb.values, metrics)
    if comparable is False or not diffs:
        return out
    base, target, flipped = _base(sa, sb)
    if base is None:
        out.not_measured = {d.facet: "no rank table at hand" for d in diffs}
        return out
    steps, out.not_measured = _steps(base, target, diffs)
    effects = measure_effects(State(base.table, base.rank_type or "realistic"), steps, metrics, target.values)
    out.effects = effects.negated(sa.values or {}) if flipped else effects
    out.measured_from = base.name
    return out


def _base(a: Subject, b: Subject):
    """The side whose table the differences are applied to: ``a``, unless only ``b`` can be (``b`` has a table
    and ``a`` has none, or ``a`` dropped unseen triples that ``b`` kept); flipped effects are negated."""
    pa, pb = tasks_of(a.protocol).unseen_policy, tasks_of(b.protocol).unseen_policy
    if b.table is not None and (a.table is None or (pa == "dropped" and pb == "kept")):
        return b, a, True
    if a.table is not None:
        return a, b, False
    return None, None, False
