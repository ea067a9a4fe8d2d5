"""Every difference between two evaluation protocols, named in words: :func:`protocol_diff`.

A protocol here is the dict of ``results.protocol`` (the layout of
:meth:`kgeval.protocol.EvaluationProtocol.to_dict`), the protocol a tool's preset stands for, or what a
paper states about a published number (any subset of the same keys, plus ``rank_type``). The
comparison reads it generically: the known fields are grouped into *facets* (rank type, ties, filter
sets, sides, unseen entities, candidates, weights, restriction, tasks), and every other key that both
protocols hold with different values is a difference of its own, named by its key. A facet that only
one side states is *unknown*, never a difference: a paper that does not say how it broke ties may have
done it either way.

Each difference says how its effect on the metrics can be measured (:class:`Difference.measurable`):
``"table"`` from one rank table (rank type, sides, dropping unseen triples), ``"model"`` by evaluating
the model again (filter sets), ``"no"`` otherwise (tie tolerance, NaN rule, sampling, restriction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..presets import PRESETS

__all__ = ["Difference", "protocol_diff", "facets", "headline_rank_type", "Tasks", "tasks_of"]

#: rank types whose ranks come from a task's optimistic and pessimistic rank alone
TABLE_RANK_TYPES = ("optimistic", "pessimistic", "realistic", "rounded_mean", "expected")

#: protocol keys that say how the evaluation was computed, never what it computed (device, chunking,
#: the consistency check, derived texts): never a difference
IGNORED = frozenset({
    "device", "entity_chunk_size", "chunk_redone_queries", "consistency_check", "approximate_null_moments",
    "realistic", "expected", "rank_types", "ties", "averaging", "macro_weights", "query_metrics", "num_candidates",
    "realistic_rank", "preset", "preset_source", "headline", "headline_rank_type", "rank_type",
})

#: the keys each facet reads (the rest of a protocol is compared key by key)
_FACET_KEYS = {
    "tasks": ("tasks_sha256", "num_triples", "num_evaluated_triples", "num_tasks", "num_relations"),
    "filter": ("filtered", "filter"),
    "sides": ("sides",),
    "unseen": ("unseen",),
    "ties": ("tie_tolerance", "tie_rtol"),
    "nan": ("nan_policy",),
    "candidates": ("sampling", "candidates", "num_entities"),
    "weights": ("macro", "weighted"),
    "restriction": ("restriction",),
}

#: how each facet's effect can be measured: from a rank table, by evaluating the model again, or not at all
MEASURABLE = {"rank_type": "table", "sides": "table", "unseen": "table", "filter": "model", "ties": "no", "nan": "no",
              "candidates": "no", "weights": "no", "restriction": "no"}


@dataclass(frozen=True)
class Difference:
    """One way two protocols differ: the facet, each side's value (as printed) and how its effect can be measured."""

    facet: str
    a: str
    b: str
    measurable: str = "no"  #: "table", "model" or "no"

    def describe(self) -> str:
        return f"{self.facet}: {self.a} vs {self.b}"

    def to_dict(self) -> dict:
        return {"facet": self.facet, "a": self.a, "b": self.b, "measurable": self.measurable}


@dataclass(frozen=True)
class Tasks:
    """What identifies the evaluated tasks of one side (None: not stated)."""

    sha256: str | None
    num_triples: int | None
    unseen_policy: str | None
    unseen_triples: int | None


def tasks_of(protocol: Mapping) -> Tasks:
    unseen = protocol.get("unseen") if isinstance(protocol.get("unseen"), Mapping) else {}
    return Tasks(protocol.get("tasks_sha256"), protocol.get("num_triples"), unseen.get("policy"),
                 unseen.get("triples"))


def headline_rank_type(protocol: Mapping, default: str | None = "realistic") -> str | None:
    """The rank type a protocol's headline numbers (``mrr``, ``hits@10``) use: ``headline_rank_type`` or
    ``rank_type`` where stated (a preset, a paper), else ``default`` (kgeval's own: realistic)."""
    for key in ("headline_rank_type", "rank_type"):
        value = protocol.get(key)
        if isinstance(value, str) and value:
            return value.strip().lower()
    preset = protocol.get("preset")  # a results' record names its preset, whose table holds the rank type
    if isinstance(preset, str) and preset in PRESETS:
        return PRESETS[preset].rank_type
    return default


def _filter_words(protocol: Mapping) -> str | None:
    filtered = protocol.get("filtered")
    if filtered is None:
        return None
    if not filtered:
        return "unfiltered"
    sets = (protocol.get("filter") or {}).get("sets") if isinstance(protocol.get("filter"), Mapping) else None
    if not sets:
        return "filtered"
    names = [str(s.get("name")) for s in sets if isinstance(s, Mapping) and s.get("name") != "evaluation"]
    return "filtered with " + " + ".join(["the evaluation triples", *names])


def _sides_words(protocol: Mapping) -> str | None:
    sides = protocol.get("sides")
    if not sides:
        return None
    named = [s for s in ("head", "tail") if s in sides]
    return " + ".join(named) if named else "both"


