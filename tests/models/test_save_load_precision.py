"""A saved model comes back in its own precision (:func:`kgeval.models.load_model`)."""

from __future__ import annotations

import numpy as np
import torch

from kgeval.evaluation import evaluate_ranks
from kgeval.models import get_model, load_model


def test_float64_model_loads_as_float64_and_ranks_the_same(tmp_path):
    """load_state_dict copied a float64 model's weights into a float32 one: near-ties 1e-9 apart became
    exact ties and the ranks changed."""
    torch.manual_seed(0)
    model = get_model("distmult", 30, 2, dim=8, seed=3).double()
    with torch.no_grad():
        model.entity.weight[1::2] = model.entity.weight[0::2] + 1e-9  # neighbours 1e-9 apart
    path = tmp_path / "m.pt"
    model.save(path)
    back = load_model(path)
    assert back.entity.weight.dtype == torch.float64
    assert torch.equal(back.entity.weight, model.entity.weight)
    rng = np.random.default_rng(0)
    test = np.stack([rng.integers(0, 30, 40), rng.integers(0, 2, 40), rng.integers(0, 30, 40)], 1)
    a = evaluate_ranks(model.eval(), test, progress=False).rank_table
    b = evaluate_ranks(back, test, progress=False).rank_table
    assert np.array_equal(np.asarray(a.optimistic), np.asarray(b.optimistic))
    assert np.array_equal(np.asarray(a.pessimistic), np.asarray(b.pessimistic))
    f32 = model.float()
    c = evaluate_ranks(f32, test, progress=False).rank_table  # what the float32 load gave: ties
    assert not np.array_equal(np.asarray(a.pessimistic), np.asarray(c.pessimistic))
