"""Null moments kept per rank table, side and base metric (results.compute.side_moments): a second
result, an on-demand key and a p-value of the same table reuse them; another table never sees them."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import RankTable, Results
from kgeval.metrics.means import GeometricMeanRank, InverseHarmonicMeanRank
from kgeval.significance.pvalues import null_p_value


def _table(seed: int = 3, n: int = 300, weighted: bool = False) -> RankTable:
    rng = np.random.default_rng(seed)
    c = rng.integers(5, 400, size=n)
    opt = np.minimum(1 + rng.geometric(0.05, size=n), c)
    pes = np.minimum(opt + rng.integers(0, 3, size=n), c)
    w = rng.random(n) + 0.1 if weighted else None
    return RankTable.from_ranks(opt, pes, num_candidates=c, side=np.arange(n) % 2, weights=w)


@pytest.fixture
def calls(monkeypatch):
    """Count the moment computations of MRR and GMR."""
    counted = {"mrr": 0, "gmr": 0}
    for cls, name in ((InverseHarmonicMeanRank, "mrr"), (GeometricMeanRank, "gmr")):
        original = cls._null_moments

        def wrapped(self, c, w, _original=original, _name=name):
            counted[_name] += 1
            return _original(self, c, w)

        monkeypatch.setattr(cls, "_null_moments", wrapped)
    return counted


@pytest.mark.parametrize("weighted", [False, True])
def test_a_second_result_of_the_same_table_reuses_the_moments_and_equals_a_fresh_one(calls, weighted):
    table = _table(weighted=weighted)
    first = Results(table).to_flat_dict()
    assert calls == {"mrr": 3, "gmr": 3}  # head, tail, both: once each
    second = Results(table)
    assert calls == {"mrr": 3, "gmr": 3}
    second["power_mean_rank_p2"], second.p_value("head.realistic.mrr"), second.p_value("tail.realistic.gmr")
    assert calls == {"mrr": 3, "gmr": 3}
    # an equal table built again computes them again, to the same bits
    again = Results(_table(weighted=weighted)).to_flat_dict()
    assert calls == {"mrr": 6, "gmr": 6}
    kept = second.to_flat_dict()
    assert kept.pop("both.realistic.power_mean_rank_p2") == Results(table)["power_mean_rank_p2"]
    assert first == kept == again


def test_kept_moments_belong_to_their_table_only():
    table = _table()
    whole = Results(table)
    part = table.subset(table.num_candidates > 200)  # other candidate counts: other moments
    sub = Results(part)
    assert sub.null_moments["both"]["inverse_harmonic_mean_rank"] != whole.null_moments["both"]["inverse_harmonic_mean_rank"]
    assert sub.null_moments["both"] == Results(_table().subset(table.num_candidates > 200)).null_moments["both"]


@pytest.mark.parametrize("key", ["tail.realistic.mrr", "both.pessimistic.hits@10", "head.realistic.igmr", "both.realistic.mr"])
def test_a_p_value_with_the_kept_moments_is_the_one_computed_from_scratch(key):
    table = _table(weighted=False)
    results = Results(table)
    side = key.split(".")[0]
    part = table.select_side(side)
    want = null_p_value(key.split(".")[2], results[key], part.num_candidates)
    assert results.p_value(key) == want
