"""OGB's link-prediction ``Evaluator`` numbers (``ogb/linkproppred/evaluate.py``, ``_eval_mrr``) from a rank table.

OGB ranks each positive against its negatives as::

    optimistic_rank  = #{neg >  pos},   pessimistic_rank = #{neg >= pos}
    ranking          = 0.5 * (optimistic_rank + pessimistic_rank) + 1
    mrr = mean(1 / ranking),   hits@k = mean(ranking <= k)

``ranking`` is kgeval's ``realistic`` rank, ``(optimistic + pessimistic) / 2`` with kgeval's
1-based ranks, so OGB's MRR / hits@k are the unweighted ``realistic``
``inverse_harmonic_mean_rank`` / ``hits_at_k`` over all tasks (both sides pooled, as OGB pools
its head- and tail-batch lists). OGB computes in float32; these are float64, so they agree to
float32 rounding (~1e-7 relative).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import numpy as np

from ..errors import InvalidInputError


def ogb_metrics(ranks, ks=(1, 3, 10)) -> dict[str, float]:
    """``{"mrr": ..., "hits@1": ..., "hits@3": ..., "hits@10": ...}`` of a :class:`~kgeval.ranks.RankTable`
    or :class:`~kgeval.Results` (e.g. from ``kgeval.evaluate(..., candidates=...)``), OGB's way."""
    table = getattr(ranks, "rank_table", ranks)
    if not hasattr(table, "ranks"):
        raise InvalidInputError(f"ogb_metrics needs a RankTable or Results, got {type(ranks).__name__}")
    if len(table) == 0:
        raise InvalidInputError("ogb_metrics needs at least one ranking task")
    ks = _check_ks(ks)
    ranking = np.asarray(table.ranks("realistic"), dtype=np.float64)
    out = {"mrr": float(np.mean(1.0 / ranking))}
    for k in ks:
        out[f"hits@{k}"] = float(np.mean(ranking <= k))
    return out


def _check_ks(ks) -> list[int]:
    """``ks`` as whole numbers >= 1 (one k alone is allowed): ``int(2.5)`` once labelled hits@2.5 as hits@2."""
    from .._validation import check_positive_int

    if isinstance(ks, (numbers.Integral, np.integer)) and not isinstance(ks, (bool, np.bool_)):
        ks = (ks,)
    elif isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise InvalidInputError(f"ks must be whole numbers >= 1, got {ks!r}")
    return [check_positive_int(f"ks[{i}]", k) for i, k in enumerate(ks)]
