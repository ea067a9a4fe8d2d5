"""EvaluationOptions (declared and validated once) and EvaluationProtocol (the record of a run)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from eval_graphs import E, small_graph

import kgeval
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.evaluation import EvaluationOptions, evaluate_ranks
from kgeval.keys import RANK_TYPES
from kgeval.protocol import EvaluationProtocol



def test_options_round_trip_through_json_and_normalise():
    o = EvaluationOptions(sides="both", restrict_entities={3, 1, 1}, query_metrics_k=[10, 1, 10], device="cpu",
                          memory_budget=1e6)
    assert o.sides == ("head", "tail") and o.restrict_entities == (1, 3) and o.query_metrics_k == (1, 10)
    assert o.memory_budget == 1_000_000 and isinstance(o.memory_budget, int)
    back = EvaluationOptions.from_dict(json.loads(json.dumps(o.to_dict())))
    assert back == o
    assert o.replace(seed=3).seed == 3 and o.seed == 42
    with pytest.raises(Exception):
        o.seed = 1  # frozen


@pytest.mark.parametrize("name", ["batch_size", "num_negatives", "entity_chunk_size", "num_relations", "seed"])
def test_options_refuse_bools_for_integers(name):
    with pytest.raises(InvalidInputError, match=name):
        EvaluationOptions(**{name: True})


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"tie_tolerance": float("nan")}, "tie_tolerance"),
        ({"tie_tolerance": -1.0}, "tie_tolerance"),
        ({"nan_policy": "ignore"}, "nan_policy"),
        ({"seed": -1}, "seed"),
        ({"memory_budget": 0}, "memory_budget"),
        ({"memory_budget": 1.5}, r"memory_budget is a whole number of bytes, got 1\.5 \(for 1\.5 GiB pass 1\.5 \* 2\*\*30\)"),
        ({"filtered": "yes"}, "filtered"),
        ({"query_metrics_k": (0,)}, "query_metrics_k"),
        # a lone float k raised TypeError: 'float' object is not iterable
        ({"query_metrics_k": 2.0}, "query_metrics_k must be a positive integer, got 2.0"),
        ({"query_metrics_k": np.float64(3.0)}, "query_metrics_k must be a positive integer"),
        ({"sides": "middle"}, "unknown side"),
        ({"device": "nonsense-device"}, "device"),
    ],
)
def test_options_name_the_bad_option(kw, match):
    with pytest.raises(InvalidInputError, match=match):
        EvaluationOptions(**kw)


def test_unknown_option_suggests_the_close_name():
    with pytest.raises(UnknownNameError, match="num_negatives"):
        EvaluationOptions.from_dict({"num_negative": 3})
    scorer, train, test = small_graph()
    with pytest.raises(UnknownNameError, match="tie_tolerance"):
        kgeval.evaluate(scorer, test, tie_tolerence=0.1, progress=False)


def test_whitelist_aliases_only_at_the_evaluate_door():
    scorer, train, test = small_graph()
    ents = list(range(1, E))
    a = kgeval.evaluate(scorer, test, filter_triples=train, restrict_entities=ents, progress=False)
    b = kgeval.evaluate(scorer, test, filter_triples=train, entity_whitelist=ents, progress=False)
    assert a.to_flat_dict() == b.to_flat_dict()
    with pytest.raises(InvalidInputError, match="given twice"):
        kgeval.evaluate(scorer, test, restrict_entities=ents, entity_whitelist=ents, progress=False)
    with pytest.raises(UnknownNameError):
        EvaluationOptions.from_dict({"entity_whitelist": ents})


def test_options_object_and_keywords_give_the_same_result():
    scorer, train, test = small_graph(1)
    kw = dict(sides="tail", num_negatives=4, seed=3, macro=True, progress=False)
    a = kgeval.evaluate(scorer, test, filter_triples=train, **kw)
    b = kgeval.evaluate(scorer, test, filter_triples=train, options=EvaluationOptions(**kw))
    c = kgeval.evaluate(scorer, test, filter_triples=train, options=EvaluationOptions(seed=3), sides="tail",
                        num_negatives=4, macro=True, progress=False)
    d = kgeval.evaluate(scorer, test, filter_triples=train, options={"seed": 3, "sides": "tail", "num_negatives": 4,
                                                                      "macro": True, "progress": False})
    assert a.to_flat_dict() == b.to_flat_dict() == c.to_flat_dict() == d.to_flat_dict()
    with pytest.raises(InvalidInputError, match="options must be"):
        kgeval.evaluate(scorer, test, options=["tail"])


def test_protocol_records_rank_types_present_and_one_realistic_key():
    scorer, train, test = small_graph(2)
    res = kgeval.evaluate(scorer, test, filter_triples={"train": train}, progress=False)
    proto = res.protocol
    assert tuple(proto["rank_types"]) == RANK_TYPES and "expected" in proto["rank_types"]
    # every recorded rank type has values, and no value has an unrecorded rank type
    present = {k.split(".")[1] for k in res.to_flat_dict() if k.count(".") == 2}
    assert present == set(proto["rank_types"])
    assert "realistic" in proto and "realistic_rank" not in proto


def test_protocol_round_trips_and_reads_the_old_layout():
    scorer, train, test = small_graph(3)
    out = evaluate_ranks(scorer, test, filter_triples={"train": train}, num_negatives=3, macro=True,
                         restrict_relations=[0, 1], progress=False)
    p = out.protocol
    assert EvaluationProtocol.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    old = p.to_dict()
    old.pop("realistic")
    old["realistic_rank"] = "mean of optimistic and pessimistic (expected rank under random tie-breaking)"
    old["rank_types"] = ["optimistic", "realistic", "pessimistic"]
    old["something_new"] = {"a": 1}
    q = EvaluationProtocol.from_dict(old)
    assert q.extra == {"something_new": {"a": 1}} and q.sampling == p.sampling and q.macro
    assert q.to_dict()["something_new"] == {"a": 1} and "realistic_rank" not in q.to_dict()
    assert EvaluationProtocol.from_dict(None).describe()  # an empty record still prints


def test_protocol_reports_chunk_redone_queries_and_reads_files_without_it():
    """The count of query rows re-ranked after a pass-1 true score differed (RunContext.chunk_redone_queries)
    was computed but missing from the protocol. Now recorded (0 when none), next to entity_chunk_size, kept
    through to_dict / from_dict and JSON, printed when not 0; an older file without it loads as None and is
    written back without the key."""
    scorer, train, test = small_graph(3)
    p = evaluate_ranks(scorer, test, filter_triples={"train": train}, entity_chunk_size=4, progress=False).protocol
    assert p.chunk_redone_queries == 0 and p.to_dict()["chunk_redone_queries"] == 0
    keys = list(p.to_dict())
    assert keys.index("chunk_redone_queries") == keys.index("entity_chunk_size") + 1
    assert EvaluationProtocol.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    assert "ranked again" not in p.describe()
    seven = p.replace(chunk_redone_queries=7)
    assert EvaluationProtocol.from_dict(json.loads(json.dumps(seven.to_dict()))).chunk_redone_queries == 7
    assert "entity chunks: 7 query rows ranked again exactly" in seven.describe()
    old = p.to_dict()
    del old["chunk_redone_queries"]
    q = EvaluationProtocol.from_dict(old)
    assert q.chunk_redone_queries is None and q.extra == {} and q.to_dict() == old


def test_describe_names_filter_sets_restriction_and_sampling():
    scorer, train, test = small_graph(4)
    out = evaluate_ranks(scorer, test, filter_triples={"training": train}, num_negatives=3, seed=5,
                         restrict_relations=[0, 1], progress=False)
    text = out.protocol.describe()
    assert f"training ({len(train)})" in text and "evaluation (" in text
    assert "restriction: 2 relations" in text and "seed 5" in text and "expected" in text
    unf = evaluate_ranks(scorer, test, filtered=False, progress=False).protocol.describe()
    assert "unfiltered" in unf


def test_sampler_seed_follows_the_one_seed_rule():
    # the same rule as pipeline/hpo seeds: 0 <= seed < 2**32 (numpy/torch/Optuna all accept it)
    from kgeval.errors import InvalidInputError
    from kgeval.evaluation.options import EvaluationOptions

    assert EvaluationOptions(seed=2**32 - 1).seed == 2**32 - 1
    for bad in (2**32, -1, True):
        with pytest.raises(InvalidInputError, match="seed"):
            EvaluationOptions(seed=bad)


def test_misspelt_option_is_named_with_a_suggestion():
    """EvaluationOptions(filtred=True) was Python's bare TypeError from the dataclass __init__."""
    from kgeval.errors import UnknownNameError
    from kgeval.evaluation import EvaluationOptions

    with pytest.raises(UnknownNameError, match="'filtred'. Did you mean: filtered"):
        EvaluationOptions(filtred=True)
    assert EvaluationOptions(filtered=False).filtered is False


def test_the_protocol_count_gives_the_count_and_its_errors(monkeypatch):
    """The distinct known-triple count is the protocol's (duplicates across the evaluation and filter sets
    counted once); an error in it reaches the caller."""
    import numpy as np
    import torch

    from kgeval.evaluation import FunctionScorer, inputs

    scorer_table = np.random.default_rng(3).random((20, 2, 20)).astype(np.float32)
    scorer = FunctionScorer(lambda h, r, t: torch.as_tensor(scorer_table)[h, r, t], 20, num_relations=2)
    test = np.array([[0, 0, 1], [2, 1, 3], [4, 0, 5]])
    train = np.array([[0, 0, 1], [0, 0, 2], [6, 1, 7], [6, 1, 7]])  # one shared with test, one duplicate
    out = evaluate_ranks(scorer, test, filter_triples=[train], progress=False)
    assert out.protocol.num_known_triples == 5

    def broken(*a, **k):
        raise RuntimeError("count failed")

    monkeypatch.setattr(inputs, "count_distinct_triples", broken)
    with pytest.raises(RuntimeError, match="count failed"):
        evaluate_ranks(scorer, test, filter_triples=[train], progress=False)