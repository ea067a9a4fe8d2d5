"""Type-constrained ranking against brute force: every allowed candidate scored one by one and compared in plain
Python, on small random graphs with integer scores (exact ties everywhere), for a table scorer and for every
built-in model family; filtered and unfiltered, with restriction, macro weights, batches and entity chunks;
answers outside their allowed set; a model scoring disallowed entities -inf; the protocol record."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgeval.data.types import CandidateSets
from kgeval.errors import InvalidInputError
from kgeval.evaluation import EvaluationOptions, FunctionScorer, evaluate_ranks
from kgeval.models import get_model, model_names
from kgeval.protocol import EvaluationProtocol
from kgeval.ranks import SIDE_HEAD, SIDE_TAIL
from eval_graphs import table_graph

E, R = 17, 3


def make_graph(seed: int):
    return table_graph(seed, E, R)


def random_sets(seed: int) -> CandidateSets:
    """Random allowed sets: relation 0's head side unconstrained, relation 2's tail side explicitly empty."""
    rng = np.random.default_rng(100 + seed)
    head = {r: rng.choice(E, size=rng.integers(3, 12), replace=False).tolist() for r in (1, 2)}
    tail = {r: rng.choice(E, size=rng.integers(3, 12), replace=False).tolist() for r in (0, 1)}
    tail[2] = []
    return CandidateSets.from_sets(head, tail, num_entities=E, num_relations=R)


def allowed_of(cs: CandidateSets, r: int, side: int) -> set[int]:
    a = cs.allowed(r, side)
    return set(range(E)) if a is None else set(a.tolist())


def brute(score, test, known, cs, *, filtered=True, ents=None, rels=None, num_entities=E):
    """``{(side, triple index): (optimistic, pessimistic, num_candidates)}``, each candidate scored alone by
    ``score(h, r, t)``; candidates: the allowed entities of the task's relation side within ``ents``, minus the
    answer and (filtered) the other known answers. The answer itself is ranked whether allowed or not."""
    known = {tuple(map(int, x)) for x in known}
    ents = set(range(num_entities)) if ents is None else set(ents)
    out = {}
    for i, (h, r, t) in enumerate(map(lambda x: tuple(map(int, x)), test)):
        if h not in ents or t not in ents or (rels is not None and r not in rels):
            continue
        for side in (SIDE_HEAD, SIDE_TAIL):
            ans = t if side == SIDE_TAIL else h
            trip = (lambda e: (h, r, e)) if side == SIDE_TAIL else (lambda e: (e, r, t))
            true = score(*trip(ans))
            allowed = (set(range(num_entities)) if cs is None else allowed_of(cs, r, side)) & ents
            cands = [e for e in sorted(allowed) if e != ans and not (filtered and trip(e) in known)]
            better = sum(score(*trip(e)) > true for e in cands)
            tied = sum(score(*trip(e)) == true for e in cands)
            out[side, i] = (1 + better, 1 + better + tied, 1 + len(cands))
    return out


def rows(tab):
    return {(int(s), int(i)): (int(o), int(p), int(n))
            for s, i, o, p, n in zip(tab.side, tab.triple_index, tab.optimistic, tab.pessimistic, tab.num_candidates)}


def outside_count(test, cs):
    return sum(int(h not in allowed_of(cs, r, SIDE_HEAD)) + int(t not in allowed_of(cs, r, SIDE_TAIL))
               for h, r, t in map(lambda x: tuple(map(int, x)), test))


@pytest.fixture(params=["torch", "numba"])
def kernel(request, monkeypatch):
    monkeypatch.setenv("KGEVAL_COUNT_KERNEL", request.param)
    return request.param


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("filtered", [True, False])
@pytest.mark.parametrize("sets", ["random", "train"])
@pytest.mark.parametrize("batch", [dict(), dict(batch_size=3, entity_chunk_size=4)])
def test_table_scorer_matches_brute_force(kernel, seed, filtered, sets, batch):
    table, train, test = make_graph(seed)
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], E, num_relations=R)
    if sets == "train":  # inferred from a part of train: many test answers fall outside
        cs = CandidateSets.from_triples(train[:30], num_entities=E, num_relations=R)
        value = "train"
        known = {"train": train[:30], "more": train[30:]}
    else:
        cs = value = random_sets(seed)
        known = {"train": train}
    out = evaluate_ranks(scorer, test, filter_triples=known, filtered=filtered, type_constraints=value,
                         progress=False, **batch)
    expected = brute(lambda h, r, t: float(table[h, r, t]), test, np.concatenate([train, test]), cs,
                     filtered=filtered)
    assert rows(out.rank_table) == expected
    record = out.protocol.type_constraints
    assert record.outside_tasks == outside_count(test, cs) > 0
    assert record.sha256 == cs.sha256()
    assert "type constraints" in out.protocol.describe()


@pytest.mark.parametrize("seed", [2, 3])
def test_restriction_and_macro_weights_match_brute_force(kernel, seed):
    table, train, test = make_graph(seed)
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], E, num_relations=R)
    cs = random_sets(seed)
    ents = sorted(np.random.default_rng(seed).choice(E, size=12, replace=False).tolist())
    out = evaluate_ranks(scorer, test, filter_triples=train, type_constraints=cs, restrict_entities=ents,
                         restrict_relations=[0, 2], macro=True, batch_size=2, progress=False)
    expected = brute(lambda h, r, t: float(table[h, r, t]), test, np.concatenate([train, test]), cs, ents=ents,
                     rels={0, 2})
    assert rows(out.rank_table) == expected
    # macro weights: 1 / #evaluated tasks sharing the query (whatever group a task was ranked in)
    kept = [i for i, (h, r, t) in enumerate(test) if h in ents and t in ents and r in (0, 2)]
    tab = out.rank_table
    for s, i, w in zip(tab.side, tab.triple_index, tab.weight):
        h, r, t = test[i]
        same = sum(1 for j in kept if (test[j, 1] == r and (test[j, 0] == h if s == SIDE_TAIL else test[j, 2] == t)))
        assert w == pytest.approx(1 / same)
    assert out.protocol.restrict_entities == len(ents)


def _integer_model(name: str, seed: int):
    """A built-in model in float64 with small integer parameters: every score exact, ties frequent. RotatE's
    phases are 0 (exact rotation); PairRE's entities are signed unit vectors (its normalisation exact)."""
    kw = {"batch_norm": False} if name == "tucker" else {}
    model = get_model(name, E, R, dim=4, seed=seed, **kw).double().eval()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        ent, rel = model.entity.weight, model.relation.weight
        if name == "pairre":
            unit = np.zeros(tuple(ent.shape))
            unit[np.arange(E), rng.integers(0, ent.shape[1], size=E)] = rng.choice([-1.0, 1.0], size=E)
            ent.copy_(torch.as_tensor(unit))
        else:
            ent.copy_(torch.as_tensor(rng.integers(-1, 2, size=tuple(ent.shape)), dtype=ent.dtype))
        rel.copy_(torch.zeros_like(rel) if name == "rotate"
                  else torch.as_tensor(rng.integers(-1, 2, size=tuple(rel.shape)), dtype=rel.dtype))
        if name == "tucker":
            model.core.copy_(torch.as_tensor(rng.integers(-1, 2, size=tuple(model.core.shape)), dtype=model.core.dtype))
    return model


