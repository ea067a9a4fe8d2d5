"""The null model of a dataset: candidate counts against the evaluator and brute force, the moments
against closed forms computed here and PyKEEN's, and the shipped tables against a rebuild."""

from __future__ import annotations

import copy
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

import kgeval
from kgeval.data import get_dataset
from kgeval.errors import InvalidInputError, NoClosedFormError, UnknownNameError
from kgeval.metrics import NullMoments
from kgeval.significance.candidates import NullProtocol, candidate_counts
from kgeval.significance.null_model import build_table, from_dataset, load_shipped
from kgeval.significance.null_tables import read_shipped, shipped_protocols
from kgeval.workflow import evaluation as workflow_rules

SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"
needs_shared = pytest.mark.skipif(not (SHARED / "FB15k-237").is_dir(), reason="../shared/datasets is absent")


def brute_force_counts(ds, split: str, filter_splits, side: str) -> np.ndarray:
    """Cᵢ = E − #(other known answers of the query), by Python sets."""
    known: dict[tuple, set] = {}
    for name in filter_splits:
        for h, r, t in ds.split(name).tolist():
            q, a = ((h, r), t) if side == "tail" else ((r, t), h)
            known.setdefault(q, set()).add(a)
    out = []
    for h, r, t in ds.split(split).tolist():
        q, a = ((h, r), t) if side == "tail" else ((r, t), h)
        out.append(ds.num_entities - len(known.get(q, set()) - {a}))
    return np.array(out)


def closed_forms(c: np.ndarray) -> dict[str, float]:
    """E[MR], E[MRR], E[hits@10] from the textbook formulas (harmonic numbers as exact sums)."""
    harmonic = np.cumsum(1.0 / np.arange(1, int(c.max()) + 1, dtype=np.longdouble))
    n = len(c)
    return {
        "mr": math.fsum((x + 1) / 2 for x in c.tolist()) / n,
        "mrr": float(np.sum(harmonic[c - 1] / c.astype(np.longdouble)) / n),
        "hits@10": math.fsum(min(10, x) / x for x in c.tolist()) / n,
    }


@pytest.mark.parametrize("name", ["nations", "kinships"])
@pytest.mark.parametrize("split,fvwt", [("test", True), ("test", False), ("valid", True)])
def test_counts_and_expectations_match_brute_force(name, split, fvwt):
    ds = get_dataset(name)
    protocol = NullProtocol(split, True, fvwt)
    model = kgeval.null_model(ds, split, filter_validation_when_testing=fvwt)
    for side in ("head", "tail"):
        expected = brute_force_counts(ds, split, protocol.filter_sets, side)
        np.testing.assert_array_equal(candidate_counts(ds, protocol)[side], expected)
    both = np.concatenate([brute_force_counts(ds, split, protocol.filter_sets, s) for s in ("head", "tail")])
    for key, value in closed_forms(both).items():
        assert model.expected_value(key) == pytest.approx(value, rel=1e-13, abs=0)  # E[MRR] ≥ 0.05: abs 1e-12 is 2e-11


def test_counts_equal_the_evaluators_num_candidates():
    ds = get_dataset("umls")

    class FixedScorer:  # deterministic scores with ties: the counts must not depend on them
        num_entities = ds.num_entities

        def score_tails(self, h, r):
            return ((h * 31 + r * 7)[:, None] * torch.arange(self.num_entities) % 11).float()

        def score_heads(self, r, t):
            return self.score_tails(t, r)

    for split, filters in (("test", workflow_rules.testing_filter_sets(ds)), ("valid", workflow_rules.validation_filter_sets(ds))):
        table = kgeval.evaluate(FixedScorer(), ds.split(split), filter_triples=filters).rank_table
        model = kgeval.null_model("umls", split)
        for side, code in (("head", 0), ("tail", 1)):
            np.testing.assert_array_equal(np.sort(table.num_candidates[table.side == code]), model.num_candidates(side))
        unfiltered = kgeval.evaluate(FixedScorer(), ds.split(split), filtered=False).rank_table
        np.testing.assert_array_equal(np.sort(unfiltered.num_candidates), kgeval.null_model("umls", split, filtered=False)
                                      .num_candidates())


def test_keys_synonyms_and_exports():
    model = kgeval.null_model("nations")
    e = model.expected_value("both.inverse_harmonic_mean_rank")
    assert model.expected_value("mrr") == e == model.expected_value("both.realistic.mrr")
    assert model.expected_value("left.mrr") == model.expected_value("head.inverse_harmonic_mean_rank") != e
    assert model.expected_value("z_mrr") == 0.0 and model.variance("z_mrr") == pytest.approx(1.0)
    assert model.std("mr") == pytest.approx(math.sqrt(model.variance("mr")))
    d = model.to_dict()
    assert d["moments"]["tail.hits_at_10"]["expected_value"] == model.expected_value("tail.hits@10")
    assert sum(n for _, n in d["candidates"]["head"]) == d["num_tasks"]["head"] == 201
    df = model.to_df()
    row = df[(df.side == "both") & (df.metric == "arithmetic_mean_rank")].iloc[0]
    assert row.variance == model.variance("mr")
    assert len(df) == len(model.keys()) == 3 * len(set(df.metric))


