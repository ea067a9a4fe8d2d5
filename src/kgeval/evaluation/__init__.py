"""Filtered link-prediction evaluation: scorer protocol, filter index, streaming evaluator.

Public: :func:`evaluate`, :func:`evaluate_ranks`, :class:`EvaluationOptions` (every option),
:class:`KnownTriples` (filter sets built once and reused across evaluations), :class:`Tuning`
(internal performance knobs; never changes a rank), :func:`warm_kernel`, the scorer adapters.

Modules, in the order a rank is computed:

- :mod:`.options`: :class:`EvaluationOptions` (validated once) and :class:`Tuning` (the only reader
  of the environment);
- :mod:`.scorers`: the scorer protocol, written down in full, and its adapters (:class:`PyKEENScorer`
  from :mod:`.pykeen_scorer`); :mod:`.scoring`: one adapter per side
  (side dispatch, output checks, reused score blocks, prepared queries);
- :mod:`.inputs`: data checks and :class:`KnownTriples`; :mod:`kgeval.filtering`: the CSR index of
  known answers;
- :mod:`.evaluator`: orchestration (inputs, sides one after the other, rank table, protocol);
- :mod:`.full`: full ranking (the pure planner :func:`.full.plan_full`, whole rows, tiles, column
  chunks with verified true scores); :mod:`.batches`: the per-evaluation state, memory budget and the
  out-of-memory-aware batch driver, a side's queries and the :class:`.batches.Batch`;
- :mod:`.blocks`: counting a batch over its score blocks (:class:`.blocks.Counts`, the chunk walk) and
  the only worker threads (the walkers); :mod:`.counting`: the exact rule (torch reference and compiled kernel),
  NaN policy, consistency check;
- :mod:`.listed`: ranking against listed candidates (sampled negatives, given candidates), one driver;
- :mod:`.distributed`, :mod:`.collectives`, :mod:`.sharded`: multi-process evaluation (task slices,
  entity shards; the collectives and their fault handling);
- :mod:`.query_metrics`: query-level precision@k / recall@k (full ranking only).
"""

from __future__ import annotations

import dataclasses

from ..errors import InvalidInputError
from ..protocol import EvaluationProtocol
from ..filtering import FilterIndex
from .evaluator import EvaluationOutput, evaluate_ranks, run_evaluation
from . import counting as count_kernel  # noqa: F401 - the kernel's former module, for existing imports
from .counting import warm_kernel
from .options import EvaluationOptions, Tuning, as_options, canonical_names
from .inputs import KnownTriples, default_memory_budget
from .listed import sample_negatives
from .scorers import FunctionScorer, PyKEENScorer, Scorer, as_scorer

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
    "as_scorer",
    "sample_negatives",
    "default_memory_budget",
]


def evaluate(scorer, triples, *, filter_triples=(), options: EvaluationOptions | None = None, candidates=None,
             train_triples=None, drop_unseen: bool = False, tuning: Tuning | None = None, **overrides):
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
        task's given negatives only (OGB's protocol, unfiltered; see :mod:`.listed`).
    train_triples:
        the training triples (default: the ``filter_triples`` set named ``train`` or ``training``, if any).
        When known, the evaluation triples with an entity or relation that no training triple has are
        counted in ``results.protocol.unseen`` (:mod:`kgeval.data.unseen`).
    drop_unseen:
        drop those triples before the evaluation (PyKEEN's default); False (default): rank them, with
        the embeddings training never updated, and report how many there are.
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
    from ..data.unseen import for_evaluation

    if drop_unseen and candidates is not None:
        raise InvalidInputError("drop_unseen=True cannot be used with candidates= (each row of negatives belongs "
                                "to one evaluation triple): drop the triples and their negatives beforehand")
    triples, unseen = for_evaluation(triples, filter_triples, train_triples, drop_unseen)
    if candidates is not None:
        from .listed import evaluate_candidates

        table, protocol = evaluate_candidates(scorer, triples, candidates, filter_triples, opts, tuning)
        out = EvaluationOutput(table, protocol)
    else:
        out = run_evaluation(scorer, triples, filter_triples, opts, tuning)
    from ..results import Results

    protocol = out.protocol if unseen is None else out.protocol.replace(unseen=unseen)
    return Results(out.rank_table, protocol=protocol, extra=out.extra)
