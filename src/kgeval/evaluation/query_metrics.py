"""Query-level precision@k and recall@k (set retrieval per query, not per task).

For each unique query, e.g. ``(h, r, ?)``, the *relevant* set is its answers in the evaluation
set (``m`` of them); answers known only from ``filter_triples`` are removed from the candidates
entirely, leaving ``N`` candidates (relevant ones included). With ``hits@k`` the number of
relevant candidates among the top ``k``:

    P@k = hits@k / k,        R@k = hits@k / m.

Ties: ``hits@k`` is its *expectation under random tie-breaking*, which is exact: let ``v`` be
the k-th largest candidate score, ``n_gt`` / ``n_eq`` the numbers of candidates scoring above /
equal to ``v`` and ``rel_gt`` / ``rel_eq`` the same counts among relevant candidates. The top
``k`` take all ``n_gt`` items above ``v`` and ``k - n_gt`` of the ``n_eq`` tied ones uniformly at
random, so (hypergeometric mean) ``E[hits@k] = rel_gt + (k - n_gt) * rel_eq / n_eq``. When
``k >= N`` every candidate is in the top k and ``hits@k = m``.

Ties are exact score equality: ``query_metrics_k`` is refused with ``tie_tolerance > 0``
(:class:`~kgeval.errors.InvalidInputError` from :class:`.EvaluationOptions`). The ranks count a
candidate within the tolerance of an answer's score as tied with it, but "within tolerance" is not
transitive, so no ordering of the candidates gives every answer its tolerant rank and the top ``k``
is undefined. Summing each answer's ``P(rank <= k)`` instead can exceed ``k``: scores
``(2.5, 2.5, 2.5, 2, 1.5, 1, 1)`` all relevant, tolerance 1, ``k = 5`` give ``E[hits@5] = 5.43``,
a precision of 1.09; exact comparisons, as before, would silently disagree with the rank table
(one answer at 1.0 and one other candidate at 1.2, tolerance 0.5: expected hits@1 0.5 in the rank
table, recall@1 0.0).

Null model (uniformly random ranking of the ``N`` candidates): ``E[hits@k] = min(k, N) * m / N``,
so ``E[P@k] = min(k, N) * m / (N * k)`` and ``E[R@k] = min(k, N) / N``.

Reported values are arithmetic means over queries (per side, and over both sides' queries):
``{side}.precision_at_{k}``, ``{side}.recall_at_{k}`` and the null model's
``{side}.random_precision_at_{k}``, ``{side}.random_recall_at_{k}`` (called
``expected_precision_at_{k}`` / ``expected_recall_at_{k}`` in earlier versions; "expected" now means
only the expectation over tie-breaking).
"""

from __future__ import annotations

import numpy as np
import torch

from ..ranks import SIDE_NAMES


def expected_hits(
    scores: torch.Tensor,
    rel_rows: torch.Tensor,
    rel_cols: torch.Tensor,
    num_relevant: torch.Tensor,
    num_excluded: torch.Tensor,
    ks,
) -> dict[int, torch.Tensor]:
    """``E[hits@k]`` per query row for each ``k`` in ``ks``.

    ``scores``: ``(q, C)`` with excluded candidates already set to ``-inf`` (and no NaN);
    ``rel_rows``/``rel_cols``: positions of the relevant candidates; ``num_excluded``: the number
    of ``-inf`` entries per row that are not candidates.
    """
    q, c = scores.shape
    kmax = min(max(ks) + 1, c)
    vals = scores.topk(kmax, dim=1).values  # descending
    rel_scores = scores[rel_rows, rel_cols]
    n_cand = c - num_excluded
    m = num_relevant.to(torch.float64)
    out = {}
    for k in ks:
        kk = min(k, kmax)
        v = vals[:, kk - 1]
        # everything scoring above the k-th largest value sits in the first k-1 positions
        n_gt = (vals[:, : kk - 1] > v[:, None]).sum(1)
        n_eq = (vals == v[:, None]).sum(1)
        # the tie block may run past the top-k list: count it on the full row
        full = (vals[:, kmax - 1] == v) & (kmax < c)
        if bool(full.any()):
            rows = full.nonzero().view(-1)
            n_eq[rows] = (scores[rows] == v[rows, None]).sum(1)
        n_eq = n_eq - torch.where(v == float("-inf"), num_excluded, torch.zeros_like(num_excluded))
        rv = v[rel_rows]
        rel_gt = torch.zeros(q, dtype=torch.float64, device=scores.device).index_add_(
            0, rel_rows, (rel_scores > rv).to(torch.float64)
        )
        rel_eq = torch.zeros(q, dtype=torch.float64, device=scores.device).index_add_(
            0, rel_rows, (rel_scores == rv).to(torch.float64)
        )
        hits = rel_gt + (k - n_gt).to(torch.float64) * rel_eq / n_eq.clamp(min=1).to(torch.float64)
        out[k] = torch.where(n_cand <= k, m, hits)
    return out


