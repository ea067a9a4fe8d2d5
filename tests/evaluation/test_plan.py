"""The batch planner (:func:`kgeval.evaluation.batches.plan_full`) as a table: options, tuning, budget, device
and the scorer's capabilities in, a BatchPlan out (hand-computed from the rules in its docstring), and the
context unchanged."""

from __future__ import annotations

import warnings

import pytest
import torch

from kgeval.evaluation import EvaluationOptions, FunctionScorer, Tuning
from kgeval.evaluation.batches import RunContext
from kgeval.evaluation.counting import Counter
from kgeval.evaluation.batches import BatchPlan, plan_full
from kgeval.evaluation.scoring import SideScorer
from kgeval.models import get_model
from kgeval.ranks import SIDE_TAIL

GIB = 1 << 30


class _RowsOnly:
    """Whole rows only: no entities= (cannot be chunked), no out=."""

    num_relations = 1

    def __init__(self, ne):
        self.num_entities = ne

    def score_tails(self, h, r):
        return torch.zeros(h.shape[0], self.num_entities)

    score_heads = score_tails


def _plan(ne, n_tasks, *, budget=GIB, device="cpu", fused=True, threads=2, model=True, options=None, tuning=None,
          query_metrics=False):
    dev = torch.device(device)
    opts = EvaluationOptions(**(options or {}))
    ctx = RunContext(options=opts, tuning=Tuning(**(tuning or {})), device=dev, num_entities=ne, num_relations=1,
                     num_columns=ne, allowed=None, pos_map=None, budget=budget, counter=Counter(0.0, fused=fused),
                     consistency=None, want_query_metrics=query_metrics, score_threads=threads)
    scorer = get_model("distmult", ne, 1, dim=4).eval() if model == "model" or model is True else \
        (_RowsOnly(ne) if model == "rows" else FunctionScorer(lambda h, r, t: (h + t) * 1.0, ne, num_relations=1))
    sc = SideScorer(scorer, SIDE_TAIL, num_entities=ne, device=torch.device("cpu"), allowed=None, threads=threads)
    plan = plan_full(ctx, sc, n_tasks)
    assert ctx.chunk_used is None and ctx.chunk_redone_queries == 0  # pure: nothing recorded
    return plan


# bytes per whole row of c columns: c * (3 * 4 + 2) + 256 (batches.auto_batch)
CASES = [
    # whole rows in groups: 16 groups x walkers x cpu_block / columns rows per batch
    (dict(ne=1000, n_tasks=5000, tuning={"cpu_block": 10_000}), BatchPlan(320)),
    (dict(ne=1000, n_tasks=5000, tuning={"cpu_block": 10_000}, fused=False), BatchPlan(160)),  # no kernel: 1 walker
    (dict(ne=1000, n_tasks=5000, tuning={"cpu_block": 10_000}, threads=1), BatchPlan(160)),
    (dict(ne=1000, n_tasks=5000, tuning={"cpu_block": 10_000, "workers": 1}), BatchPlan(160)),
    (dict(ne=1000, n_tasks=5000, tuning={"cpu_block": 10_000}, model=False), BatchPlan(160)),  # no out=: 1 walker
    (dict(ne=1000, n_tasks=5000, tuning={"cpu_block": 10_000}, query_metrics=True), BatchPlan(64)),  # one group
    (dict(ne=1000, n_tasks=5000), BatchPlan(5000)),
    # rows wider than cpu_whole_cols: equal row blocks of <= 1,024 rows x aligned 1,024-column chunks, one block a
    # batch by default (FB15k-237's 14,541 entities are chunked), up to row_blocks
    (dict(ne=20_000, n_tasks=5000), BatchPlan(1000, 1024, 1000)),
    (dict(ne=14_541, n_tasks=5000), BatchPlan(1000, 1024, 1000)),
    (dict(ne=14_541, n_tasks=5000, tuning={"cpu_whole_cols": 1 << 14}), BatchPlan(16 * 2 * (1 << 21) // 14_541)),
    (dict(ne=4096, n_tasks=5000), BatchPlan(5000)),  # up to cpu_whole_cols: whole rows
    (dict(ne=20_000, n_tasks=5000, tuning={"row_blocks": 4}), BatchPlan(4000, 1024, 1000)),
    (dict(ne=5000, n_tasks=5000, tuning={"cpu_block_rows": 4096}), BatchPlan(2500, 384, 2500)),
    # explicit sizes are used as given
    (dict(ne=20_000, n_tasks=5000, options={"batch_size": 100}), BatchPlan(100)),
    (dict(ne=1000, n_tasks=5000, options={"entity_chunk_size": 50}), BatchPlan(5000, 50)),
    (dict(ne=1000, n_tasks=5000, options={"entity_chunk_size": 5000}), BatchPlan(5000)),  # wider than a row
    # the budget binds: 2^20 holds 73 whole rows (>= 64: whole), 2^19 holds 36 (chunks of 54 for 512 rows)
    (dict(ne=1000, n_tasks=5000, budget=1 << 20), BatchPlan(73)),
    (dict(ne=1000, n_tasks=5000, budget=1 << 19), BatchPlan(518, 54)),
    # not the CPU: no blocks, one product per batch of what the budget holds
    (dict(ne=20_000, n_tasks=5000, device="cuda"), BatchPlan(GIB // (20_000 * 14 + 256))),
]


@pytest.mark.parametrize("kw, expected", CASES)
def test_plan_table(kw, expected):
    assert _plan(**kw) == expected


def test_a_scorer_without_entities_gets_whole_rows_with_a_warning():
    with pytest.warns(UserWarning, match="entity chunking is impossible"):
        assert _plan(1000, 5000, model="rows", options={"entity_chunk_size": 50}) == BatchPlan(5000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _plan(1000, 5000, options={"entity_chunk_size": 50}) == BatchPlan(5000, 50)
