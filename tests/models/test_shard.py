"""Entity shards of the built-in models (no process group needed): the shards' scores, put side by
side, are the whole model's; ranges, errors and the plain-embedding shard."""

import numpy as np
import pytest
import torch

import kgeval
from kgeval.errors import InvalidInputError
from kgeval.evaluation.distributed import TooManyRanksError, shard_range
from kgeval.models import EntityShard, from_embeddings, get_model, model_names, shard_embeddings


@pytest.mark.parametrize("name", model_names())
@pytest.mark.parametrize("inverse", [False, True])
def test_shards_score_like_the_whole_model(name, inverse):
    ne, nr, world = 23, 3, 3
    model = get_model(name, ne, nr, dim=4, inverse_relations=inverse, seed=0).eval()
    with torch.no_grad():
        for p in model.parameters():  # away from the default init, TuckER's batch norms included
            p.add_(0.1 * torch.randn_like(p))
    h = torch.tensor([0, 5, 22, 9])
    r = torch.tensor([0, 2, 1, 1])
    shards = [model.shard(k, world) for k in range(world)]
    assert [s.entity_range for s in shards] == [shard_range(ne, k, world) for k in range(world)] \
        == [(0, 7), (7, 15), (15, 23)]
    owner = [next(s for s in shards if s.entity_range[0] <= int(e) < s.entity_range[1]) for e in h]
    rows = torch.cat([o.entity_rows(e[None]) for o, e in zip(owner, h)])
    with torch.no_grad():
        tails = torch.cat([s.score_tails_from(rows, r) for s in shards], 1)
        heads = torch.cat([s.score_heads_from(r, rows) for s in shards], 1)
        torch.testing.assert_close(tails, model.score_tails(h, r), rtol=0, atol=1e-5)
        torch.testing.assert_close(heads, model.score_heads(r, h), rtol=0, atol=1e-5)
        # entities= (global ids inside the shard) as a slice and as a tensor
        s = shards[1]
        torch.testing.assert_close(s.score_tails_from(rows, r, entities=slice(9, 12)), tails[:, 9:12])
        torch.testing.assert_close(s.score_heads_from(r, rows, entities=torch.tensor([14, 7])), heads[:, [14, 7]])
    assert sum(s.local.entity.weight.shape[0] for s in shards) == ne


def test_shard_errors():
    model = get_model("distmult", 5, 2, dim=3)
    with pytest.raises(TooManyRanksError, match="world size 6 is larger than the number of entities 5"):
        model.shard(0, 6)
    with pytest.raises(InvalidInputError, match="rank must lie in"):
        model.shard(2, 2)
    s = model.shard(1, 2)
    with pytest.raises(InvalidInputError, match="not held by this shard"):
        s.entity_rows(torch.tensor([0]))
    with pytest.raises(InvalidInputError, match="not held by this shard"):
        s.score_tails_from(torch.zeros(1, 3), torch.tensor([0]), entities=torch.tensor([1]))
    # a shard is not a scorer on its own: evaluating it in one process is refused by name
    with pytest.raises(InvalidInputError, match="entity shard.*distributed='entities'"):
        kgeval.evaluate(s, np.array([[0, 0, 1]]), progress=False)
    with pytest.raises(InvalidInputError, match="do not lie in"):
        EntityShard(get_model("distmult", 3, 2, dim=3), entity_offset=4, num_entities=5)


def test_shard_embeddings_reads_only_its_rows(tmp_path):
    rng = np.random.default_rng(0)
    ent = rng.standard_normal((11, 4)).astype(np.float32)
    rel = rng.standard_normal((2, 4)).astype(np.float32)
    path = tmp_path / "ent.npy"
    np.save(path, ent)
    whole = from_embeddings("distmult", ent, rel)
    for source in (ent, str(path)):
        s = shard_embeddings("distmult", source, rel, rank=1, world=2)
        assert s.entity_range == (5, 11) and s.num_entities == 11
        np.testing.assert_array_equal(s.local.entity.weight.detach().numpy(), ent[5:11])
        h, r = torch.tensor([1, 7]), torch.tensor([0, 1])
        rows = whole.entity.weight[h].detach()
        torch.testing.assert_close(s.score_tails_from(rows, r), whole.score_tails(h, r)[:, 5:].detach())
    with pytest.raises(InvalidInputError, match="has 12 entities"):
        shard_embeddings("distmult", ent, rel, rank=0, world=2, num_entities=12)


