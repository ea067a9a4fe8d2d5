"""The protocol record of one run of the driver: :func:`run_protocol` builds its
:class:`~kgeval.protocol.EvaluationProtocol` (sides, filter sets and counts, restriction, sampling, ties, the
consistency check, chunking) from the run's inputs, options and context."""

from __future__ import annotations

from ..protocol import EvaluationProtocol, FilterSet, Sampling, tasks_digest
from ..ranks import SIDE_NAMES, RankTable
from . import constraints
from .batches import RunContext
from .inputs import Inputs
from .options import EvaluationOptions

def run_protocol(inp: Inputs, opts: EvaluationOptions, ctx: RunContext, table: RankTable, eval_idx, capped: int,
              num_known: int | None):
    """The run's :class:`EvaluationProtocol` (``num_known``: distinct known triples of a filtered run,
    the (query, answer) pairs of either side's filter index)."""
    tri, ne, nr = inp.triples, inp.num_entities, inp.num_relations
    filtered = opts.filtered
    sampling = None
    if opts.num_negatives is not None:
        sampling = Sampling(
            num_negatives=opts.num_negatives, seed=opts.seed,
            excludes="known true answers" if filtered else "the true answer", capped_tasks=capped,
            scoring="candidates method" if ctx.used_candidates_method else "full rows, gathered",
        )
    cc = ctx.consistency
    return EvaluationProtocol(
        sides=tuple(SIDE_NAMES[c] for c in inp.side_codes),
        filtered=filtered,
        filter_sets=(FilterSet("evaluation", int(tri.shape[0])),
                     *(FilterSet(n, int(a.shape[0])) for n, a in inp.filter_sets)) if filtered else (),
        num_known_triples=num_known,
        num_triples=int(tri.shape[0]),
        num_evaluated_triples=int(eval_idx.shape[0]),
        num_tasks=len(table),
        num_entities=ne,
        num_relations=nr,
        restrict_entities=None if inp.entities is None else int(inp.entities.size),
        restrict_relations=None if inp.relations is None else int(inp.relations.size),
        num_triples_dropped=int((~inp.keep).sum()),
        sampling=sampling,
        macro=opts.macro,
        tie_tolerance=opts.tie_tolerance,
        tie_rtol=opts.tie_rtol,
        nan_policy=opts.nan_policy,
        preset=opts.protocol,
        candidates=(
            "1 + sampled negatives" if sampling is not None
            else ("the entities allowed in the task's position of its relation (type constraints)"
                  if inp.constraints is not None else "allowed entities")
            + (" minus the other known true answers of the query" if filtered else "")
            + "; the true answer counted"
        ),
        type_constraints=constraints.protocol_record(inp, eval_idx),
        query_metrics_k=opts.query_metrics_k if ctx.want_query_metrics else (),
        consistency_checked=None if cc is None else cc.checked,
        consistency_mismatches=None if cc is None else cc.mismatches,
        entity_chunk_size=ctx.chunk_used,
        chunk_redone_queries=ctx.chunk_redone_queries,
        device=str(ctx.device),
        tasks_sha256=tasks_digest(tri),
    )