def _unseen_words(protocol: Mapping) -> str | None:
    unseen = protocol.get("unseen")
    if isinstance(unseen, Mapping) and unseen.get("policy"):
        return str(unseen["policy"])
    return None


def _ties_words(protocol: Mapping) -> str | None:
    atol, rtol = protocol.get("tie_tolerance"), protocol.get("tie_rtol")
    if atol is None and rtol is None:
        return None
    atol, rtol = float(atol or 0.0), float(rtol or 0.0)  # a stated tolerance without the other: that one is 0
    if not atol and not rtol:
        return "exact float comparison"
    return f"|s - s_true| <= {atol:g} + {rtol:g} * |s_true|"


def _nan_words(protocol: Mapping) -> str | None:
    value = protocol.get("nan_policy")
    return None if value is None else str(value)


def _candidates_words(protocol: Mapping) -> str | None:
    sampling = protocol.get("sampling")
    if isinstance(sampling, Mapping):
        return f"{sampling.get('num_negatives')} sampled negatives per task (seed {sampling.get('seed')})"
    if "sampling" in protocol or protocol.get("num_entities") is not None:
        n = protocol.get("num_entities")
        return "all entities" + ("" if n is None else f" ({n:,})")
    return None


def _weights_words(protocol: Mapping) -> str | None:
    if "macro" not in protocol and "averaging" not in protocol:
        return None
    macro = protocol.get("averaging") == "macro" or bool(protocol.get("macro"))
    return "macro (1 / #tasks of the query)" if macro else "micro"


def _restriction_words(protocol: Mapping) -> str | None:
    r = protocol.get("restriction")
    if not isinstance(r, Mapping):
        return None
    if r.get("entities") is None and r.get("relations") is None:
        return "none"
    parts = [f"{r[k]} {k}" if isinstance(r.get(k), int) else f"{len(r[k])} {k}" for k in ("relations", "entities")
             if r.get(k) is not None and not isinstance(r.get(k), bool)]
    return "restricted to " + ", ".join(parts)


_WORDS = {"rank_type": headline_rank_type, "filter": _filter_words, "sides": _sides_words,
          "unseen": _unseen_words, "ties": _ties_words, "nan": _nan_words, "candidates": _candidates_words,
          "weights": _weights_words, "restriction": _restriction_words}


def facets(protocol: Mapping) -> dict[str, str | None]:
    """Each facet of ``protocol`` in words (None: not stated)."""
    return {name: (fn(protocol, None) if fn is headline_rank_type else fn(protocol)) for name, fn in _WORDS.items()}


def _same_filtering(a: str, b: str) -> bool:
    """A side that states only "filtered" (no sets) agrees with any filtered protocol."""
    return "filtered" in (a, b) and a.startswith("filtered") and b.startswith("filtered")


def _other_keys(a: Mapping, b: Mapping) -> list[Difference]:
    """Keys outside the facets that both protocols hold with different values (a preset's new fields)."""
    covered = {k for keys in _FACET_KEYS.values() for k in keys} | IGNORED
    out = []
    for key in sorted((set(a) & set(b)) - covered):
        if a[key] is not None and b[key] is not None and a[key] != b[key]:
            out.append(Difference(key, _short(a[key]), _short(b[key])))
    return out


def _short(value) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def protocol_diff(a: Mapping, b: Mapping, *, rank_types: tuple[str | None, str | None] = (None, None)
                  ) -> tuple[list[Difference], list[str]]:
    """The differences between protocols ``a`` and ``b``, and the facets only one of them states.

    Parameters
    ----------
    a, b : Mapping
        Protocol dicts (``results.protocol``, a preset's or a paper's stated protocol).
    rank_types : (str or None, str or None)
        The headline rank type of each side where known otherwise (default: each protocol's
        ``headline_rank_type`` / ``rank_type``, else realistic for a kgeval result that has a rank table).

    Returns
    -------
    (list of Difference, list of str)
        The differences, facets first in a fixed order, then other keys by name; and the names of the
        facets one side states and the other does not.

    Examples
    --------
    >>> a = {"filtered": True, "filter": {"sets": [{"name": "training", "num_triples": 10}]}, "sides": ["head", "tail"]}
    >>> b = {"filtered": True, "filter": {"sets": [{"name": "training", "num_triples": 10},
    ...                                             {"name": "testing", "num_triples": 3}]}, "sides": ["tail"]}
    >>> [d.describe() for d in protocol_diff(a, b)[0]]
    ['filter: filtered with the evaluation triples + training vs filtered with the evaluation triples + training + testing', 'sides: head + tail vs tail']
    """
    fa, fb = facets(a), facets(b)
    fa["rank_type"] = rank_types[0] or fa["rank_type"]
    fb["rank_type"] = rank_types[1] or fb["rank_type"]
    diffs, unknown = [], []
    for name in _WORDS:
        va, vb = fa[name], fb[name]
        if va is None and vb is None:
            continue
        if va is None or vb is None:
            unknown.append(name)
        elif va != vb and not (name == "filter" and _same_filtering(va, vb)):
            diffs.append(Difference(name, va, vb, MEASURABLE.get(name, "no")))
    return diffs + _other_keys(a, b), unknown
