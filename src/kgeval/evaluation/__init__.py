"""Filtered link-prediction evaluation: scorer protocol, filter index, streaming evaluator.

Public: :func:`evaluate`, :func:`evaluate_ranks`, :class:`EvaluationOptions` (every option),
:class:`KnownTriples` (filter sets built once and reused across evaluations), :class:`Tuning`
(internal performance knobs; never changes a rank), :func:`warm_kernel`, the scorer adapters.

Modules, in the order a rank is computed:

- :mod:`.options`: :class:`EvaluationOptions` (validated once) and :class:`Tuning` (the only reader
  of the environment);
- :mod:`.scorers`: the scorer protocol and its adapters; :mod:`.scoring`: one adapter per side
  (side dispatch, output checks, reused score blocks, prepared queries);
- :mod:`.inputs`: data checks and :class:`KnownTriples`; :mod:`.filter_index`: the CSR index of
  known answers;
- :mod:`.evaluator`: orchestration (inputs, sides one after the other, rank table, protocol);
- :mod:`.full`: full ranking (the pure planner :func:`.full.plan_full`, whole rows, tiles, column
  chunks with verified true scores); :mod:`.querybatch`: a side's queries and the :class:`.querybatch.Batch`;
  :mod:`.batching`: memory budget and the out-of-memory-aware batch driver;
- :mod:`.blocks`: counting a batch over its score blocks (:class:`.blocks.Counts`, the chunk walk);
  :mod:`.executor`: the only worker threads; :mod:`.counting`: the exact rule (torch reference), NaN
  policy, consistency check; :mod:`.count_kernel`: the compiled counting kernels;
- :mod:`.sampled`, :mod:`.sampling`, :mod:`.candidates`: ranking against listed candidates (sampled
  negatives, given candidates);
- :mod:`.distributed`, :mod:`.sharded`: multi-process evaluation (task slices, entity shards);
- :mod:`.query_metrics`: query-level precision@k / recall@k; :mod:`.context`: per-evaluation state.
"""

from __future__ import annotations

import dataclasses

from ..protocol import EvaluationProtocol
from .batching import default_memory_budget
from .evaluator import EvaluationOutput, evaluate_ranks, run_evaluation
from .count_kernel import warm_kernel
from .options import EvaluationOptions, Tuning, as_options, canonical_names
from .filter_index import FilterIndex
from .inputs import KnownTriples
from .sampling import sample_negatives
from .scorers import DistMultScorer, FunctionScorer, PyKEENScorer, Scorer, as_scorer

__all__ = [
    "evaluate",
    "evaluate_ranks",
    "EvaluationOptions",
    "Tuning",
    "warm_kernel",
    "EvaluationProtocol",
    "EvaluationOutput",
    "FilterIndex",
    "KnownTriples",
    "Scorer",
    "FunctionScorer",
    "PyKEENScorer",
    "DistMultScorer",
    "as_scorer",
    "sample_negatives",
    "default_memory_budget",
]


def evaluate(scorer, triples, *, filter_triples=(), options: EvaluationOptions | None = None, candidates=None,
             tuning: Tuning | None = None, **overrides):
    """Rank-based link-prediction evaluation of ``scorer`` on ``triples``; returns :class:`kgeval.Results`.

    For each evaluation triple ``(h, r, t)`` and side, the true answer's score ``s`` is compared
    with every candidate's: ``optimistic = 1 + #{score > s}``,
    ``pessimistic = optimistic + #{score == s} - 1`` (exact float comparison; with
    ``tie_tolerance = tol``: ``#{score > s + tol}`` and ``#{|score - s| <= tol}``).

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
        task's given negatives only (OGB's protocol, unfiltered; see :mod:`.candidates`).
    overrides:
        any field of :class:`EvaluationOptions` (``sides``, ``filtered``, ``num_negatives``,
        ``restrict_entities``, ...), applied on top of ``options``; the fields' comments there
        document each one. PyKEEN's spellings ``entity_whitelist`` / ``relation_whitelist``
        (and ``evaluation_*_whitelist``, ``restrict_*_to``) are accepted for the restrictions.
    tuning:
        a :class:`Tuning` of internal performance knobs (kernel, walkers, block sizes); default
        :meth:`Tuning.from_env`. Ranks never depend on it.

    The protocol (an :class:`~kgeval.protocol.EvaluationProtocol`: sides, filter sets and counts,
    restriction, sampling, averaging, ties) is in ``results.protocol``; the rank table in
    ``results.rank_table``.
    """
    opts = as_options(options)
    if overrides:
        opts = dataclasses.replace(opts, **canonical_names(overrides))
    if candidates is not None:
        from .candidates import evaluate_candidates

        out = evaluate_candidates(scorer, triples, candidates, filter_triples, opts)
    else:
        out = run_evaluation(scorer, triples, filter_triples, opts, tuning)
    from ..results import Results

    return Results(out.rank_table, protocol=out.protocol, extra=out.extra)
