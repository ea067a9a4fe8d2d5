"""Adjusting published numbers: ``kgeval.adjust`` and ``kgeval adjust``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import kgeval
from kgeval.cli import main
from kgeval.errors import InvalidInputError, UnknownNameError


def test_adjusted_index_and_z_follow_from_the_null_model():
    null = kgeval.null_model("kinships")
    table = kgeval.adjust("kinships", {"mrr": 0.6, "hits@10": 0.9, "mr": 3.5, "tail.hits@1": 0.4}, as_frame=False)
    by = {row["metric"]: row for row in table}
    for name, key, value, opt in (("mrr", "both.mrr", 0.6, 1.0), ("hits@10", "both.hits@10", 0.9, 1.0),
                                  ("mr", "both.mr", 3.5, 1.0), ("tail.hits@1", "tail.hits@1", 0.4, 1.0)):
        e, sd = null.expected_value(key), null.std(key)
        row = by[name]
        assert row["expected_value"] == e and row["std"] == pytest.approx(sd)
        assert row["adjusted_index"] == pytest.approx((value - e) / (opt - e))
        sign = -1 if name == "mr" else 1  # a smaller mean rank is better
        assert row["z"] == pytest.approx(sign * (value - e) / sd)
        assert row["log10_p_value"] < -6  # in log space: the p-value itself may underflow to 0
        assert row["p_value"] == pytest.approx(10 ** row["log10_p_value"], rel=1e-9, abs=1e-300)
    assert by["tail.hits@1"]["side"] == "tail"


def test_p_value_is_about_one_half_at_the_null_expectation_and_falls_with_better_values():
    null = kgeval.null_model("nations")
    e = null.expected_value("mrr")
    rows = kgeval.adjust("nations", {"mrr": e}, as_frame=False) + kgeval.adjust("nations", {"mrr": e + 0.02},
                                                                                as_frame=False)
    assert 0.3 < rows[0]["p_value"] < 0.7
    assert rows[1]["p_value"] < rows[0]["p_value"] / 3


def test_dataframe_names_the_protocol():
    pytest.importorskip("pandas")
    df = kgeval.adjust("fb15k237", {"mrr": 0.356, "hits@10": 0.541, "mr": 177}, drop_unseen=True)
    assert list(df.metric) == ["mrr", "hits@10", "mr"]
    assert "train + valid + test" in df.attrs["protocol"] and "dropped" in df.attrs["protocol"]
    assert df.adjusted_index.iloc[0] == pytest.approx(0.356, abs=1e-3)  # E[MRR] is tiny on FB15k-237


@pytest.mark.parametrize("values,error,match", [
    ({"mrx": 0.3}, UnknownNameError, "mrx"),
    ({"mrr": 1.5}, InvalidInputError, "outside the range"),
    ({"mr": 0.5}, InvalidInputError, "outside the range"),
    ({"mr": 99}, InvalidInputError, "lies in"),  # Nations has at most 14 candidates
    ({"mrr": float("nan")}, InvalidInputError, "mrr"),
    ({"mrr": "0.3"}, InvalidInputError, "number"),
    ({"z_mrr": 3.0}, InvalidInputError, "already adjusted"),
    ({"std": 3.0}, InvalidInputError, "no analytic"),
    ({}, InvalidInputError, "non-empty"),
])
def test_bad_values_are_named(values, error, match):
    with pytest.raises(error, match=match):
        kgeval.adjust("nations", values)


def test_cli_prints_the_table_and_the_protocol():
    res = CliRunner().invoke(main, ["adjust", "--dataset", "fb15k237", "mrr=0.356", "hits@10=0.541", "mr=177"])
    assert res.exit_code == 0, res.output
    assert "filtered with train + valid + test" in res.output and "unseen entities kept" in res.output
    null = kgeval.null_model("fb15k237")
    mrr_line = next(line for line in res.output.splitlines() if line.startswith("mrr "))
    assert f"{null.expected_value('mrr'):.3e}" in mrr_line


def test_cli_json_matches_the_api():
    args = ["adjust", "--dataset", "umls", "--split", "valid", "--side", "head", "--format", "json", "mrr=0.5"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    [row] = payload["metrics"]
    expected = kgeval.adjust("umls", {"mrr": 0.5}, "valid", side="head", as_frame=False)[0]
    assert row == expected and payload["protocol"]["filter_sets"] == ["train", "valid"]


@pytest.mark.parametrize("args,message", [
    (["mrr"], "malformed argument 'mrr'"),
    (["mrr=abc"], "not a number"),
    (["mrr=0.3", "mrr=0.4"], "given twice"),
    (["hits@10=1.2"], "outside the range"),
    (["mrx=0.3"], "unknown metric 'mrx'"),
    ([], "at least one metric=value"),
    (["--dataset", "fb15k238", "mrr=0.3"], "unknown dataset 'fb15k238'"),
])
def test_cli_errors_exit_2_with_a_named_message(args, message):
    if "--dataset" not in args:
        args = ["--dataset", "nations", *args]
    res = CliRunner().invoke(main, ["adjust", *args])
    assert res.exit_code == 2 and message in res.output, res.output


@pytest.mark.parametrize("values", [{"mrr": 0.3, "MRR": 0.5}, {"mrr": 0.3, "inverse_harmonic_mean_rank": 0.3},
                                    {"hits@10": 0.9, "both.hits_at_10": 0.9}])
def test_one_metric_under_two_names_is_refused(values):
    """kgeval adjust mrr=0.3 MRR=0.5 printed two rows for one metric, one of them for a value not reported."""
    with pytest.raises(InvalidInputError, match="same metric"):
        kgeval.adjust("nations", values)
    assert len(kgeval.adjust("nations", {"mrr": 0.3, "tail.mrr": 0.4}, as_frame=False)) == 2  # other sides: two metrics
