"""Protocol differences named by facet; facets only one side states are unknown, not different."""

from __future__ import annotations

from kgeval import Results
from kgeval.results.protocol_diff import protocol_diff


def _p(**kw):
    base = {"sides": ["head", "tail"], "filtered": True, "tie_tolerance": 0.0, "nan_policy": "raise",
            "filter": {"sets": [{"name": "evaluation", "num_triples": 5}, {"name": "training", "num_triples": 9}]},
            "unseen": {"policy": "kept", "triples": 0, "entities": 0, "relations": 0}, "sampling": None,
            "num_entities": 14, "averaging": "micro", "restriction": {"entities": None, "relations": None}}
    base.update(kw)
    return base


def test_identical_protocols_have_no_difference():
    assert protocol_diff(_p(), _p()) == ([], [])


def test_each_facet_is_named():
    b = _p(sides=["tail"], tie_tolerance=1e-5, tie_rtol=1e-4, nan_policy="worst", filtered=False,
           unseen={"policy": "dropped"}, sampling={"num_negatives": 500, "seed": 1}, averaging="macro",
           restriction={"entities": 3, "relations": None}, new_field="x")
    diffs, unknown = protocol_diff(_p(new_field="y"), b, rank_types=("realistic", "rounded_mean"))
    assert [d.facet for d in diffs] == ["rank_type", "filter", "sides", "unseen", "ties", "nan", "candidates",
                                        "weights", "restriction", "new_field"]
    assert {d.facet: d.measurable for d in diffs}["filter"] == "model"
    assert {d.facet: d.measurable for d in diffs}["new_field"] == "no"
    assert unknown == []


def test_unstated_facets_are_unknown_not_different():
    diffs, unknown = protocol_diff(_p(), {"rank_type": "pessimistic", "filtered": True},
                                   rank_types=("realistic", None))
    assert [d.facet for d in diffs] == ["rank_type"]  # "filtered" without sets agrees with any filtered protocol
    assert set(unknown) == {"sides", "unseen", "ties", "nan", "candidates", "weights", "restriction"}


def test_results_protocol_diff():
    a = Results.from_ranks([1, 2], protocol=_p())
    b = Results.from_ranks([1, 2], protocol=_p(filter={"sets": [{"name": "evaluation", "num_triples": 5},
                                                               {"name": "training", "num_triples": 9},
                                                               {"name": "testing", "num_triples": 4}]}))
    (d,) = a.protocol_diff(b)
    assert d.facet == "filter" and d.b.endswith("training + testing")
    assert a.protocol_diff(a) == []
