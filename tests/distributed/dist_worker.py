"""One rank of the distributed tests: ``python dist_worker.py RANK WORLD PORT OUT_DIR``.

Runs every scenario in one process group (one interpreter start per rank) and writes
``OUT_DIR/rank{RANK}.json``: per scenario the rank table columns of the distributed run and of
the single-process run, or the name of the error raised.
"""

import datetime
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import kgeval
from kgeval.data.types import CandidateSets
from kgeval.models import DistMultScorer
from kgeval.models import EntityShard, from_embeddings, get_model, shard_embeddings


def graph(seed=0, ne=30, nr=4):
    rng = np.random.default_rng(seed)
    ent = torch.as_tensor(rng.integers(-2, 3, size=(ne, 4)), dtype=torch.float32)  # integer scores: many ties
    rel = torch.as_tensor(rng.integers(-2, 3, size=(nr, 4)), dtype=torch.float32)
    allt = rng.integers(0, [ne, nr, ne], size=(90, 3))
    return DistMultScorer(ent, rel), allt[:60], allt[60:]


def table(res):
    t = res.rank_table
    return {k: np.asarray(getattr(t, k)).tolist() for k in ("optimistic", "pessimistic", "num_candidates",
                                                           "triple_index", "side")}


#: type constraints inferred from a part of graph()'s training triples: many test answers lie outside their sets
TYPED = CandidateSets.from_triples(graph()[1][:25], num_entities=30, num_relations=4)

SCENARIOS = {
    "typed": dict(type_constraints=TYPED, macro=True),
    "filtered": dict(),
    "unfiltered": dict(filtered=False),
    "restricted": dict(restrict_entities=tuple(range(0, 30, 2)) + (1, 3), restrict_relations=(0, 1, 2)),
    "sampled": dict(num_negatives=7, seed=3),
    "macro_small_batches": dict(macro=True, batch_size=3),
}


class Boom(RuntimeError):
    pass


class FailingScorer(DistMultScorer):
    def score_tails(self, h, r, entities=None):
        raise Boom("scorer failed on this rank")


class Shifted(DistMultScorer):
    """DistMult plus 2^-18: exact for the integer scores of graph() (|score| < 64)."""

    def score_tails(self, h, r, entities=None, out=None):
        return super().score_tails(h, r, entities) + 2 ** -18

    def score_heads(self, r, t, entities=None, out=None):
        return super().score_heads(r, t, entities) + 2 ** -18

    def score_triples(self, h, r, t):
        return super().score_triples(h, r, t) + 2 ** -18

    score_tail_candidates = score_head_candidates = None


class GatherShifted(DistMultScorer):
    """DistMult, 0.5 higher where entities are asked for as a tensor of ids (pass 1's answer columns), not as
    slices (chunks): every chunked task's pass-1 true score differs, so its query is ranked again."""

    def score_tails(self, h, r, entities=None, out=None):
        s = super().score_tails(h, r, entities)
        return s + 0.5 if isinstance(entities, torch.Tensor) else s

    def score_heads(self, r, t, entities=None, out=None):
        s = super().score_heads(r, t, entities)
        return s + 0.5 if isinstance(entities, torch.Tensor) else s

    score_tail_candidates = score_head_candidates = None