@pytest.mark.parametrize("name", model_names())
@pytest.mark.parametrize("filtered", [True, False])
def test_every_model_family_matches_brute_force(name, filtered):
    _, train, test = make_graph(5)
    model = _integer_model(name, 7)
    cs = random_sets(5)

    def score(h, r, t):  # one triple at a time, the model's own triple scorer
        with torch.no_grad():
            return float(model.score_triples(torch.tensor([h]), torch.tensor([r]), torch.tensor([t]))[0])

    ents = list(range(1, E))
    out = evaluate_ranks(model, test, filter_triples=train, filtered=filtered, type_constraints=cs,
                         restrict_entities=ents, macro=True, progress=False, batch_size=4)
    assert rows(out.rank_table) == brute(score, test, np.concatenate([train, test]), cs, filtered=filtered, ents=ents)


def test_a_model_scoring_disallowed_entities_minus_inf_ranks_the_same():
    """The PyKEEN-style workaround (scores of disallowed entities set to -inf): the same ranks as the constrained
    evaluation for answers inside their sets, but its candidate counts are every entity; kgeval's are the allowed."""
    table, train, test = make_graph(8)
    cs = random_sets(8)
    mask = torch.zeros(R, 2, E, dtype=torch.bool)  # (relation, side, entity): allowed
    for r in range(R):
        for side in (SIDE_HEAD, SIDE_TAIL):
            mask[r, side, sorted(allowed_of(cs, r, side))] = True

    class MinusInf:
        num_entities, num_relations = E, R

        def score_tails(self, h, r):
            return torch.where(mask[r, SIDE_TAIL], table[h, r], float("-inf"))

        def score_heads(self, r, t):
            return torch.where(mask[r, SIDE_HEAD], table[:, r, t].T, float("-inf"))

    inside = np.array([bool(mask[r, SIDE_HEAD, h] and mask[r, SIDE_TAIL, t]) for h, r, t in test])
    test = test[inside]
    plain = evaluate_ranks(MinusInf(), test, filter_triples=train, progress=False).rank_table
    typed = evaluate_ranks(MinusInf(), test, filter_triples=train, type_constraints=cs, progress=False).rank_table
    assert (plain.optimistic == typed.optimistic).all() and (plain.pessimistic == typed.pessimistic).all()
    expected = brute(lambda h, r, t: float(table[h, r, t]), test, np.concatenate([train, test]), cs)
    assert rows(typed) == expected
    # the -inf path's counts: every entity minus the known answers, as if unconstrained
    unconstrained = brute(lambda h, r, t: float(table[h, r, t]), test, np.concatenate([train, test]), None)
    assert {k: v[2] for k, v in rows(plain).items()} == {k: v[2] for k, v in unconstrained.items()}
    assert (typed.num_candidates < plain.num_candidates).any()


