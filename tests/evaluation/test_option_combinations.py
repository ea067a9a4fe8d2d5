"""Combinations of the evaluator's options against an independent plain-Python reference.

Each case is a seeded random graph with exact scores (a table of values with many ties, +-inf and
NaN, or built-in DistMult / ComplEx models with small integer embeddings, whose float32 products
are exact whatever the summation order) and a random combination of: filtered or not; filter
sets given as a list, a dict or one array, in C / Fortran order, int32, strided slices or
tensors, overlapping, with duplicates and with test triples inside them; sides; entity and
relation restriction (alone, together, dropping test triples); tie tolerance; NaN policy; macro
weights; sampled negatives; query-level precision / recall @ k; odd batch sizes and entity chunk
widths (1, primes, wider than the graph); tiny memory budgets. The reference gives every rank
table row, the weights, the protocol's counts (``num_known_triples``, ``num_triples_dropped``,
``num_evaluated_triples``, ``num_tasks``) and the query metrics as exact fractions. Both counting
paths (torch and the compiled kernel) run every case.

``KGEVAL_SLOW=1`` runs 20x the cases.
"""

from __future__ import annotations

import math
import os
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.evaluation import FunctionScorer, evaluate_ranks
from kgeval.models import from_embeddings
from kgeval.ranks import SIDE_HEAD, SIDE_TAIL

SCALE = 20 if os.environ.get("KGEVAL_SLOW") == "1" else 1
NAMES = {SIDE_HEAD: "head", SIDE_TAIL: "tail"}


@pytest.fixture(params=["torch", "numba"])
def kernel(request, monkeypatch):
    monkeypatch.setenv("KGEVAL_COUNT_KERNEL", request.param)
    return request.param


# ----------------------------------------------------------------------------- the reference
def reference(S, E, test, known_sets, o, negatives=None):
    """``(rows, protocol counts, query metrics)`` by plain Python over sets; ``S[h][r][t]`` floats.

    rows: ``{(side, triple index): (optimistic, pessimistic, num_candidates, weight or None)}``,
    or ``"raise"`` for a task whose candidates or true score are NaN under ``nan_policy="raise"``."""
    test = [tuple(int(v) for v in x) for x in test]
    known = set(test) | {tuple(int(v) for v in x) for a in known_sets for x in a}
    ents = sorted(set(range(E) if o.get("restrict_entities") is None else o["restrict_entities"]))
    rels = o.get("restrict_relations")
    allowed = set(ents)
    kept = [i for i, (h, r, t) in enumerate(test) if h in allowed and t in allowed and (rels is None or r in rels)]
    counts = {"num_known_triples": len(known) if o["filtered"] else None,
              "num_triples_dropped": len(test) - len(kept), "num_evaluated_triples": len(kept)}
    tol, sides = o["tie_tolerance"], ("head", "tail") if o["sides"] == "both" else (o["sides"],)
    rows, per_side = {}, {}
    for side in sides:
        def trip(i, e, side=side):
            h, r, t = test[i]
            return (h, r, e) if side == "tail" else (e, r, t)

        def score(x):
            return S[x[0]][x[1]][x[2]]

        query = {i: test[i][:2] if side == "tail" else test[i][1:] for i in kept}
        share = {q: sum(1 for j in kept if query[j] == q) for q in query.values()}
        for i in kept:
            ans = test[i][2] if side == "tail" else test[i][0]
            if negatives is None:
                cands = [e for e in ents if e != ans and not (o["filtered"] and trip(i, e) in known)]
            else:
                cands = [int(e) for e in negatives[side][i] if e >= 0]
            s, sc = score(trip(i, ans)), [score(trip(i, e)) for e in cands]
            if o["nan_policy"] == "raise" and (math.isnan(s) or any(math.isnan(x) for x in sc)):
                rows[side, i] = "raise"
                continue
            if math.isnan(s):
                better, tied = len(cands), 0
            else:
                better = sum(x > s + tol for x in sc)
                tied = sum(s - tol <= x <= s + tol for x in sc)
            rows[side, i] = (1 + better, 1 + better + tied, 1 + len(cands), 1 / share[query[i]] if o["macro"] else None)
        if o.get("query_metrics_k") and negatives is None:
            per_side[side] = []
            for q in dict.fromkeys(query[i] for i in kept):
                mine = [i for i in kept if query[i] == q]
                relevant = {test[i][2] if side == "tail" else test[i][0] for i in mine}
                cands = [e for e in ents if e in relevant or not (o["filtered"] and trip(mine[0], e) in known)]
                # NaN ranks last (below -inf too: it ties with -inf only here, as the evaluator's -inf)
                val = {e: score(trip(mine[0], e)) for e in cands}
                val = {e: -math.inf if math.isnan(v) else v for e, v in val.items()}
                n, m = len(cands), len(relevant)
                row = {}
                for k in o["query_metrics_k"]:
                    # E[hits@k] under random tie-breaking: a relevant item with a candidates above it and b
                    # tied (itself included) is in the top k with probability clip(k - a, 0, b) / b
                    hits = Fraction(m) if k >= n else sum(
                        (Fraction(min(max(k - sum(v > val[e] for v in val.values()), 0), b), b)
                         for e in relevant for b in [sum(v == val[e] for v in val.values())]), Fraction(0))
                    row[k] = (hits / k, hits / m, Fraction(min(k, n) * m, n * k), Fraction(min(k, n), n))
                per_side[side].append(row)
    qm = {}
    if per_side and kept:
        groups = dict(per_side)
        if len(per_side) > 1:
            groups["both"] = [r for s in sides for r in per_side[s]]
        for g, vals in groups.items():
            for k in o["query_metrics_k"]:
                for j, name in enumerate(("precision", "recall", "random_precision", "random_recall")):
                    qm[f"{g}.{name}_at_{k}"] = float(sum(v[k][j] for v in vals) / len(vals))
    return rows, counts, qm


