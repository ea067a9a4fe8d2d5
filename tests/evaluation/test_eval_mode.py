"""A torch-module scorer is evaluated in eval mode (:func:`kgeval.evaluation.scoring.eval_mode`): no
dropout, no batch-norm updates, and its own modes restored afterwards."""

from __future__ import annotations

import numpy as np
import torch

import kgeval
from kgeval.evaluation import evaluate_ranks
from kgeval.models import get_model

NE, NR = 40, 3


def _data():
    rng = np.random.default_rng(0)
    return np.stack([rng.integers(0, NE, 60), rng.integers(0, NR, 60), rng.integers(0, NE, 60)], 1)


def _table(out):
    return np.asarray(out.rank_table.optimistic), np.asarray(out.rank_table.pessimistic)


def test_training_mode_model_is_ranked_as_in_eval_mode():
    """A TuckER in training mode (dropout 0.3-0.5, batch norm) ranked with dropout: two evaluations of
    the same weights differed, and batch-norm statistics moved."""
    test = _data()
    torch.manual_seed(0)
    model = get_model("tucker", NE, NR, dim=8, seed=1, batch_norm=True)
    for m in model.modules():  # non-trivial running statistics, so eval and train batch norms differ
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    model.train()
    model.bn1.eval()  # a submodule already in eval mode stays so
    modes = {name: m.training for name, m in model.named_modules()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    a = _table(evaluate_ranks(model, test, progress=False))
    b = _table(evaluate_ranks(model, test, progress=False))
    assert {name: m.training for name, m in model.named_modules()} == modes  # restored, submodule by submodule
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k  # no batch-norm statistics updated
    model.eval()
    ref = _table(evaluate_ranks(model, test, progress=False))
    for x, y, z in zip(a, b, ref):
        assert np.array_equal(x, z) and np.array_equal(y, z)


def test_candidates_mode_too():
    test = _data()
    model = get_model("tucker", NE, NR, dim=8, seed=1)
    cand = {"tail_neg": (test[:, 2:3] + 1 + np.arange(10)) % NE}  # never the true answer
    model.train()
    a = kgeval.evaluate(model, test, candidates=cand, progress=False).rank_table
    assert model.training
    model.eval()
    b = kgeval.evaluate(model, test, candidates=cand, progress=False).rank_table
    assert np.array_equal(np.asarray(a.optimistic), np.asarray(b.optimistic))
