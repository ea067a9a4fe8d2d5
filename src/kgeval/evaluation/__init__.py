"""Filtered link-prediction evaluation: scorer protocol, filter index, streaming evaluator.

Modules:
- :mod:`.scorers`: the scorer protocol, written down in full, and the adapters
  (:class:`FunctionScorer`, :class:`PyKEENScorer` from :mod:`.pykeen_scorer`);
- :mod:`.filter_index`: the CSR index of known true answers;
- :mod:`.options`: :class:`EvaluationOptions`, every option of an evaluation, validated once;
- :mod:`.evaluator`: the streaming evaluator producing the rank table and the protocol, over
  :mod:`.inputs` (data checks), :mod:`.scoring` (one adapter per side), :mod:`.counting`
  (better/tied counts, NaN rule, consistency check), :mod:`.batching` (memory budget, the
  out-of-memory-aware batch driver), :mod:`.full` ranking and :mod:`.listed` ranking against listed
  candidates (sampled negatives, given candidates);
- :mod:`.query_metrics`: query-level precision@k / recall@k;
- :mod:`.distributed`: the two distributed modes, over :mod:`.collectives` (the collectives and
  their fault handling) and :mod:`.sharded` (entity-sharded ranking).
"""

from __future__ import annotations

import dataclasses

from ..errors import InvalidInputError
from ..protocol import EvaluationProtocol
from .batching import default_memory_budget
from .evaluator import EvaluationOutput, evaluate_ranks, run_evaluation
from .options import EvaluationOptions, as_options, canonical_names
from .filter_index import FilterIndex
from .listed import sample_negatives
from .scorers import FunctionScorer, PyKEENScorer, Scorer, as_scorer

__all__ = [
    "evaluate",
    "evaluate_ranks",
    "EvaluationOptions",
    "EvaluationProtocol",
    "EvaluationOutput",
    "FilterIndex",
    "Scorer",
    "FunctionScorer",
    "PyKEENScorer",
    "as_scorer",
    "sample_negatives",
    "default_memory_budget",
]


def evaluate(scorer, triples, *, filter_triples=(), options: EvaluationOptions | None = None, candidates=None,
             train_triples=None, drop_unseen: bool = False, **overrides):
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

        table, protocol = evaluate_candidates(scorer, triples, candidates, filter_triples, opts)
        out = EvaluationOutput(table, protocol)
    else:
        out = run_evaluation(scorer, triples, filter_triples, opts)
    from ..results import Results

    protocol = out.protocol if unseen is None else out.protocol.replace(unseen=unseen)
    return Results(out.rank_table, protocol=protocol, extra=out.extra)
