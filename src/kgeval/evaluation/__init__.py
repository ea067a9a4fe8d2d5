"""Filtered link-prediction evaluation: the scorer protocol, the streaming evaluator and its options.

Public: :func:`evaluate`, :func:`evaluate_ranks`, :class:`EvaluationOptions` (every option),
:class:`KnownTriples` (filter sets built once and reused across evaluations), :class:`Tuning`
(internal performance knobs; never changes a rank), :func:`warm_kernel`, the scorer adapters.

This module orchestrates one evaluation: inputs checked (:mod:`.inputs`), each side's tasks ranked in
batches (:mod:`.full` against every candidate, :mod:`.listed` against listed candidates), collected
into a :class:`~kgeval.ranks.RankTable` and described by an :class:`~kgeval.protocol.EvaluationProtocol`.
Modules, in the order a rank is computed:

- :mod:`.options`: :class:`EvaluationOptions` (validated once) and :class:`Tuning` (the only reader of
  the environment); :mod:`.scorers`: the scorer protocol, written down in full, and its adapters;
  :mod:`.scoring`: one adapter per side (output checks, reused blocks, prepared queries; entity shards);
- :mod:`.inputs`: data checks, :class:`KnownTriples` and the memory budget;
- :mod:`.batches`: the per-evaluation state, the pure batch planner, the out-of-memory-aware batch
  driver and the :class:`.batches.Batch`; :mod:`.full`: full ranking (whole rows, tiles, column chunks
  with verified true scores, query-level metrics); :mod:`.listed`: listed candidates (sampled, given);
- :mod:`.blocks`: counting a batch over its score blocks and the walkers (the only worker threads);
  :mod:`.counting`: the exact rule (torch reference and compiled kernel), NaN policy, consistency check;
- :mod:`.distributed`, :mod:`.collectives`: multi-process evaluation (task slices, entity shards: the
  collectives, their fault handling and the hooks of the drivers).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import presets
from .._threads import torch_threads
from ..errors import InvalidInputError
from ..filtering import FilterIndex, answer_column, query_keys
from ..protocol import EvaluationProtocol
from ..ranks import SIDE_NAMES, RankTable
from . import counting as count_kernel  # noqa: F401 - the kernel's former module, for existing imports
from . import constraints, distributed
from .batches import RunContext
from .collectives import ShardReduce
from .counting import ConsistencyCheck, Counter, use_kernel, warm_kernel
from .ties import tie_rule
from .full import ONE_PROCESS, rank_full
from .inputs import Inputs, KnownTriples, default_memory_budget, prepare_inputs, seen_candidates
from .listed import evaluate_candidates, rank_listed, sample_negatives
from .options import EvaluationOptions, as_options, canonical_names
from .tuning import Tuning, as_tuning
from .record import run_protocol
from .scorers import FunctionScorer, PyKEENScorer, Scorer, as_scorer
from .scoring import ShardSideScorer, SideScorer, eval_mode

__all__ = ["evaluate", "evaluate_ranks", "EvaluationOptions", "Tuning", "warm_kernel", "EvaluationProtocol",
           "EvaluationOutput", "FilterIndex", "KnownTriples", "Scorer", "FunctionScorer", "PyKEENScorer", "as_scorer",
           "sample_negatives", "default_memory_budget"]


def evaluate(scorer, triples, *, filter_triples=(), options: EvaluationOptions | None = None, candidates=None,
             train_triples=None, drop_unseen: bool | None = None, tuning: Tuning | None = None, **overrides):
    """Rank-based link-prediction evaluation of ``scorer`` on ``triples``; returns :class:`kgeval.Results`.

    For each evaluation triple ``(h, r, t)`` and side, the true answer's score ``s`` is compared
    with every candidate's: ``optimistic = 1 + #{score > s}``,
    ``pessimistic = optimistic + #{score == s} - 1`` (exact float comparison; with
    ``tol = tie_tolerance + tie_rtol * |s|``: ``#{score > s + tol}`` and ``#{|score - s| <= tol}``).

    ``protocol="pykeen" | "libkge" | "torchkge" | "ogb" | ...`` (an option, :mod:`kgeval.presets`) sets
    that tool's defaults (tie rule and tolerances, NaN rule, sides, filtering, dropping unseen triples;
    options named in the same call win) and the rank type of the results' short keys: under
    ``protocol="libkge"`` ``results["mrr"]`` is LibKGE's MRR of its rounded mean rank.
    ``sides`` may include ``"relation"``: relation prediction, ``(h, ?, t)`` ranked against every relation
    (:mod:`.relations`).

    Parameters
    ----------
    scorer:
        an object with ``num_entities``, ``score_tails(heads, relations)`` and
        ``score_heads(relations, tails)`` returning ``(batch, num_entities)`` tensors (larger =
        more plausible); see :mod:`kgeval.evaluation.scorers` for optional methods. A PyKEEN
        model is wrapped in :class:`PyKEENScorer`.
    triples:
        integer ``(n, 3)`` array or tensor of ``(head, relation, tail)`` ids.
    filter_triples:
        known true triples beyond ``triples`` (which are always known): one array, a list of
        arrays, or a dict ``name -> array`` (names appear in the protocol). Typically train + valid.
        A :class:`KnownTriples` built once and passed to every evaluation of a loop reuses its
        filter indexes and distinct count.
    options:
        an :class:`EvaluationOptions` or a mapping of its fields (default: all defaults).
    candidates:
        ``{"head_neg": (n, K), "tail_neg": (n, K)}`` entity ids: rank each true answer against its
        task's given negatives only (OGB's protocol, unfiltered; see :mod:`.listed`).
    train_triples:
        the training triples (default: the ``filter_triples`` set named ``train`` or ``training``, if any).
        When known, the evaluation triples with an entity or relation that no training triple has are
        counted in ``results.protocol.unseen`` (:mod:`kgeval.data.unseen`).
    drop_unseen:
        drop those triples before the evaluation (PyKEEN's default); False: rank them, with
        the embeddings training never updated, and report how many there are. None (default): the
        protocol preset's choice (True for ``protocol="pykeen"``, else False).
    overrides:
        any field of :class:`EvaluationOptions` (``sides``, ``filtered``, ``num_negatives``,
        ``restrict_entities``, ``type_constraints``, ...), applied on top of ``options``; the fields' comments there
        document each one. PyKEEN's spellings ``entity_whitelist`` / ``relation_whitelist``
        (and ``evaluation_*_whitelist``, ``restrict_*_to``) are accepted for the restrictions.
    tuning:
        a :class:`Tuning` of internal performance knobs (kernel, walkers, block sizes); default
        :meth:`Tuning.from_env`. Ranks never depend on it.

    The protocol (an :class:`~kgeval.protocol.EvaluationProtocol`: sides, filter sets and counts,
    restriction, sampling, averaging, ties) is in ``results.protocol``; the rank table in
    ``results.rank_table``.

    Examples
    --------
    >>> import numpy as np
    >>> import kgeval
    >>> from kgeval.data import get_dataset
    >>> from kgeval.models import from_embeddings
    >>> ds = get_dataset("nations")
    >>> rng = np.random.default_rng(0)
    >>> model = from_embeddings("distmult", rng.normal(size=(14, 8)), rng.normal(size=(55, 8)))
    >>> results = kgeval.evaluate(model, ds.testing, filter_triples=[ds.training, ds.validation], progress=False)
    >>> len(results.rank_table), 0 < results.get_metric("mrr") <= 1
    (402, True)
    """
    opts = as_options(options)
    if overrides:
        opts = opts.replace(**canonical_names(overrides))
    from ..data.unseen import for_evaluation, training_triples_of

    preset = presets.get(opts.protocol)
    if drop_unseen is None:  # the preset's rule, where the training triples are known (else nothing to drop)
        drop_unseen = bool(preset.drop_unseen and candidates is None
                           and (train_triples is not None or training_triples_of(filter_triples) is not None))
    if preset.candidates == "given" and candidates is None:
        raise InvalidInputError(f"protocol={preset.name!r} ranks each triple against the dataset's given negatives: "
                                "pass candidates={'head_neg': ..., 'tail_neg': ...} (OGB's arrays)")

    if drop_unseen and candidates is not None:
        raise InvalidInputError("drop_unseen=True cannot be used with candidates= (each row of negatives belongs "
                                "to one evaluation triple): drop the triples and their negatives beforehand")
    if candidates is not None and opts.type_constraints is not None:
        raise InvalidInputError("candidates= cannot be combined with type_constraints: the given negatives are "
                                "the candidates (draw them from the allowed entities instead)")
    triples, unseen = for_evaluation(triples, filter_triples, train_triples, drop_unseen)
    if drop_unseen and preset.drop_unseen and opts.restrict_entities is None:
        opts = seen_candidates(opts, scorer, train_triples, filter_triples)
    if candidates is not None:
        table, protocol = evaluate_candidates(scorer, triples, candidates, filter_triples, opts, tuning)
        out = EvaluationOutput(table, protocol)
    else:
        out = run_evaluation(scorer, triples, filter_triples, opts, tuning)
    from ..results import Results

    protocol = out.protocol if unseen is None else out.protocol.replace(unseen=unseen)
    return Results(out.rank_table, protocol=protocol, extra=out.extra)


@dataclass
class EvaluationOutput:
    """What :func:`evaluate_ranks` computes: the rank table, the protocol and extra metrics."""

    rank_table: RankTable
    protocol: EvaluationProtocol
    extra: dict[str, float] = field(default_factory=dict)
    sampled_negatives: dict[str, np.ndarray] | None = None


def evaluate_ranks(scorer, triples, *, filter_triples=(), options: EvaluationOptions | Mapping | None = None,
                   tuning: Tuning | None = None, **overrides) -> EvaluationOutput:
    """Rank every evaluation task; the arguments are those of :func:`kgeval.evaluation.evaluate`."""
    opts = as_options(options)
    if overrides:
        opts = opts.replace(**overrides)
    return run_evaluation(scorer, triples, filter_triples, opts, tuning)


def run_evaluation(scorer, triples, filter_triples, opts: EvaluationOptions,
                   tuning: Tuning | None = None) -> EvaluationOutput:
    """The evaluation of ``triples`` under ``opts`` (validated before any work starts), with a torch
    module scorer in eval mode meanwhile (:func:`.scoring.eval_mode`: no dropout, no batch-norm updates).
    ``tuning``: the performance knobs (default :meth:`.options.Tuning.from_env`, read now, once)."""
    tuning = as_tuning(tuning)
    with eval_mode(scorer):
        if "relation" in opts.sides:  # relation prediction: the transposed problem, through this driver
            return _with_relations(scorer, triples, filter_triples, opts, tuning)
        return _run_evaluation(scorer, triples, filter_triples, opts, tuning)


def _with_relations(scorer, triples, filter_triples, opts: EvaluationOptions, tuning: Tuning) -> EvaluationOutput:
    """The entity sides of ``opts`` (if any) as usual, and the relation tasks (:mod:`.relations`), in one table."""
    from .inputs import _filter_sets
    from .relations import with_relations

    named = _filter_sets(filter_triples) if opts.filtered else []
    return EvaluationOutput(*with_relations(scorer, triples, filter_triples, named, opts, tuning, _run_evaluation))


def _run_evaluation(scorer, triples, filter_triples, opts: EvaluationOptions, tuning: Tuning) -> EvaluationOutput:
    if opts.query_metrics_k and opts.num_negatives is not None:  # asked for, not computed: say so
        warnings.warn(f"query_metrics_k={opts.query_metrics_k} is ignored with num_negatives={opts.num_negatives}: "
                      "query-level precision / recall need whole score rows (no such keys in the results)",
                      stacklevel=3)
    plan = None if opts.distributed is None else distributed.start(opts.distributed)
    if plan is None:
        inp = _prepared(scorer, triples, filter_triples, opts)
    else:  # a rank whose inputs fail to load ends every rank; then the inputs must agree
        inp = plan.guard(_prepared, scorer, triples, filter_triples, opts)
        plan.check_same(distributed.fingerprint(inp, opts))
        if plan.mode == "tasks":  # each rank ranks its share with its own copy of the model
            distributed.check_replicas(plan, inp)
    shard = None
    if plan is not None and plan.mode == "entities":  # (lo, hi, row width, row dtype), the same on all ranks
        shard = distributed.check_shards(plan, inp.scorer, inp.num_entities)
    ctx = _context(inp, opts, tuning) if plan is None else plan.guard(_context, inp, opts, tuning)
    ctx.dist = plan
    ctx.shard = shard
    eval_idx = np.flatnonzero(inp.keep)
    ctx.query_metrics = qacc = QueryMetricAccumulator(opts.query_metrics_k) if ctx.want_query_metrics else None
    from tqdm.auto import tqdm

    bar = tqdm(total=eval_idx.shape[0] * len(inp.side_codes), unit="task", desc="Evaluating",
               disable=not opts.progress, leave=False)
    tables, sampled, capped = [], {}, 0
    try:
        with torch.inference_mode(), torch_threads(tuning.bookkeeping_threads):
            for side, (table, negs, n_capped) in zip(inp.side_codes, _rank_sides(ctx, inp, eval_idx, bar)):
                tables.append(table)
                capped += n_capped
                if negs is not None:
                    sampled[SIDE_NAMES[side]] = negs
    finally:
        bar.close()
    if capped:
        warnings.warn(
            f"{capped} task(s) have fewer than num_negatives={opts.num_negatives} available negatives; "
            "they use all available ones (num_candidates = 1 + available)",
            stacklevel=3,
        )
    if plan is not None:
        plan.merge_consistency(ctx.consistency)
        # chunk widths differ between ranks (local slices; "tasks": each rank plans its own share of the
        # tasks): the protocol reports the widest, the same on every rank
        if plan.mode == "tasks":  # each rank re-ranked queries of its own share ("entities": the same on all)
            got = plan.exchange(lambda: (ctx.chunk_redone_queries, ctx.chunk_used))
            ctx.chunk_redone_queries = sum(g[0] for g in got)
            widths = [g[1] for g in got if g[1] is not None]
        else:
            widths = [w for w in plan.exchange(lambda: ctx.chunk_used) if w is not None]
        ctx.chunk_used = max(widths) if widths else None
    if ctx.consistency is not None and ctx.consistency.mismatches:
        c = ctx.consistency
        warnings.warn(c.first_mismatch + f" ({c.mismatches} of {c.checked} checked tasks differ)", stacklevel=3)
    table = RankTable.concat(tables)
    # the protocol's distinct known triples: memoised by a KnownTriples passed again
    num_known = inp.known_triples.num_distinct(inp.triples, inp.num_entities, inp.num_relations) if opts.filtered else None
    protocol = run_protocol(inp, opts, ctx, table, eval_idx, capped, num_known)
    extra = qacc.to_flat_dict() if qacc is not None else {}
    return EvaluationOutput(table, protocol, extra, sampled or None)


class QueryMetricAccumulator:
    """Collects per-query ``E[hits@k]``, ``m`` and ``N`` (:func:`.full.add_query_metrics`) and reports the mean
    ``{side}.precision_at_{k}`` / ``recall_at_{k}`` over queries (per side and both), with the null model's
    ``random_precision_at_{k} = min(k, N) m / (N k)`` and ``random_recall_at_{k} = min(k, N) / N``."""

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


def _prepared(scorer, triples, filter_triples, opts: EvaluationOptions) -> Inputs:
    """:func:`.inputs.prepare_inputs`, with the type constraints resolved (:func:`.constraints.resolve`)."""
    inp = prepare_inputs(scorer, triples, filter_triples, opts)
    if opts.type_constraints is not None:
        inp.constraints = constraints.resolve(opts.type_constraints, inp)
    return inp


def _context(inp: Inputs, opts: EvaluationOptions, tuning: Tuning) -> RunContext:
    dev = inp.device
    pos_map = allowed = None
    if inp.entities is not None:
        allowed = torch.as_tensor(inp.entities, device=dev)
        pos_map = torch.full((inp.num_entities,), -1, dtype=torch.long, device=dev)
        pos_map[allowed] = torch.arange(allowed.shape[0], device=dev)
    counter = Counter(tie_rule(opts), fused=use_kernel(
        dev, int(np.count_nonzero(inp.keep)) * len(inp.side_codes) * int(inp.universe.shape[0]), tuning))
    return RunContext(
        options=opts,
        tuning=tuning,
        device=dev,
        num_entities=inp.num_entities,
        num_relations=inp.num_relations,
        num_columns=int(inp.universe.shape[0]),
        allowed=allowed,
        pos_map=pos_map,
        budget=opts.memory_budget if opts.memory_budget is not None else default_memory_budget(dev),
        counter=counter,
        consistency=ConsistencyCheck(inp.side_codes) if opts.check_consistency else None,
        want_query_metrics=bool(opts.query_metrics_k) and opts.num_negatives is None,
        # the scorer calls keep the caller's thread count; the bookkeeping around them may use fewer
        score_threads=torch.get_num_threads(),
    )


def _rank_sides(ctx: RunContext, inp: Inputs, eval_idx: np.ndarray, bar) -> list:
    """:func:`_rank_side` of each side, one after the other, in side order."""
    return [_rank_side(ctx, inp, side, eval_idx, bar) for side in inp.side_codes]


def _rank_side(ctx: RunContext, inp: Inputs, side: int, eval_idx: np.ndarray, bar):
    """``(rank table, sampled negatives or None, #tasks with capped negatives)`` of one side."""
    opts = ctx.options
    sub = inp.triples[eval_idx]
    keys = query_keys(sub, side, inp.num_relations)
    answers = answer_column(sub, side).astype(np.int64, copy=False)
    sharded = ctx.dist is not None and ctx.dist.mode == "entities"

    def setup():
        index = None
        if opts.filtered:  # only the known answers of the queries evaluated here
            index = inp.known_triples.index(inp.triples, side, keys, inp.num_entities, inp.num_relations, ctx.device)
        if sharded:
            sc = ShardSideScorer(inp.scorer, side, num_entities=inp.num_entities, device=ctx.device,
                                 allowed=ctx.allowed, threads=ctx.score_threads, layout=ctx.shard)
        else:
            sc = SideScorer(inp.scorer, side, num_entities=inp.num_entities, device=ctx.device, allowed=ctx.allowed,
                            threads=ctx.score_threads)
        negs = counts = None
        if opts.num_negatives is not None:  # drawn for all tasks (on every rank) before any split
            negs, counts = sample_negatives(keys, answers, num_negatives=opts.num_negatives, seed=opts.seed,
                                            side=side, universe=inp.universe, index=index)
        return index, sc, negs, counts

    # a rank failing here (out of memory, say) ends every rank instead of leaving them waiting
    def scorer_over(allowed):  # the side's scorer over the candidate ids ``allowed`` (type constraints: a group's)
        if sharded:
            return ShardSideScorer(inp.scorer, side, num_entities=inp.num_entities, device=ctx.device,
                                   allowed=allowed, threads=ctx.score_threads, layout=ctx.shard)
        return SideScorer(inp.scorer, side, num_entities=inp.num_entities, device=ctx.device, allowed=allowed,
                          threads=ctx.score_threads)

    index, sc, negs, counts = setup() if ctx.dist is None else ctx.dist.guard(setup)
    capped = 0
    # distributed="tasks": this rank's slice of the side's tasks; "entities": all, summed over ranks
    part = slice(None) if ctx.dist is None or sharded else ctx.dist.task_slice(sub.shape[0])
    red = ShardReduce(ctx.dist) if sharded else ONE_PROCESS
    if opts.num_negatives is None and inp.constraints is not None:  # per relation side (and outside answer)
        def local():
            return constraints.rank_constrained(ctx, inp, side, sub[part], eval_idx[part], keys[part], answers[part],
                                                index, bar, red, scorer_over)
    elif opts.num_negatives is None:
        def local():
            return rank_full(ctx, sc, sub[part], eval_idx[part], keys[part], answers[part], index, bar, red)
    else:
        capped = int((counts < opts.num_negatives).sum())
        ctx.used_candidates_method = sc.candidates_method is not None

        def local():
            return rank_listed(ctx, sc, sub[part], eval_idx[part], negs[part], bar, red)
    # "entities": every rank holds every task's summed counts already
    res = local() if ctx.dist is None or sharded else ctx.dist.gather_side(local)
    ti = np.concatenate(res.triple_index)
    order = _index_order(ti, inp.triples.shape[0])
    weights = None
    if opts.macro:  # 1 / #tasks sharing the query; keys and the sorted table rows are in eval_idx order
        _, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
        weights = 1.0 / cnt[inv]
    table = RankTable.from_counts(
        np.concatenate(res.better)[order], np.concatenate(res.tied)[order], np.concatenate(res.ncand)[order],
        side=side, triple_index=ti[order], relation=inp.triples[ti[order], 1], weights=weights,
    )
    return table, negs, capped


def _index_order(values: np.ndarray, upper: int) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` of triple indices in ``[0, upper)``: where they are distinct (each
    task of a side once) one scatter into ``upper`` slots (cheaper than the sort);
    a sort where they repeat or ``upper`` dwarfs their count."""
    if values.size and upper <= 4 * values.size + 4096:
        slot = np.full(upper, -1, dtype=np.int64)
        slot[values] = np.arange(values.size)
        order = slot[slot >= 0]
        if order.size == values.size:  # distinct: no slot was written twice
            return order
    return np.argsort(values, kind="stable")