def test_answer_outside_its_set_is_ranked_against_the_set_plus_itself():
    scores = torch.tensor([5.0, 1.0, 2.0, 3.0, 9.0])  # by tail entity
    scorer = FunctionScorer(lambda h, r, t: scores[t] + 0 * h, 5, num_relations=1)
    cs = CandidateSets.from_sets({}, {0: [1, 2, 3]}, num_entities=5, num_relations=1)
    test = np.array([[0, 0, 0], [0, 0, 2], [0, 0, 4], [1, 0, 4]])
    out = evaluate_ranks(scorer, test, sides="tail", filtered=False, type_constraints=cs, progress=False)
    tab = out.rank_table
    # 0 (score 5) outside {1, 2, 3}: first of 4, the query's other outside answer 4 (score 9) no candidate of it;
    # 2 inside: 2nd of 3 (3 scores more); 4 (score 9): first of 4, twice
    assert tab.optimistic.tolist() == [1, 2, 1, 1] and tab.num_candidates.tolist() == [4, 3, 4, 4]
    assert out.protocol.type_constraints.outside_tasks == 3
    # filtered: the other known answers of the query (0, 0, ?) leave the candidates where they are ones: 2 for
    # the tasks of 0 and 4 ({1, 3} + the answer); for the task of 2 neither 0 nor 4 is a candidate anyway
    out = evaluate_ranks(scorer, test, sides="tail", type_constraints=cs, progress=False)
    assert out.rank_table.num_candidates.tolist() == [3, 3, 3, 4]
    assert out.rank_table.optimistic.tolist() == [1, 2, 1, 1]


