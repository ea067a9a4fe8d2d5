"""The epoch strategies against independent computations: LCWA label rows, sLCWA corruptions."""

from __future__ import annotations

import collections

import pytest
import torch

from kgeval.errors import InvalidInputError
from kgeval.models import get_model
from kgeval.training import TrainingConfig, train
from kgeval.training.epochs import LcwaEpoch, SlcwaEpoch, TrainingTriples

TRIPLES = torch.tensor([[0, 0, 1], [0, 0, 2], [1, 0, 2], [2, 1, 0], [0, 0, 1], [3, 1, 0], [1, 1, 3]])


def test_slcwa_with_one_entity_is_refused():
    """The only corruption of (0, 0, 0) in a one-entity graph is the triple itself: it was trained as its own negative."""
    model = get_model("distmult", 1, 1, dim=2, seed=0)
    with pytest.raises(InvalidInputError, match="at least 2 entities"):
        train(model, torch.tensor([[0, 0, 0]]), loop="slcwa", epochs=1, progress=False)


def test_slcwa_corruptions_are_uniform_over_the_other_entities():
    n_ent, k = 5, 3
    model = get_model("distmult", n_ent, 2, dim=3, seed=0)
    data = TrainingTriples.of(model, TRIPLES, n_ent, 2)
    epoch = SlcwaEpoch(model, data, TrainingConfig(loop="slcwa", num_negatives=k))
    gen = torch.Generator().manual_seed(1)
    counts = collections.Counter()
    for _ in range(1000):
        (nh, nr, nt), head_side, _ = epoch._corrupt(data.head[:2], data.relation[:2], data.tail[:2], gen)
        assert nh.numel() == 2 * k
        for i, (h, r, t, side) in enumerate(zip(nh.tolist(), nr.tolist(), nt.tolist(), head_side.tolist())):
            ph, pr, pt = TRIPLES[i // k].tolist()
            assert r == pr and (h, t) != (ph, pt)
            assert (t == pt) if side else (h == ph)  # exactly one side replaced
            if i // k == 0:
                counts[(side, h if side else t)] += 1
    # (0, 0, 1): heads 1..4, tails {0, 2, 3, 4}, each about 3000 / 8 = 375 times
    assert set(counts) == {(True, e) for e in (1, 2, 3, 4)} | {(False, e) for e in (0, 2, 3, 4)}
    assert all(300 < c < 450 for c in counts.values()), counts


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("batch_size", [1, 2, 100])
def test_lcwa_rows_hold_every_known_answer_once_per_query(inverse, batch_size):
    model = get_model("distmult", 4, 2, dim=3, inverse_relations=inverse, seed=0)
    data = TrainingTriples.of(model, TRIPLES, 4, 2)
    epoch = LcwaEpoch(model, data, TrainingConfig(batch_size=batch_size))
    known = TRIPLES.tolist()
    seen = collections.Counter()
    for side_idx, q in epoch._batches(torch.Generator().manual_seed(0)):
        side, queries = epoch.sides[side_idx]
        assert q.numel() <= batch_size
        rows, cols = queries.targets(q)
        for i, query in enumerate(q.tolist()):
            a, r = int(queries.anchor[query]), int(queries.relation[query])
            if side.name == "TAIL" and r < 2:
                expected = {t for h, rr, t in known if (h, rr) == (a, r)}
            else:  # a head query: (?, r, a), or the inverse tail query (a, r + 2, ?)
                expected = {h for h, rr, t in known if (t, rr) == (a, r % 2)}
            assert set(cols[rows == i].tolist()) == expected
            seen[(side.name, a, r)] += 1
    tails = {("TAIL", h, r) for h, r, _ in known}
    heads = {("TAIL", t, r + 2) for _, r, t in known} if inverse else {("HEAD", t, r) for _, r, t in known}
    assert seen.keys() == tails | heads and set(seen.values()) == {1}
