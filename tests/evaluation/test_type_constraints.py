"""Type-constrained ranking against brute force (every allowed candidate scored one by one in plain numpy), a
model that scores disallowed entities -inf, answers outside their allowed set, and the types files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kgeval
from kgeval.data.types import TypeConstraints
from kgeval.errors import InvalidInputError
from kgeval.evaluation import FunctionScorer
from kgeval.models import from_embeddings, get_model


def _graph(seed: int, e: int = 12, r: int = 4):
    rng = np.random.default_rng(seed)
    train = np.unique(np.stack([rng.integers(0, e, 70), rng.integers(0, r, 70), rng.integers(0, e, 70)], 1), axis=0)
    test = np.unique(np.stack([rng.integers(0, e, 20), rng.integers(0, r, 20), rng.integers(0, e, 20)], 1), axis=0)
    return train, test, e, r


def _models(e, r, seed):
    rng = np.random.default_rng(seed)
    yield "distmult", from_embeddings("distmult", rng.integers(-1, 2, (e, 3)).astype(float),
                                      rng.integers(-1, 2, (r, 3)).astype(float))  # exact ties
    yield "complex", from_embeddings("complex", rng.integers(-1, 2, (e, 4)).astype(float),
                                     rng.integers(-1, 2, (r, 4)).astype(float))
    for name in ("transe", "rotate", "tucker", "pairre"):
        yield name, get_model(name, e, r, dim=4, seed=seed).eval()


def _brute(model, test, known: set, constraints, filtered: bool, restrict=None):
    """{(triple index, side): (optimistic, pessimistic, num_candidates)} over the allowed entities (plus an
    answer outside them), the other known answers removed."""
    out = {}
    for i, (h, r, t) in enumerate(test.tolist()):
        if restrict is not None and (h not in restrict or t not in restrict):
            continue
        for side in (0, 1):
            answer = h if side == 0 else t
            allowed = set(constraints.allowed(r, side).tolist())
            if restrict is not None:
                allowed &= set(restrict)
            cands = sorted(allowed | {answer})
            if filtered:
                cands = [c for c in cands if c == answer or ((c, r, t) if side == 0 else (h, r, c)) not in known]
            with torch.no_grad():
                scores = [float(model.score_triples(torch.tensor([c if side == 0 else h]), torch.tensor([r]),
                                                    torch.tensor([t if side == 0 else c]))[0]) for c in cands]
            s = scores[cands.index(answer)]
            better, tied = sum(v > s for v in scores), sum(v == s for v in scores) - 1
            out[(i, side)] = (1 + better, 1 + better + tied, len(cands))
    return out


def _table(results):
    t = results.rank_table
    return {(int(i), int(s)): (int(o), int(p), int(c)) for i, s, o, p, c in
            zip(t.triple_index, t.side, t.optimistic, t.pessimistic, t.num_candidates)}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("filtered", [True, False])
def test_every_model_family_matches_brute_force(seed, filtered):
    train, test, e, r = _graph(seed)
    constraints = TypeConstraints.from_triples(train, e, r)
    known = {tuple(x) for x in train.tolist()} | {tuple(x) for x in test.tolist()}
    for name, model in _models(e, r, seed):
        res = kgeval.evaluate(model, test, filter_triples={"train": train}, type_constraints="train",
                              filtered=filtered, progress=False)
        assert _table(res) == _brute(model, test, known, constraints, filtered), name
    outside = sum(a not in constraints.allowed(rel, s) for h, rel, t in test.tolist() for s, a in ((0, h), (1, t)))
    assert res.protocol["type_constraints"]["answers_outside"] == outside > 0  # the rule was exercised


def test_restriction_macro_and_chunks():
    train, test, e, r = _graph(2)
    constraints = TypeConstraints.from_triples(train, e, r)
    known = {tuple(x) for x in train.tolist()} | {tuple(x) for x in test.tolist()}
    model = dict(_models(e, r, 2))["distmult"]
    restrict = list(range(2, 12))
    res = kgeval.evaluate(model, test, filter_triples=train, type_constraints=constraints, macro=True,
                          restrict_entities=restrict, entity_chunk_size=3, progress=False)
    assert _table(res) == _brute(model, test, known, constraints, True, restrict)
    t = res.rank_table
    anchors = np.where(t.side == 1, test[t.triple_index, 0], test[t.triple_index, 2])
    keys = list(zip(anchors.tolist(), t.relation.tolist(), t.side.tolist()))
    assert np.allclose(t.weight, [1 / keys.count(k) for k in keys])


def test_a_model_scoring_disallowed_entities_minus_inf_ranks_alike_but_counts_fewer_candidates():
    train, test, e, r = _graph(3)
    constraints = TypeConstraints.from_triples(train, e, r)
    test = np.array([x for x in test.tolist() if x[0] in constraints.allowed(x[1], 0)
                     and x[2] in constraints.allowed(x[1], 1)])  # answers inside their sets
    rng = np.random.default_rng(3)
    table = torch.as_tensor(rng.integers(0, 5, size=(e, r, e)).astype(np.float64))
    for rel in range(r):
        table[[i for i in range(e) if i not in constraints.allowed(rel, 0)], rel, :] = -np.inf
        table[:, rel, [i for i in range(e) if i not in constraints.allowed(rel, 1)]] = -np.inf
    scorer = FunctionScorer(lambda h, rel, t: table[h, rel, t], e, num_relations=r)
    typed = kgeval.evaluate(scorer, test, filter_triples=train, type_constraints=constraints, progress=False)
    plain = kgeval.evaluate(scorer, test, filter_triples=train, progress=False)
    a, b = _table(typed), _table(plain)
    assert {k: v[:2] for k, v in a.items()} == {k: v[:2] for k, v in b.items()}  # the same ranks
    assert all(a[k][2] <= b[k][2] for k in a) and sum(v[2] for v in a.values()) < sum(v[2] for v in b.values())
    # but only the allowed candidates count (the known answers removed from both)
    assert typed.get_metric("both.realistic.adjusted_mrr") < plain.get_metric("both.realistic.adjusted_mrr")


def test_files_both_layouts_and_their_errors(tmp_path):
    openke = tmp_path / "type_constrain.txt"
    openke.write_text("2\n0\t2\t1\t3\n0\t1\t2\n1\t1\t0\n1\t3\t1\t2\t3\n")
    c = TypeConstraints.from_file(openke, 5, 2)
    assert c.allowed(0, 0).tolist() == [1, 3] and c.allowed(0, 1).tolist() == [2]
    assert c.allowed(1, 0).tolist() == [0] and c.allowed(1, 1).tolist() == [1, 2, 3]
    tsv = tmp_path / "types.tsv"
    tsv.write_text("likes\thead\talice\nlikes\ttail\tbob\nlikes\ttail\tcarol\n")
    c = TypeConstraints.from_file(tsv, 3, 1, entity_to_id={"alice": 0, "bob": 1, "carol": 2},
                                  relation_to_id={"likes": 0})
    assert c.allowed(0, 0).tolist() == [0] and c.allowed(0, 1).tolist() == [1, 2]
    bad = {"1\n0\t2\t1\n0\t0\n": "says 2 entities but lists 1", "3\n0\t0\n": "declares 3 relations",
           "likes\tmiddle\tbob\n": "side must be head or tail", "likes\thead\n": "expected relation<TAB>side",
           "likes\thead\tzed\n": "unknown entity 'zed'", "": "empty"}
    for text, message in bad.items():
        tsv.write_text(text)
        with pytest.raises(InvalidInputError, match=message):
            TypeConstraints.from_file(tsv, 3, 1, entity_to_id={"bob": 1}, relation_to_id={"likes": 0})
    with pytest.raises(InvalidInputError, match="out of range"):
        TypeConstraints.from_pairs([0], [1], [7], 5, 1)


def test_widened_by_entity_types():
    train = np.array([[0, 0, 1]])
    types = np.array([[0, 10], [2, 10], [1, 20], [3, 20], [4, 30]])  # 0 ~ 2, 1 ~ 3
    c = TypeConstraints.from_triples(train, 5, 1, entity_types=types)
    assert c.allowed(0, 0).tolist() == [0, 2] and c.allowed(0, 1).tolist() == [1, 3]


def test_bad_use_is_named():
    train, test, e, r = _graph(4)
    model = dict(_models(e, r, 4))["distmult"]
    with pytest.raises(InvalidInputError, match="needs the training triples"):
        kgeval.evaluate(model, test, filter_triples=[train], type_constraints="train", progress=False)
    with pytest.raises(InvalidInputError, match="TypeConstraints or 'train'"):
        kgeval.evaluate(model, test, type_constraints=42, progress=False)
    with pytest.raises(InvalidInputError, match="num_negatives"):
        kgeval.evaluate(model, test, filter_triples={"train": train}, type_constraints="train", num_negatives=3,
                        progress=False)


def test_a_relation_without_stated_types_allows_every_entity(tmp_path):
    """A types file that leaves a relation out constrains nothing there (an empty allowed set would rank every
    answer first); the protocol counts those tasks."""
    train, test, e, r = _graph(6)
    model = dict(_models(e, r, 6))["distmult"]
    partial = TypeConstraints.from_triples(train[train[:, 1] != 1], e, r)  # relation 1 stated nowhere
    typed = kgeval.evaluate(model, test, filter_triples=train, type_constraints=partial, progress=False)
    plain = kgeval.evaluate(model, test, filter_triples=train, progress=False)
    a, b = _table(typed), _table(plain)
    rel1 = [k for k in a if test[k[0], 1] == 1]
    assert rel1 and all(a[k] == b[k] for k in rel1)
    assert typed.protocol["type_constraints"]["unconstrained_tasks"] == len(rel1)


def test_hostile_files_are_refused_by_name(tmp_path):
    path = tmp_path / "types.txt"
    path.write_bytes("likes\thead\tbob\n".encode("utf-16"))
    with pytest.raises(InvalidInputError, match="not a UTF-8 text file"):
        TypeConstraints.from_file(path, 3, 1)
    path.write_text("1\n0\t1\t" + "9" * 40 + "\n0\t0\n")
    with pytest.raises(InvalidInputError, match="in range"):
        TypeConstraints.from_file(path, 3, 1)
    path.write_text("1\n0\tmany\t1\n0\t0\n")
    with pytest.raises(InvalidInputError, match="line 2: count 'many' is not an integer"):
        TypeConstraints.from_file(path, 3, 1)
    with pytest.raises(InvalidInputError, match="cannot read type constraints"):
        TypeConstraints.from_file(tmp_path / "absent.txt", 3, 1)
