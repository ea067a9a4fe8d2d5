"""Scoring contract of every model: shapes, 1-to-all == score_triples, candidate subsets, inverse relations."""

from __future__ import annotations

import pytest
import torch

from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.models import Model, get_model, model_names

N_ENT, N_REL, DIM = 9, 4, 6

# every model, plus the non-default distance norms that take a different (chunked / matmul) path
VARIANTS = [(name, {}) for name in model_names()] + [
    ("transe", {"p": 1}), ("pairre", {"p": 2}), ("tucker", {"relation_dim": 3, "batch_norm": False}),
]
IDS = [name + "".join(f"-{k}={v}" for k, v in kw.items()) for name, kw in VARIANTS]


def _model(name, kw, inverse=False, seed=0):
    model = get_model(name, N_ENT, N_REL, dim=DIM, inverse_relations=inverse, seed=seed, **kw).double()
    if name == "tucker" and model.bn0 is not None:
        # give batch norm non-trivial running statistics so the affine head formula is exercised
        with torch.no_grad():
            for bn in (model.bn0, model.bn1):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-1, 1)
    return model.eval()


def _all_pairs(num_rel):
    anchors = torch.arange(N_ENT).repeat_interleave(num_rel)
    rels = torch.arange(num_rel).repeat(N_ENT)
    return anchors, rels


def test_registry_names():
    assert set(model_names()) == {"transe", "distmult", "complex", "rotate", "tucker", "pairre"}
    assert isinstance(get_model("ComplEx", 3, 2, dim=4), Model)
    assert get_model("TRANSE", 3, 2, dim=4).name == "transe"


def test_unknown_model_suggests():
    with pytest.raises(UnknownNameError, match="complex"):
        get_model("complx", 3, 2)


@pytest.mark.parametrize(("name", "kw"), VARIANTS, ids=IDS)
def test_shapes(name, kw):
    model = _model(name, kw)
    h = torch.tensor([0, 3, 8])
    r = torch.tensor([1, 0, 3])
    assert model.num_entities == N_ENT
    assert model.score_tails(h, r).shape == (3, N_ENT)
    assert model.score_heads(r, h).shape == (3, N_ENT)
    assert model.score_triples(h, r, h).shape == (3,)
    assert model.score_tails(h, r, entities=torch.tensor([2, 5])).shape == (3, 2)


