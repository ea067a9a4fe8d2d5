"""Metric registry: keys (PyKEEN's, with k in every Hits-family key), synonyms, lookup.

``get("mrr")``, ``get("hits@10")``, ``get("h@10")``, ``get("hits_at_10")``,
``get("z_hits_at_3")``, ``get("power_mean_rank", p=2)`` all work, case-insensitively.
Unknown names raise :class:`~kgeval.errors.UnknownNameError` suggesting the closest.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import InvalidInputError, unknown_name
from .base import Metric
from .derived import AdjustedIndex, ExpectationNormalized, ZScore
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

# base metric key -> (factory, synonyms, wrappers). wrappers: which adjustments exist:
# "norm" = M/E, "index" = (M−E)/(opt−E), "z" = z-score.
_BASES: dict[str, tuple[Callable[[], Metric], tuple[str, ...], tuple[str, ...]]] = {
    "arithmetic_mean_rank": (ArithmeticMeanRank, ("mean_rank", "mr"), ("norm", "index", "z")),
    "inverse_arithmetic_mean_rank": (InverseArithmeticMeanRank, ("iamr", "imr", "inverse_mean_rank"), ("index", "z")),
    "geometric_mean_rank": (GeometricMeanRank, ("gmr",), ("norm", "index", "z")),
    "inverse_geometric_mean_rank": (InverseGeometricMeanRank, ("igmr",), ("index", "z")),
    "harmonic_mean_rank": (HarmonicMeanRank, ("hmr",), ("norm", "index", "z")),
    "inverse_harmonic_mean_rank": (InverseHarmonicMeanRank, ("mean_reciprocal_rank", "mrr", "ihmr"), ("index", "z")),
    "median_rank": (MedianRank, ("mdr", "median"), ("index",)),
    "inverse_median_rank": (InverseMedianRank, ("imdr",), ()),
    "standard_deviation": (StandardDeviation, ("rank_std", "std"), ()),
    "variance": (Variance, ("rank_var", "var"), ()),
    "median_absolute_deviation": (MedianAbsoluteDeviation, ("rank_mad", "mad"), ()),
    "count": (Count, ("num_tasks",), ()),
}

# synonyms of the wrappers, following PyKEEN where it has them
_WRAPPER_SYNONYMS = {
    "adjusted_arithmetic_mean_rank": ("adjusted_mean_rank", "amr"),
    "adjusted_arithmetic_mean_rank_index": ("adjusted_mean_rank_index", "amri"),
    "z_arithmetic_mean_rank": ("zamr", "zmr", "z_mean_rank"),
    "adjusted_inverse_arithmetic_mean_rank": ("aiamr",),
    "z_inverse_arithmetic_mean_rank": ("ziamr",),
    "adjusted_geometric_mean_rank": ("agmr",),
    "adjusted_geometric_mean_rank_index": ("agmri",),
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


def _wrap(kind: str, base: Metric) -> Metric:
    m = _WRAP[kind](base)
    m.synonyms = _WRAPPER_SYNONYMS.get(m.key, ())
    return m


def _named(factory, synonyms) -> Metric:
    m = factory()
    m.synonyms = synonyms
    return m


def _static_table() -> dict[str, Callable[[], Metric]]:
    table: dict[str, Callable[[], Metric]] = {}
    for key, (factory, syn, wrappers) in _BASES.items():
        table[key] = lambda f=factory, s=syn: _named(f, s)
        for kind in wrappers:
            probe = _wrap(kind, _named(factory, syn))
            table[probe.key] = lambda kind=kind, f=factory, s=syn: _wrap(kind, _named(f, s))
    return table


_TABLE = _static_table()
_SYNONYMS: dict[str, str] = {}
for _key, _factory in _TABLE.items():
    for _s in _factory().synonyms:
        _SYNONYMS[normalize_name(_s)] = _key

_HITS = re.compile(r"^(adjusted_|z_|a|z)?(?:hits_at_|hits@|hits_|h@|hits|h)(\d+)$")
_POWER = re.compile(r"^(adjusted_|z_)?(?:power_mean_rank_p|pmr_?)(neg)?(\d+(?:_\d+)?)(_index)?$")


def _hits(prefix: str | None, k: int) -> Metric:
    base = HitsAtK(k)
    if not prefix:
        return base
    return _wrap("z" if prefix.startswith("z") else "index", base)


def get(name, **kwargs) -> Metric:
    """Return a metric by key or synonym (case-insensitive).

    Parametrised families: ``hits_at_k`` (``k=``) and ``power_mean_rank`` (``p=``), also as
    ``get("hits@3")`` or ``get("power_mean_rank_p2")``; prefixes ``adjusted_`` / ``z_`` apply.
    A :class:`Metric` instance is returned unchanged.
    """
    if isinstance(name, Metric):
        return name
    if not isinstance(name, str):
        raise InvalidInputError(f"metric name must be a string, got {type(name).__name__}")
    norm = normalize_name(name)
    if norm in ("hits_at_k", "hits", "hits@k", "adjusted_hits_at_k", "z_hits_at_k"):
        prefix = "adjusted_" if norm.startswith("adjusted") else ("z_" if norm.startswith("z_") else None)
        return _hits(prefix, kwargs.get("k", 10))
    if norm in ("power_mean_rank", "adjusted_power_mean_rank_index", "z_power_mean_rank", "pmr"):
        base = PowerMeanRank(kwargs.get("p", 2.0))
        return base if not norm.startswith(("adjusted", "z_")) else _wrap("index" if norm.startswith("adj") else "z", base)
    if kwargs:
        raise InvalidInputError(f"metric {name!r} takes no parameters, got {sorted(kwargs)}")
    key = norm if norm in _TABLE else _SYNONYMS.get(norm)
    if key is not None:
        return _TABLE[key]()
    m = _HITS.match(norm)
    if m:
        prefix, k = m.group(1), int(m.group(2))
        if k < 1:
            raise InvalidInputError(f"hits@k needs k >= 1, got {k}")
        return _hits(prefix, k)
    m = _POWER.match(norm)
    if m:
        prefix, neg, digits, _ = m.groups()
        p = float(digits.replace("_", ".")) * (-1 if neg else 1)
        base = PowerMeanRank(p)
        return base if not prefix else _wrap("index" if prefix == "adjusted_" else "z", base)
    raise unknown_name("metric", name, names(include_synonyms=True))


def names(*, include_synonyms: bool = False) -> list[str]:
    """Keys of all registered metrics (hits with the default k's), optionally with synonyms."""
    out = [m.key for m in default_metrics()]
    out += ["power_mean_rank_p2", "power_mean_rank_pneg0_5"]
    if include_synonyms:
        out += list(_SYNONYMS)
    return sorted(set(out))


def default_metrics(ks=DEFAULT_KS) -> list[Metric]:
    """The default metric set: every base metric, hits@k for ``ks``, and every
    expectation-normalised, adjusted-index and z variant that is defined."""
    out = [f() for f in _TABLE.values()]
    for k in ks:
        base = HitsAtK(k)
        out += [base, _wrap("index", HitsAtK(k)), _wrap("z", HitsAtK(k))]
    return out
