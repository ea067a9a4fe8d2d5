"""True scores predicted from the rounding of a float32 CPU matrix product, instead of scored.

Chunked ranking (:func:`.full._rank_chunks`) needs every task's true score before the batch's
chunks are counted. Scoring the batch against its answer columns (:func:`.full.answer_scores`)
costs ~#rows / #columns of the batch's work, on the calling thread while the other walkers wait:
measured 22 ms of a 0.88 s evaluation at 10^5 entities (dim 64, 2 cores), ~10% of the products at
10^4.

When a model's scores are a plain product ``q @ C.T`` (DistMult, ComplEx, TuckER's tails:
:meth:`kgeval.models.base.PreparedQueries.product`), each score is a dot product whose float32
rounding is fixed by the order of the BLAS kernel's fused multiply-adds. On x86 MKL (2024.2,
AVX-512; measured with torch 2.13) each entry is one chain over ``k = 0 .. d-1`` for ``d <= 192``,
and for wider ``d`` chains of ``b`` terms whose sums are added (``d`` = 200: b = 100; 256: 128;
400 and 1000: 192), the same for every block shape of the evaluator tried (1,024 x 1,024,
4,096 x 256, 209 x 10^4, 1,024 x 4,096, 50 x 300) on one and two threads:

    s = ((a_0 + a_1) + a_2) + ...,   a_m = fma(q_k, c_k, ... fma(q_{mb}, c_{mb}, 0) ...),  mb <= k < (m+1) b

:func:`chain_length` finds ``b`` for a width ``d`` once per process, by comparing candidates with
``torch.matmul`` on a random sample (None when none reproduces it: another BLAS or CPU; then the
answer columns are scored as before). :func:`.count_kernel.chain_dots` computes the chains.

A prediction is still a guess: pass 2 reads every answer's in-batch score and re-ranks any task
whose value differs (exact either way), and a batch in which more than ``1 / MISS_RATE`` of the
tasks differ turns prediction off for the rest of the evaluation.
``KGEVAL_PREDICT_TRUE=0`` turns it off altogether.

Measured (2-core box, DistMult): at 10^5 entities, dim 64, ~3% of the evaluation saved; with no
pass-1 products, rows of 4,097-16,384 entities are chunked instead of scored whole
(:func:`.full.plan_batches`): 14,541 entities (FB15k-237-sized) dim 200 1.42-1.48x -> 1.10-1.13x
the matmul floor, dim 64 1.89-1.94x -> 1.23-1.32x; FB15k-237 itself 1.14-1.17 s -> 1.04-1.09 s.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import torch

from .._threads import env_switch, torch_threads
from .count_kernel import chain_dots, kernel_ready

__all__ = ["chain_length", "predicted_scores", "predictable", "enabled", "MISS_RATE", "MIN_ROWS"]

#: a batch with more than 1 in MISS_RATE of its tasks mispredicted stops prediction (each miss
#: re-ranks its query: a few misses cost little, a BLAS rounding another way would double the work)
MISS_RATE = 200

#: products of fewer query rows than this are never predicted: MKL rounds them another way (measured with
#: torch.mm against the rows of a 400-row product, dim 16-200, 1-8 threads: 1-3, 5-7 and 9-11 rows differ,
#: 12 and more never), so a side's small remainder batch missed every prediction and turned prediction off
#: for the rest of the evaluation, the other side's batches too
MIN_ROWS = 16

_CHAINS: dict[int, int | None] = {}  # d -> chain length (None: no candidate reproduces the product)
_LOCK = threading.Lock()


def _after_fork_in_child() -> None:  # a fork while another thread calibrated: its lock is gone
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
_SAMPLE = (256, 1024, 4096)  # calibration: query rows, candidate rows, checked pairs


def enabled() -> bool:
    """``KGEVAL_PREDICT_TRUE`` (read at each call): ``1`` (default) or ``0``."""
    return env_switch("KGEVAL_PREDICT_TRUE")


def _candidates(d: int) -> list[int]:
    """Chain lengths to try for width ``d``: one chain, equal splits, then fixed blocks."""
    out = []
    for b in [d, -(-d // 2), -(-d // 3), -(-d // 4), 64, 96, 128, 192, 256, 384, 512]:
        if 1 <= b <= d and b not in out:
            out.append(b)
    return out


def _calibrate(d: int) -> int | None:
    rng = np.random.default_rng(d)
    m, n, k = _SAMPLE
    q = rng.standard_normal((m, d), dtype=np.float32)
    c = rng.standard_normal((n, d), dtype=np.float32)
    rows, cols = rng.integers(0, m, k), rng.integers(0, n, k)
    tq, tc = torch.from_numpy(q), torch.from_numpy(c)
    with torch.inference_mode():
        # the walkers score on one thread, a single walker on all of torch's: both must agree
        products = [torch.matmul(tq, tc.t())]
        with torch_threads(1):
            products.append(torch.matmul(tq, tc.t()))
    wanted = [p.numpy()[rows, cols] for p in products]
    for b in _candidates(d):
        got = chain_dots(q, c, rows, cols, b)
        if got is None:
            return None
        if all(np.array_equal(got, w) for w in wanted):
            return b
    return None


def chain_length(d: int) -> int | None:
    """The chain length ``b`` with which :func:`.count_kernel.chain_dots` reproduces ``torch.matmul``'s
    float32 products of width ``d`` on this machine, or None (no candidate does, or the kernel is not
    loaded). Calibrated once per process and width (~1-50 ms)."""
    if not kernel_ready():
        return None
    with _LOCK:
        if d not in _CHAINS:
            _CHAINS[d] = _calibrate(d)
        return _CHAINS[d]


def predictable(ctx, sc, planning: bool = False) -> bool:
    """Whether :func:`predicted_scores` applies to this side's batches (queried once per side scorer:
    a one-query batch is prepared to see whether its scores are a float32 product with a known chain
    length). The batch planner chunks short rows only then (:func:`.full.plan_batches`), with
    ``planning``: whatever a batch of misses turned off meanwhile (``ctx.predict_true``), so that each
    side is planned as at the start of the evaluation, whether the sides run one after the other or at
    once (:mod:`.side_threads`), and with the counting kernel as it was at the evaluation's start
    (``ctx.kernel``: the prediction needs it)."""
    if not ((ctx.predict_true or planning) and sc.predicts_true) or sc.device.type != "cpu" or sc.prepare is None:
        return False
    if planning and not ctx.kernel:  # as when the evaluation started, not a load finished since
        return False
    if not enabled():
        return False
    known = sc._predictable
    if known is None:
        one = torch.zeros(1, dtype=torch.long, device=sc.device)
        known = _product(sc.prepared(one, one), one) is not None
        sc._predictable = known
    return known


def _product(prepared, ids: torch.Tensor):
    """``(q, C, chain length)``: ``prepared``'s query vectors and the rows of the entities ``ids``
    when the scores are a float32 CPU product with a known chain length, else None."""
    parts = None if prepared is None else prepared.product(ids)
    if parts is None:
        return None
    q, c = (t.detach() for t in parts)
    if q.dtype != torch.float32 or c.dtype != torch.float32 or q.dim() != 2 or c.dim() != 2:
        return None
    if q.device.type != "cpu" or c.device.type != "cpu" or q.shape[1] != c.shape[1]:
        return None
    b = chain_length(int(q.shape[1]))
    return None if b is None else (q, c, b)


def predicted_scores(sc, prepared, task_q: torch.Tensor, col: torch.Tensor) -> torch.Tensor | None:
    """Each task's score ``q[task_q[t]] . C[col[t]]`` predicted from the product's rounding (float32),
    or None where that does not apply: not on the CPU, queries that are not a plain float32 product
    (``prepared.product``), a width without a chain length, tasks whose answer is on another shard."""
    if prepared is None or not sc.predicts_true or sc.device.type != "cpu" or col.dim() != 1 or not enabled():
        return None
    if col.numel() and int(col.min()) < 0:
        return None
    # the batch's answer columns (their rows are gathered once, |U| x d) and each task's position among
    # them: one sort (~20 us for 5,000 tasks where unique + searchsorted took ~130)
    cols, at = torch.unique(col, return_inverse=True)
    found = _product(prepared, cols if sc.allowed is None else sc.allowed[cols])
    if found is None:
        return None
    q, c, b = found
    got = chain_dots(q.contiguous().numpy(), c.contiguous().numpy(), task_q.numpy(), at.numpy(), b)
    return None if got is None else torch.from_numpy(got)
