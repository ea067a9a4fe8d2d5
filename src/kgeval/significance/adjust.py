"""Adjust published metric values: how far from chance is a reported MRR, hits@10 or MR?

For a value M of a base metric with null expectation E and variance σ² on the same dataset and
protocol (:func:`~kgeval.significance.null_model.null_model`), :func:`adjust` reports

    adjusted index = (M − E) / (opt − E)   (1 = perfect, 0 = chance; AMRI for MR, AMRR for MRR)
    z              = ±(M − E) / σ          (signed so that larger is better)
    p              = P(M' at least as good as M) under the null model (ranks uniform on 1..Cᵢ)

through the wrappers of :mod:`kgeval.metrics.derived` and the p-value engine of
:mod:`kgeval.significance.pvalues` (exact where tractable, from the candidate histograms).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .._compat import install_hint
from .._validation import Side
from ..errors import InvalidInputError
from ..metrics.derived import AdjustedIndex, DerivedMetric, ZScore
from .null_model import NullModel, null_model
from .pvalues import null_p_value

__all__ = ["adjust", "parse_metric", "COLUMNS"]

COLUMNS = ("metric", "key", "side", "value", "expected_value", "variance", "std", "adjusted_index", "z",
           "p_value", "log10_p_value", "p_method")


def parse_metric(name) -> tuple[object, str | None]:
    """``(base metric, side or None)`` of a user's metric name (``mrr``, ``hits@10``, ``tail.mr``)."""
    from .. import metrics
    from ..keys import parse_key

    if not isinstance(name, str):
        raise InvalidInputError(f"metric names must be strings, got {name!r}")
    side = None
    if "." in name:
        side, _, short = parse_key(name)
    else:
        short = name
    metric = metrics.get(short)
    if isinstance(metric, DerivedMetric):
        raise InvalidInputError(f"metric {name!r} is already adjusted: give the raw value of {metric.base.key}")
    return metric, side


def adjust(dataset, values: Mapping[str, float], split: str = "test", *, side: str = "both", filtered: bool = True,
           filter_validation_when_testing: bool = True, drop_unseen: bool = False, data_dir=None, as_frame=None):
    """Null expectation, adjusted index, z-score and p-value of each reported ``{metric: value}``.

    ``dataset`` is anything :func:`~kgeval.significance.null_model.null_model` takes, or a
    :class:`NullModel`; the other keywords choose its protocol (they must match the one the
    values were measured under). A metric name may carry its own side (``tail.mrr``).
    Returns a DataFrame (columns :data:`COLUMNS`; ``.attrs["protocol"]`` describes the null
    model) when pandas is installed (``as_frame=False``: a list of dicts).

    Examples
    --------
    >>> import kgeval
    >>> table = kgeval.adjust("nations", {"mrr": 0.6}, as_frame=False)
    >>> row = table[0]
    >>> round(row["expected_value"], 4), round(row["adjusted_index"], 4)  # (0.6 - E) / (1 - E)
    (0.3844, 0.3502)
    """
    if not isinstance(values, Mapping) or not values:
        raise InvalidInputError("values must be a non-empty mapping {metric name: reported value}")
    side = side if side == "both" else Side.parse(side).label
    model = dataset if isinstance(dataset, NullModel) else null_model(
        dataset, split, filtered=filtered, filter_validation_when_testing=filter_validation_when_testing,
        drop_unseen=drop_unseen, data_dir=data_dir)
    rows = [_row(model, name, value, side) for name, value in values.items()]
    first: dict[tuple[str, str], str] = {}
    for row in rows:  # 'mrr' and 'MRR' (or inverse_harmonic_mean_rank) were two rows of one metric
        where = (row["side"], row["key"])
        if where in first:
            raise InvalidInputError(f"{row['metric']!r} and {first[where]!r} are the same metric ({row['key']}, "
                                    f"side {row['side']}): give it once")
        first[where] = row["metric"]
    if as_frame is False:
        return rows
    try:
        import pandas as pd
    except ImportError:
        if as_frame:
            raise InvalidInputError(f"as_frame=True needs pandas ({install_hint('pandas', 'pandas')})") from None
        return rows
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame.attrs["protocol"] = describe(model)
    return frame


def describe(model: NullModel) -> str:
    """One line naming the dataset, the protocol and where the counts came from."""
    return f"null model of {model.dataset}: {model.protocol.describe()} (from the {model.source})"


def _row(model: NullModel, name, value, default_side: str) -> dict:
    metric, key_side = parse_metric(name)
    side = key_side or default_side
    value = _check_value(name, value, metric, model.num_candidates(side))
    moments = model.moments(f"{side}.{metric.key}")
    if moments.mean is None or moments.variance is None:
        raise InvalidInputError(f"metric {name!r} ({metric.key}) has no analytic null expectation and variance")
    p = null_p_value(metric, value, model.num_candidates(side))
    return {
        "metric": str(name), "key": metric.key, "side": side, "value": value,
        "expected_value": moments.mean, "variance": moments.variance, "std": math.sqrt(max(moments.variance, 0.0)),
        "adjusted_index": AdjustedIndex(metric).adjust(value, moments) if metric.optimum is not None else None,
        "z": ZScore(metric).adjust(value, moments),
        "p_value": p.value, "log10_p_value": p.log10, "p_method": p.method,
    }


def _check_value(name, value, metric, c: np.ndarray) -> float:
    """A finite number inside the metric's range and attainable with these candidate counts."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidInputError(f"value of {name!r} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value not in metric.value_range:
        raise InvalidInputError(f"value of {name!r} is {value!r}, outside the range {metric.value_range} of {metric.key}")
    # the best and the worst value any ranking can reach on these tasks (all ranks 1, all ranks Cᵢ)
    ends = sorted((metric._compute(np.ones(c.size), c, None), metric._compute(c.astype(np.float64), c, None)))
    slack = 1e-9 * max(1.0, abs(ends[1]))
    if not ends[0] - slack <= value <= ends[1] + slack:
        raise InvalidInputError(f"value of {name!r} is {value!r}, but {metric.key} lies in "
                                f"[{ends[0]:.6g}, {ends[1]:.6g}] on these {c.size} tasks")
    return value
