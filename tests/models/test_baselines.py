"""The non-trained baselines against brute force: every candidate scored one by one in plain Python from the raw
training triples (rules mined by comparing every relation pair), and the realistic ranks counted by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import kgeval
from kgeval.errors import InvalidInputError
from kgeval.models import get_model, load_model

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"


def _graph(seed: int, e: int = 12, r: int = 5):
    """A small graph with an exact inverse pair (1 = reverse of 0), a near duplicate (2 ~ 0, 3 of 4 pairs), a
    symmetric relation (4) and random triples: many ties in every baseline's scores."""
    rng = np.random.default_rng(seed)
    base = {(int(a), int(b)) for a, b in rng.integers(0, e, size=(10, 2)) if a != b}
    train = {(h, 0, t) for h, t in base} | {(t, 1, h) for h, t in base}
    train |= {(h, 2, t) for i, (h, t) in enumerate(sorted(base)) if i % 4}
    sym = {(int(a), int(b)) for a, b in rng.integers(0, e, size=(6, 2)) if a != b}
    train |= {(h, 4, t) for h, t in sym} | {(t, 4, h) for h, t in sym}
    train |= {(int(a), 3, int(b)) for a, b in rng.integers(0, e, size=(8, 2))}
    train = np.array(sorted(train), dtype=np.int64)
    test = np.array([(int(a), int(x), int(b)) for a, x, b in zip(rng.integers(0, e, 12), rng.integers(0, r, 12),
                                                                 rng.integers(0, e, 12))], dtype=np.int64)
    return train, test, e, r


def _brute_scores(name: str, train: np.ndarray, e: int, r: int, threshold: float):
    """``score(h, r, t)`` of each baseline, by its definition, from the raw triples."""
    triples = {tuple(map(int, x)) for x in train}
    deg = np.zeros(e)
    for h, _, t in triples:
        deg[h] += 1
        deg[t] += 1
    if name == "popularity":
        return lambda h, rel, t: deg[h] + deg[t]
    if name == "marginal":
        return lambda h, rel, t: (sum(1 for a, b, c in triples if b == rel and c == t)
                                  + sum(1 for a, b, c in triples if b == rel and a == h))
    pairs = {x: {(a, c) for a, b, c in triples if b == x} for x in range(r)}
    rules = set()
    for body in range(r):
        for head in range(r):
            if not pairs[body]:
                continue
            inverse = sum((c, a) in pairs[head] for a, c in pairs[body]) / len(pairs[body])
            duplicate = sum((a, c) in pairs[head] for a, c in pairs[body]) / len(pairs[body])
            if inverse >= threshold:
                rules.add((body, head, "inverse"))
            if duplicate >= threshold and body != head:
                rules.add((body, head, "duplicate"))

    def score(h, rel, t):
        return float(any((t, h) in pairs[b] if kind == "inverse" else (h, t) in pairs[b]
                         for b, hd, kind in rules if hd == rel))
    score.rules = rules
    return score


def _brute_ranks(score, test, known: set, e: int) -> dict:
    """``{(triple index, side): realistic rank}`` over every candidate but the other known answers."""
    out = {}
    for i, (h, rel, t) in enumerate(map(tuple, test.tolist())):
        for side in (0, 1):
            true = score(h, rel, t)
            cands = [c for c in range(e) if (((c, rel, t) if side == 0 else (h, rel, c)) not in known)
                     and c != (h if side == 0 else t)]
            values = [score(c, rel, t) if side == 0 else score(h, rel, c) for c in cands]
            better, tied = sum(v > true for v in values), sum(v == true for v in values)
            out[(i, side)] = 1 + better + tied / 2
    return out


