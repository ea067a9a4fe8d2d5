"""Results.p_value, the p-value flat keys, the summary row and the JSON round trip."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import RankTable, Results
from kgeval.errors import InvalidInputError
from kgeval.significance.pvalues import null_p_value


@pytest.fixture(scope="module")
def results():
    rng = np.random.default_rng(5)
    c = rng.integers(10, 300, size=400)
    opt = rng.integers(1, c + 1) // 4 + 1
    pess = np.minimum(opt + rng.integers(0, 3, size=400), c)
    return Results(RankTable.from_ranks(opt, pess, num_candidates=c, side=np.arange(400) % 2))


def test_p_value_is_the_null_p_value_of_that_side_and_rank_type(results):
    t = results.rank_table
    tail = t.select_side("tail")
    got = results.p_value("tail.pessimistic.hits@10")
    want = null_p_value("hits@10", results["tail.pessimistic.hits@10"], tail.num_candidates)
    assert got == want and got.method == "exact: Poisson-binomial"
    # an adjusted or z variant is the same event as its base metric
    assert results.p_value("both.realistic.z_mrr") == results.p_value("both.realistic.mrr")


def test_flat_keys_summary_and_json_round_trip(results, tmp_path):
    flat = results.to_flat_dict(p_values=True)
    # the default flat dict holds the values only: the p-values are one call away
    assert set(flat) - set(results.to_flat_dict()) == {
        k for k in flat if k.split(".")[2].startswith(("p_", "log10_p_"))} != set()
    assert results.to_dict(p_values=True)["tail"]["realistic"]["p_hits_at_3"] == flat["tail.realistic.p_hits_at_3"]
    assert "p_hits_at_3" not in results.to_dict()["tail"]["realistic"]
    p = results.p_value("both.realistic.mrr")
    assert flat["both.realistic.p_inverse_harmonic_mean_rank"] == p.value
    assert flat["both.realistic.log10_p_inverse_harmonic_mean_rank"] == p.log10
    assert results["head.realistic.p_hits_at_10"] == results.p_value("head.realistic.hits@10").value
    assert "p_inverse_harmonic_mean_rank" in results.summary_table()
    back = Results.load_json(results.save_json(tmp_path / "r.json"))
    # p_hits_at_3 is 6.7e-8: pytest.approx's default abs=1e-12 would let it be off by 1.5e-5 relative;
    # the JSON round trip keeps every bit
    assert back.to_flat_dict(p_values=True) == flat
    assert back.to_flat_dict() == results.to_flat_dict()
    assert back.to_flat_dict(p_values=True)["tail.realistic.p_hits_at_3"] == flat["tail.realistic.p_hits_at_3"]


def test_without_a_rank_table_the_saved_p_values_or_null_moments_are_used(results, tmp_path):
    back = Results.load_json(results.save_json(tmp_path / "r.json"))
    # a headline p-value as saved (it was floored at P(all ranks 1), which the moments alone cannot redo)
    got = back.p_value("both.realistic.hits@10")
    assert got.method.startswith("as saved") and got.log10 == results.p_value("both.realistic.hits@10").log10
    assert back.summary_table() == results.summary_table()
    # any other metric, or method="normal": the normal approximation from the saved null moments
    for key, method in (("both.realistic.gmr", "auto"), ("both.realistic.mrr", "normal")):
        got = back.p_value(key, method=method)
        assert got.method.startswith("normal approximation")
        # p ≈ 5e-53 (gmr), 2e-32 (mrr): abs=0, else approx's default abs=1e-12 accepts any p in [0, 1e-12]
        assert got.value == pytest.approx(results.p_value(key, method="normal").value, rel=1e-9, abs=0)


def test_p_values_need_candidates_and_null_moments(results):
    no_c = Results(RankTable.from_ranks([1, 2, 3], [1, 2, 3]))
    with pytest.raises(InvalidInputError):
        no_c.p_value("mrr")
    with pytest.raises(InvalidInputError, match="no null-model moments"):
        results.p_value("median_rank")


def test_loaded_results_read_p_values_by_any_metric_name(results, tmp_path):
    """A loaded result saved its p-values under canonical keys only: back["p_mrr"] raised
    "unknown metric 'p_mrr'. Did you mean: z_mrr" although the value was in the file."""
    back = Results.load_json(results.save_json(tmp_path / "r.json"))
    assert back.rank_table is None
    for key in ("p_mrr", "both.realistic.p_mrr", "tail.log10_p_hits@10", "head.p_z_mrr", "log10_p_igmr"):
        assert back[key] == results[key], key
    assert back["head.p_z_mrr"] == results["head.p_mrr"]
    # not saved (no headline metric): the normal approximation from the saved null moments, as p_value gives
    assert back["p_gmr"] == back.p_value("gmr").value
    assert back["p_gmr"] == pytest.approx(results.p_value("gmr", method="normal").value, rel=1e-9, abs=0)  # p ≈ 5e-53
