"""Scores a scorer cannot mean (meta device, sparse / nested / MKL-DNN layouts, complex, wrong shape)
and entity counts that cannot fit are refused by one named InvalidInputError, never a raw torch /
numpy traceback (issue 31, class 7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kgeval
from kgeval import InvalidInputError
from kgeval._validation import check_entity_count, check_score_tensor

E, R = 6, 2
TABLE = torch.arange(E * R * E, dtype=torch.float32).reshape(E, R, E) % 5
GOOD = np.array([[0, 0, 1], [2, 1, 3]])

BAD = {
    "meta": (lambda x: torch.empty(x.shape, device="meta"), "'meta' device, which holds no data"),
    "sparse": (lambda x: x.to_sparse(), "sparse_coo tensor; return dense"),
    "sparse_csr": (lambda x: x.to_sparse_csr(), "sparse_csr tensor; return dense"),
    "nested": (lambda x: torch.nested.nested_tensor(list(x)), "nested tensor"),
    "complex": (lambda x: x.to(torch.complex64), "floating-point scores, got dtype torch.complex64"),
    "numpy": (lambda x: x.numpy(), "must return a torch.Tensor, got ndarray"),
    "columns": (lambda x: x[:, :-1], r"returned shape \(\d+, \d+\), expected"),
}


def _scorer(f, per_candidates=False):
    class S:
        num_entities, num_relations = E, R

        def score_tails(self, h, r):
            return f(TABLE[h, r])

        def score_heads(self, r, t):
            return f(TABLE[:, r, t].T.contiguous())

    if per_candidates:
        S.score_tail_candidates = lambda self, h, r, c: f(TABLE[h, r].gather(1, c))
    return S()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize("mode", ["full", "sampled", "candidates", "candidates-per-candidate"])
def test_impossible_scores_name_the_scorer_method(kind, mode):
    f, match = BAD[kind]
    if kind == "numpy" and mode == "candidates":
        pytest.skip("whole rows in the candidates mode go through torch.as_tensor: numpy rows are fine there")
    kw = {"full": {}, "sampled": {"num_negatives": 2, "sides": "tail"}}.get(mode, {})
    if mode.startswith("candidates"):
        kw = {"candidates": {"tail_neg": np.array([[2, 3], [4, 5]])}}
    s = _scorer(f, per_candidates=mode == "candidates-per-candidate")
    with pytest.raises(InvalidInputError, match=r"scorer\.score_(tail|head)(s|_candidates) .*" + match
                       if kind not in ("numpy", "complex") else match):
        kgeval.evaluate(s, GOOD, progress=False, **kw)


def test_good_scores_still_rank_the_same_in_every_mode():
    """The checks refuse nothing valid: float64, non-contiguous and grad-carrying scores give the
    ranks of the plain float32 table (brute force: 1 + #strictly better, realistic ties)."""
    base = kgeval.evaluate(_scorer(lambda x: x), GOOD, progress=False, filter_triples=None)
    for f in (lambda x: x.double(), lambda x: x.t().contiguous().t(), lambda x: x.clone().requires_grad_(True)):
        other = kgeval.evaluate(_scorer(f), GOOD, progress=False, filter_triples=None)
        assert other["mrr"] == pytest.approx(base["mrr"], abs=0)
    # the candidates mode against a brute-force count over the two given negatives
    cands = np.array([[2, 3], [4, 5]])
    res = kgeval.evaluate(_scorer(lambda x: x), GOOD, candidates={"tail_neg": cands}, progress=False)
    ranks = []
    for (h, r, t), negs in zip(GOOD, cands):
        s = TABLE[h, r, t]
        better = sum(float(TABLE[h, r, n]) > float(s) for n in negs)
        tied = sum(float(TABLE[h, r, n]) == float(s) for n in negs)
        ranks.append(1 + better + tied / 2)
    assert res["mrr"] == pytest.approx(np.mean([1 / x for x in ranks]), rel=1e-12)


def test_check_score_tensor_accepts_dense_real_scores():
    check_score_tensor("scorer.score_tails", torch.zeros(2, 3, dtype=torch.float64), (2, 3))
    with pytest.raises(InvalidInputError, match="returned shape"):
        check_score_tensor("scorer.score_tails", torch.zeros(3, 2), (2, 3))


class _Huge:
    """Declares more entities than any machine holds (``2**31 + 5``, and ``2**62``)."""

    num_relations = 2

    def __init__(self, n):
        self.num_entities = n

    def score_tails(self, h, r):  # never reached
        raise AssertionError("scored before the size check")

    score_heads = score_tails


@pytest.mark.parametrize("n", [2**40 + 5, 2**62])
@pytest.mark.parametrize("kw", [{}, {"num_negatives": 3}])
def test_an_impossible_entity_count_is_refused_before_allocating(n, kw):
    """Before: numpy's _ArrayMemoryError for an int64 range of 8 n bytes (or "Maximum allowed size
    exceeded"); now the declared count, the bytes needed and the bytes free."""
    with pytest.raises(InvalidInputError, match=rf"num_entities={n} does not fit in memory.*GiB"):
        kgeval.evaluate(_Huge(n), np.array([[0, 0, 1]]), progress=False, **kw)


def test_check_entity_count_arithmetic():
    # 12 bytes per entity on the host alone; 8 on the host + 4 on the device otherwise
    check_entity_count(100, host_free=1200)
    with pytest.raises(InvalidInputError, match="on the host"):
        check_entity_count(100, host_free=1199)
    check_entity_count(100, host_free=800, device_free=400)
    with pytest.raises(InvalidInputError, match="on the device"):
        check_entity_count(100, host_free=800, device_free=399)
    check_entity_count(10**15, host_free=None)  # unknown free memory: no check


def test_consistency_check_names_meta_triple_scores():
    class S:
        num_entities, num_relations = E, R

        def score_tails(self, h, r):
            return TABLE[h, r]

        def score_heads(self, r, t):
            return TABLE[:, r, t].T.contiguous()

        def score_triples(self, h, r, t):
            return torch.empty(len(h), device="meta")

    with pytest.raises(InvalidInputError, match=r"scorer\.score_triples returned scores on the 'meta' device"):
        kgeval.evaluate(S(), GOOD, progress=False)


def test_an_entity_shard_needs_no_whole_score_row():
    check_entity_count(100, host_free=800, score_row=False)  # the candidate ids only
    with pytest.raises(InvalidInputError, match="on the host"):
        check_entity_count(100, host_free=799, score_row=False)
    check_entity_count(100, host_free=800, device_free=0, score_row=False)