# ----------------------------------------------------------------------------- the cases
VALUES = [-1.0, 0.0, 0.5, 1.0, 1.0, 2.0, 3.0, math.inf, -math.inf]


class _NoEntities:
    """A scorer without the ``entities=`` keyword (rows are restricted by the evaluator)."""

    def __init__(self, table, E, R):
        self.table, self.num_entities, self.num_relations = table, E, R

    def score_tails(self, h, r):
        return self.table[h, r]

    def score_heads(self, r, t):
        return self.table[:, r, t].T.contiguous()


def _scorer(kind, rng, E, R):
    """``(scorer, exact score table as nested lists)``."""
    if kind in ("table", "nan", "plain", "low"):
        values = [-math.inf, -math.inf, math.nan, 0.0, 1.0] if kind == "low" else VALUES + [math.nan] * (kind == "nan")
        table = torch.tensor(rng.choice(values, size=(E, R, E)), dtype=torch.float32)
        sc = _NoEntities(table, E, R) if kind == "plain" else FunctionScorer(lambda h, r, t: table[h, r, t], E,
                                                                             num_relations=R)
        return sc, table.double().tolist()
    d = int(rng.integers(1, 5)) * (2 if kind == "complex" else 1)
    model = from_embeddings(kind, rng.integers(-2, 3, size=(E, d)).astype(np.float32),
                            rng.integers(-2, 3, size=(R, d)).astype(np.float32))
    # the exact table, independently of the model: integer arithmetic in numpy
    ent, rel = model.entity.weight.detach().double().numpy(), model.relation.weight.detach().double().numpy()
    if kind == "distmult":
        S = np.einsum("hd,rd,td->hrt", ent, rel, ent)
    else:  # ComplEx: Re(<h, r, conj(t)>), [re | im] halves
        h_re, h_im = np.split(ent, 2, axis=1)
        r_re, r_im = np.split(rel, 2, axis=1)
        S = (np.einsum("hd,rd,td->hrt", h_re, r_re, h_re) + np.einsum("hd,rd,td->hrt", h_im, r_re, h_im)
             + np.einsum("hd,rd,td->hrt", h_re, r_im, h_im) - np.einsum("hd,rd,td->hrt", h_im, r_im, h_re))
    return model, S.tolist()