@pytest.mark.parametrize("name", ["popularity", "marginal", "rule"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranks_match_brute_force(name, seed):
    train, test, e, r = _graph(seed)
    model = get_model(name, e, r).fit(torch.as_tensor(train))
    score = _brute_scores(name, train, e, r, threshold=0.8)
    if name == "rule":
        assert set(model.rules()) == score.rules and score.rules  # mined the same rules, and some
    # every score, one by one, against score_tails / score_heads / score_triples
    h, rel, t = (torch.as_tensor(test[:, i]) for i in range(3))
    tails, heads = model.score_tails(h, rel).numpy(), model.score_heads(rel, t).numpy()
    for i, (a, x, b) in enumerate(test.tolist()):
        assert [score(a, x, c) for c in range(e)] == tails[i].tolist()
        assert [score(c, x, b) for c in range(e)] == heads[i].tolist()
    assert model.score_triples(h, rel, t).tolist() == [score(*x) for x in test.tolist()]
    results = kgeval.evaluate(model, test, filter_triples=train, progress=False)
    known = {tuple(x) for x in train.tolist()} | {tuple(x) for x in test.tolist()}
    expected = _brute_ranks(score, test, known, e)
    table = results.rank_table
    got = {(int(i), int(s)): (o + p) / 2 for i, s, o, p in zip(table.triple_index, table.side, table.optimistic,
                                                               table.pessimistic)}
    assert got == expected


def test_scores_are_one_function_of_the_triple():
    """A head query and a tail query score the same triple alike (the evaluator's consistency check)."""
    train, test, e, r = _graph(3)
    for name in ("popularity", "marginal", "rule"):
        model = get_model(name, e, r).fit(train)
        h, rel, t = (torch.as_tensor(test[:, i]) for i in range(3))
        from_tails = model.score_tails(h, rel).gather(1, t.view(-1, 1)).view(-1)
        from_heads = model.score_heads(rel, t).gather(1, h.view(-1, 1)).view(-1)
        assert torch.equal(from_tails, from_heads)


def test_entity_chunks_and_saved_models_score_alike(tmp_path):
    train, test, e, r = _graph(4)
    model = get_model("rule", e, r, threshold=0.7).fit(train)
    path = tmp_path / "rule.pt"
    model.save(path)
    back = load_model(path)
    assert back.rules() == model.rules() and back.hparams == {"threshold": 0.7}
    h, rel = torch.as_tensor(test[:, 0]), torch.as_tensor(test[:, 1])
    whole = model.score_tails(h, rel)
    assert torch.equal(back.score_tails(h, rel), whole)
    assert torch.equal(model.score_tails(h, rel, entities=slice(3, 9)), whole[:, 3:9])
    assert torch.equal(model.score_tails(h, rel, entities=torch.tensor([5, 1])), whole[:, [5, 1]])
    chunked = kgeval.evaluate(model, test, filter_triples=train, progress=False, entity_chunk_size=5)
    plain = kgeval.evaluate(model, test, filter_triples=train, progress=False)
    assert np.array_equal(chunked.rank_table.optimistic, plain.rank_table.optimistic)
    assert np.array_equal(chunked.rank_table.pessimistic, plain.rank_table.pessimistic)


def test_bad_use_is_named():
    train, _, e, r = _graph(5)
    with pytest.raises(InvalidInputError, match="not fitted"):
        get_model("marginal", e, r).score_tails(torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(InvalidInputError, match="threshold"):
        get_model("rule", e, r, threshold=1.5)
    with pytest.raises(InvalidInputError, match="out of range"):
        get_model("popularity", e - 1, r).fit(train)
    with pytest.raises(InvalidInputError, match="no inverse relations"):
        get_model("rule", e, r, inverse_relations=True)
    with pytest.raises(InvalidInputError, match="early stopping"):
        kgeval.pipeline(dataset="nations", model="marginal", stopper="early", progress=False)


def test_pipeline_run_and_report(tmp_path):
    """A baseline is a run like any other: saved, reloaded and reported as not trained."""
    from click.testing import CliRunner

    from kgeval.cli import main
    from kgeval.report import build_report

    out = CliRunner().invoke(main, ["pipeline", "-d", "kinships", "-m", "rule", "-o", str(tmp_path / "rule")])
    assert out.exit_code == 0, out.output
    assert "training: none, the rule baseline counted on the training split (threshold 0.8)" in out.output
    run = kgeval.pipeline(dataset="kinships", model="rule", progress=False)
    assert run.results.get_metric("both.realistic.mrr") == pytest.approx(
        build_report([tmp_path / "rule"]).runs[0].headline[0]["value"])
    report = build_report([tmp_path / "rule"])
    assert ("trained", "not trained: the rule baseline counted on the training split") in report.runs[0].setup


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="shared benchmark datasets not present")
def test_rule_baseline_shows_wn18_leakage():
    """WN18's inverse relations let the rule baseline rank nearly every test triple first; WN18RR removed them
    and keeps only its symmetric relations' share (the diagnostics count the same triples)."""
    results = {}
    for name in ("wn18", "wn18rr"):
        run = kgeval.pipeline(dataset=name, model="rule", data_dir=str(SHARED), progress=False)
        diagnosis = kgeval.diagnose(name, data_dir=str(SHARED))
        share = diagnosis.splits["test"].reverse_in_training / diagnosis.splits["test"].num_triples
        results[name] = (run.results.get_metric("both.realistic.hits_at_1"), share)
    assert results["wn18"][0] > 0.9 and results["wn18rr"][0] < 0.4
    for hits, share in results.values():  # a rule fires only where some reverse is in training
        assert hits <= share + 1e-9