@pytest.mark.parametrize("name", ["complex", "tucker"])
def test_load_model_shard_equals_shard_of_loaded_model(tmp_path, name):
    """load_model(path, shard=(rank, world)) builds only the local rows (memory-mapped file) and
    scores like model.shard(rank, world) of the whole loaded model; labels and checksum are kept."""
    from kgeval.models import load_model

    model = get_model(name, 9, 2, dim=4, seed=1).eval()
    labels = [f"e{i}" for i in range(9)]
    path = tmp_path / "m.pt"
    model.save(path, entity_labels=labels, relation_labels=["a", "b"])
    whole = load_model(path).eval()
    for rank in range(2):
        s = load_model(path, shard=(rank, 2)).eval()
        ref = whole.shard(rank, 2)
        assert isinstance(s, EntityShard) and s.entity_range == ref.entity_range and s.num_entities == 9
        assert s.local.num_entities == ref.local.num_entities < 9
        assert s.entity_labels == labels and s.relation_labels == ["a", "b"]
        rows = whole.entity.weight[[0, 8]].detach()
        with torch.no_grad():
            torch.testing.assert_close(s.score_tails_from(rows, torch.tensor([0, 1])),
                                       ref.score_tails_from(rows, torch.tensor([0, 1])), rtol=0, atol=0)
    with pytest.raises(TooManyRanksError):
        load_model(path, shard=(0, 10))
    blob = torch.load(path, weights_only=True)
    blob["state_dict"]["entity.weight"][0, 0] += 1
    torch.save(blob, path)
    with pytest.raises(InvalidInputError, match="checksum"):
        load_model(path, shard=(0, 2))


@pytest.mark.parametrize("name", model_names())
@pytest.mark.parametrize("inverse", [False, True])
def test_prepared_shard_queries_score_bit_for_bit_like_score_from(name, inverse):
    """``score_prepared_from(prepare_tails_from(rows, r), entities, out)`` (what ``score_tails_from``
    runs) is exactly the local model's per-call arithmetic (``_tails_from`` on the rows), heads
    likewise; the evaluator prepares an :class:`EntityShard` but not a shard class scoring its own way."""
    from kgeval.evaluation.scoring import _prepare_from
    from kgeval.ranks import SIDE_HEAD, SIDE_TAIL

    model = get_model(name, 23, 3, dim=4, inverse_relations=inverse, seed=1).eval()
    shard = model.shard(1, 3)
    rows = model.entity.weight.detach()[[0, 5, 22, 9]]
    r = torch.tensor([0, 2, 1, 1])
    m = shard.local

    def per_call(side, entities):  # the local model's own arithmetic, queries rebuilt in the call
        cand = shard._local(entities)
        if side == "tails":
            return m._tails_from(rows, r, cand)
        return m._tails_from(rows, r + 3, cand) if inverse else m._heads_from(r, rows, cand)

    with torch.inference_mode():
        for side, prep, args in (("tails", "prepare_tails_from", (rows, r)), ("heads", "prepare_heads_from", (r, rows))):
            prepared = getattr(shard, prep)(*args)
            for entities in (None, slice(9, 12), torch.tensor([14, 7])):
                ref = per_call(side, entities)
                assert torch.equal(getattr(shard, f"score_{side}_from")(*args, entities=entities), ref)
                assert torch.equal(shard.score_prepared_from(prepared, entities=entities), ref)
                block = torch.full(ref.shape, float("nan"))
                assert torch.equal(shard.score_prepared_from(prepared, entities=entities, out=block), ref)
    assert _prepare_from(shard, SIDE_TAIL) is not None and _prepare_from(shard, SIDE_HEAD) is not None

    class Own(EntityShard):
        def score_tails_from(self, head_rows, relations, entities=None, out=None):
            return super().score_tails_from(head_rows, relations, entities) + 1

    own = Own.__new__(Own)
    own.__dict__.update(shard.__dict__)
    assert _prepare_from(own, SIDE_TAIL) is None and _prepare_from(own, SIDE_HEAD) is not None
