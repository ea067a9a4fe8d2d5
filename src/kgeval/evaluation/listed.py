"""Ranking against listed candidates: sampled negatives and given candidates, one driver.

Task ``i`` ranks its true answer against the entities in row ``i`` of an ``(n, K)`` id array (``-1``:
padding): ``optimistic = 1 + #{j : score(c_ij) > s_i}``, ``pessimistic = optimistic + #{j : score(c_ij)
== s_i}``, ``num_candidates = 1 + #listed``. The rows are either **sampled negatives**
(``num_negatives=k``, :func:`sample_negatives`: uniformly without replacement from the candidate
universe minus every known answer of the query when filtered, the task's own answer otherwise) or
**given candidates** (``candidates={"head_neg": H, "tail_neg": T}``, OGB's protocol, unfiltered;
:func:`parse_candidates`). Both go through :func:`rank_listed` with the contract of full ranking
(output checks, counting rule, NaN policy, out-of-memory batch driver, consistency check); entity
shards through the same driver with their hooks.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import torch

from .._validation import as_whole_numbers
from ..errors import InvalidInputError
from ..protocol import EvaluationProtocol, tasks_digest
from ..ranks import SIDE_NAMES, SIDE_TAIL, RankTable, Side
from ..filtering import FilterIndex
from .batches import Batch, RunContext, SideResult
from .counting import ConsistencyCheck, Counter, apply_nan_policy, check_nan, tie_rule
from .full import ONE_PROCESS, OneProcess
from .inputs import default_memory_budget, prepare_inputs
from .options import EvaluationOptions
from .tuning import Tuning, as_tuning
from .scoring import SideScorer, eval_mode

__all__ = ["sample_negatives", "rank_listed", "evaluate_candidates", "parse_candidates"]

_KEYS = {"head_neg": Side.HEAD, "head": Side.HEAD, "tail_neg": Side.TAIL, "tail": Side.TAIL}


def sample_negatives(keys: np.ndarray, answers: np.ndarray, *, num_negatives: int, seed: int, side: int,
                     universe: np.ndarray, index: FilterIndex | None) -> tuple[np.ndarray, np.ndarray]:
    """Sampled negatives of each task, drawn in task order (independent of the batch size and of the other
    sides) without materialising the allowed set: with the excluded universe positions ``x_0 < x_1 < ...``
    and ``y_j = x_j - j``, the ``i``-th allowed position is ``i + #{j : y_j <= i}``.

    Parameters
    ----------
    keys, answers:
        query key and true answer of each task.
    num_negatives, seed, side:
        negatives per task; the generator is ``default_rng([seed, side])``.
    universe:
        sorted allowed entity ids.
    index:
        known answers per key; None (unfiltered) excludes only the task's own answer.

    Returns
    -------
    ``(negatives, counts)``: ``negatives`` is ``(n, min(num_negatives, #universe))`` int64 padded
    with -1 where fewer entities are available, ``counts[i]`` the number drawn for task ``i``.

    Examples
    --------
    >>> import numpy as np
    >>> negs, counts = sample_negatives(np.array([0]), np.array([2]), num_negatives=5, seed=0, side=1,
    ...                                 universe=np.arange(4), index=None)
    >>> sorted(negs[0].tolist()), counts.tolist()
    ([-1, 0, 1, 3], [3])
    """
    rng = np.random.default_rng([int(seed), int(side)])
    n, u = keys.shape[0], universe.shape[0]
    # no task can have more negatives than candidates: cap before allocating (n, k), so a huge
    # num_negatives costs nothing extra (the draws are the same: each task draws min(k, available))
    k = max(1, min(int(num_negatives), u))
    out = np.full((n, k), -1, dtype=np.int64)
    counts = np.zeros(n, dtype=np.int64)
    cache: dict[int, np.ndarray] = {}
    for i in range(n):
        key = int(keys[i])
        y = cache.get(key) if index is not None else None
        if y is None:
            excl = index.answers_of(key) if index is not None else np.asarray([answers[i]], dtype=np.int64)
            pos = np.searchsorted(universe, excl)
            ok = pos < u
            ok[ok] = universe[pos[ok]] == excl[ok]
            x = pos[ok]  # sorted: answers and universe are sorted
            y = x - np.arange(x.shape[0])
            if index is not None:
                cache[key] = y
        m = min(k, u - y.shape[0])
        if m <= 0:
            continue
        idx = rng.choice(u - y.shape[0], size=m, replace=False)
        out[i, :m] = universe[idx + np.searchsorted(y, idx, side="right")]
        counts[i] = m
    return out, counts


def rank_listed(ctx: RunContext, sc: SideScorer, sub: np.ndarray, eval_idx: np.ndarray, negs: np.ndarray,
                bar, red: OneProcess = ONE_PROCESS) -> SideResult:
    """Counts of every task ``sub[i]`` of one side against its listed candidates ``negs[i]`` (``(n, k)``
    entity ids, ``-1`` = padding); ``eval_idx``: the tasks' triple indices; ``red``: the hooks of an
    entity shard (each rank scores the candidates in its slice), or of one process."""
    dev = ctx.device
    n, k = negs.shape
    batch_size = red.listed_batch(ctx, sc, n, k)
    res = SideResult()
    t_sub = torch.as_tensor(sub, device=dev)
    t_negs = torch.as_tensor(negs, device=dev)
    nan_policy = ctx.options.nan_policy

    def step(a0: int, a1: int) -> None:
        h, r, t = t_sub[a0:a1, 0], t_sub[a0:a1, 1], t_sub[a0:a1, 2]
        ans, ent = (t, h) if sc.side == SIDE_TAIL else (h, t)
        ng = t_negs[a0:a1]
        valid = ng >= 0
        b = Batch(red.rows(sc, ent), r, torch.arange(a1 - a0, device=dev), red.columns(ctx, sc, ans, None)[0],
                  None, None, None, sub[a0:a1])
        got = {}

        def read(task_q, col):  # scores every row's candidates (an entity shard: those in its slice)
            got["scores"], got["usable"] = red.candidates(ctx, sc, b, ans, ng, valid)
            return got["scores"][task_q, 0]

        true = red.true(sc, b, read)

        def count():
            scores, usable = got.pop("scores"), got.pop("usable")
            # padding and candidates elsewhere hold the answer's score or 0: a NaN there is the true score's
            check_nan(nan_policy, sc.side, scores, true, b.triples, b.task_q)
            neg = torch.where(usable, scores[:, 1:], torch.full_like(scores[:, 1:], float("nan")))
            return (*ctx.counter.pairs(neg, true), None)

        better, tied, _ = red.counts(ctx, sc, b, count, False, true)
        ncand = 1 + valid.sum(1)
        better, tied = apply_nan_policy(better, tied, true, ncand, nan_policy)
        if ctx.consistency is not None:
            red.check(ctx, sc, b, true, None)
        res.add(eval_idx[a0:a1], better, tied, ncand)

    red.run_batches(n, batch_size, step, bar, None)
    return res


def evaluate_candidates(scorer, triples, candidates, filter_triples, opts: EvaluationOptions,
                        tuning: Tuning | None = None) -> tuple[RankTable, EvaluationProtocol]:
    """The rank table and protocol of the given-candidates protocol (module docstring), a torch
    module scorer in eval mode meanwhile (:func:`.scorers.eval_mode`); ``tuning`` as in
    :func:`kgeval.evaluation.run_evaluation`."""
    tuning = as_tuning(tuning)
    _refuse_unsupported(opts)
    given = _given_sides(candidates)
    if opts.sides != EvaluationOptions().sides and sorted(opts.sides) != sorted(given.values()):
        raise InvalidInputError(
            f"sides={list(opts.sides)} but candidates are given for {sorted(given.values())}: in the candidates "
            "mode the sides are those with a negatives array (leave sides unset)")
    with eval_mode(scorer):
        inp = prepare_inputs(scorer, triples, filter_triples,
                             opts.replace(sides=tuple(sorted(given.values()))))
        if any(arr.shape[0] for _, arr in inp.filter_sets):
            raise InvalidInputError("candidates= ranks against the given negatives only: filter_triples must be empty")
        per_side = parse_candidates(candidates, inp.triples, inp.num_entities)
        ctx = RunContext(
            options=opts, tuning=tuning, device=inp.device, num_entities=inp.num_entities, num_relations=inp.num_relations,
            num_columns=inp.num_entities, allowed=None, pos_map=None,
            budget=opts.memory_budget if opts.memory_budget is not None else default_memory_budget(inp.device),
            counter=Counter(tie_rule(opts)), want_query_metrics=False,
            consistency=ConsistencyCheck(inp.side_codes) if opts.check_consistency else None,
            score_threads=torch.get_num_threads())
        tables, n = [], inp.triples.shape[0]
        with torch.inference_mode():
            for side, negs in per_side.items():
                sc = SideScorer(inp.scorer, side, num_entities=inp.num_entities, device=inp.device, allowed=None,
                                threads=ctx.score_threads)
                res = rank_listed(ctx, sc, inp.triples, np.arange(n), negs, None)
                tables.append(RankTable.from_counts(
                    np.concatenate(res.better), np.concatenate(res.tied), np.concatenate(res.ncand), side=side,
                    triple_index=np.arange(n), relation=inp.triples[:, 1]))
    cc = ctx.consistency
    if cc is not None and cc.mismatches:
        warnings.warn(cc.first_mismatch + f" ({cc.mismatches} of {cc.checked} checked tasks differ)", stacklevel=3)
    table = RankTable.concat(tables)
    protocol = EvaluationProtocol(
        sides=tuple(SIDE_NAMES[s] for s in per_side), filtered=False, num_triples=n, num_evaluated_triples=n,
        num_tasks=len(table), num_entities=inp.num_entities, num_relations=inp.num_relations,
        tie_tolerance=opts.tie_tolerance, tie_rtol=opts.tie_rtol, nan_policy=opts.nan_policy,
        preset=opts.protocol,
        candidates="1 + the given negatives of each task (OGB protocol); unfiltered",
        consistency_checked=None if cc is None else cc.checked,
        consistency_mismatches=None if cc is None else cc.mismatches,
        device=str(inp.device), tasks_sha256=tasks_digest(inp.triples, *per_side.values()))
    return table, protocol


def _refuse_unsupported(opts: EvaluationOptions) -> None:
    """A named error for every option the given-candidates protocol cannot honour (never ignore one silently)."""
    refused = {
        "num_negatives": (opts.num_negatives is not None, "the negatives are given"),
        "restrict_entities": (opts.restrict_entities is not None,
                              "restrict the given negatives yourself (num_candidates = 1 + K per task)"),
        "restrict_relations": (opts.restrict_relations is not None, "pass only the triples (and rows) to evaluate"),
        "macro": (bool(opts.macro), "macro weights are defined for full-ranking queries only"),
        "query_metrics_k": (bool(opts.query_metrics_k), "query-level precision/recall need whole score rows"),
        "distributed": (opts.distributed is not None, "the candidates mode runs in one process"),
    }
    for name, (bad, why) in refused.items():
        if bad:
            raise InvalidInputError(f"candidates= cannot be combined with {name}={getattr(opts, name)!r}: {why}")


def _given_sides(candidates) -> dict[str, str]:
    """``{key: side name}`` of a candidates mapping: a dict, known keys, each side once."""
    if not isinstance(candidates, Mapping) or not candidates:
        raise InvalidInputError("candidates must be a dict like {'head_neg': (n, K) ids, 'tail_neg': (n, K) ids}")
    unknown = sorted(str(k) for k in candidates if k not in _KEYS)
    if unknown:
        raise InvalidInputError(f"unknown candidates key(s) {unknown}; use head_neg and/or tail_neg")
    out: dict[str, str] = {}
    for key in candidates:
        side = _KEYS[key]
        if SIDE_NAMES[side] in out.values():
            raise InvalidInputError(f"candidates give the {side.label} side twice")
        out[key] = SIDE_NAMES[side]
    return out


def parse_candidates(candidates, triples: np.ndarray, num_entities: int) -> dict[Side, np.ndarray]:
    """``{side: (n, K) int64}`` from a mapping of ``head_neg`` / ``tail_neg`` arrays, validated against the
    evaluation ``triples`` (shape, whole ids in range, never the true answer); sides in side order."""
    _given_sides(candidates)
    out: dict[Side, np.ndarray] = {}
    for key, value in candidates.items():
        side = _KEYS[key]
        arr = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
        if arr.ndim != 2 or arr.shape[0] != len(triples) or arr.shape[1] < 1:
            raise InvalidInputError(f"candidates[{key!r}] must have shape (num_triples={len(triples)}, K >= 1), "
                                    f"got {arr.shape}")
        arr = as_whole_numbers(f"candidates[{key!r}]", arr.reshape(-1), minimum=0).reshape(arr.shape).astype(np.int64)
        if int(arr.max()) >= num_entities:
            i, j = np.argwhere(arr >= num_entities)[0]
            raise InvalidInputError(f"candidates[{key!r}][{i}, {j}] = {arr[i, j]} is out of range [0, {num_entities})")
        answers = triples[:, 0 if side == Side.HEAD else 2]
        hit = arr == answers[:, None]
        if hit.any():
            i, j = np.argwhere(hit)[0]
            raise InvalidInputError(f"candidates[{key!r}][{i}, {j}] is the true answer {answers[i]} of triple {i}: "
                                    "the negatives must not contain it")
        out[side] = arr
    return dict(sorted(out.items()))
