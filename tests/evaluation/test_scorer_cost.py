"""A scorer's declared working memory per score (``score_bytes``) shrinks the planned batches, and
the ranks do not change."""

from __future__ import annotations

import numpy as np
import torch

from kgeval.evaluation import evaluate_ranks
from kgeval.models import DistMultScorer


class Recording(DistMultScorer):
    """DistMult that records the (rows, columns) of every scoring call."""

    def __init__(self, *args, score_bytes: float = 0.0):
        super().__init__(*args)
        self.score_bytes = score_bytes
        self.calls: list[tuple[int, int]] = []

    def score_tails(self, heads, relations, entities=None):
        out = super().score_tails(heads, relations, entities)
        self.calls.append(tuple(out.shape))
        return out

    def score_heads(self, relations, tails, entities=None):
        out = super().score_heads(relations, tails, entities)
        self.calls.append(tuple(out.shape))
        return out


def test_declared_cost_bounds_the_batches():
    rng = np.random.default_rng(0)
    n, budget, cost = 300, 1 << 20, 30.0  # 30 bytes per score: a broadcast over dim 8 (float32, ~1 copy)
    ent, rel = torch.randn(n, 8, generator=torch.Generator().manual_seed(0)), torch.randn(5, 8)
    test = rng.integers(0, [n, 5, n], size=(400, 3))
    plain, costly = Recording(ent, rel), Recording(ent, rel, score_bytes=cost)
    kw = dict(progress=False, memory_budget=budget, check_consistency=False)
    a, b = evaluate_ranks(plain, test, **kw).rank_table, evaluate_ranks(costly, test, **kw).rank_table
    assert np.array_equal(a.optimistic, b.optimistic) and np.array_equal(a.pessimistic, b.pessimistic)
    assert max(r * c for r, c in plain.calls) * cost > budget  # without the declaration: far over budget
    assert max(r * c for r, c in costly.calls) * cost <= budget
