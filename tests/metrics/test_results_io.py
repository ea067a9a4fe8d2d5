"""Results JSON: loaded results have what fresh ones have; no NaN/inf in files; clear errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kgeval import metrics
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.ranks import RankTable
from kgeval.results import Results, metric_table


@pytest.fixture(scope="module")
def results():
    o = np.array([1, 3, 2, 7, 1, 4])
    p = np.array([1, 5, 2, 9, 3, 4])
    w = [1.0, 2.0, 1.0, 1.0, 0.5, 1.0]
    return Results(RankTable.from_ranks(o, p, num_candidates=[20, 20, 30, 30, 40, 40], side=[0, 1] * 3, weights=w))


def test_loaded_results_have_null_moments_and_protocol(results, tmp_path):
    """Results.load_json(p).null_model raised AttributeError and null moments were never saved."""
    loaded = Results.load_json(results.save_json(tmp_path / "r.json"))
    assert loaded.null_model == results.null_model
    assert loaded.null_moments == results.null_moments
    assert loaded.null_model["both"]["inverse_harmonic_mean_rank"]["exact"] is True
    assert loaded.protocol == json.loads(json.dumps(results.protocol))
    assert loaded.to_flat_dict() == results.to_flat_dict()
    assert loaded.sides == results.sides
    assert loaded.summary_table() == results.summary_table()
    assert Results.from_json(results.to_json()).null_model == results.null_model


def test_loaded_results_with_rank_table_compute_new_keys(results, tmp_path):
    loaded = Results.load_json(results.save_json(tmp_path / "r.json"), rank_table=results.rank_table)
    assert loaded.get_metric("hits@7") == results.get_metric("hits@7")


def test_protocol_records_rank_types_present(results):
    assert results.protocol["rank_types"] == ["optimistic", "pessimistic", "realistic", "expected"]
    only = Results(results.rank_table, protocol={"rank_types": ["optimistic", "realistic"]}, rank_types=["optimistic"])
    assert only.protocol["rank_types"] == ["optimistic"]


def test_non_finite_values_are_written_as_null(tmp_path):
    """NaN went into JSON output (not valid JSON); now null, and skipped when read back."""
    res = Results.from_values(
        {("both", "realistic", "inverse_harmonic_mean_rank"): 0.5, ("both", "realistic", "arithmetic_mean_rank"): math.inf},
        extra={"both.precision_at_5": float("nan")},
        protocol={"note": float("-inf"), "ok": np.float64(1.5)},
    )
    path = res.save_json(tmp_path / "r.json")
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard constant {c}"))
    assert data["metrics"]["both.realistic.arithmetic_mean_rank"] is None
    assert data["metrics"]["both.precision_at_5"] is None
    assert data["protocol"] == {"note": None, "ok": 1.5}
    back = Results.load_json(path)
    assert back.to_flat_dict() == {"both.realistic.inverse_harmonic_mean_rank": 0.5}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "top level is a list"),
        (b'{"protocol": {}}', "no 'metrics' object"),
        (b'{"metrics": {"mrr": "high"}}', "non-numeric value"),
        (b'{"metrics": {}, "protocol": 3}', "'protocol' is not an object"),
        (b'{"metrics": {}, "null_moments": {"both": {"mrr": 1}}}', "malformed 'null_moments'"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_malformed_file_names_file_and_problem(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(InvalidInputError, match=problem) as info:
        Results.load_json(path)
    assert str(path) in str(info.value)


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InvalidInputError, match="cannot read"):
        Results.load_json(tmp_path / "nope.json")


def test_one_table_renderer_with_labels(results):
    text = metric_table(results, [("MRR", "mrr"), "hits@10", ("nothing", "hits@9")], footer=False)
    lines = text.splitlines()
    assert lines[0].split() == ["metric", "head", "tail", "both"]
    assert lines[2].startswith("MRR ") and lines[3].startswith("hits_at_10 ")
    assert len(lines) == 4  # hits@9 is not among the stored values: row dropped
    assert results.summary_table(["mrr"]) == metric_table(results, ["mrr"])


def test_typed_protocol_view(results, tmp_path):
    typed = results.evaluation_protocol
    assert typed.rank_types == ("optimistic", "pessimistic", "realistic", "expected")
    assert "rank types:" in typed.describe()
    assert Results.load_json(results.save_json(tmp_path / "r.json")).evaluation_protocol.rank_types == typed.rank_types


def test_side_with_zero_total_weight_has_no_values():
    """A side whose tasks all have weight 0 has no weighted mean: its values are absent (they were
    NaN, which then went into JSON), the other sides are unaffected."""
    table = RankTable.from_ranks([1, 2, 3, 4], num_candidates=[5] * 4, side=[0, 0, 1, 1], weights=[1.0, 2.0, 0.0, 0.0])
    res = Results(table)
    assert res.sides == ["head", "both"]
    assert res.get_metric("head.mrr") == res.get_metric("both.mrr") == pytest.approx((1 + 2 / 2) / 3)
    with pytest.raises(UnknownNameError):
        res.get_metric("tail.mrr")


def test_relation_with_zero_total_weight_is_nan_in_breakdown():
    table = RankTable.from_ranks([1, 2, 3], num_candidates=[5] * 3, weights=[1.0, 0.0, 2.0], relation=[0, 1, 0])
    out = Results(table).by_relation(["mrr"])
    assert out[0]["inverse_harmonic_mean_rank"] == pytest.approx((1 + 2 / 3) / 3)
    assert math.isnan(out[1]["inverse_harmonic_mean_rank"])


@pytest.mark.parametrize("key", ["both.realistic.inverse_harmonic_mean_rank", "both.realistic.mrr", "mrr", "tail.best.hits@10"])
def test_extra_values_may_not_shadow_computed_metrics(key):
    """extra={"both.realistic.inverse_harmonic_mean_rank": 0.9, "both.realistic.mrr": 0.8} gave three
    MRRs for one table: results["mrr"] 0.8, the canonical key and to_flat_dict 0.9, the summary 0.6111."""
    table = RankTable.from_ranks([1, 2, 3], num_candidates=10, side=[0, 1, 1])
    with pytest.raises(InvalidInputError, match="names the metric"):
        Results(table, extra={key: 0.9})
    ok = Results(table, extra={"both.precision_at_3": 0.25, "tail.random_recall_at_10": 0.1})
    assert ok["both.precision_at_3"] == 0.25 and ok["mrr"] == metrics.get("mrr")([1, 2, 3])
