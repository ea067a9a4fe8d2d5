"""PyKEEN reference ranks (shared fixtures) and query-level precision/recall vs brute force."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from kgeval.evaluation import FunctionScorer, evaluate_ranks
from kgeval.models import DistMultScorer

SHARED = Path(__file__).parents[2].parent / "shared"
NAMES = ["Nations", "Kinships", "UMLS"]


def _load_reference(name):
    path = SHARED / "reference" / f"evaluation-{name}-distmult-int.json"
    if not path.exists():
        pytest.skip(f"shared reference data not found at {path}")
    d = json.loads(path.read_text())
    ent = {e: i for i, e in enumerate(d["entities"])}
    rel = {r: i for i, r in enumerate(d["relations"])}

    def ids(rows):
        return np.array([[ent[h], rel[r], ent[t]] for h, r, t in rows], dtype=np.int64)

    def split(s):
        lines = (SHARED / "datasets" / name / f"{s}.txt").read_text().strip().split("\n")
        return ids(line.split("\t") for line in lines)

    scorer = DistMultScorer(torch.tensor(d["entity_embeddings"], dtype=torch.float32),
                            torch.tensor(d["relation_embeddings"], dtype=torch.float32))
    return d, scorer, ids(d["test_triples"]), [split("train"), split("valid")]


@pytest.mark.parametrize("name", NAMES)
def test_reference_ranks_exact(name):
    d, scorer, test, filt = _load_reference(name)
    out = evaluate_ranks(scorer, test, filter_triples=filt, progress=False, batch_size=37)
    tab = out.rank_table
    for code, side in ((0, "head"), (1, "tail")):
        rows = tab.side == code
        assert np.array_equal(tab.triple_index[rows], np.arange(len(test)))  # task order = triple order
        for col in ("optimistic", "pessimistic", "num_candidates"):
            assert np.array_equal(getattr(tab, col)[rows], np.array(d["tasks"][side][col])), (side, col)


@pytest.mark.parametrize("name", NAMES)
def test_reference_results_float64(name):
    pytest.importorskip("kgeval.results")
    from kgeval.evaluation import evaluate

    d, scorer, test, filt = _load_reference(name)
    res = evaluate(scorer, test, filter_triples=filt, progress=False)
    flat = res.to_flat_dict()
    missing = [k for k in d["results_float64"] if k not in flat]
    wrong = [k for k, v in d["results_float64"].items() if k in flat and flat[k] != pytest.approx(v, rel=1e-9, abs=1e-12)]
    assert not missing and not wrong, f"missing: {missing[:10]} wrong: {wrong[:10]}"
    assert res.protocol["filter"]["sets"][1]["num_triples"] == len(filt[0])


# ---------------------------------------------------------------------------- query metrics
def brute_query_metrics(table, test, known, ks, E):
    """P@k and R@k by linearity of expectation: a relevant item with G candidates above it and
    Q tied (itself included) is in the top k with probability clip((k - G) / Q, 0, 1)."""
    known = {tuple(map(int, x)) for x in known}
    out = {}
    for side in ("head", "tail"):
        queries = {}
        for h, r, t in map(lambda x: tuple(map(int, x)), test):
            q, a = ((h, r), t) if side == "tail" else ((r, t), h)
            queries.setdefault(q, set()).add(a)
        vals = {k: [] for k in ks}
        nulls = {k: [] for k in ks}
        for q, rel in queries.items():
            trip = (lambda e: (q[0], q[1], e)) if side == "tail" else (lambda e: (e, q[0], q[1]))
            cands = [e for e in range(E) if e in rel or trip(e) not in known]
            sc = {e: float(table[trip(e)]) for e in cands}
            n, m = len(cands), len(rel)
            for k in ks:
                hits = 0.0
                for a in rel:
                    g = sum(sc[e] > sc[a] for e in cands)
                    qq = sum(sc[e] == sc[a] for e in cands)
                    hits += min(1.0, max(0.0, (k - g) / qq))
                vals[k].append((hits / k, hits / m))
                nulls[k].append((min(k, n) * m / n / k, min(k, n) / n))
        for k in ks:
            p, rc = np.mean(vals[k], axis=0)
            ep, er = np.mean(nulls[k], axis=0)
            out.update({f"{side}.precision_at_{k}": p, f"{side}.recall_at_{k}": rc,
                        f"{side}.random_precision_at_{k}": ep, f"{side}.random_recall_at_{k}": er})
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_query_metrics_match_brute_force(seed):
    E, R = 14, 2
    rng = np.random.default_rng(seed)
    table = torch.as_tensor(rng.integers(0, 3, size=(E, R, E)), dtype=torch.float32)
    table[0, 0, 5] = float("-inf")  # -inf candidates are still candidates
    allt = rng.integers(0, [E, R, E], size=(90, 3))
    train, test = allt[:60], allt[60:]
    ks = (1, 2, 5, 20)
    out = evaluate_ranks(FunctionScorer(lambda h, r, t: table[h, r, t], E), test, filter_triples=train,
                         query_metrics_k=ks, progress=False, batch_size=3)
    expected = brute_query_metrics(table, test, np.concatenate([train, test]), ks, E)
    for key, v in expected.items():
        assert out.extra[key] == pytest.approx(v, rel=1e-12), key
    assert "both.precision_at_5" in out.extra


def test_query_metrics_of_a_perfect_scorer():
    # the scorer puts every evaluation answer first: P@1 = 1 and R@k = 1 for k >= max answers
    E = 10
    test = np.array([[0, 0, 1], [0, 0, 2], [3, 0, 4]])
    good = {(0, 0, 1), (0, 0, 2), (3, 0, 4)}
    table = torch.zeros(E, 1, E)
    for h, r, t in good:
        table[h, r, t] = 1.0
    out = evaluate_ranks(FunctionScorer(lambda h, r, t: table[h, r, t], E), test, sides="tail",
                         query_metrics_k=(1, 2), progress=False)
    assert out.extra["tail.precision_at_1"] == 1.0
    assert out.extra["tail.recall_at_2"] == 1.0
    assert out.extra["tail.precision_at_2"] == pytest.approx((1.0 + 0.5) / 2)
    assert out.extra["tail.random_recall_at_1"] == pytest.approx(1 / E)


def test_query_metrics_with_sampled_negatives_warn_that_they_are_not_computed():
    """Query precision / recall need whole score rows: with num_negatives they are not computed, and
    the evaluation says so instead of silently leaving the keys out."""
    from kgeval.evaluation import FunctionScorer, evaluate_ranks

    table = torch.arange(5 * 2 * 5, dtype=torch.float32).reshape(5, 2, 5) % 3
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], 5, num_relations=2)
    tri = np.array([[0, 0, 1], [2, 1, 3]])
    with pytest.warns(UserWarning, match=r"query_metrics_k=\(1, 3\) is ignored with num_negatives=2"):
        out = evaluate_ranks(scorer, tri, num_negatives=2, query_metrics_k=(3, 1), progress=False)
    assert out.extra == {} and out.protocol.query_metrics_k == ()
    assert "head.precision_at_1" in evaluate_ranks(scorer, tri, query_metrics_k=(1,), progress=False).extra


def test_query_metrics_refuse_a_tie_tolerance():
    """The ranks count a candidate within ``tie_tolerance`` of the answer as tied; query precision /
    recall compared scores exactly: one answer at 1.0 and a candidate at 1.2 with tolerance 0.5 gave
    an expected hits@1 of 0.5 in the rank table but recall@1 = 0.0. A tolerance has no consistent
    top-k set (see :mod:`kgeval.evaluation.query_metrics`), so the combination is a named error."""
    from kgeval.errors import InvalidInputError
    from kgeval.evaluation import EvaluationOptions

    table = torch.tensor([[[0.0, 1.0, 1.2]]])  # query (0, 0, ?): answer 1 at 1.0, entity 2 at 1.2
    scorer = FunctionScorer(lambda h, r, t: table[h, r, t], 3, num_relations=1)
    tri = np.array([[0, 0, 1]])
    with pytest.raises(InvalidInputError, match="query_metrics_k cannot be combined with tie_tolerance=0.5"):
        evaluate_ranks(scorer, tri, sides="tail", tie_tolerance=0.5, query_metrics_k=(1,), progress=False)
    with pytest.raises(InvalidInputError, match="tie_tolerance"):
        EvaluationOptions(query_metrics_k=3, tie_tolerance=1e-6)
    # exact ties: recall@1 is the rank table's expected hits@1 (one answer per query)
    out = evaluate_ranks(scorer, tri, sides="tail", query_metrics_k=(1,), progress=False)
    assert out.extra["tail.recall_at_1"] == 0.0 and out.rank_table.optimistic.tolist() == [2]
    tied = evaluate_ranks(scorer, tri, sides="tail", tie_tolerance=0.5, progress=False).rank_table
    assert (tied.optimistic.tolist(), tied.pessimistic.tolist()) == ([1], [2])
    # sampled ranking computes no query metrics (a warning says so): the tolerance stays allowed there
    with pytest.warns(UserWarning, match="ignored with num_negatives"):
        evaluate_ranks(scorer, tri, sides="tail", tie_tolerance=0.5, query_metrics_k=(1,), num_negatives=1,
                       progress=False)