def test_protocol_record_round_trips_and_is_printed():
    table, train, test = make_graph(9)
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], E, num_relations=R)
    out = evaluate_ranks(scorer, test, filter_triples={"train": train}, type_constraints="train", progress=False)
    p = out.protocol
    back = EvaluationProtocol.from_dict(p.to_dict())
    assert back.type_constraints == p.type_constraints and back.extra == {}
    text = p.describe()
    assert "inferred from train (120 triples)" in text and "the entities allowed in the task's position" in text
    assert p.to_dict()["type_constraints"]["outside_tasks"] == p.type_constraints.outside_tasks
    # without constraints nothing changes in the record
    plain = evaluate_ranks(scorer, test, filter_triples={"train": train}, progress=False).protocol
    assert plain.type_constraints is None and "type_constraints" not in plain.to_dict()


def test_options_refuse_what_cannot_be_honoured():
    cs = random_sets(0)
    with pytest.raises(InvalidInputError, match="num_negatives"):
        EvaluationOptions(type_constraints=cs, num_negatives=5)
    with pytest.raises(InvalidInputError, match="query_metrics_k"):
        EvaluationOptions(type_constraints="train", query_metrics_k=3)
    with pytest.raises(InvalidInputError, match="must be None, 'train'"):
        EvaluationOptions(type_constraints=3)
    summary = EvaluationOptions(type_constraints=cs).to_dict()["type_constraints"]
    assert summary["sha256"] == cs.sha256()
    with pytest.raises(InvalidInputError, match="summary"):
        EvaluationOptions(type_constraints=summary)
    table, train, test = make_graph(0)
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], E, num_relations=R)
    with pytest.raises(InvalidInputError, match="filter set named 'train'"):
        evaluate_ranks(scorer, test, filter_triples=[train], type_constraints="train", progress=False)
    small = CandidateSets.from_sets({}, {0: [1]}, num_entities=E - 1, num_relations=R)
    with pytest.raises(InvalidInputError, match="cover 16 entities"):
        evaluate_ranks(scorer, test, type_constraints=small, progress=False)
    import kgeval

    with pytest.raises(InvalidInputError, match="candidates= cannot be combined with type_constraints"):
        kgeval.evaluate(scorer, test, candidates={"tail_neg": np.zeros((len(test), 2), dtype=int)},
                        type_constraints=cs, progress=False)


def test_sharded_single_process_agrees(tmp_path):
    """distributed="entities" (one rank holding every entity as a shard) and "tasks" in a one-rank process group:
    the same rank table as one process, groups and all."""
    import torch.distributed as dist

    _, train, test = make_graph(4)
    model = _integer_model("distmult", 3)
    cs = random_sets(4)
    kw = dict(filter_triples=train, type_constraints=cs, progress=False, restrict_entities=list(range(2, E)))
    one = evaluate_ranks(model, test, **kw, entity_chunk_size=3)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        shard = evaluate_ranks(model.shard(0, 1), test, distributed="entities", entity_chunk_size=3, **kw)
        tasks = evaluate_ranks(model, test, distributed="tasks", **kw)
    finally:
        dist.destroy_process_group()
    for other in (shard, tasks):
        assert rows(other.rank_table) == rows(one.rank_table)
        assert other.protocol.type_constraints == one.protocol.type_constraints


def test_comparisons_refuse_other_constraints():
    from kgeval.significance.align import Model, ProtocolMismatchError, check_protocols

    table, train, test = make_graph(6)
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], E, num_relations=R)

    def model(name, value):
        res = evaluate_ranks(scorer, test, filter_triples={"train": train}, type_constraints=value, progress=False)
        return Model(name, [res.rank_table], res.protocol.to_dict())

    inferred = CandidateSets.from_triples(train, num_entities=E, num_relations=R, source="training")
    check_protocols(model("a", "train"), model("b", inferred))  # the same sets, worded otherwise
    with pytest.raises(ProtocolMismatchError, match="different type constraints"):
        check_protocols(model("a", "train"), model("b", random_sets(6)))
    with pytest.raises(ProtocolMismatchError, match="different type constraints .*none"):
        check_protocols(model("a", "train"), model("b", None))
