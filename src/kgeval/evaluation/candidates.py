"""Given negative candidates per task (OGB's ``ogbl-wikikg2`` / ``ogbl-biokg`` protocol).

``kgeval.evaluate(scorer, triples, candidates={"head_neg": H, "tail_neg": T})``: task ``i`` of
a side ranks its true answer against the ``K`` entities in row ``i`` of that side's ``(n, K)``
array (``head_neg`` / ``tail_neg``; ``head`` / ``tail`` are accepted too; sides without an
array are not evaluated)::

    optimistic  = 1 + #{j : score(neg_ij) > s_i}
    pessimistic = optimistic + #{j : score(neg_ij) == s_i},     num_candidates = 1 + K

so adjusted, z and p-value metrics use the right null model unchanged. There is no filtering
in this mode (OGB's negatives are already chosen; ``filter_triples`` must be empty): a
negative equal to the true answer, ids out of range or a wrong shape raise
:class:`~kgeval.errors.InvalidInputError`. OGB's ``Evaluator`` MRR / hits@k equal kgeval's
``realistic`` rank metrics on this table (see :func:`kgeval.metrics.ogb`).

Scoring streams over tasks in batches: the scorer's ``score_tail_candidates`` /
``score_head_candidates`` (``(b, 1 + K)`` scores) when it has them, else full score rows of a
batch sized from the memory budget, gathered at the candidates, so memory never scales with
``n x num_entities``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from .._validation import as_whole_numbers, check_score_tensor
from ..errors import InvalidInputError, NaNScoresError
from ..protocol import EvaluationProtocol, tasks_digest
from ..ranks import SIDE_NAMES, RankTable, Side
from ..triples import as_triples, check_ids
from .batching import default_memory_budget
from .counting import tolerance_bounds
from .inputs import evaluation_device
from .evaluator import EvaluationOutput
from .options import EvaluationOptions
from .scorers import as_scorer, eval_mode

_DEFAULT_SIDES = EvaluationOptions().sides

_KEYS = {"head_neg": Side.HEAD, "head": Side.HEAD, "tail_neg": Side.TAIL, "tail": Side.TAIL}


def evaluate_candidates(scorer, triples, candidates, filter_triples, opts: EvaluationOptions) -> EvaluationOutput:
    """The rank table and protocol of the given-candidates protocol (module docstring), a torch module
    scorer in eval mode meanwhile (:func:`.scorers.eval_mode`)."""
    with eval_mode(scorer):
        return _evaluate_candidates(scorer, triples, candidates, filter_triples, opts)


def _evaluate_candidates(scorer, triples, candidates, filter_triples, opts: EvaluationOptions) -> EvaluationOutput:
    if not _no_known_triples(filter_triples):
        raise InvalidInputError("candidates= ranks against the given negatives only: filter_triples must be empty")
    _refuse_unsupported(opts)
    scorer = as_scorer(scorer)
    ne = int(scorer.num_entities)
    tri = as_triples("triples", triples)
    check_ids("triples", tri, ne, getattr(scorer, "num_relations", None))
    per_side = parse_candidates(candidates, tri, ne)
    given = tuple(SIDE_NAMES[s] for s in per_side)
    if opts.sides != _DEFAULT_SIDES and tuple(sorted(opts.sides)) != tuple(sorted(given)):
        raise InvalidInputError(f"sides={list(opts.sides)} but candidates are given for {list(given)}: in the "
                                "candidates mode the sides are those with a negatives array (leave sides unset)")
    device = evaluation_device(opts, scorer)
    budget = opts.memory_budget if opts.memory_budget is not None else default_memory_budget(device)
    tables = []
    with torch.inference_mode():
        for side, negs in per_side.items():
            better, tied = _count_side(scorer, tri, side, negs, ne, budget, opts.tie_tolerance, opts.nan_policy,
                                       device, opts.batch_size)
            tables.append(RankTable.from_counts(better, tied, np.full(len(tri), negs.shape[1] + 1), side=side,
                                                triple_index=np.arange(len(tri)), relation=tri[:, 1]))
    table = RankTable.concat(tables)
    protocol = EvaluationProtocol(
        sides=tuple(SIDE_NAMES[s] for s in per_side), filtered=False, num_triples=len(tri),
        num_evaluated_triples=len(tri), num_tasks=len(table), num_entities=ne,
        num_relations=getattr(scorer, "num_relations", None), tie_tolerance=opts.tie_tolerance,
        candidates="1 + the given negatives of each task (OGB protocol); unfiltered", device=str(device),
        tasks_sha256=tasks_digest(tri, *per_side.values()))
    return EvaluationOutput(table, protocol)


def _no_known_triples(filter_triples) -> bool:
    """Whether ``filter_triples`` (any form :func:`kgeval.evaluation.evaluate` takes) holds no triple: an
    empty array, tensor or set of them is no filter (``np.zeros((0, 3))`` was refused as one)."""
    from .inputs import _filter_sets

    return all(as_triples(name, arr, allow_empty=True).shape[0] == 0 for name, arr in _filter_sets(filter_triples))


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


def parse_candidates(candidates, triples: np.ndarray, num_entities: int) -> dict[Side, np.ndarray]:
    """``{side: (n, K) int64}`` from a mapping of ``head_neg`` / ``tail_neg`` arrays, validated."""
    if not isinstance(candidates, Mapping) or not candidates:
        raise InvalidInputError("candidates must be a dict like {'head_neg': (n, K) ids, 'tail_neg': (n, K) ids}")
    unknown = sorted(str(k) for k in candidates if k not in _KEYS)
    if unknown:
        raise InvalidInputError(f"unknown candidates key(s) {unknown}; use head_neg and/or tail_neg")
    out: dict[Side, np.ndarray] = {}
    for key, value in candidates.items():
        side = _KEYS[key]
        if side in out:
            raise InvalidInputError(f"candidates give the {side.label} side twice")
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


def _count_side(scorer, tri: np.ndarray, side: Side, negs: np.ndarray, ne: int, budget: int, tol: float,
                nan_policy: str = "raise", device: torch.device = torch.device("cpu"), batch_size: int | None = None):
    """``(#better, #tied)`` per task, in batches of ``batch_size`` rows (default: from the memory budget).
    ``nan_policy="worst"``: a NaN negative loses to every non-NaN true score; a NaN true score gets the
    worst rank (``better = K``)."""
    per_candidates = getattr(scorer, "score_head_candidates" if side == Side.HEAD else "score_tail_candidates", None)
    width = negs.shape[1] + 1 if per_candidates is not None else ne
    step = batch_size or max(1, budget // (8 * width))
    better, tied = np.empty(len(tri), np.int64), np.empty(len(tri), np.int64)
    for lo in range(0, len(tri), step):
        b = torch.as_tensor(tri[lo:lo + step]).to(device)  # ids go to the scorer's device, scores stay there
        h, r, t = b[:, 0], b[:, 1], b[:, 2]
        answers = h if side == Side.HEAD else t
        cand = torch.cat([answers[:, None], torch.as_tensor(negs[lo:lo + step]).to(device)], dim=1)
        if per_candidates is not None:
            scores = per_candidates(r, t, cand) if side == Side.HEAD else per_candidates(h, r, cand)
            check_score_tensor(f"scorer.score_{side.label}_candidates", scores, tuple(cand.shape))
        else:
            rows = torch.as_tensor(scorer.score_heads(r, t) if side == Side.HEAD else scorer.score_tails(h, r))
            check_score_tensor(f"scorer.score_{side.label}s", rows, (len(cand), ne))
            scores = rows.gather(1, cand.to(rows.device))
        # counted where the scores live (a GPU scorer's scores never cross to the host; only counts do)
        scores = scores.detach()
        if scores.dtype not in (torch.float32, torch.float64):
            scores = scores.float()
        nan = torch.isnan(scores)
        if nan_policy == "raise" and bool(nan.any()):
            i = int(nan.any(dim=1).nonzero()[0, 0]) + lo
            raise NaNScoresError(f"the scorer returned NaN for a candidate of {side.label} task {i} "
                                    "(nan_policy='worst' ranks NaN last)")
        s, neg = scores[:, :1], scores[:, 1:]
        # comparisons with NaN are False: NaN negatives never beat or tie; thresholds in float64 as in
        # the full ranking (counting.tolerance_bounds)
        upper, lower = tolerance_bounds(s, tol)
        b_ = (neg > upper).sum(1)
        t_ = ((neg >= lower) & (neg <= upper)).sum(1)
        worst = nan[:, 0]  # NaN true score: every negative is better
        better[lo:lo + step] = torch.where(worst, neg.shape[1], b_).cpu().numpy()
        tied[lo:lo + step] = torch.where(worst, 0, t_).cpu().numpy()
    return better, tied
