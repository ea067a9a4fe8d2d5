"""Metric registry: the single source of keys and synonyms, and lookup by name.

Keys are PyKEEN's, with k in every hits-family key. ``get("mrr")``, ``get("hits@10")``,
``get("h@10")``, ``get("hits_at_10")``, ``get("z_hits_at_3")``, ``get("hits_at_k.3")`` (PyKEEN's
``name.k`` form), ``get("power_mean_rank", p=2)`` all work, case-insensitively. Unknown names
raise :class:`~kgeval.errors.UnknownNameError` suggesting the closest.

Metric classes carry only their ``key``; every synonym is declared here, so a synonym that
:attr:`Metric.synonyms` lists always resolves back to that metric.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import InvalidInputError, unknown_name
from .base import Metric
from .derived import AdjustedIndex, ExpectationNormalized, ZScore, wrapper_key
from .means import (
    ArithmeticMeanRank,
    GeometricMeanRank,
    HarmonicMeanRank,
    HitsAtK,
    InverseArithmeticMeanRank,
    InverseGeometricMeanRank,
    InverseHarmonicMeanRank,
    PowerMeanRank,
)
from .order import Count, InverseMedianRank, MedianAbsoluteDeviation, MedianRank, StandardDeviation, Variance

DEFAULT_KS = (1, 3, 5, 10)

# base metric class -> (synonyms, wrappers): which adjustments exist
# ("norm" = M/E, "index" = (M−E)/(opt−E), "z" = z-score)
_BASES: dict[type[Metric], tuple[tuple[str, ...], tuple[str, ...]]] = {
    ArithmeticMeanRank: (("mean_rank", "mr"), ("norm", "index", "z")),
    InverseArithmeticMeanRank: (("iamr", "imr", "inverse_mean_rank"), ("index", "z")),
    GeometricMeanRank: (("gmr",), ("norm", "index", "z")),
    InverseGeometricMeanRank: (("igmr",), ("index", "z")),
    HarmonicMeanRank: (("hmr",), ("norm", "index", "z")),
    InverseHarmonicMeanRank: (("mean_reciprocal_rank", "mrr", "ihmr"), ("index", "z")),
    MedianRank: (("mdr", "median"), ("index",)),
    InverseMedianRank: (("imdr",), ()),
    StandardDeviation: (("rank_std", "std"), ()),
    Variance: (("rank_var", "var"), ()),
    MedianAbsoluteDeviation: (("rank_mad", "mad"), ()),
    Count: (("n", "num_tasks", "rank_count"), ()),
}

# synonyms of the wrappers, following PyKEEN where it has them
_WRAPPER_SYNONYMS = {
    "adjusted_arithmetic_mean_rank": ("adjusted_mean_rank", "amr", "aamr"),
    "adjusted_arithmetic_mean_rank_index": ("adjusted_mean_rank_index", "amri", "aamri"),
    "z_arithmetic_mean_rank": ("zamr", "zmr", "z_mean_rank"),
    "adjusted_inverse_arithmetic_mean_rank": ("aiamr",),
    "z_inverse_arithmetic_mean_rank": ("ziamr",),
    "adjusted_geometric_mean_rank": ("agmr",),
    "adjusted_geometric_mean_rank_index": ("agmri", "gmri"),
    "z_geometric_mean_rank": ("zgmr",),
    "adjusted_inverse_geometric_mean_rank": ("aigmr",),
    "z_inverse_geometric_mean_rank": ("zigmr",),
    "adjusted_harmonic_mean_rank": ("ahmr",),
    "adjusted_harmonic_mean_rank_index": ("ahmri",),
    "z_harmonic_mean_rank": ("zhmr",),
    "adjusted_inverse_harmonic_mean_rank": ("amrr", "aihmr", "adjusted_mrr", "adjusted_mean_reciprocal_rank"),
    "z_inverse_harmonic_mean_rank": ("zmrr", "zihmr", "z_mrr"),
    "adjusted_median_rank_index": ("amdri",),
}

_WRAP = {"norm": ExpectationNormalized, "index": AdjustedIndex, "z": ZScore}


def normalize_name(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


def _static_table() -> dict[str, Callable[[], Metric]]:
    table: dict[str, Callable[[], Metric]] = {}
    for cls, (_, wrappers) in _BASES.items():
        table[cls.key] = cls
        for kind in wrappers:
            table[wrapper_key(kind, cls.key, cls.increasing)] = lambda kind=kind, cls=cls: _WRAP[kind](cls())
    return table


_TABLE = _static_table()
_SYNONYMS_OF: dict[str, tuple[str, ...]] = {cls.key: syn for cls, (syn, _) in _BASES.items()} | _WRAPPER_SYNONYMS
_SYNONYMS: dict[str, str] = {normalize_name(s): key for key, syns in _SYNONYMS_OF.items() for s in syns}


# ---------------------------------------------------------------------------- parametrised families
def _wrapped(prefix: str | None, base: Metric) -> Metric:
    """``adjusted_``/``a`` prefix -> adjusted index, ``z_``/``z`` -> z-score, none -> the base."""
    if not prefix:
        return base
    return _WRAP["z" if prefix.startswith("z") else "index"](base)


def _power(m: re.Match) -> Metric | None:
    """The power-mean family, named as :func:`wrapper_key` names it (the power mean decreases):
    ``adjusted_<key>`` is M / E, ``adjusted_<key>_index`` the adjusted index, ``z_<key>`` the
    z-score; ``_index`` without ``adjusted_`` names nothing (None)."""
    prefix, neg, digits, index = m[1], m[2], m[3], m[4]
    base = PowerMeanRank(float(digits.replace("_", ".")) * (-1 if neg else 1))
    if prefix == "adjusted_":
        return _WRAP["index" if index else "norm"](base)
    if index:
        return None
    return _wrapped(prefix, base)


# (regex, factory(match)) pairs, tried in order after the fixed keys and synonyms; a factory
# returning None refuses the name
_FAMILIES: list[tuple[re.Pattern, Callable[[re.Match], Metric | None]]] = [
    (
        re.compile(r"^(adjusted_|z_|a|z)?(?:hits_at_|hits@|hits_|h@|hits|h)(\d+)$"),
        lambda m: _wrapped(m[1], HitsAtK(int(m[2]))),
    ),
    (
        re.compile(r"^(adjusted_|z_)?(?:power_mean_rank_p|pmr_?)(neg)?(\d+(?:_\d+)?)(_index)?$"),
        _power,
    ),
]
# family names that take a keyword parameter: name -> (parameter, default, factory(value))
_PARAMETRISED: dict[str, tuple[str, float, Callable[[object], Metric]]] = {
    **{n: ("k", 10, lambda k: HitsAtK(k)) for n in ("hits_at_k", "hits", "hits@k", "h@k")},
    **{n: ("k", 10, lambda k: AdjustedIndex(HitsAtK(k))) for n in ("adjusted_hits_at_k", "ahits@k", "ah@k", "ahk")},
    **{n: ("k", 10, lambda k: ZScore(HitsAtK(k))) for n in ("z_hits_at_k", "zhits@k", "zahk")},
    **{n: ("p", 2.0, lambda p: PowerMeanRank(p)) for n in ("power_mean_rank", "pmr")},
    "adjusted_power_mean_rank_index": ("p", 2.0, lambda p: AdjustedIndex(PowerMeanRank(p))),
    "z_power_mean_rank": ("p", 2.0, lambda p: ZScore(PowerMeanRank(p))),
}
# synonyms of family members, derived from their keys (each one resolves through _FAMILIES)
_FAMILY_SYNONYMS: list[tuple[re.Pattern, Callable[[re.Match], tuple[str, ...]]]] = [
    (re.compile(r"^hits_at_(\d+)$"), lambda m: (f"hits@{m[1]}", f"h@{m[1]}")),
    (re.compile(r"^power_mean_rank_p([\w]+)$"), lambda m: (f"pmr_{m[1]}",)),
]
# PyKEEN's "name.k" form: hits_at_k.3, both.best.hits@k.5
_NAME_DOT_K = re.compile(r"^([^.]+)\.(\d+)$")


def synonyms_of(key: str) -> tuple[str, ...]:
    """Every synonym the registry resolves to ``key`` (empty for an unregistered key).

    Examples
    --------
    >>> synonyms_of("inverse_harmonic_mean_rank")
    ('mean_reciprocal_rank', 'mrr', 'ihmr')
    """
    if key in _SYNONYMS_OF:
        return _SYNONYMS_OF[key]
    for pattern, make in _FAMILY_SYNONYMS:
        m = pattern.match(key)
        if m:
            return make(m)
    return ()


Metric._synonyms_of = staticmethod(synonyms_of)  # what Metric.synonyms reports


def get(name, **kwargs) -> Metric:
    """Return a metric by key or synonym (case-insensitive).

    Parametrised families: ``hits_at_k`` (``k=``) and ``power_mean_rank`` (``p=``), also as
    ``get("hits@3")``, ``get("hits_at_k.3")`` (PyKEEN) or ``get("power_mean_rank_p2")``; the
    prefixes ``adjusted_`` / ``z_`` apply. A :class:`Metric` instance is returned unchanged.

    Examples
    --------
    >>> from kgeval import metrics
    >>> mrr = metrics.get("mrr")
    >>> mrr.key
    'inverse_harmonic_mean_rank'
    >>> round(mrr([1, 2, 10], num_candidates=[10, 10, 100]), 4)
    0.5333
    """
    if isinstance(name, Metric):
        return name
    if not isinstance(name, str):
        raise InvalidInputError(f"metric name must be a string, got {type(name).__name__}")
    norm = normalize_name(name)
    dot_k = _NAME_DOT_K.match(norm)
    if dot_k:
        if _PARAMETRISED.get(dot_k[1], ("",))[0] != "k" or kwargs:
            raise unknown_name("metric", name, names(include_synonyms=True))
        norm, kwargs = dot_k[1], {"k": int(dot_k[2])}
    if norm in _PARAMETRISED:
        param, default, make = _PARAMETRISED[norm]
        unexpected = sorted(set(kwargs) - {param})
        if unexpected:
            raise InvalidInputError(f"metric {name!r} takes only {param}=, got {unexpected}")
        return make(kwargs.get(param, default))
    if kwargs:
        raise InvalidInputError(f"metric {name!r} takes no parameters, got {sorted(kwargs)}")
    key = norm if norm in _TABLE else _SYNONYMS.get(norm)
    if key is not None:
        return _TABLE[key]()
    for pattern, make in _FAMILIES:
        m = pattern.match(norm)
        if m:
            metric = make(m)
            if metric is not None:
                return metric
            break
    raise unknown_name("metric", name, names(include_synonyms=True))


def names(*, include_synonyms: bool = False) -> list[str]:
    """Keys of all registered metrics (hits with the default k's, two power means), optionally
    with synonyms.

    Examples
    --------
    >>> "inverse_harmonic_mean_rank" in names(), "mrr" in names(include_synonyms=True)
    (True, True)
    """
    out = [m.key for m in default_metrics()]
    out += [PowerMeanRank(2).key, PowerMeanRank(-0.5).key]
    if include_synonyms:
        out += [s for key in out for s in synonyms_of(key)]
    return sorted(set(out))


def default_metrics(ks=DEFAULT_KS) -> list[Metric]:
    """The default metric set: every base metric, hits@k for ``ks``, and every
    expectation-normalised, adjusted-index and z variant that is defined."""
    out = [f() for f in _TABLE.values()]
    for k in ks:
        out += [HitsAtK(k), AdjustedIndex(HitsAtK(k)), ZScore(HitsAtK(k))]
    return out
