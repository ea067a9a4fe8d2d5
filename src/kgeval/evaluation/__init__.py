"""Filtered link-prediction evaluation: scorer protocol, filter index, streaming evaluator.

Modules:
- :mod:`.scorers`: the scorer protocol and adapters (:class:`FunctionScorer`,
  :class:`PyKEENScorer`, reference :class:`DistMultScorer`);
- :mod:`.filter_index`: the CSR index of known true answers;
- :mod:`.evaluator`: the streaming evaluator producing the rank table;
- :mod:`.sampling`: negatives for the sampled protocol;
- :mod:`.query_metrics`: query-level precision@k / recall@k.
"""

from __future__ import annotations

from .evaluator import EvaluationOutput, default_memory_budget, evaluate_ranks
from .filter_index import FilterIndex
from .sampling import sample_negatives
from .scorers import DistMultScorer, FunctionScorer, PyKEENScorer, Scorer, as_scorer

__all__ = [
    "evaluate",
    "evaluate_ranks",
    "EvaluationOutput",
    "FilterIndex",
    "Scorer",
    "FunctionScorer",
    "PyKEENScorer",
    "DistMultScorer",
    "as_scorer",
    "sample_negatives",
    "default_memory_budget",
]


def evaluate(
    scorer,
    triples,
    *,
    filter_triples=(),
    sides=("head", "tail"),
    restrict_entities=None,
    restrict_relations=None,
    batch_size: int | None = None,
    device=None,
    progress: bool = True,
    filtered: bool = True,
    macro: bool = False,
    num_negatives: int | None = None,
    seed: int = 42,
    tie_tolerance: float = 0.0,
    nan_policy: str = "raise",
    check_consistency: bool = True,
    memory_budget: int | None = None,
    query_metrics_k=(),
    num_relations: int | None = None,
    entity_chunk_size: int | None = None,
):
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
    sides:
        ``"head"``, ``"tail"``, ``"both"`` or a sequence of them.
    restrict_entities, restrict_relations:
        id sets (set, list, array, tensor). Triples outside them are dropped and candidates are
        only the allowed entities, so ``num_candidates`` counts allowed entities only.
    filtered:
        remove the other known answers of each query from its candidates (default).
    macro:
        weight each task by ``1 / #evaluation tasks sharing its query`` (PyKEEN's
        ``MacroRankBasedEvaluator``).
    num_negatives, seed:
        sampled protocol: ``k`` negatives per task, uniformly without replacement, excluding the
        known answers (and restricted-out entities); ``num_candidates = 1 + k`` (``1 + available``
        with a warning when fewer exist). Uses ``score_*_candidates`` when the scorer has them,
        otherwise scores full rows and gathers (correct, but no faster than full ranking).
    nan_policy:
        ``"raise"`` (an :class:`~kgeval.InvalidInputError` naming the triple and side) or
        ``"worst"``: NaN candidates lose to every non-NaN true score, a NaN true score gets the
        worst rank (``optimistic = pessimistic = num_candidates``).
    check_consistency:
        re-score the first and last task of every batch alone (``score_triples`` if present) and
        warn when the in-batch score differs (relative tolerance 1e-5, absolute 1e-5 x the mean |score|
        of the checked rows, so scores that cancel to near zero are not flagged for float rounding).
    batch_size, memory_budget:
        task rows per batch; by default chosen from ``memory_budget`` bytes (default
        ``min(1 GiB, available memory / 4)``). Out-of-memory errors halve the batch.
    query_metrics_k:
        ``k`` values of query-level precision@k / recall@k (full ranking only), e.g.
        ``(1, 3, 5, 10)``. Off by default: the extra top-k pass roughly doubles the time
        beyond the matmul on WN18RR-sized graphs (measured in ``benchmarks/evaluate.py``).
        reported in the results' extra keys ``{side}.precision_at_{k}``,
        ``{side}.expected_precision_at_{k}``, ``{side}.recall_at_{k}``,
        ``{side}.expected_recall_at_{k}``; see :mod:`kgeval.evaluation.query_metrics`.
    num_relations:
        relation count for key building and range checks (default: ``scorer.num_relations``
        or the largest relation id seen + 1).
    entity_chunk_size:
        score each query batch in column chunks of this many (allowed) entities, through the
        scorer's ``entities=`` keyword (full ranking only; sampled ranking ignores it). By
        default chunks are used only when the memory budget does not hold 64 whole score rows.
        Ranks are identical to unchunked scoring; chunked batches score the chunks holding true
        answers twice (the true scores are read from the same chunk calls they are compared
        in). A scorer without ``entities=`` cannot be chunked: whole rows are scored (with a
        warning). Cannot be combined with ``query_metrics_k`` (which needs whole rows; automatic
        chunking is off when query metrics are requested).

    The protocol (sides, filter sets and counts, restriction, sampling, averaging, ties) is
    recorded in ``results.protocol``; the rank table in ``results.rank_table``.
    """
    out = evaluate_ranks(
        scorer,
        triples,
        filter_triples=filter_triples,
        sides=sides,
        restrict_entities=restrict_entities,
        restrict_relations=restrict_relations,
        batch_size=batch_size,
        device=device,
        progress=progress,
        filtered=filtered,
        macro=macro,
        num_negatives=num_negatives,
        seed=seed,
        tie_tolerance=tie_tolerance,
        nan_policy=nan_policy,
        check_consistency=check_consistency,
        memory_budget=memory_budget,
        query_metrics_k=query_metrics_k,
        num_relations=num_relations,
        entity_chunk_size=entity_chunk_size,
    )
    from ..results import Results

    return Results(out.rank_table, protocol=out.protocol, extra=out.extra)