def test_bad_input_is_named():
    with pytest.raises(UnknownNameError, match="metric"):
        kgeval.null_model("nations").expected_value("mrx")
    with pytest.raises(NoClosedFormError, match="variance"):
        kgeval.null_model("nations").variance("median_rank")
    with pytest.raises(InvalidInputError, match="split"):
        kgeval.null_model("nations", "train")
    with pytest.raises(InvalidInputError, match="filtered"):
        kgeval.null_model("nations", filtered="yes")
    with pytest.raises(InvalidInputError, match="drop_unseen"):
        kgeval.null_model(get_dataset("nations"), drop_unseen=True)
    with pytest.raises(UnknownNameError, match="dataset"):
        kgeval.null_model("fb15k238")


#: how far a rebuilt moment may be from the shipped one, relative. Measured: a rebuild on the machine
#: that built the tables equals them bit for bit (every dataset, protocol, side and metric). Another
#: numpy/libm may differ in the last bit of a log or exp; the moments amplify that by little (the
#: variances come from residual integrals that cancel by ≤ 4x, not from E[X²] − E[X]², which
#: amplified it by Var/E² and showed 6e-11 for IAMR between two installs), so 1e-12 (~4500 ulp) is
#: a margin, and any change of the computation or the data above it fails.
MOMENT_RTOL = 1e-12


def moment_mismatches(a, b) -> list[str]:
    """Why the moments ``a`` and ``b`` (NullMoments) differ beyond :data:`MOMENT_RTOL`; empty if they don't.
    The candidate counts the moments come from are compared exactly, by the callers."""
    out = []
    if (a.mean is None) != (b.mean is None) or (a.variance is None) != (b.variance is None):
        out.append(f"stated moments differ: {a} vs {b}")
    if a.exact != b.exact:
        out.append(f"exact flag {a.exact} vs {b.exact}")
    if (a.optimum_gap is None) != (b.optimum_gap is None):
        out.append(f"optimum_gap stated in one only: {a} vs {b}")
    for what, x, y in (("mean", a.mean, b.mean), ("variance", a.variance, b.variance),
                       ("optimum_gap", a.optimum_gap, b.optimum_gap)):
        if x is not None and y is not None and not abs(x - y) <= MOMENT_RTOL * abs(y):
            out.append(f"{what} {x!r} vs {y!r} (relative {abs(x - y) / abs(y) if y else math.inf:.2g})")
    return out


def assert_same_moments(a, b, where=""):
    assert not moment_mismatches(a, b), (where, moment_mismatches(a, b))


def table_mismatches(rebuilt: dict, shipped: dict) -> list:
    """Every difference between a rebuilt table and the shipped one: identity, protocols and
    candidate histograms exactly, moments to :data:`MOMENT_RTOL`."""
    out = []
    if rebuilt["identity"] != shipped["identity"]:
        out.append("identity")
    if rebuilt["protocols"].keys() != shipped["protocols"].keys():
        return out + ["protocols"]
    for key, table in rebuilt["protocols"].items():
        other = shipped["protocols"][key]
        if table.keys() != other.keys():
            out.append((key, "fields"))
            continue
        for field in table:
            if field != "moments" and table[field] != other[field]:  # candidate histograms, counts, protocol
                out.append((key, field))
        for side, metrics in table["moments"].items():
            if metrics.keys() != other["moments"].get(side, {}).keys():
                out.append((key, side, "metrics"))
                continue
            for metric, row in metrics.items():
                why = moment_mismatches(NullMoments(*row), NullMoments(*other["moments"][side][metric]))
                out += [(key, side, metric, w) for w in why]
    return out


@lru_cache(maxsize=None)
def _rebuilt(name: str) -> dict:
    return build_table(name, data_dir=SHARED if SHARED.is_dir() else None)


def _shipped_names():
    return [pytest.param(name, marks=[] if info.builtin else [needs_shared])
            for name, info in kgeval.data.DATASETS.items()]


@pytest.mark.parametrize("name", _shipped_names())
def test_every_shipped_table_equals_a_rebuild(name):
    """Every registered dataset, every protocol, side and metric (before: Nations, Kinships and UMLS
    whole, one FB15k-237 and two WN18RR protocols at 1e-9 for variances; CoDEx-S, CoDEx-M, WN18 and the
    other protocols never, so a 6.9e-6 change of a shipped value passed)."""
    shipped = read_shipped(name)
    assert shipped is not None
    assert table_mismatches(_rebuilt(name), shipped) == []


