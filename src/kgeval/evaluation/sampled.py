"""Sampled ranking: each task against its true answer and ``k`` sampled negatives.

Candidates are ``[answer, negative_1, ..., negative_k]`` (see :mod:`.sampling`; padding ``-1``
where fewer negatives exist is excluded from the counts): ``num_candidates = 1 + #negatives``.
They are scored through ``score_*_candidates`` when the scorer has it, else as whole rows
gathered at the candidates (correct, no faster than full ranking). The NaN rule is full ranking's
(:mod:`.counting`): the true score and the candidates count; a known answer, never drawn, never does.
"""

from __future__ import annotations

import numpy as np
import torch

from ..ranks import SIDE_TAIL
from .batching import auto_batch, run_batches
from .context import RunContext, SideResult
from .counting import apply_nan_policy, check_nan
from .scoring import SideScorer

__all__ = ["rank_sampled"]


def rank_sampled(ctx: RunContext, sc: SideScorer, sub: np.ndarray, eval_idx: np.ndarray, negs: np.ndarray,
                 bar) -> SideResult:
    """Counts of every task of one side against its sampled negatives ``negs`` ``(n, k)``."""
    dev = ctx.device
    n, k = negs.shape
    cols = (k + 1) if sc.candidates_method is not None else ctx.num_entities
    batch_size = ctx.options.batch_size or auto_batch(ctx.budget, cols, n)
    res = SideResult()
    t_sub = torch.as_tensor(sub, device=dev)
    t_negs = torch.as_tensor(negs, device=dev)
    nan_policy = ctx.options.nan_policy

    def step(a0: int, a1: int) -> None:
        h, r, t = t_sub[a0:a1, 0], t_sub[a0:a1, 1], t_sub[a0:a1, 2]
        ans, ent = (t, h) if sc.side == SIDE_TAIL else (h, t)
        ng = t_negs[a0:a1]
        valid = ng >= 0
        cand = torch.cat([ans[:, None], torch.where(valid, ng, ans[:, None])], dim=1)
        scores = sc.candidates(ent, r, cand)
        true = scores[:, 0]
        check_nan(nan_policy, sc.side, scores, true, sub[a0:a1], torch.arange(a1 - a0, device=dev))
        # padding is no candidate: NaN counts neither better nor tied (a new tensor, not a write)
        neg = torch.where(valid, scores[:, 1:], torch.full_like(scores[:, 1:], float("nan")))
        better, tied = ctx.counter.pairs(neg, true)
        ncand = 1 + valid.sum(1)
        better, tied = apply_nan_policy(better, tied, true, ncand, nan_policy)
        if ctx.consistency is not None:
            ctx.consistency.check(sc, sub[a0:a1], true, sorted({0, a1 - a0 - 1}))
        res.add(eval_idx[a0:a1], better, tied, ncand)

    run_batches(n, batch_size, step, bar)
    return res