class QueryMetricAccumulator:
    """Collects per-query ``E[hits@k]``, ``m`` and ``N`` and reports the mean P@k / R@k."""

    def __init__(self, ks):
        self.ks = tuple(int(k) for k in ks)
        self.parts: dict[str, list[dict[str, np.ndarray]]] = {}

    def add(self, side: str, hits: dict[int, torch.Tensor], num_relevant: torch.Tensor, num_candidates: torch.Tensor):
        part = {f"hits{k}": hits[k].cpu().numpy() for k in self.ks}
        part["m"] = num_relevant.cpu().numpy().astype(np.float64)
        part["n"] = num_candidates.cpu().numpy().astype(np.float64)
        self.parts.setdefault(side, []).append(part)

    def to_flat_dict(self) -> dict[str, float]:
        out: dict[str, float] = {}
        cols = {}
        for side, parts in self.parts.items():
            cols[side] = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        if len(cols) > 1:
            cols["both"] = {name: np.concatenate([c[name] for c in cols.values()]) for name in next(iter(cols.values()))}
        for side, c in cols.items():
            m, n = c["m"], c["n"]
            for k in self.ks:
                hits = c[f"hits{k}"]
                null_hits = np.minimum(k, n) * m / n
                out[f"{side}.precision_at_{k}"] = float(np.mean(hits / k))
                out[f"{side}.random_precision_at_{k}"] = float(np.mean(null_hits / k))
                out[f"{side}.recall_at_{k}"] = float(np.mean(hits / m))
                out[f"{side}.random_recall_at_{k}"] = float(np.mean(np.minimum(k, n) / n))
        return out


def add_query_metrics(qacc: QueryMetricAccumulator, side: int, scores, task_q, col, masked, nan_policy: str) -> None:
    """Add the query rows of one batch: relevant answers (the batch's tasks) get their scores back,
    answers known only from the filter sets become ``-inf`` and leave the candidates.

    ``scores``: the batch's ``(q, C)`` rows, with the known answers masked when ``masked`` =
    ``(rows, columns, saved scores)`` is given (then ``scores`` is the evaluator's own tensor).
    """
    dev = scores.device
    nq, ncols = scores.shape
    code = torch.unique(task_q * ncols + col)  # unique (query row, relevant column) pairs
    rel_rows, rel_cols = code // ncols, code % ncols
    num_rel = torch.zeros(nq, dtype=torch.long, device=dev).index_add_(0, rel_rows, torch.ones_like(rel_rows))
    n_excl = torch.zeros(nq, dtype=torch.long, device=dev)
    if masked is not None:
        rows, fcol, saved = masked
        is_rel = torch.isin(rows * ncols + fcol, code)
        scores[rows, fcol] = torch.where(is_rel, saved, torch.full_like(saved, float("-inf")))
        n_excl.index_add_(0, rows, (~is_rel).long())
    if nan_policy == "worst" and bool(torch.isnan(scores).any()):
        scores = torch.nan_to_num(scores, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    hits = expected_hits(scores, rel_rows, rel_cols, num_rel, n_excl, qacc.ks)
    qacc.add(SIDE_NAMES[side], hits, num_rel, ncols - n_excl)