def distinct_queries(tri, world, num_relations=4):
    """Distinct (entity, relation) queries of each side, counted in each rank's contiguous share of the tasks."""
    n, total = len(tri), 0
    for col in (0, 2):
        keys = tri[:, col].astype(np.int64) * num_relations + tri[:, 1]
        total += sum(np.unique(keys[n * r // world:n * (r + 1) // world]).size for r in range(world))
    return total


def main(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
    from patience import scaled  # the factor the test froze in KGEVAL_TEST_TIMEOUT_SCALE

    group_timeout = scaled(30)  # a lost peer ends the run; a slow one (a loaded machine) must not
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=group_timeout))
    scorer, train, test = graph()
    report = {"group_timeout_s": group_timeout}
    for mode in ("tasks",):
        for name, kw in SCENARIOS.items():
            base = dict(filter_triples=train, progress=False, **kw)
            one = kgeval.evaluate(scorer, test, **base)
            many = kgeval.evaluate(scorer, test, distributed=mode, **base)
            report[f"{mode}/{name}"] = {"single": table(one), "distributed": table(many),
                                        "protocol_diff": _protocol_diff(one, many)}
        # rank 1 is given other triples: both ranks fail at the start with a named error
        mine = test if rank == 0 else test[::-1][:20]
        report[f"{mode}/mismatch"] = _error(lambda: kgeval.evaluate(scorer, mine, filter_triples=train,
                                                                    progress=False, distributed=mode))
        # rank 1 holds another model (all entity rows; one relation's row): each rank would rank its share
        # of the tasks with its own copy, so both fail at the start with a named error
        other = DistMultScorer(scorer.entity.flip(0), scorer.relation) if rank == 1 else scorer
        report[f"{mode}/other_model"] = _error(lambda: kgeval.evaluate(other, test, filter_triples=train,
                                                                       progress=False, distributed=mode))
        rel = scorer.relation.clone()
        rel[int(test[-1, 1])] += 1  # a relation the first test triple does not have
        assert int(test[0, 1]) != int(test[-1, 1])
        other = DistMultScorer(scorer.entity, rel) if rank == 1 else scorer
        report[f"{mode}/other_relation"] = _error(lambda: kgeval.evaluate(other, test, filter_triples=train,
                                                                          progress=False, distributed=mode))
        # scores 2^-18 apart on rank 1 (rounded differently, say on another device): within tolerance,
        # and the same ranks (every score moves by the same exact amount)
        close = Shifted(scorer.entity, scorer.relation) if rank == 1 else scorer
        one = kgeval.evaluate(scorer, test, filter_triples=train, progress=False)
        many = kgeval.evaluate(close, test, filter_triples=train, progress=False, distributed=mode)
        report[f"{mode}/rounding"] = {"single": table(one), "distributed": table(many)}
        # chunks whose pass-1 true scores differ: each rank re-ranks the queries of its share, the protocol sums them
        gs = GatherShifted(scorer.entity, scorer.relation)
        kw = dict(filter_triples=train, progress=False, entity_chunk_size=4, batch_size=5)
        one, many = kgeval.evaluate(gs, test, **kw), kgeval.evaluate(gs, test, distributed=mode, **kw)
        report[f"{mode}/redone"] = {"single": table(one), "distributed": table(many),
                                    "redone": [one.protocol.get("chunk_redone_queries"),
                                               many.protocol.get("chunk_redone_queries")],
                                    "expected": [distinct_queries(test, 1), distinct_queries(test, world)]}
        # an automatic chunk width planned from each rank's share of the tasks (29 triples: 15 and 14 per
        # side): the ranks plan 3 and 4 columns, the protocol reports the widest on both
        kw = dict(filter_triples=train, progress=False, memory_budget=4500)
        many = kgeval.evaluate(scorer, test[:29], distributed=mode, **kw)
        report[f"{mode}/auto_chunk"] = {"protocol": {k: v for k, v in many.protocol.items() if k != "elapsed"},
                                        "share": [kgeval.evaluate(scorer, half, **kw).protocol.get("entity_chunk_size")
                                                  for half in (test[:29][:15], test[:29][15:])]}
        # the scorer raises on rank 1 only: both ranks end with an error, none waits
        bad = FailingScorer(scorer.entity, scorer.relation) if rank == 1 else scorer
        report[f"{mode}/exception"] = _error(lambda: kgeval.evaluate(bad, test, filter_triples=train,
                                                                     progress=False, distributed=mode))
    report.update(new_targets(scorer, train, test))
    report.update(empty_slice(rank))
    report.update(entities(rank, world, train, test))
    report.update(wide(rank, world))
    report.update(nan_on_one_rank(rank, world, train, test))
    report.update(user_shards(rank, world, train, test))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


def new_targets(scorer, train, test):
    """Relation prediction split over the ranks ("tasks"): the same tables."""
    out = {}
    for name, kw in (("relation", dict(sides=["head", "tail", "relation"])),):
        base = dict(filter_triples=train, progress=False, **kw)
        one = kgeval.evaluate(scorer, test, **base)
        try:
            many = table(kgeval.evaluate(scorer, test, distributed="tasks", **base))
        except Exception as exc:  # noqa: BLE001 - the test shows it
            many = {"error": type(exc).__name__, "message": str(exc)}
        out[f"targets/{name}"] = {"single": table(one), "distributed": many}
    return out


def empty_slice(rank):
    """One evaluation triple on two ranks: rank 1's share of the tasks is empty, and rows of 5,000
    entities are planned for no task (compiled kernel)."""
    os.environ["KGEVAL_COUNT_KERNEL"] = "numba"
    try:
        model = get_model("distmult", 5000, 3, dim=8, seed=0).eval()
        one_triple = np.array([[0, 1, 2]])
        out = {}
        for name, kw in (("one_triple", {}), ("one_triple_sampled", dict(num_negatives=5, seed=1))):
            one = kgeval.evaluate(model, one_triple, progress=False, **kw)
            many = _error(lambda: kgeval.evaluate(model, one_triple, progress=False, distributed="tasks", **kw))
            if many.get("error") is None:
                many = table(kgeval.evaluate(model, one_triple, progress=False, distributed="tasks", **kw))
            out[f"tasks/{name}"] = {"single": table(one), "distributed": many}
        return out
    finally:
        del os.environ["KGEVAL_COUNT_KERNEL"]


def _protocol_diff(one, many, exact=False):
    """Protocol fields that differ; the consistency check re-scores the first and last task of each
    batch, and batches differ between one process and a rank's slice, so its count may differ
    (``exact``: entities mode walks the same batches as one process, so it must not)."""
    a, b = dict(one.protocol), dict(many.protocol)
    return sorted(k for k in a if a[k] != b[k] and (exact or not k.startswith("consistency_check")))


def _error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test checks the type and message
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None}


ENTITY_SCENARIOS = {
    **SCENARIOS,
    "sampled_unfiltered_restricted": dict(num_negatives=5, seed=1, filtered=False,
                                          restrict_entities=tuple(range(0, 30, 3)) + (1, 5, 29)),
    "chunked": dict(entity_chunk_size=4, batch_size=5),
    "head_only_worst": dict(sides=("head",), nan_policy="worst", batch_size=7),
    # rank 1's slice [15, 30) holds no allowed entity: it scores nothing and counts zeros
    "restricted_empty_slice": dict(restrict_entities=tuple(range(12))),
    "restricted_empty_slice_chunked": dict(restrict_entities=tuple(range(12)), entity_chunk_size=5, batch_size=6),
    "restricted_empty_slice_sampled": dict(restrict_entities=tuple(range(12)), num_negatives=4, seed=2),
    # groups over the allowed entities of each relation side: rank 1's slice [15, 30) holds two of them at most
    "typed_chunked_restricted": dict(type_constraints=TYPED, restrict_entities=tuple(range(12)) + (20, 25),
                                     entity_chunk_size=4, batch_size=5),
}


def _int_weights(model, seed):
    """Small integer embeddings: every score is exact, so ties are many and exactly reproducible."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in (model.entity.weight, model.relation.weight):
            p.copy_(torch.as_tensor(rng.integers(-2, 3, size=tuple(p.shape)), dtype=p.dtype))
    return model.eval()


def entity_models(rank, world):
    """(name, whole model, this rank's shard): built-in models and the plain-embedding scorer."""
    ne, nr = 30, 4
    out = []
    for name, kw in (("distmult", {}), ("complex", {}), ("transe", {"p": 2}), ("transe_l1", {"p": 1})):
        m = _int_weights(get_model(name.split("_")[0], ne, nr, dim=4, **kw), seed=len(name))
        out.append((name, m, m.shard(rank, world)))
    nan = _int_weights(get_model("distmult", ne, nr, dim=4), seed=5)
    with torch.no_grad():
        nan.entity.weight[[3, 20]] = float("nan")  # one NaN entity in each rank's slice
    out.append(("distmult_nan", nan, nan.shard(rank, world)))
    rng = np.random.default_rng(7)
    ent = rng.integers(-2, 3, size=(ne, 6)).astype(np.float32)
    rel = rng.integers(-2, 3, size=(nr, 6)).astype(np.float32)
    out.append(("embeddings", from_embeddings("complex", ent, rel),
                shard_embeddings("complex", ent, rel, rank=rank, world=world)))
    return out


FLOAT_MODELS = ("tucker", "rotate", "pairre", "transe_float")
FLOAT_SCENARIOS = ("filtered", "sampled")
CORE_SCENARIOS = ("filtered", "unfiltered", "restricted", "sampled")


def float_models(rank, world):
    """Models whose scores are not integers (trigonometry, batch norm, square roots of non-integers):
    rank tables match one process as long as slicing the entity table does not change a score."""
    out = []
    for name, kw in (("tucker", {}), ("rotate", {}), ("pairre", {"p": 2}), ("transe_float", {"p": 2})):
        m = get_model(name.split("_")[0], 30, 4, dim=4, seed=3, **kw).eval()
        out.append((name, m, m.shard(rank, world)))
    return out


class FailingShard(EntityShard):
    """Raises in its n-th scoring call (phase B) or in entity_rows (phase A)."""

    def __init__(self, shard, where, after=1):
        super().__init__(shard.local, entity_offset=shard.entity_range[0], num_entities=shard.num_entities)
        self.where, self.after, self.calls = where, after, 0

    def _tick(self, where):
        if self.where == where:
            self.calls += 1
            if self.calls > self.after:
                if where == "oom":
                    if self.calls == self.after + 1:  # once: the batch is halved on every rank
                        raise RuntimeError("CUDA out of memory (simulated)")
                    return
                raise Boom(f"shard failed in {where}")

    def entity_rows(self, ids):
        self._tick("rows")
        return super().entity_rows(ids)

    def score_tails_from(self, head_rows, relations, entities=None):
        self._tick("scores")
        self._tick("oom")
        return super().score_tails_from(head_rows, relations, entities)


class NaNColumnShard(EntityShard):
    """Scores NaN for entity ``NAN_ENTITY`` as a candidate (rank 1's slice [15, 30) only): its entity row is
    finite, so no query row and no other rank's scores hold a NaN."""

    NAN_ENTITY = 20

    def __init__(self, shard):
        super().__init__(shard.local, entity_offset=shard.entity_range[0], num_entities=shard.num_entities)

    def _nan(self, out, entities):
        lo, hi = self.entity_range
        ids = (torch.arange(lo, hi) if entities is None else
               torch.arange(entities.start, entities.stop) if isinstance(entities, slice) else entities.cpu())
        out = out.clone()
        out[:, ids == self.NAN_ENTITY] = float("nan")
        return out

    def score_tails_from(self, head_rows, relations, entities=None):
        return self._nan(super().score_tails_from(head_rows, relations, entities), entities)

    def score_heads_from(self, relations, tail_rows, entities=None):
        return self._nan(super().score_heads_from(relations, tail_rows, entities), entities)


class NaNTripleScorer(DistMultScorer):
    """DistMult with a NaN score for one triple only (the true score of the last test triple, which is
    in rank 1's share of the tasks; a filtered answer, hence ignored, in any other task's row)."""

    def __init__(self, entity, relation, triple):
        super().__init__(entity, relation)
        self.triple = tuple(int(x) for x in triple)

    def score_tails(self, h, r, entities=None):
        out = super().score_tails(h, r, entities).clone()
        th, tr, tt = self.triple
        rows = ((h == th) & (r == tr)).nonzero().view(-1)
        cols = (torch.arange(self.num_entities) if entities is None else torch.as_tensor(entities)) == tt
        out[rows[:, None], cols.nonzero().view(1, -1)] = float("nan")
        return out

    def score_heads(self, r, t, entities=None):
        out = super().score_heads(r, t, entities).clone()
        th, tr, tt = self.triple
        rows = ((r == tr) & (t == tt)).nonzero().view(-1)
        cols = (torch.arange(self.num_entities) if entities is None else torch.as_tensor(entities)) == th
        out[rows[:, None], cols.nonzero().view(1, -1)] = float("nan")
        return out

    score_tail_candidates = score_head_candidates = score_triples = None


class ShiftedNaNColumnShard(NaNColumnShard):
    """Scores 0.5 higher for entities asked for as a tensor (pass 1's answer columns) than in chunks: every
    chunked batch is ranked again (:func:`kgeval.evaluation.full._rank_chunks_exact`); :class:`NaNColumnShard`'s NaN
    only once ``armed`` (set as the re-ranking starts), so the NaN is met there first."""

    armed = False

    def _nan(self, out, entities):
        out = super()._nan(out, entities) if self.armed else out
        return out + 0.5 if isinstance(entities, torch.Tensor) else out


def nan_on_one_rank(rank, world, train, test):
    """nan_policy="raise" with a NaN that only one rank sees: every rank ends with the same NaNScoresError."""
    import time

    report, seconds = {}, []

    def timed(fn):  # the error, and how long this rank took to end with it
        t0 = time.perf_counter()
        try:
            return _error(fn)
        finally:
            seconds.append(time.perf_counter() - t0)

    name, full, shard = entity_models(rank, world)[0]
    nan = NaNColumnShard(shard)
    for case, kw in (("whole_rows", {}), ("chunked", dict(entity_chunk_size=4, batch_size=5)),
                     ("sampled", dict(num_negatives=29, seed=1, filtered=False)), ("head_only", dict(sides="head"))):
        report[f"entities/nan_one_rank/{case}"] = timed(
            lambda: kgeval.evaluate(nan, test, filter_triples=train, progress=False, distributed="entities", **kw))
    # whole local rows of 15 columns scored in tiles of 8 (Tuning.tile_cols shrunk from 4,096)
    import kgeval.evaluation.full as ranking
    import kgeval.evaluation.collectives as sharded
    from kgeval.evaluation import Tuning

    tiles8 = Tuning.from_env().replace(tile_cols=8, tile_align=8)
    real = (sharded.count_tiles, ranking._rank_chunks_exact)
    ran = []
    sharded.count_tiles = lambda *a, **k: ran.append("tiles") or real[0](*a, **k)
    shifted = ShiftedNaNColumnShard(shard)

    def rerank(*a, **k):
        ran.append("rerank")
        shifted.armed = True
        return real[1](*a, **k)

    ranking._rank_chunks_exact = rerank
    try:
        report["entities/nan_one_rank/tiles"] = timed(
            lambda: kgeval.evaluate(nan, test, filter_triples=train, progress=False, distributed="entities",
                                    tuning=tiles8))
        # chunked batches whose pass-1 scores differ, ranked again
        report["entities/nan_one_rank/rerank"] = timed(
            lambda: kgeval.evaluate(shifted, test, filter_triples=train, progress=False,
                                    distributed="entities", entity_chunk_size=4, batch_size=5, tuning=tiles8))
    finally:
        sharded.count_tiles, ranking._rank_chunks_exact = real
    report["nan_one_rank/paths"] = sorted(set(ran))
    # no evaluation triple holds the NaN entity: only rank 1 sees a NaN at all (a candidate)
    clean = test[(test[:, 0] != NaNColumnShard.NAN_ENTITY) & (test[:, 2] != NaNColumnShard.NAN_ENTITY)]
    report["entities/nan_one_rank/candidate_only"] = timed(
        lambda: kgeval.evaluate(nan, clean, filter_triples=train, progress=False, distributed="entities"))
    scorer, _, _ = graph()
    bad = NaNTripleScorer(scorer.entity, scorer.relation, test[-1])
    for case, kw in (("tasks", {}), ("tasks_sampled", dict(num_negatives=7, seed=3))):
        report[f"tasks/nan_one_rank/{case}"] = timed(
            lambda: kgeval.evaluate(bad, test, filter_triples=train, progress=False, distributed="tasks", **kw))
    # what each rank sees alone (the rank 1 shard's NaN column alone; the tasks of each rank's share)
    lo, hi = shard.entity_range
    report["nan_one_rank/slowest_s"] = max(seconds)
    report["nan_one_rank/sees_nan"] = NaNColumnShard.NAN_ENTITY in range(lo, hi)
    share = test[len(test) * rank // world:len(test) * (rank + 1) // world]
    report["nan_one_rank/own_share"] = _error(lambda: kgeval.evaluate(bad, share, filter_triples=[train, test],
                                                                      progress=False))
    return report


def entities(rank, world, train, test):
    report = {}
    mode = "entities"
    for model_name, full, shard in entity_models(rank, world) + float_models(rank, world):
        for name, kw in ENTITY_SCENARIOS.items():
            if model_name == "distmult_nan":
                kw = {**kw, "nan_policy": "worst"}
            if name not in (FLOAT_SCENARIOS if model_name in FLOAT_MODELS else
                            ENTITY_SCENARIOS if model_name in ("distmult", "distmult_nan") else CORE_SCENARIOS):
                continue  # batching, chunks and options do not depend on the model: checked on DistMult
            base = dict(filter_triples=train, progress=False, **kw)
            one = kgeval.evaluate(full, test, **base)
            many = kgeval.evaluate(shard, test, distributed=mode, **base)
            report[f"{mode}/{model_name}/{name}"] = {"single": table(one), "distributed": table(many),
                                                     "protocol_diff": _protocol_diff(one, many, exact=True)}
    name, full, shard = entity_models(rank, world)[0]
    # the sums as all_reduce (NCCL, or more than 4 gloo ranks) instead of all-gather + local sum
    from kgeval.evaluation import collectives as kdist

    gather_ranks = kdist._GATHER_SUM_RANKS
    kdist._GATHER_SUM_RANKS = 0
    try:
        for name_, kw in (("filtered", {}), ("chunked", ENTITY_SCENARIOS["chunked"])):
            base = dict(filter_triples=train, progress=False, **kw)
            one = kgeval.evaluate(full, test, **base)
            many = kgeval.evaluate(shard, test, distributed=mode, **base)
            report[f"{mode}/all_reduce/{name_}"] = {"single": table(one), "distributed": table(many),
                                                   "protocol_diff": _protocol_diff(one, many, exact=True)}
    finally:
        kdist._GATHER_SUM_RANKS = gather_ranks
    # both sums keep the dtype: int32 (float32 query rows travel as their bits) and int64
    sums = {}
    for path in (gather_ranks, 0):
        kdist._GATHER_SUM_RANKS = path
        for dt in (torch.int32, torch.int64):
            got = kdist._sum_over_ranks(torch.arange(6, dtype=dt).view(2, 3) * (rank + 1), world)
            sums[f"{path}/{dt}"] = [str(got.dtype), got.tolist()]
    kdist._GATHER_SUM_RANKS = gather_ranks
    report[f"{mode}/sums"] = sums
    base = dict(filter_triples=train, progress=False, distributed=mode)
    # NaN scores with nan_policy="raise": a named error on every rank (the rank that sees them, or
    # every rank when the query row or the true score is NaN; RankFailedError quoting it otherwise)
    nan = next(s for n, _, s in entity_models(rank, world) if n == "distmult_nan")
    report[f"{mode}/nan_raise"] = _error(lambda: kgeval.evaluate(nan, test, **base))
    # a simulated out-of-memory error on rank 1 halves the batch on both ranks: same table
    oom = FailingShard(shard, "oom") if rank == 1 else shard
    res = kgeval.evaluate(oom, test, batch_size=8, **base)
    report[f"{mode}/oom"] = {"single": table(kgeval.evaluate(full, test, filter_triples=train, progress=False)),
                             "distributed": table(res), "protocol_diff": []}
    # rank 1 holds rank 0's entities
    wrong = full.shard(0, world)
    report[f"{mode}/mismatch_range"] = _error(lambda: kgeval.evaluate(wrong, test, **base))
    # rank 1's model has more entities
    other = _int_weights(get_model("distmult", 31 if rank == 1 else 30, 4, dim=4), seed=1).shard(rank, world)
    report[f"{mode}/mismatch_entities"] = _error(lambda: kgeval.evaluate(other, test, **base))
    # rank 1's shard comes from a model with other relation embeddings
    rel = _int_weights(get_model("distmult", 30, 4, dim=4), seed=1 if rank == 0 else 2).shard(rank, world)
    report[f"{mode}/mismatch_parameters"] = _error(lambda: kgeval.evaluate(rel, test, **base))
    # more ranks than entities
    tiny = EntityShard(get_model("distmult", 1, 1, dim=2), entity_offset=0, num_entities=1)
    report[f"{mode}/too_many_ranks"] = _error(lambda: kgeval.evaluate(tiny, np.array([[0, 0, 0]]), progress=False,
                                                                       distributed=mode))
    # not a shard
    report[f"{mode}/not_a_shard"] = _error(lambda: kgeval.evaluate(full, test, **base))
    # an exception on rank 1 only, in the second batch: both ranks end, none waits
    for where in ("rows", "scores"):
        bad = FailingShard(shard, where, after=1) if rank == 1 else shard
        report[f"{mode}/exception_{where}"] = _error(lambda: kgeval.evaluate(bad, test, batch_size=4, **base))
    return report


class ShiftedColumns(EntityShard):
    """Adds 0.5 to scores asked for as a tensor of entity ids (the answer-columns pass, unions of
    sampled candidates), not to slices (chunks): pass 1 of a chunked batch then differs from the
    chunk scores, and the flagged queries must be ranked again exactly. Records the widest call."""

    def __init__(self, shard):
        super().__init__(shard.local, entity_offset=shard.entity_range[0], num_entities=shard.num_entities)
        self.widest = 0

    def _shift(self, out, entities):
        self.widest = max(self.widest, int(out.shape[1]))
        return out + 0.5 if isinstance(entities, torch.Tensor) else out

    def score_tails_from(self, head_rows, relations, entities=None):
        return self._shift(super().score_tails_from(head_rows, relations, entities), entities)

    def score_heads_from(self, relations, tail_rows, entities=None):
        return self._shift(super().score_heads_from(relations, tail_rows, entities), entities)


class Widest(EntityShard):
    """Records the number of entities scored by the widest call, and for calls on slices (chunks) the
    columns scored in all and the passes over the local slice (calls on a slice starting at its first entity)."""

    def __init__(self, shard):
        super().__init__(shard.local, entity_offset=shard.entity_range[0], num_entities=shard.num_entities)
        self.widest = self.slice_columns = self.passes = 0

    def _note(self, out, entities):
        self.widest = max(self.widest, int(out.shape[1]))
        if entities is None or isinstance(entities, slice):
            self.slice_columns += int(out.shape[1])
            self.passes += entities is None or entities.start == self.entity_range[0]
        return out

    def score_tails_from(self, head_rows, relations, entities=None):
        return self._note(super().score_tails_from(head_rows, relations, entities), entities)

    def score_heads_from(self, relations, tail_rows, entities=None):
        return self._note(super().score_heads_from(relations, tail_rows, entities), entities)


class PlainShard:
    """A user's own DistMult entity shard (no kgeval class, no replicated_digest()): the local entity rows, the
    relation rows every rank must share, an integer offset; ``module=True`` holds them in an nn.Module."""

    def __init__(self, entity, relation, rank, world, module=False):
        from torch import nn

        n = entity.shape[0]
        self.num_entities, self.num_relations = n, relation.shape[0]
        lo, hi = n * rank // world, n * (rank + 1) // world
        self.entity_range = (lo, hi)
        if module:
            self.params = nn.Module()
            self.params.entity = nn.Parameter(entity[lo:hi].clone())
            self.params.relation = nn.Parameter(relation.clone())
            self.params.register_buffer("offset", torch.tensor(lo))  # differs between ranks: not compared
        else:
            self.entity, self.relation, self.offset = entity[lo:hi].clone(), relation.clone(), torch.tensor(lo)

    def _tables(self):
        p = getattr(self, "params", self)
        return p.entity.detach(), p.relation.detach()

    def entity_rows(self, ids):
        return self._tables()[0][torch.as_tensor(ids) - self.entity_range[0]]

    def _local(self, entities):
        ent, lo = self._tables()[0], self.entity_range[0]
        if entities is None:
            return ent
        if isinstance(entities, slice):
            return ent[entities.start - lo:entities.stop - lo]
        return ent[torch.as_tensor(entities) - lo]

    def score_tails_from(self, head_rows, relations, entities=None):
        return (head_rows * self._tables()[1][relations]) @ self._local(entities).T

    def score_heads_from(self, relations, tail_rows, entities=None):
        return (tail_rows * self._tables()[1][relations]) @ self._local(entities).T


class ClosureShard(PlainShard):
    """A user's shard whose parameters live in a closure: nothing the ranks can compare."""

    def __init__(self, *args):
        super().__init__(*args)
        ent, rel = self.entity, self.relation
        del self.entity, self.relation
        self._tables = lambda: (ent, rel)


def user_shards(rank, world, train, test):
    """Entity shards of a user's own class, without replicated_digest(): rank 1 holding other relation rows was
    not noticed (the rank table silently mixed the two); the same relations still evaluate as one process."""
    import warnings

    report = {}
    scorer, _, _ = graph()
    rel = scorer.relation.clone()
    rel[int(test[0, 1])] += 1
    base = dict(filter_triples=train, progress=False)
    one = kgeval.evaluate(scorer, test, **base)
    for kind, module in (("plain", False), ("module", True)):
        same = PlainShard(scorer.entity, scorer.relation, rank, world, module=module)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            many = kgeval.evaluate(same, test, distributed="entities", **base)
        report[f"user_shard/{kind}/same"] = {"single": table(one), "distributed": table(many),
                                             "warnings": [str(w.message) for w in caught]}
        other = PlainShard(scorer.entity, rel if rank == 1 else scorer.relation, rank, world, module=module)
        report[f"user_shard/{kind}/other_relation"] = _error(
            lambda: kgeval.evaluate(other, test, distributed="entities", **base))
    closure = ClosureShard(scorer.entity, rel if rank == 1 else scorer.relation, rank, world)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kgeval.evaluate(closure, test, distributed="entities", **base)
    report["user_shard/closure/warnings"] = [str(w.message) for w in caught]
    return report


def _graph(ne, nr, n_train, n_test, seed):
    rng = np.random.default_rng(seed)
    allt = rng.integers(0, [ne, nr, ne], size=(n_train + n_test, 3))
    return allt[:n_train], allt[n_train:]


def wide(rank, world):
    """Graphs wider than a few dozen entities: sampled candidates scored as unions of columns, the
    re-ranking of chunked batches whose pass-1 scores differ, automatic CPU chunks of the local slice."""
    import kgeval.evaluation.full as ranking
    import kgeval.evaluation.collectives as sharded

    report, mode = {}, "entities"
    redone = []
    rerank = ranking._rank_chunks_exact
    ranking._rank_chunks_exact = lambda *a, **k: redone.append(1) or rerank(*a, **k)

    def run(name, full, shard, test, **kw):
        one = kgeval.evaluate(full, test, progress=False, **kw)
        many = kgeval.evaluate(shard, test, distributed=mode, progress=False, **kw)
        report[f"{mode}/{name}"] = {"single": table(one), "distributed": table(many),
                                    "protocol_diff": _protocol_diff(one, many, exact=True),
                                    "widest": getattr(shard, "widest", None), "local": shard.local.num_entities,
                                    "slice_columns": getattr(shard, "slice_columns", None),
                                    "passes": getattr(shard, "passes", None),
                                    "chunk": many.protocol.get("entity_chunk_size"), "redone": len(redone),
                                    "redone_queries": [one.protocol.get("chunk_redone_queries"),
                                                       many.protocol.get("chunk_redone_queries")],
                                    "queries": distinct_queries(test, 1, full.num_relations)}
        redone.clear()

    # 400 entities (200 per rank), 6 negatives per task in batches of 8: a batch's local candidates are
    # at most 8 x 7 columns (padded to 64), never the whole local slice
    full = _int_weights(get_model("distmult", 400, 5, dim=4), seed=11)
    train, test = _graph(400, 5, 600, 80, seed=2)
    for name, kw in (("sampled_filtered", dict(filter_triples=train)),
                     ("sampled_unfiltered", dict(filtered=False)),
                     ("sampled_restricted", dict(filter_triples=train, restrict_entities=tuple(range(0, 400, 2))))):
        run(f"wide/{name}", full, Widest(full.shard(rank, world)), test, num_negatives=6, seed=5, batch_size=8,
            **kw)
    # automatic batches of sampled tasks (sqrt of the block per candidate): the same table
    run("wide/sampled_auto", full, Widest(full.shard(rank, world)), test, num_negatives=6, seed=5,
        filter_triples=train)
    # pass 1 (a tensor of answer columns) scores 0.5 higher than the chunks: every query is re-ranked
    for name, kw in (("shifted_filtered", dict(filter_triples=train)), ("shifted_unfiltered", dict(filtered=False))):
        run(f"wide/{name}", full, ShiftedColumns(full.shard(rank, world)), test, entity_chunk_size=48,
            batch_size=16, **kw)
    # a consistent scorer: chunked batches (one pass) are never re-ranked
    run("wide/chunked", full, Widest(full.shard(rank, world)), test, entity_chunk_size=48, batch_size=16,
        filter_triples=train)
    run("wide/chunked_restricted", full, Widest(full.shard(rank, world)), test, entity_chunk_size=30,
        batch_size=16, filter_triples=train, restrict_entities=tuple(range(1, 400, 3)))
    # 40,000 entities and 300 tasks per side: on the CPU the 20,000-entity local slices are streamed in
    # automatic chunks (score blocks of ~4M entries), as one process streams its 40,000 columns
    big = _int_weights(get_model("distmult", 40_000, 3, dim=2), seed=13)
    train, test = _graph(40_000, 3, 2000, 300, seed=4)
    run("wide/auto_chunks", big, Widest(big.shard(rank, world)), test, filter_triples=train)
    # whole local rows of unaligned length are scored in column tiles (tiles of 40 here, not 4,096):
    # 298 entities, 149 local columns per rank, as one process tiles its 298
    from kgeval.evaluation import Tuning

    tiled, count_tiles = [], sharded.count_tiles
    tiles40 = Tuning.from_env().replace(tile_cols=40, tile_align=8)
    sharded.count_tiles = lambda *a, **k: tiled.append(1) or count_tiles(*a, **k)
    try:
        model = _int_weights(get_model("distmult", 298, 4, dim=4), seed=17)
        train, test = _graph(298, 4, 500, 120, seed=6)
        for name, kw in (("tiles_filtered", dict(filter_triples=train)), ("tiles_unfiltered", dict(filtered=False)),
                         ("tiles_restricted", dict(filter_triples=train, restrict_entities=tuple(range(0, 298, 3))))):
            tiled.clear()
            run(f"wide/{name}", model, Widest(model.shard(rank, world)), test, tuning=tiles40, **kw)
            report[f"{mode}/wide/{name}"]["tiled"] = len(tiled)
    finally:
        sharded.count_tiles = count_tiles
    ranking._rank_chunks_exact = rerank
    return report


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