def _layout(rng, arr):
    """The same triples in another container or memory layout."""
    return [lambda a: a, np.asfortranarray, lambda a: a.astype(np.int32), lambda a: np.repeat(a, 2, axis=0)[::2],
            torch.as_tensor, lambda a: a.tolist() if a.shape[0] else a][int(rng.integers(0, 6))](arr)


def _triples(rng, n, E, R):
    return np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n)], 1).reshape(-1, 3)


def make_case(seed, large=False, low=False):
    """A random case; ``low``: query metrics of filtered rows whose k-th score is often -inf or NaN."""
    rng = np.random.default_rng(seed)
    E = int(rng.integers(30, 130)) if large else int(rng.integers(1, 14))
    R = int(rng.integers(1, 4))
    kind = "low" if low else str(rng.choice(["distmult", "complex", "table"] if large else
                                            ["table", "table", "nan", "plain", "distmult", "complex"]))
    scorer, S = _scorer(kind, rng, E, R)
    test = _triples(rng, int(rng.integers(1, 60 if large else 12)), E, R)
    sets = []
    for _ in range(int(rng.integers(0, 4))):
        a = _triples(rng, int(rng.integers(0, 600 if large else 15)), E, R)
        if rng.random() < 0.3:
            a = np.concatenate([a, test[: int(rng.integers(1, len(test) + 1))]])  # test triples inside a filter set
        if rng.random() < 0.3:
            a = np.concatenate([a, a[:2]])  # duplicates
        sets.append(a)
    if sets and rng.random() < 0.3:
        sets.append(sets[0].copy())  # two overlapping sets
    if low:
        sets.append(_triples(rng, 3 * E * R, E, R))
    o = {"filtered": bool(rng.random() < 0.7), "sides": str(rng.choice(["both", "head", "tail"])),
         "tie_tolerance": float(rng.choice([0.0, 0.0, 0.5, 1.0])), "nan_policy": str(rng.choice(["raise", "worst"])),
         "macro": bool(rng.random() < 0.3), "check_consistency": bool(rng.random() < 0.5), "progress": False}
    if rng.random() < (0.6 if large else 0.35):
        o["restrict_entities"] = sorted(set(rng.integers(0, E, int(rng.integers(max(1, E // 2), E + 1))).tolist()))
    if rng.random() < 0.35:
        o["restrict_relations"] = sorted(set(rng.integers(0, R, int(rng.integers(1, R + 1))).tolist()))
    if rng.random() < 0.25:
        o["num_negatives"], o["seed"] = int(rng.integers(1, E + 3)), int(rng.integers(0, 100))
    if rng.random() < 0.3:
        o["query_metrics_k"] = tuple(sorted(set(rng.integers(1, 8, int(rng.integers(1, 3))).tolist())))
    if rng.random() < 0.4:
        o["batch_size"] = int(rng.choice([1, 2, 3, 5, 7, 13, 1000]))
    if rng.random() < 0.3 and "query_metrics_k" not in o:
        o["entity_chunk_size"] = int(rng.choice([1, 2, 3, 5, 7, 13, 1000]))
    if rng.random() < 0.2:
        o["memory_budget"] = int(rng.choice([1, 7, 64, 200, 4096, 50_000]))
    if low:
        o.update(filtered=True, nan_policy="worst", query_metrics_k=(1, 2, 3, 5), tie_tolerance=0.0, batch_size=None,
                 entity_chunk_size=None, num_negatives=None, memory_budget=None)
        o = {k: v for k, v in o.items() if v is not None}
    form = int(rng.integers(0, 3))
    if form == 0:
        filters = [_layout(rng, a) for a in sets]
    elif form == 1:
        filters = {f"set{i}": _layout(rng, a) for i, a in enumerate(sets)}
    else:
        filters = _layout(rng, np.concatenate(sets)) if sets else ()
    return scorer, S, E, test, sets, _layout(rng, test), filters, o


def check_case(seed, large=False, low=False):
    scorer, S, E, test, sets, test_in, filters, o = make_case(seed, large, low)
    # query metrics have no top k under a tolerance (intransitive ties): refused by name
    refused = bool(o.get("query_metrics_k")) and o.get("num_negatives") is None and o["tie_tolerance"] > 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = evaluate_ranks(scorer, test_in, filter_triples=filters, **o)
    except (InvalidInputError, UnknownNameError) as exc:
        if refused:
            assert "query_metrics_k cannot be combined with tie_tolerance" in str(exc), (seed, o, exc)
            return
        rows, counts, _ = reference(S, E, test, sets, o)
        if "excludes every evaluation triple" in str(exc):
            assert counts["num_evaluated_triples"] == 0, (seed, o)
        else:  # only a NaN true score or candidate raises (never one at a filtered answer)
            assert "NaN scores" in str(exc) and o["nan_policy"] == "raise" and "raise" in rows.values(), (seed, o, exc)
        return
    assert not refused, (seed, o, "query metrics with a tie tolerance were not refused")
    tab = out.rank_table
    negatives = None
    if o.get("num_negatives") is not None:
        negatives = {}
        for side, drawn in out.sampled_negatives.items():
            idx = np.sort(tab.triple_index[tab.side == (SIDE_HEAD if side == "head" else SIDE_TAIL)])
            negatives[side] = dict(zip(idx.tolist(), drawn))
        _check_negatives(S, E, test, sets, o, negatives)
    rows, counts, qm = reference(S, E, test, sets, o, negatives)
    assert "raise" not in rows.values(), (seed, o, "NaN among the candidates was not refused")
    got = {(NAMES[int(s)], int(i)): (int(a), int(b), int(c), None if tab.weight is None else float(w))
           for s, i, a, b, c, w in zip(tab.side, tab.triple_index, tab.optimistic, tab.pessimistic,
                                       tab.num_candidates, tab.weight if tab.weight is not None else tab.side)}
    assert got == rows, (seed, o)
    p = out.protocol
    for name, value in counts.items():
        assert getattr(p, name) == value, (seed, o, name)
    assert p.num_tasks == len(rows) and p.num_triples == len(test)
    assert set(out.extra) == set(qm), (seed, o)
    for key, value in qm.items():
        assert out.extra[key] == pytest.approx(value, rel=1e-12, abs=1e-15), (seed, o, key)


def _check_negatives(S, E, test, sets, o, negatives):
    """Distinct, allowed, never the answer (nor, filtered, a known answer), ``min(k, available)`` of them."""
    plain = dict(o, tie_tolerance=0.0, nan_policy="worst", macro=False, query_metrics_k=())
    full, _, _ = reference(S, E, test, sets, plain)
    known = {tuple(x) for x in test.tolist()} | {tuple(x) for a in sets for x in a.tolist()}
    allowed = set(range(E)) if o.get("restrict_entities") is None else set(o["restrict_entities"])
    for side, rows in negatives.items():
        for i, row in rows.items():
            h, r, t = test[i].tolist()
            drawn = [int(e) for e in row if e >= 0]
            assert len(set(drawn)) == len(drawn) and set(drawn) <= allowed and (t if side == "tail" else h) not in drawn
            if o["filtered"]:
                assert not any(((h, r, e) if side == "tail" else (e, r, t)) in known for e in drawn)
            assert len(drawn) == min(o["num_negatives"], full[side, i][2] - 1)


@pytest.mark.parametrize("block", range(2))
def test_option_combinations_match_the_reference(kernel, block):
    for seed in range(block * 60 * SCALE, (block + 1) * 60 * SCALE):
        check_case(seed)


def test_option_combinations_on_larger_graphs_match_the_reference(kernel):
    """30-130 entities and up to ~2,000 filter triples: whole-row groups, tiles and entity chunks
    with several walkers, predicted true scores of the built-in models."""
    for seed in range(1000, 1000 + 4 * SCALE):
        check_case(seed, large=True)


def test_query_metrics_where_the_kth_score_is_minus_inf_among_filtered_answers(kernel):
    """Filtered answers leave the candidates as -inf entries; a k-th score of -inf (or NaN under
    ``nan_policy="worst"``) must not count them among its ties."""
    for seed in range(2000, 2000 + 30 * SCALE):
        check_case(seed, low=True)