def test_a_changed_shipped_value_is_caught():
    """The comparison itself: any one moment moved by 6.9e-6 (or by 1e-11) relative, an exact flag
    flipped, or a candidate count changed, is reported."""
    rebuilt = _rebuilt("Nations")
    assert table_mismatches(rebuilt, copy.deepcopy(rebuilt)) == []
    key = next(iter(rebuilt["protocols"]))
    for metric in ("inverse_arithmetic_mean_rank", "harmonic_mean_rank", "geometric_mean_rank", "hits_at_10"):
        for slot, factor in ((0, 1 + 6.9e-6), (1, 1 + 6.9e-6), (1, 1 - 1e-11), (0, 1 + 1e-11), (3, 1 + 1e-11)):
            changed = copy.deepcopy(rebuilt)
            changed["protocols"][key]["moments"]["both"][metric][slot] *= factor
            found = table_mismatches(rebuilt, changed)
            assert [f[:3] for f in found] == [(key, "both", metric)], (metric, slot, factor, found)
    changed = copy.deepcopy(rebuilt)
    changed["protocols"][key]["moments"]["tail"]["harmonic_mean_rank"][2] ^= True
    assert len(table_mismatches(rebuilt, changed)) == 1
    changed = copy.deepcopy(rebuilt)
    changed["protocols"][key]["candidates"]["head"][0][1] += 1
    assert table_mismatches(rebuilt, changed) == [(key, "candidates")]


def test_shipped_table_used_without_files(tmp_path):
    model = kgeval.null_model("fb15k237", drop_unseen=True, data_dir=tmp_path)
    assert model.source == "shipped table" and model.num_entities == 14_505 and model.num_tasks() == 2 * 20_438
    assert model.identity["sha256"]["testing"] == "e2e35e8e6113de220140b6f44dc71a5207b0fc6872d575e874aefe13259b655b"
    # every registered dataset ships every protocol
    for info in kgeval.data.DATASETS.values():
        for protocol in shipped_protocols():
            assert load_shipped(info.name, protocol) is not None, (info.name, protocol.key)


def test_case_study_expectations_agree_with_pykeen():
    ranking = pytest.importorskip("pykeen.metrics.ranking")
    model = load_shipped("FB15k-237", NullProtocol("test", True, True, drop_unseen=True))
    c = model.num_candidates()
    for key, metric in (("mrr", ranking.InverseHarmonicMeanRank()), ("mr", ranking.ArithmeticMeanRank()),
                        ("hits@10", ranking.HitsAtK(10))):
        # E[MRR] = 7e-4, Var 3e-9 (MRR) .. 2e-8 (hits@10): abs=0, else approx's default abs=1e-12 is
        # 1.4e-9 relative of E and up to 3.5e-4 relative of Var
        assert model.expected_value(key) == pytest.approx(metric.expected_value(num_candidates=c), rel=1e-12, abs=0)
        assert model.variance(key) == pytest.approx(metric.variance(num_candidates=c), rel=1e-12, abs=0)


@needs_shared
def test_case_study_protocol_from_the_files_matches_brute_force_and_the_table():
    ds = get_dataset("fb15k237", data_dir=SHARED, drop_unseen=True)
    protocol = NullProtocol("test", True, True, drop_unseen=True)
    model = from_dataset(ds, protocol)
    both = np.concatenate([brute_force_counts(ds, "test", protocol.filter_sets, s) for s in ("head", "tail")])
    np.testing.assert_array_equal(model.num_candidates(), np.sort(both))
    for key, value in closed_forms(both).items():
        assert model.expected_value(key) == pytest.approx(value, rel=1e-13, abs=0)  # E[MRR] = 7e-4
    shipped = load_shipped("FB15k-237", protocol)
    for key in model.keys():
        assert_same_moments(model.moments(key), shipped.moments(key), key)


def test_drop_unseen_on_a_directory_dataset(tmp_path):
    """A dataset given as a directory: drop_unseen=True drops the test triple whose tail ``z`` never
    occurs in training (and ``z`` from the entities); the counts are checked by hand."""
    splits = {"train": [("a", "r", "b"), ("b", "r", "c"), ("c", "s", "a"), ("a", "s", "c")],
              "valid": [("b", "s", "a")],
              "test": [("a", "r", "c"), ("c", "r", "z"), ("b", "s", "c")]}
    for name, rows in splits.items():
        (tmp_path / f"{name}.txt").write_text("".join("\t".join(r) + "\n" for r in rows))
    kept, dropped = kgeval.null_model(tmp_path), kgeval.null_model(tmp_path, drop_unseen=True)
    assert (kept.num_entities, dropped.num_entities) == (4, 3)
    # kept: tails of (a,r,?) 4-|{b}|, (c,r,?) 4, (b,s,?) 4-|{a}|
    np.testing.assert_array_equal(np.sort(kept.num_candidates("tail")), [3, 3, 4])
    # dropped: (a,r,c) and (b,s,c) remain; every query has one other known answer among 3 entities
    np.testing.assert_array_equal(dropped.num_candidates("tail"), [2, 2])
    np.testing.assert_array_equal(dropped.num_candidates("head"), [2, 2])
    assert dropped.num_tasks() == 4 and dropped.expected_value("mr") == 1.5
    assert dropped.expected_value("mrr") == pytest.approx(0.75, rel=1e-15, abs=0)
