"""Registry lookup, key grammar and the Results container."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kgeval import metrics
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.keys import parse_key
from kgeval.metrics import HitsAtK, PowerMeanRank, ZScore
from kgeval.metrics.derived import AdjustedIndex
from kgeval.ranks import RankTable
from kgeval.results import Results


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("mrr", "inverse_harmonic_mean_rank"),
        ("MRR", "inverse_harmonic_mean_rank"),
        ("mean_reciprocal_rank", "inverse_harmonic_mean_rank"),
        ("mr", "arithmetic_mean_rank"),
        ("hits@10", "hits_at_10"),
        ("h@10", "hits_at_10"),
        ("hits_at_10", "hits_at_10"),
        ("HITS@10", "hits_at_10"),
        ("Hits@1", "hits_at_1"),
        ("hits@7", "hits_at_7"),
        ("z_hits_at_3", "z_hits_at_3"),
        ("adjusted_hits_at_3", "adjusted_hits_at_3"),
        ("amri", "adjusted_arithmetic_mean_rank_index"),
        ("AMRI", "adjusted_arithmetic_mean_rank_index"),
        ("amr", "adjusted_arithmetic_mean_rank"),
        ("igmr", "inverse_geometric_mean_rank"),
        ("gmr", "geometric_mean_rank"),
        ("hmr", "harmonic_mean_rank"),
        ("iamr", "inverse_arithmetic_mean_rank"),
        ("zmrr", "z_inverse_harmonic_mean_rank"),
        ("adjusted_mrr", "adjusted_inverse_harmonic_mean_rank"),
        ("power_mean_rank_p2", "power_mean_rank_p2"),
        ("power_mean_rank_pneg0_5", "power_mean_rank_pneg0_5"),
        ("median", "median_rank"),
        ("count", "count"),
    ],
)
def test_get_by_key_and_synonym(name, key):
    assert metrics.get(name).key == key


def test_get_semantics_of_parametrised_families():
    h = metrics.get("h@3")
    assert isinstance(h, HitsAtK) and h.k == 3
    assert h([1, 3, 4], [10, 10, 10]) == pytest.approx(2 / 3)
    z = metrics.get("z_hits_at_3")
    assert isinstance(z, ZScore) and z.base.k == 3
    a = metrics.get("adjusted_hits_at_3")
    assert isinstance(a, AdjustedIndex) and a.base.k == 3
    # adjusted hits@3 with C = 10: E = 0.3, index = (h − 0.3)/(1 − 0.3)
    assert a([1, 3, 4], [10, 10, 10]) == pytest.approx((2 / 3 - 0.3) / 0.7)
    pm = metrics.get("power_mean_rank", p=2)
    assert isinstance(pm, PowerMeanRank) and pm.p == 2.0 and pm.key == "power_mean_rank_p2"
    assert pm([1, 7]) == pytest.approx(5.0)  # √((1 + 49)/2)
    pn = metrics.get("power_mean_rank", p=-0.5)
    assert pn.key == "power_mean_rank_pneg0_5" and metrics.get(pn.key).p == -0.5
    assert metrics.get("hits_at_k", k=4).k == 4
    assert metrics.get("amri").base.key == "arithmetic_mean_rank"
    m = metrics.get("mrr")
    assert metrics.get(m) is m


@pytest.mark.parametrize(("name", "suggestion"), [("mrrr", "mrr"), ("arithmetic_mean_rnk", "arithmetic_mean_rank"),
                                                  ("hits_at_ten", "hits_at_10")])
def test_unknown_name_suggests_closest(name, suggestion):
    with pytest.raises(UnknownNameError, match="Did you mean") as info:
        metrics.get(name)
    msg = str(info.value)
    assert repr(name) in msg
    hint = msg.split("Did you mean:")[1].split("?")[0]
    assert suggestion in [s.strip() for s in hint.split(",")]
    assert isinstance(info.value, KeyError)


def test_get_rejects_parameters_for_plain_metrics():
    with pytest.raises(InvalidInputError, match="takes no parameters"):
        metrics.get("mrr", k=3)
    with pytest.raises(InvalidInputError, match="string"):
        metrics.get(3)


def test_names_round_trip():
    ns = metrics.names()
    assert len(ns) == len(set(ns)) and ns == sorted(ns)
    for required in ("inverse_harmonic_mean_rank", "hits_at_10", "z_hits_at_3", "adjusted_hits_at_3",
                     "adjusted_arithmetic_mean_rank_index", "geometric_mean_rank", "median_rank",
                     "power_mean_rank_p2", "count"):
        assert required in ns
    for n in ns:
        assert metrics.get(n).key == n
        assert metrics.get(n.upper()).key == n
    with_syn = metrics.names(include_synonyms=True)
    assert set(ns) < set(with_syn) and "mrr" in with_syn and "amri" in with_syn
    for s in with_syn:
        metrics.get(s)  # every listed synonym resolves


# ---------------------------------------------------------------------------- key grammar
@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("mrr", ("both", "realistic", "mrr")),
        ("tail.mrr", ("tail", "realistic", "mrr")),
        ("pessimistic.hits@10", ("both", "pessimistic", "hits@10")),
        ("both.realistic.inverse_harmonic_mean_rank", ("both", "realistic", "inverse_harmonic_mean_rank")),
        ("left.best.mr", ("head", "optimistic", "mr")),
        ("right.worst.mr", ("tail", "pessimistic", "mr")),
        ("avg.head.mr", ("head", "realistic", "mr")),
        ("exp.mrr", ("both", "expected", "mrr")),
    ],
)
def test_parse_key(key, parsed):
    assert parse_key(key) == parsed


@pytest.fixture(scope="module")
def table():
    o = np.array([1, 3, 2, 7, 1, 4, 12, 1])
    p = np.array([1, 5, 2, 9, 3, 4, 15, 1])
    c = np.array([20, 20, 30, 30, 40, 40, 50, 50])
    side = ["head", "tail", "head", "tail", "head", "tail", "head", "tail"]
    rel = [0, 0, 1, 1, 2, 0, 1, 2]
    return RankTable.from_ranks(o, p, num_candidates=c, side=side, relation=rel, triple_index=[0, 0, 1, 1, 2, 2, 3, 3])


@pytest.fixture(scope="module")
def results(table):
    return Results(table)


def _np(table, side, rt):
    sel = np.ones(len(table), bool) if side == "both" else table.side == {"head": 0, "tail": 1}[side]
    o, p = table.optimistic[sel].astype(float), table.pessimistic[sel].astype(float)
    return {"optimistic": o, "pessimistic": p, "realistic": 0.5 * (o + p)}[rt], table.num_candidates[sel]


@pytest.mark.parametrize(
    ("key", "side", "rt", "fn"),
    [
        ("mrr", "both", "realistic", lambda r, c: np.mean(1 / r)),
        ("both.realistic.inverse_harmonic_mean_rank", "both", "realistic", lambda r, c: np.mean(1 / r)),
        ("tail.pessimistic.hits@10", "tail", "pessimistic", lambda r, c: np.mean(r <= 10)),
        ("pessimistic.tail.hits_at_1", "tail", "pessimistic", lambda r, c: np.mean(r <= 1)),
        ("best.mr", "both", "optimistic", lambda r, c: np.mean(r)),
        ("worst.mr", "both", "pessimistic", lambda r, c: np.mean(r)),
        ("avg.mr", "both", "realistic", lambda r, c: np.mean(r)),
        ("left.mrr", "head", "realistic", lambda r, c: np.mean(1 / r)),
        ("right.best.h@3", "tail", "optimistic", lambda r, c: np.mean(r <= 3)),
        ("HEAD.Optimistic.MRR", "head", "optimistic", lambda r, c: np.mean(1 / r)),
        ("amri", "both", "realistic", lambda r, c: (np.mean(r) - np.mean((c + 1) / 2)) / (1 - np.mean((c + 1) / 2))),
        ("tail.count", "tail", "realistic", lambda r, c: float(r.size)),
    ],
)
def test_results_key_grammar(results, table, key, side, rt, fn):
    r, c = _np(table, side, rt)
    assert results.get_metric(key) == pytest.approx(fn(r, c), rel=1e-12, abs=0)
    assert results[key] == results.get_metric(key)


def test_results_unknown_keys(results):
    with pytest.raises(UnknownNameError, match="Did you mean"):
        results.get_metric("both.realistic.mrrr")
    untied = Results(RankTable.from_ranks([1, 2], num_candidates=[4, 4]))
    with pytest.raises(UnknownNameError, match="no 'tail' side"):
        untied.get_metric("tail.mrr")
    no_c = Results(RankTable.from_ranks([1, 2]))
    with pytest.raises(UnknownNameError, match="num_candidates"):
        no_c.get_metric("amri")
    assert no_c.get_metric("mrr") == pytest.approx(0.75)


def test_flat_dict_to_dict_df(results, table):
    flat = results.to_flat_dict()
    r, _ = _np(table, "both", "realistic")
    assert flat["both.realistic.inverse_harmonic_mean_rank"] == pytest.approx(np.mean(1 / r), rel=1e-12, abs=0)
    for side in ("head", "tail", "both"):
        for rt in ("optimistic", "pessimistic", "realistic", "expected"):
            assert f"{side}.{rt}.hits_at_10" in flat
            assert f"{side}.{rt}.z_hits_at_10" in flat
    assert "both.realistic.adjusted_hits_at_3" in flat
    assert "both.expected.harmonic_mean_rank" not in flat  # no tie expectation for g ≠ identity
    for k, v in flat.items():
        assert results.get_metric(k) == v
    nested = results.to_dict()
    assert nested["tail"]["pessimistic"]["hits_at_10"] == flat["tail.pessimistic.hits_at_10"]
    assert sum(len(x) for s in nested.values() for x in s.values()) == len(flat)
    df = results.to_df()
    assert list(df.columns) == ["Side", "Type", "Metric", "Value"]
    assert len(df) == len(flat)
    row = df[(df.Side == "head") & (df.Type == "optimistic") & (df.Metric == "inverse_harmonic_mean_rank")]
    assert row.Value.item() == pytest.approx(flat["head.optimistic.inverse_harmonic_mean_rank"])


def test_json_round_trip(results, tmp_path):
    path = results.save_json(tmp_path / "r.json")
    data = json.loads(path.read_text())
    assert data["metrics"]["both.realistic.inverse_harmonic_mean_rank"] == results.get_metric("mrr")
    loaded = Results.load_json(path)
    assert loaded.to_flat_dict() == results.to_flat_dict()
    assert loaded.get_metric("tail.worst.hits@10") == results.get_metric("tail.pessimistic.hits_at_10")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInputError, match="not a kgeval results file"):
        Results.load_json(bad)


def test_by_relation(results, table):
    out = results.by_relation(["mrr", "hits@1", "count", "amri"])
    assert sorted(out) == [0, 1, 2]
    for rel, vals in out.items():
        sel = table.relation == rel
        r = 0.5 * (table.optimistic[sel] + table.pessimistic[sel])
        c = table.num_candidates[sel]
        assert vals["inverse_harmonic_mean_rank"] == pytest.approx(np.mean(1 / r), rel=1e-12, abs=0)
        assert vals["hits_at_1"] == pytest.approx(np.mean(r <= 1))
        assert vals["count"] == sel.sum()
        e = np.mean((c + 1) / 2)
        assert vals["adjusted_arithmetic_mean_rank_index"] == pytest.approx((np.mean(r) - e) / (1 - e), rel=1e-12, abs=0)
    with pytest.raises(InvalidInputError, match="relation column"):
        Results(RankTable.from_ranks([1, 2])).by_relation()


def test_summary_table(results, table):
    text = results.summary_table()
    lines = text.splitlines()
    header = lines[0].split()
    assert header == ["metric", "head", "tail", "both"]
    row = next(ln for ln in lines if ln.startswith("inverse_harmonic_mean_rank "))
    cells = row.split()[1:]
    for side, cell in zip(("head", "tail", "both"), cells):
        r, _ = _np(table, side, "realistic")
        assert cell == f"{np.mean(1 / r):.4f}"
    assert any(ln.startswith("adjusted_arithmetic_mean_rank_index") for ln in lines)
    assert "rank type: realistic" in text and "8 tasks" in text
    pes = results.summary_table(["hits@10"], rank_type="pessimistic")
    r, _ = _np(table, "both", "pessimistic")
    assert f"{np.mean(r <= 10):.4f}" in pes and "rank type: pessimistic" in pes


def test_summary_table_and_by_relation_read_rank_type_synonyms():
    """summary_table(rank_type='best') (PyKEEN's name, accepted in every key) printed a table with
    no rows at all, and an unknown rank type likewise; by_relation(rank_type='best') raised 'no
    single rank array'. Now synonyms are read as in keys and an unknown name is an UnknownNameError."""
    from kgeval.errors import UnknownNameError
    from kgeval.ranks import RankTable
    from kgeval.results import Results

    res = Results(RankTable.from_ranks([1, 2, 3], [1, 4, 3], num_candidates=[5, 5, 5], side=[0, 1, 1],
                                       relation=[0, 0, 1]))
    table = res.summary_table(rank_type="Best")
    mrr_row = next(line for line in table.splitlines() if line.startswith("inverse_harmonic_mean_rank"))
    # optimistic ranks 1 | 2, 3: head 1/1, tail (1/2 + 1/3)/2, both (1 + 1/2 + 1/3)/3
    assert [float(x) for x in mrr_row.split()[1:]] == pytest.approx([1.0, 5 / 12, 11 / 18], abs=1e-4)
    worst = res.by_relation(("mrr",), rank_type="worst")
    assert worst[0]["inverse_harmonic_mean_rank"] == pytest.approx((1 + 1 / 4) / 2)
    assert worst[1]["inverse_harmonic_mean_rank"] == pytest.approx(1 / 3)
    for bad in ("bogus", 3):
        with pytest.raises(UnknownNameError, match="rank type"):
            res.summary_table(rank_type=bad)
        with pytest.raises(UnknownNameError, match="rank type"):
            res.by_relation(rank_type=bad)