@pytest.mark.parametrize(("name", "kw"), VARIANTS, ids=IDS)
def test_one_to_all_equals_triples(name, kw):
    """score_tails(h, r)[e] == score_triples(h, r, e) and score_heads(r, t)[e] == score_triples(e, r, t)."""
    model = _model(name, kw)
    a, r = _all_pairs(N_REL)
    tails, heads = model.score_tails(a, r), model.score_heads(r, a)
    for e in range(N_ENT):
        col = torch.full_like(a, e)
        torch.testing.assert_close(tails[:, e], model.score_triples(a, r, col), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(heads[:, e], model.score_triples(col, r, a), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("name", "kw"), VARIANTS, ids=IDS)
def test_entity_subset_equals_columns(name, kw):
    model = _model(name, kw)
    a, r = _all_pairs(N_REL)
    subset = torch.tensor([7, 0, 4, 4])
    full_t, full_h = model.score_tails(a, r), model.score_heads(r, a)
    torch.testing.assert_close(model.score_tails(a, r, entities=subset), full_t[:, subset])
    torch.testing.assert_close(model.score_heads(r, a, entities=subset), full_h[:, subset])
    torch.testing.assert_close(model.score_tails(a, r, entities=slice(2, 6)), full_t[:, 2:6])
    torch.testing.assert_close(model.score_heads(r, a, entities=slice(3, None)), full_h[:, 3:])


@pytest.mark.parametrize(("name", "kw"), VARIANTS, ids=IDS)
def test_inverse_relations(name, kw):
    """With inverse relations, (?, r, t) is scored as (t, r + R, ?)."""
    model = _model(name, kw, inverse=True)
    assert model.num_relation_embeddings == 2 * N_REL
    a, r = _all_pairs(N_REL)
    heads = model.score_heads(r, a)
    torch.testing.assert_close(heads, model.score_tails(a, r + N_REL))
    for e in range(N_ENT):
        torch.testing.assert_close(heads[:, e], model.score_triples(a, r + N_REL, torch.full_like(a, e)))
    with pytest.raises(InvalidInputError, match="relations"):
        model.score_heads(torch.tensor([N_REL]), torch.tensor([0]))  # inverse ids are internal


def test_chunked_l1_matches_unchunked(monkeypatch):
    """The bounded-memory L1 path gives the same scores when forced into many tiny chunks."""
    import kgeval.models.base as base

    for name in ("transe", "pairre"):
        model = _model(name, {"p": 1})
        a, r = _all_pairs(N_REL)
        expected = model.score_tails(a, r), model.score_heads(r, a)
        monkeypatch.setattr(base, "CHUNK_ELEMENTS", 1)
        got = model.score_tails(a, r), model.score_heads(r, a)
        monkeypatch.undo()
        torch.testing.assert_close(got, expected)


def test_gradients_flow_through_one_to_all():
    for name in model_names():
        model = get_model(name, N_ENT, N_REL, dim=DIM, seed=0)
        model.score_tails(torch.tensor([0, 1]), torch.tensor([1, 2])).sum().backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert any(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads), name


def test_seeded_construction_is_reproducible_and_isolated():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    m1 = get_model("complex", N_ENT, N_REL, dim=DIM, seed=5)
    after = torch.rand(1)
    m2 = get_model("complex", N_ENT, N_REL, dim=DIM, seed=5)
    assert torch.equal(before, after)  # the caller's RNG stream is untouched
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p1, p2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": 0}, "dim"),
        ({"dim": 2.5}, "dim"),
        ({"inverse_relations": "yes"}, "inverse_relations"),
        ({"p": 3}, "p"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_model_options(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        get_model("transe", N_ENT, N_REL, **kwargs)


def test_bad_model_sizes_and_indices():
    with pytest.raises(InvalidInputError, match="num_entities"):
        get_model("distmult", 0, 3)
    model = get_model("distmult", N_ENT, N_REL, dim=DIM)
    with pytest.raises(InvalidInputError, match="heads"):
        model.score_tails(torch.tensor([N_ENT]), torch.tensor([0]))
    with pytest.raises(InvalidInputError, match="relations"):
        model.score_tails(torch.tensor([0]), torch.tensor([-1]))
    with pytest.raises(InvalidInputError, match="equal lengths"):
        model.score_triples(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([0, 1]))
    with pytest.raises(InvalidInputError, match="integer"):
        model.score_tails(torch.tensor([0.0]), torch.tensor([0]))
    with pytest.raises(InvalidInputError, match="entities"):
        model.score_tails(torch.tensor([0]), torch.tensor([0]), entities=torch.tensor([N_ENT]))


@pytest.mark.parametrize(("name", "kw"), VARIANTS, ids=IDS)
@pytest.mark.parametrize("inverse", [False, True])
def test_out_block_gives_the_same_scores(name, kw, inverse):
    """``out=`` (the evaluator's reused block) never changes a score; matrix-product models write
    into it (the result *is* the block), the distance models may ignore it."""
    model = _model(name, kw, inverse=inverse).float()
    anchors, rels = _all_pairs(N_REL)
    with torch.inference_mode():
        for method, args in (("score_tails", (anchors, rels)), ("score_heads", (rels, anchors))):
            for entities in (None, slice(2, 7)):
                ref = getattr(model, method)(*args, entities=entities)
                block = torch.full(ref.shape, float("nan"))
                got = getattr(model, method)(*args, entities=entities, out=block)
                assert torch.equal(got, ref)
                if name in ("distmult", "complex") or (name == "tucker" and (method == "score_tails" or inverse
                                                                                 or model.bn0 is None)):
                    assert got.data_ptr() == block.data_ptr()
            wrong = torch.empty(ref.shape, dtype=torch.float64)  # a block that does not fit is not used
            assert torch.equal(getattr(model, method)(*args, entities=slice(2, 7), out=wrong), ref)


def test_out_block_is_not_used_when_gradients_are_tracked():
    model = get_model("distmult", N_ENT, N_REL, dim=DIM)
    block = torch.zeros(N_ENT * N_REL, N_ENT)
    anchors, rels = _all_pairs(N_REL)
    scores = model.score_tails(anchors, rels, out=block)
    assert scores.requires_grad and scores.data_ptr() != block.data_ptr()
    scores.sum().backward()
    assert model.entity.weight.grad is not None


@pytest.mark.parametrize(("name", "kw"), VARIANTS, ids=IDS)
@pytest.mark.parametrize("inverse", [False, True])
def test_prepared_queries_give_the_same_scores_bit_for_bit(name, kw, inverse):
    """``score_prepared(prepare_tails(h, r), entities, out)`` (what ``score_tails`` runs) equals the
    model's per-call arithmetic ``_tails_from(entity rows, r, candidate rows)`` exactly: the query
    vectors built once (``_tail_query``) round as when built inside each call, for every candidate
    spec, with and without an ``out=`` block; heads likewise (inverse relations: the tail form)."""
    model = _model(name, kw, inverse=inverse).float()
    anchors, rels = _all_pairs(N_REL)
    W = model.entity.weight

    def per_call(side, entities):
        cand = model._rows(W, model._candidates(entities))
        if side == "tails":
            return model._tails_from(model.entity(anchors), rels, cand)
        if inverse:
            return model._tails_from(model.entity(anchors), rels + N_REL, cand)
        return model._heads_from(rels, model.entity(anchors), cand)

    with torch.inference_mode():
        for side, prep, args in (("tails", "prepare_tails", (anchors, rels)), ("heads", "prepare_heads", (rels, anchors))):
            prepared = getattr(model, prep)(*args)
            for entities in (None, slice(2, 7), torch.tensor([0, 3, 8])):
                ref = per_call(side, entities)
                assert torch.equal(model.score_prepared(prepared, entities=entities), ref)
                block = torch.full(ref.shape, float("nan"))
                assert torch.equal(model.score_prepared(prepared, entities=entities, out=block), ref)
                # a range of the prepared rows: those rows of the batch's scores (the same query
                # numbers; a product over 3 rows may round differently from one over all: TuckER's does)
                torch.testing.assert_close(model.score_prepared(prepared.rows(2, 5), entities=entities), ref[2:5])
    with pytest.raises(InvalidInputError, match="heads"):
        model.prepare_tails(torch.tensor([N_ENT]), torch.tensor([0]))


def test_prepared_queries_follow_a_subclass_and_are_not_used_past_its_own_scoring():
    """A subclass overriding ``_tails_from`` is scored by it (the parent's prepared query vectors are
    not used); one overriding the public ``score_tails`` is not prepared by the evaluator at all."""
    from kgeval.evaluation.scoring import _prepare_method
    from kgeval.models import DistMult
    from kgeval.ranks import SIDE_HEAD, SIDE_TAIL

    class Shifted(DistMult):
        def _tails_from(self, h_rows, r, cand_rows, out=None):
            return super()._tails_from(h_rows, r, cand_rows) + 1.0

    class Public(DistMult):
        def score_tails(self, heads, relations, entities=None, out=None):
            return super().score_tails(heads, relations, entities) * 2

    shifted = Shifted(N_ENT, N_REL, dim=DIM).eval()
    anchors, rels = _all_pairs(N_REL)
    with torch.inference_mode():
        ref = shifted.score_tails(anchors, rels, entities=slice(1, 5))
        assert torch.equal(shifted.score_prepared(shifted.prepare_tails(anchors, rels), entities=slice(1, 5)), ref)
    public = Public(N_ENT, N_REL, dim=DIM)
    assert _prepare_method(public, SIDE_TAIL) is None and _prepare_method(public, SIDE_HEAD) is not None
    assert _prepare_method(shifted, SIDE_TAIL) is not None


@pytest.mark.parametrize(("name", "option"), [("tucker", "batch_norm"), ("transe", "normalize_entities")])
@pytest.mark.parametrize("value", ["False", "false", 0, None])
def test_boolean_options_are_not_read_by_truthiness(name, option, value):
    # bool("False") is True: a configuration file's "False" built a TuckER *with* batch norm (and TransE
    # with its unit-norm constraint), while the run's configuration said 'False'
    with pytest.raises(InvalidInputError, match=option):
        get_model(name, N_ENT, N_REL, dim=DIM, **{option: value})
    off = get_model(name, N_ENT, N_REL, dim=DIM, **{option: False})
    assert off.hparams[option] is False
    if name == "tucker":
        assert off.bn0 is None and off.bn1 is None
