"""Shared pieces of the preset tests: score tables with ties, near ties, NaN and infinities on nations,
and a port of LibKGE's ranking function (LibKGE does not pip-install next to torch 2.13).

A score table ``S`` of shape ``(entities, relations, entities)`` holds ``score(h, r, t) = S[h, r, t]``;
every tool under test scores through it, so all see the same float32 scores.
"""

from __future__ import annotations

import numpy as np
import torch

from kgeval.evaluation import FunctionScorer

#: the scorers of the tests: plain DistMult scores, many exact ties, near ties, NaN / +-inf candidates
KINDS = ("distmult", "ties", "near_ties", "special")


def score_table(kind: str, num_entities: int, num_relations: int, seed: int = 0, protect=None) -> torch.Tensor:
    """A float32 ``(E, R, E)`` table of ``kind`` (:data:`KINDS`). ``protect``: ``(n, 3)`` triples whose scores
    stay finite in ``special`` (the true answers, where a tool's NaN rule is undefined)."""
    rng = np.random.default_rng(seed)
    dim = 8
    e, r = rng.normal(size=(num_entities, dim)), rng.normal(size=(num_relations, dim))
    s = np.einsum("hd,rd,td->hrt", e, r, e).astype(np.float32)
    if kind in ("ties", "near_ties"):
        s = np.round(s * 2) / 2  # a 0.5 grid: most queries hold exact ties
    if kind == "near_ties":
        # half the scores move by at most 1e-6 (inside LibKGE's isclose: atol 1e-5 + rtol 1e-4 |s|, never
        # within float32 rounding of its edge), a tenth by 1e-2 (outside it): tied for LibKGE, not for the rest
        small = rng.random(s.shape) < 0.5
        s = s + np.where(small, rng.uniform(-1e-6, 1e-6, s.shape), 0.0)
        s = s + np.where(rng.random(s.shape) < 0.1, 1e-2, 0.0)
        s = s.astype(np.float32)
    if kind == "special":
        u = rng.random(s.shape)
        s = np.where(u < 0.05, np.nan, np.where(u < 0.10, np.inf, np.where(u < 0.15, -np.inf, s))).astype(np.float32)
        if protect is not None:
            h, rr, t = np.asarray(protect).T
            s[h, rr, t] = np.nan_to_num(s[h, rr, t], nan=0.5, posinf=0.5, neginf=0.5)
    return torch.from_numpy(np.ascontiguousarray(s, dtype=np.float32))


def scorer_of(table: torch.Tensor) -> FunctionScorer:
    """kgeval's scorer reading ``table``."""
    return FunctionScorer(lambda h, r, t: table[h, r, t], table.shape[0], num_relations=table.shape[1])


def libkge_ranks(table: torch.Tensor, test: np.ndarray, known: np.ndarray, *, atol: float = 1e-5,
                 rtol: float = 1e-4):
    """Port of LibKGE's filtered entity ranking (uma-pi1/kge at 9bca31fefbfc41d48fdc03396acd0cf42eee9dc4,
    ``kge/job/eval_entity_ranking.py``): ``_evaluate`` (labels of known answers +inf, the true answer's
    label 0, ``scores - labels``), ``_get_ranks_and_num_ties`` (lines 571-596: NaN -> -inf,
    ``torch.isclose(scores, true, rtol, atol)`` ties counting the true answer, ``rank = #(greater and not
    close)``) and ``_get_ranks`` (``rounded_mean_rank``: ``rank + num_ties // 2``), 1-based as in its traces.

    ``known``: every filter triple (LibKGE's filter splits and the evaluated split). Returns
    ``{side: (ranks, num_ties, filtered_others)}`` with side 0 = head ``(?, r, t)``, 1 = tail, in ``test``
    order; ``filtered_others``: the known answers besides the true one (they score -inf after filtering).
    """
    out = {}
    known_set = {tuple(x) for x in np.asarray(known).tolist()}
    for side in (0, 1):
        ranks, ties, others = [], [], []
        for h, r, t in np.asarray(test).tolist():
            scores = (table[:, r, t] if side == 0 else table[h, r, :]).clone()
            answer = h if side == 0 else t
            true = scores[answer].clone().view(1)  # score_po / score_sp gathered at the answer
            labels = torch.zeros_like(scores)
            for e in range(scores.shape[0]):
                if ((e, r, t) if side == 0 else (h, r, e)) in known_set:
                    labels[e] = float("inf")
            labels[answer] = 0
            scores = scores - labels
            scores[torch.isnan(scores)] = float("-Inf")
            true[torch.isnan(true)] = float("-Inf")
            is_close = torch.isclose(scores, true.view(-1, 1)[0], rtol=rtol, atol=atol)
            is_greater = scores > true
            num_ties = int(torch.sum(is_close, dtype=torch.long))
            rank = int(torch.sum(is_greater & ~is_close, dtype=torch.long))
            ranks.append(rank + num_ties // 2 + 1)
            ties.append(num_ties)
            others.append(int((labels == float("inf")).sum()))
        out[side] = (np.array(ranks), np.array(ties), np.array(others))
    return out
